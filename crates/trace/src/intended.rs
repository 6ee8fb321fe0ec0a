//! Denials a profile makes on purpose: ENOSYS for a syscall that libc
//! answers by using an older one (or by doing without), so the program runs
//! on as if the kernel were older. These are counted and shown with their
//! reason, but are no sign that the profile breaks the workload.
//!
//! Where such ENOSYS answers come from:
//! - moby's default profile (profiles/default.json) and containerd's
//!   RuntimeDefault, which mirrors it (contrib/seccomp/seccomp_default.go),
//!   answer `clone3` with ENOSYS unless CAP_SYS_ADMIN (moby PR 42681,
//!   containerd PR 5982), so that glibc falls back to `clone`;
//! - containers-common's seccomp.json (CRI-O, podman) sets
//!   `defaultErrnoRet: 38`: every syscall it does not name gets ENOSYS;
//! - runc's -ENOSYS stub (libcontainer/seccomp/patchbpf, modelled in
//!   `nodeproof_seccomp::patchbpf`): syscalls newer than every one the
//!   profile names get ENOSYS "so libc falls back".
//!
//! Whoever wrote the rule, libc reacts to the errno alone: a Localhost
//! profile copied from moby's has the same `clone3` rule with the same
//! effect, so the classification does not depend on the profile's type.
//! A syscall that is not in [`FALLBACKS`], or any other errno, is a real
//! denial; so is the fallback syscall itself when it is denied too (it is
//! in no row), which is what would break the workload.
//!
//! Each row was also seen on Debian 12's glibc 2.36 under a filter that
//! answers ENOSYS (strace: the call, then its fallback), except
//! `fchmodat2`, which glibc uses from 2.39 on. musl is in no row: it
//! creates threads with `clone` and calls none of these first.

use super::event::Action;
use serde::Serialize;

/// The C library whose wrapper falls back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Libc {
    Glibc,
}

impl Libc {
    pub fn as_str(self) -> &'static str {
        match self {
            Libc::Glibc => "glibc",
        }
    }
}

/// One syscall that libc retries another way on ENOSYS.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct Fallback {
    pub syscall: &'static str,
    /// What libc does instead, in words (`clone`).
    pub fallback: &'static str,
    pub libc: Libc,
    /// The first release of `libc` that falls back.
    pub since: &'static str,
    /// The upstream file that does it.
    pub source: &'static str,
}

/// The syscalls whose ENOSYS libc answers with a fallback, with the file
/// that does it.
pub const FALLBACKS: &[Fallback] = &[
    // __clone_internal: "Fallback to clone only if clone3 is not
    // supported" (errno ENOSYS); pthread_create, posix_spawn and fork use it.
    Fallback {
        syscall: "clone3",
        fallback: "clone",
        libc: Libc::Glibc,
        since: "2.34",
        source: "sysdeps/unix/sysv/linux/clone-internal.c",
    },
    // faccessat with flags (AT_EACCESS, AT_SYMLINK_NOFOLLOW): faccessat2,
    // then on ENOSYS faccessat plus an fstatat check of the flags.
    Fallback {
        syscall: "faccessat2",
        fallback: "faccessat",
        libc: Libc::Glibc,
        since: "2.33",
        source: "sysdeps/unix/sysv/linux/faccessat.c",
    },
    // statx(): on ENOSYS statx_generic, built on fstatat.
    Fallback {
        syscall: "statx",
        fallback: "newfstatat",
        libc: Libc::Glibc,
        since: "2.28",
        source: "sysdeps/unix/sysv/linux/statx.c",
    },
    // closefrom(): close_range, and on failure __closefrom_fallback, which
    // closes each descriptor listed in /proc/self/fd.
    Fallback {
        syscall: "close_range",
        fallback: "close of each fd in /proc/self/fd",
        libc: Libc::Glibc,
        since: "2.34",
        source: "sysdeps/unix/sysv/linux/closefrom.c",
    },
    // preadv2/pwritev2 with flags 0: preadv/pwritev on ENOSYS (other flags
    // fail with ENOTSUP, which the program sees).
    Fallback {
        syscall: "preadv2",
        fallback: "preadv",
        libc: Libc::Glibc,
        since: "2.26",
        source: "sysdeps/unix/sysv/linux/preadv2.c",
    },
    Fallback {
        syscall: "pwritev2",
        fallback: "pwritev",
        libc: Libc::Glibc,
        since: "2.26",
        source: "sysdeps/unix/sysv/linux/pwritev2.c",
    },
    // fchmodat with AT_SYMLINK_NOFOLLOW: fchmodat2, then on ENOSYS the
    // O_PATH and /proc/self/fd emulation.
    Fallback {
        syscall: "fchmodat2",
        fallback: "fchmodat through an O_PATH descriptor",
        libc: Libc::Glibc,
        since: "2.39",
        source: "sysdeps/unix/sysv/linux/fchmodat.c",
    },
    // The registration at program start: on failure glibc sets
    // __rseq_size to 0 and runs without rseq (no thread registers later).
    // A process that registered before its filter was loaded and then
    // starts a thread aborts instead; a container's filter is loaded
    // before its program starts, so there the denial is the first call.
    Fallback {
        syscall: "rseq",
        fallback: "no rseq (registration failure is ignored)",
        libc: Libc::Glibc,
        since: "2.35",
        source: "sysdeps/nptl/dl-tls_init_tp.c",
    },
];

