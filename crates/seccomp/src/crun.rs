//! What crun does with a decoded profile, as its differences from runc.
//! crun builds the filter itself with libseccomp (`src/libcrun/seccomp.c`,
//! `libcrun_generate_seccomp`) in the runtime process, after the container's
//! process has been created, and hands the compiled BPF to that process,
//! which loads it (`libcrun_apply_seccomp`). Its differences from runc are
//! the fields of [`SeccompBehaviour`]; what its init calls after the filter
//! is loaded is [`crun_init`]'s tables, learned from the real crun.

pub use crate::behaviour::{resolve_arch, CrunVersion};
use crate::behaviour::{
    ArchNames, EnosysStub, FlagSupport, InitCaller, OciRuntime, SeccompBehaviour, Stage,
};
use crate::crun_init;
use crate::filter::Libseccomp;

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
