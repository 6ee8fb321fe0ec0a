//! What crun does with a decoded profile, as its differences from runc.
//! crun builds the filter itself with libseccomp (`src/libcrun/seccomp.c`,
//! `libcrun_generate_seccomp`) in the runtime process, after the container's
//! process has been created, and hands the compiled BPF to that process,
//! which loads it (`libcrun_apply_seccomp`). Its differences from runc are
//! the fields of [`SeccompBehaviour`]; what its init calls after the filter
//! is loaded is [`crun_init`]'s tables, learned from the real crun.

use crate::crun_init;
use crate::filter::Arch;
use crate::oci_runtime::{
    ArchNames, EnosysStub, FlagSupport, InitCaller, Libseccomp, OciRuntime, SeccompBehaviour,
};
use crate::runc::Stage;

/// The crun releases this module models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CrunVersion {
    /// bookworm's crun 1.8.1.
    V1_8,
    /// trixie's crun 1.21.
    V1_21,
}

impl CrunVersion {
    pub fn as_str(self) -> &'static str {
        match self {
            CrunVersion::V1_8 => "1.8",
            CrunVersion::V1_21 => "1.21",
        }
    }
}

/// crun 1.8.1 (bookworm, libseccomp 2.5.4).
pub static CRUN_1_8: SeccompBehaviour = SeccompBehaviour {
    runtime: OciRuntime::Crun(CrunVersion::V1_8),
    refusal: Stage::Init,
    arch_names: ArchNames::LibseccompNames,
    flags: FlagSupport::Known(&[
        "SECCOMP_FILTER_FLAG_TSYNC",
        "SECCOMP_FILTER_FLAG_SPEC_ALLOW",
        "SECCOMP_FILTER_FLAG_LOG",
        "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV",
    ]),
    empty_name_fails: false,
    errno_ret_needs_errno_action: true,
    notify_checks: false,
    listener_unreachable: Stage::Config,
    enosys_stub: EnosysStub::Absent,
    libseccomp: Libseccomp::V2_5_4,
    init_syscalls: crun_init::CRUN_1_8,
    init_caller: InitCaller::C,
};

/// crun 1.21 (trixie, libseccomp 2.6.0).
pub static CRUN_1_21: SeccompBehaviour = SeccompBehaviour {
    runtime: OciRuntime::Crun(CrunVersion::V1_21),
    libseccomp: Libseccomp::V2_6_0,
    init_syscalls: crun_init::CRUN_1_21,
    ..CRUN_1_8
};

/// How crun reads an `architectures` entry (`libcrun_generate_seccomp`): a
/// leading `SCMP_ARCH_` dropped, at most 31 bytes kept, lowercased, then
/// `seccomp_arch_resolve_name`. `None`: libseccomp does not know it (crun
/// fails); `Some(None)`: it does, but nodeproof's [`Arch`] does not model it.
pub fn resolve_arch(name: &str, libseccomp: Libseccomp) -> Option<Option<Arch>> {
    let bare = name.strip_prefix("SCMP_ARCH_").unwrap_or(name);
    // stpncpy into a 32-byte buffer: a NUL or the 31st byte ends the name.
    let bare = bare.split('\0').next().unwrap_or(bare);
    let mut lower: Vec<u8> = bare.bytes().take(31).collect();
    lower.make_ascii_lowercase();
    let lower = String::from_utf8_lossy(&lower);
    if !libseccomp.arch_names().contains(&lower.as_ref()) {
        return None;
    }
    Some(
        Arch::ALL
            .into_iter()
            .find(|a| a.scmp_name()["SCMP_ARCH_".len()..].eq_ignore_ascii_case(&lower)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_names_are_libseccomps() {
        let v25 = Libseccomp::V2_5_4;
        assert_eq!(
            resolve_arch("SCMP_ARCH_X86_64", v25),
            Some(Some(Arch::X86_64))
        );
        assert_eq!(resolve_arch("x86_64", v25), Some(Some(Arch::X86_64)));
        assert_eq!(
            resolve_arch("SCMP_ARCH_riscv64", v25),
            Some(Some(Arch::Riscv64))
        );
        assert_eq!(resolve_arch("SCMP_ARCH_PARISC", v25), Some(None));
        assert_eq!(resolve_arch("SCMP_ARCH_LOONGARCH64", v25), None);
        assert_eq!(
            resolve_arch("SCMP_ARCH_LOONGARCH64", Libseccomp::V2_6_0),
            Some(None)
        );
        assert_eq!(resolve_arch("SCMP_ARCH_NOPE", Libseccomp::V2_6_0), None);
    }
}
