//! Which OCI runtime (and which release of it) turns the decoded profile
//! into a filter and starts the container: runc (containerd's default, and
//! CRI-O's on some distributions) or crun (CRI-O's default on Fedora, RHEL,
//! openSUSE and Debian's cri-o package).

use serde::Serialize;
use std::fmt;

use crate::cbpf::SockFilter;
use crate::crun;
pub use crate::crun::CrunVersion;
use crate::filter::Arch;
use crate::model::Seccomp;
use crate::patchbpf;
pub use crate::runc::RuncVersion;
use crate::runc::{self, Stage};
use crate::runc_init::InitSyscall;
pub use crate::syscalls::Libseccomp;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OciRuntime {
    Runc(RuncVersion),
    Crun(CrunVersion),
}

/// The runtime's name alone, as `--oci-runtime` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OciRuntimeKind {
    Runc,
    Crun,
}

impl OciRuntime {
    pub fn kind(self) -> OciRuntimeKind {
        match self {
            OciRuntime::Runc(_) => OciRuntimeKind::Runc,
            OciRuntime::Crun(_) => OciRuntimeKind::Crun,
        }
    }

    pub fn version(self) -> &'static str {
        match self {
            OciRuntime::Runc(v) => v.as_str(),
            OciRuntime::Crun(v) => v.as_str(),
        }
    }
}

impl Default for OciRuntime {
    /// runc 1.1.5: what containerd runs on Debian 12 and the release the runc model was learned from.
    fn default() -> Self {
        OciRuntime::Runc(RuncVersion::V1_1_5)
    }
}

impl OciRuntimeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OciRuntimeKind::Runc => "runc",
            OciRuntimeKind::Crun => "crun",
        }
    }
}

impl fmt::Display for OciRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind().as_str(), self.version())
    }
}

/// What the runtime does with a decoded profile where runc and crun differ,
/// as data: `runc::translate` and `lint` read it, so a runtime's difference
/// is a field here, not a branch on the runtime's name.
#[derive(Debug)]
pub struct SeccompBehaviour {
    pub runtime: OciRuntime,
    /// Where a profile the runtime refuses while building the filter fails:
    /// runc refuses in `specconv.SetupSeccomp` before any container process
    /// exists ([`Stage::Config`]); crun builds the filter
    /// (`libcrun_generate_seccomp`) after it has created the container's
    /// process, so its refusals are start failures ([`Stage::Init`]).
    pub refusal: Stage,
    /// How `architectures` names are read.
    pub arch_names: ArchNames,
    /// What the runtime does with `flags`.
    pub flags: FlagSupport,
    /// An empty syscall name: runc init fails ("empty string is not a valid
    /// syscall"); crun asks libseccomp, which resolves no syscall, so crun
    /// skips it like any unknown name.
    pub empty_name_fails: bool,
    /// crun refuses `errnoRet`/`defaultErrnoRet` with an action other than
    /// ERRNO or TRACE ("errno value specified for action"); runc ignores it.
    pub errno_ret_needs_errno_action: bool,
    /// runc refuses SCMP_ACT_NOTIFY as the default action or for `write`, and
    /// NOTIFY without `listenerPath`; crun checks none of these.
    pub notify_checks: bool,
    /// Where a missing seccomp agent socket fails: runc sends the listener fd
    /// from init (a start failure); crun connects to the socket before it
    /// creates the container ("open seccomp receiver"): refused.
    pub listener_unreachable: Stage,
    /// The -ENOSYS stub runc's patchbpf prepends, if any.
    pub enosys_stub: EnosysStub,
    /// The libseccomp the runtime is linked with, as packaged beside it.
    pub libseccomp: Libseccomp,
    /// What the runtime's init and the entrypoint call after the filter is loaded.
    pub init_syscalls: &'static [InitSyscall],
    /// Who makes init's calls after the filter is loaded, which decides what
    /// the argument slots a call does not take hold (see [`InitCaller`]).
    pub init_caller: InitCaller,
}

/// The code that makes a runtime's init calls once the filter is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitCaller {
    /// Go (runc init): its own calls go through Go's `syscall` and
    /// `x/sys/unix` wrappers, which pass 0 in every slot a call does not take
    /// (`Syscall(trap, a1, a2, a3)` is `Syscall6(trap, a1, a2, a3, 0, 0, 0)`;
    /// go1.19 src/syscall/syscall_linux.go), except the calls Go's runtime
    /// makes from assembly ([`crate::runc_init::GO_RUNTIME_CALLS`]).
    Go,
    /// C (crun, through libc): the slots a call does not take hold whatever
    /// was left in the registers.
    C,
}

/// runc's -ENOSYS stub (libcontainer/seccomp/patchbpf): syscalls numbered
/// above every one the profile names fail with ENOSYS instead of taking the
/// default action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnosysStub {
    /// crun loads libseccomp's program as exported: a syscall the profile
    /// does not name gets the default action, however new.
    Absent,
    /// runc 1.1.5: sections for the listed architectures only.
    ListedArches,
    /// runc 1.1.6 and later: the native architecture gets a section too.
    ListedAndNative,
}

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

/// How a runtime resolves an `architectures` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchNames {
    /// runc's own `archs` map of `SCMP_ARCH_*` names (`ConvertStringToArch`):
    /// the architectures nodeproof models, and names runc also accepts that
    /// nodeproof does not model (their sections are left out of its filter).
    RuncTable {
        arches: &'static [Arch],
        unmodelled: &'static [&'static str],
    },
    /// crun: an optional `SCMP_ARCH_` prefix dropped, the rest lowercased and
    /// handed to `seccomp_arch_resolve_name`, so `x86_64` works and any
    /// architecture the linked libseccomp knows is accepted.
    LibseccompNames,
}

/// What the runtime does with the profile's `flags`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagSupport {
    /// runc 1.1 refuses any flag ("seccomp flags are not yet supported by runc").
    Refused,
    /// crun's `libcrun_apply_seccomp` knows these names and fails the start on
    /// any other ("unknown seccomp option"); if the kernel refuses the flags
    /// (EINVAL) it loads the filter again without them.
    Known(&'static [&'static str]),
}

impl Libseccomp {
    /// The names `seccomp_arch_resolve_name` knows (src/arch.c), lowercase.
    pub fn arch_names(self) -> &'static [&'static str] {
        match self {
            Libseccomp::V2_5_4 => &LIBSECCOMP_2_5_ARCHES[..19],
            // 2.6.0 added LoongArch and SuperH (and m68k).
            Libseccomp::V2_6_0 => &LIBSECCOMP_2_5_ARCHES,
        }
    }
}

const LIBSECCOMP_2_5_ARCHES: [&str; 23] = [
    "x86",
    "x86_64",
    "x32",
    "arm",
    "aarch64",
    "mips",
    "mips64",
    "mips64n32",
    "mipsel",
    "mipsel64",
    "mipsel64n32",
    "ppc",
    "ppc64",
    "ppc64le",
    "s390",
    "s390x",
    "parisc",
    "parisc64",
    "riscv64",
    // 2.6.0 only:
    "loongarch64",
    "m68k",
    "sh",
    "sheb",
];

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
