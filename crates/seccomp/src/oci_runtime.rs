//! Which OCI runtime (and which release of it) turns the decoded profile
//! into a filter and starts the container: runc (containerd's default, and
//! CRI-O's on some distributions) or crun (CRI-O's default on Fedora, RHEL,
//! openSUSE and Debian's cri-o package).
//!
//! The behaviour types are `behaviour`'s, re-exported here where callers
//! name them; this module selects the release's model.

pub use crate::behaviour::{
    ArchNames, CrunVersion, EnosysStub, FlagSupport, InitCaller, OciRuntime, OciRuntimeKind,
    RuncVersion, SeccompBehaviour, Stage,
};
use crate::cbpf::SockFilter;
use crate::crun;
use crate::filter::Arch;
pub use crate::filter::Libseccomp;
use crate::model::Seccomp;
use crate::patchbpf;
use crate::runc;

impl EnosysStub {
    /// The instructions prepended to libseccomp's program for `profile` on
    /// `native`, its names resolved with the runtime's `lib`.
    pub fn program(self, profile: &Seccomp, native: Arch, lib: Libseccomp) -> Vec<SockFilter> {
        match self {
            EnosysStub::Absent => Vec::new(),
            EnosysStub::ListedArches => patchbpf::enosys_stub_in(profile, lib),
            EnosysStub::ListedAndNative => patchbpf::enosys_stub_with_native(profile, native, lib),
        }
    }
}

impl OciRuntime {
    /// The modelled behaviour of this runtime release.
    pub fn behaviour(self) -> &'static SeccompBehaviour {
        match self {
            OciRuntime::Runc(RuncVersion::V1_1_5) => &runc::RUNC_1_1_5,
            OciRuntime::Runc(RuncVersion::V1_1_15) => &runc::RUNC_1_1_15,
            OciRuntime::Crun(CrunVersion::V1_8) => &crun::CRUN_1_8,
            OciRuntime::Crun(CrunVersion::V1_21) => &crun::CRUN_1_21,
        }
    }
}
