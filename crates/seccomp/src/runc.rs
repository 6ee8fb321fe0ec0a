//! runc's seccomp behaviour per release, as data (`SeccompBehaviour`): what
//! `translate` and `lint` read to predict what each release does with a
//! profile, as `crun` holds crun's. runc 1.1.5 is the release the model was
//! learned from; 1.1.15 states only where it differs.

use crate::behaviour::{
    ArchNames, EnosysStub, FlagSupport, InitCaller, OciRuntime, RuncVersion, SeccompBehaviour,
    Stage,
};
use crate::filter::Libseccomp;
use crate::runc_init;

/// runc 1.1.5 (bookworm): the release the runc model was learned from.
pub static RUNC_1_1_5: SeccompBehaviour = SeccompBehaviour {
    runtime: OciRuntime::Runc(RuncVersion::V1_1_5),
    refusal: Stage::Config,
    arch_names: ArchNames::RuncTable {
        arches: RuncVersion::V1_1_5.arches(),
        unmodelled: &[],
    },
    flags: FlagSupport::Refused,
    empty_name_fails: true,
    errno_ret_needs_errno_action: false,
    notify_checks: true,
    listener_unreachable: Stage::Init,
    enosys_stub: EnosysStub::ListedArches,
    libseccomp: Libseccomp::V2_5_4,
    init_syscalls: runc_init::RUNC_1_1_5,
    init_caller: InitCaller::Go,
};

/// runc 1.1.15 (trixie: go1.24, libseccomp 2.6.0). Measured differences
/// from 1.1.5 (tests/tests/lint_vs_runc.rs): its `archs` map has riscv64
/// and loong64 (runc 1.1.6 and 1.1.10), its -ENOSYS stub covers the native
/// architecture unlisted (1.1.6), its init is `RUNC_1_1_15`'s table.
pub static RUNC_1_1_15: SeccompBehaviour = SeccompBehaviour {
    runtime: OciRuntime::Runc(RuncVersion::V1_1_15),
    arch_names: ArchNames::RuncTable {
        arches: RuncVersion::V1_1_15.arches(),
        unmodelled: &["SCMP_ARCH_LOONGARCH64"],
    },
    enosys_stub: EnosysStub::ListedAndNative,
    libseccomp: Libseccomp::V2_6_0,
    init_syscalls: runc_init::RUNC_1_1_15,
    ..RUNC_1_1_5
};