/// What a denial means for the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenialKind {
    /// The call failed and nothing retries it for the program.
    Denied,
    /// ENOSYS that libc answers with [`Fallback::fallback`].
    IntendedFallback(&'static Fallback),
}

impl DenialKind {
    /// The metric label value (`outcome`).
    pub fn as_str(self) -> &'static str {
        match self {
            DenialKind::Denied => "denied",
            DenialKind::IntendedFallback(_) => "intended-fallback",
        }
    }

    pub fn is_intended(self) -> bool {
        matches!(self, DenialKind::IntendedFallback(_))
    }

    /// The fallback, when there is one.
    pub fn fallback(self) -> Option<&'static Fallback> {
        match self {
            DenialKind::Denied => None,
            DenialKind::IntendedFallback(f) => Some(f),
        }
    }
}

impl Fallback {
    /// The reason in words: `glibc falls back to clone`.
    pub fn reason(&self) -> String {
        format!("{} falls back to {}", self.libc.as_str(), self.fallback)
    }
}

/// Classifies one denial by its syscall name (as the tracer names it),
/// action and errno: only an ERRNO action with ENOSYS on a syscall of
/// [`FALLBACKS`] is intended. A notify supervisor's ENOSYS is a choice of
/// its own, not a profile's, and stays a denial.
pub fn classify(syscall: &str, action: Action, errno: i32) -> DenialKind {
    if action != Action::Errno || errno != libc::ENOSYS {
        return DenialKind::Denied;
    }
    FALLBACKS
        .iter()
        .find(|f| f.syscall == syscall)
        .map_or(DenialKind::Denied, DenialKind::IntendedFallback)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clone3_enosys_is_glibcs_fallback_to_clone() {
        let k = classify("clone3", Action::Errno, libc::ENOSYS);
        assert!(k.is_intended());
        assert_eq!(k.as_str(), "intended-fallback");
        let f = k.fallback().unwrap();
        assert_eq!(
            (f.fallback, f.libc, f.since),
            ("clone", Libc::Glibc, "2.34")
        );
        assert_eq!(f.reason(), "glibc falls back to clone");
    }

    #[test]
    fn every_row_is_intended_on_enosys_only() {
        for f in FALLBACKS {
            assert_eq!(
                classify(f.syscall, Action::Errno, libc::ENOSYS),
                DenialKind::IntendedFallback(f),
                "{}",
                f.syscall
            );
            for errno in [libc::EPERM, libc::EACCES, libc::EINVAL, 0] {
                assert_eq!(
                    classify(f.syscall, Action::Errno, errno),
                    DenialKind::Denied,
                    "{} errno {errno}",
                    f.syscall
                );
            }
            for action in [Action::Kill, Action::Trap, Action::NotifyError] {
                assert_eq!(
                    classify(f.syscall, action, libc::ENOSYS),
                    DenialKind::Denied
                );
            }
            assert!(f.source.starts_with("sysdeps/"), "{}", f.source);
        }
    }

    #[test]
    fn unknown_syscalls_and_the_fallbacks_themselves_are_denials() {
        // No libc retries these: ENOSYS reaches the program.
        for name in ["openat2", "mkdir", "unshare", "nr999", "unknown"] {
            assert_eq!(
                classify(name, Action::Errno, libc::ENOSYS),
                DenialKind::Denied,
                "{name}"
            );
        }
        // A profile that denies the fallback too breaks the program.
        for f in FALLBACKS {
            assert_eq!(
                classify(f.fallback, Action::Errno, libc::ENOSYS),
                DenialKind::Denied
            );
        }
        assert_eq!(
            classify("clone", Action::Errno, libc::EPERM).as_str(),
            "denied"
        );
    }

    #[test]
    fn one_row_per_syscall() {
        let mut names: Vec<_> = FALLBACKS.iter().map(|f| f.syscall).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FALLBACKS.len());
    }
}
