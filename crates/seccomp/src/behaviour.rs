//! The modelled behaviour of the OCI runtimes, as data: which releases
//! exist (`RuncVersion`, `CrunVersion`, the `Libseccomp` each links), what
//! each does with a profile (`SeccompBehaviour`, one static per release in
//! `runc` and `crun`), and where a refusal happens (`Stage`). A leaf: the
//! translation (`runc`, `crun`), the stub (`patchbpf`) and the selector
//! (`oci_runtime`) all read it, and it reads only the filter's vocabulary.

use serde::Serialize;
use std::fmt;

use crate::filter::{Arch, Libseccomp};
use crate::runc_init::InitSyscall;
use strum::IntoStaticStr;

/// A runtime release whose behaviour is modelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OciRuntime {
    Runc(RuncVersion),
    Crun(CrunVersion),
}

/// The runtime's name alone, as `--oci-runtime` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, IntoStaticStr)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
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
        self.into()
    }
}

impl fmt::Display for OciRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind().as_str(), self.version())
    }
}

/// What the runtime does with a decoded profile where runc and crun differ,
/// as data: `translate::translate` and `lint` read it, so a runtime's difference
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

/// The runc releases whose behaviour this module models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, IntoStaticStr)]
pub enum RuncVersion {
    #[strum(serialize = "1.1.5")]
    V1_1_5,
    #[strum(serialize = "1.1.15")]
    V1_1_15,
}

impl RuncVersion {
    /// `ConvertStringToArch`: the architecture a profile's name stands for, if this runc knows it.
    pub fn arch(self, scmp_name: &str) -> Option<Arch> {
        Arch::from_scmp_name(scmp_name).filter(|a| self.arches().contains(a))
    }

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The architectures in this runc's own `archs` map
    /// (libcontainer/seccomp/config.go), which `ConvertStringToArch` reads in
    /// specconv.SetupSeccomp before libseccomp is ever asked. It is runc's
    /// table, not libseccomp's: 1.1.5 has no riscv64 entry, so it refuses
    /// SCMP_ARCH_RISCV64 although libseccomp 2.5 knows that architecture.
    pub const fn arches(self) -> &'static [Arch] {
        match self {
            // 1.1.6 added riscv64 (and 1.1.10 loong64, which nodeproof does
            // not model): every architecture nodeproof knows.
            RuncVersion::V1_1_15 => &Arch::ALL,
            RuncVersion::V1_1_5 => &[
                Arch::X86,
                Arch::X86_64,
                Arch::X32,
                Arch::Arm,
                Arch::Aarch64,
                Arch::Mips,
                Arch::Mips64,
                Arch::Mips64N32,
                Arch::Mipsel,
                Arch::Mipsel64,
                Arch::Mipsel64N32,
                Arch::Ppc,
                Arch::Ppc64,
                Arch::Ppc64Le,
                Arch::S390,
                Arch::S390X,
            ],
        }
    }
}

/// Where in the runtime a profile fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Before any container process exists: the runtime refuses the config.
    Config,
    /// The container's process exists (runc init, crun's child): the start fails.
    Init,
}

/// The crun releases this module models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, IntoStaticStr)]
pub enum CrunVersion {
    /// bookworm's crun 1.8.1.
    #[strum(serialize = "1.8")]
    V1_8,
    /// trixie's crun 1.21.
    #[strum(serialize = "1.21")]
    V1_21,
}

impl CrunVersion {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

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
