//! Syscall names per audit arch (libseccomp's tables) and errno names.

use super::event::{AUDIT_ARCH_AARCH64, AUDIT_ARCH_I386, AUDIT_ARCH_X86_64};
use libseccomp::{ScmpArch, ScmpSyscall};
use std::collections::HashMap;

/// The arch's short name, as libseccomp and the JSON output spell it.
pub fn arch_name(audit_arch: u32) -> &'static str {
    match audit_arch {
        AUDIT_ARCH_X86_64 => "x86_64",
        AUDIT_ARCH_I386 => "x86",
        AUDIT_ARCH_AARCH64 => "aarch64",
        _ => "unknown",
    }
}

fn scmp_arch(audit_arch: u32) -> Option<ScmpArch> {
    match audit_arch {
        AUDIT_ARCH_X86_64 => Some(ScmpArch::X8664),
        AUDIT_ARCH_I386 => Some(ScmpArch::X86),
        AUDIT_ARCH_AARCH64 => Some(ScmpArch::Aarch64),
        _ => None,
    }
}

/// The syscall's name on that arch, or `nr<N>` when libseccomp does not know it.
pub fn syscall_name(audit_arch: u32, nr: i32) -> String {
    // The BTF-free tracepoint variant cannot see a KILL's syscall and reports -1.
    if nr < 0 {
        return "unknown".to_string();
    }
    scmp_arch(audit_arch)
        .and_then(|arch| ScmpSyscall::from(nr).get_name_by_arch(arch).ok())
        .unwrap_or_else(|| format!("nr{nr}"))
}

/// Memoizes [`syscall_name`]: a storm repeats the same few syscalls.
#[derive(Default)]
pub struct SyscallNames {
    cache: HashMap<(u32, i32), String>,
}

impl SyscallNames {
    pub fn get(&mut self, audit_arch: u32, nr: i32) -> &str {
        self.cache
            .entry((audit_arch, nr))
            .or_insert_with(|| syscall_name(audit_arch, nr))
    }
}

/// Symbolic names of the errnos profiles use; others print as numbers.
pub fn errno_name(errno: i32) -> Option<&'static str> {
    Some(match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::ENOSYS => "ENOSYS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_per_arch() {
        assert_eq!(syscall_name(AUDIT_ARCH_X86_64, 83), "mkdir");
        assert_eq!(syscall_name(AUDIT_ARCH_I386, 39), "mkdir");
        assert_eq!(syscall_name(AUDIT_ARCH_AARCH64, 34), "mkdirat");
        assert_eq!(syscall_name(AUDIT_ARCH_X86_64, 9999), "nr9999");
        assert_eq!(syscall_name(0, 1), "nr1");
        assert_eq!(syscall_name(AUDIT_ARCH_X86_64, -1), "unknown");
        let mut n = SyscallNames::default();
        assert_eq!(n.get(AUDIT_ARCH_X86_64, 165), "mount");
        assert_eq!(arch_name(AUDIT_ARCH_I386), "x86");
        assert_eq!(errno_name(1), Some("EPERM"));
        assert_eq!(errno_name(4000), None);
    }
}
