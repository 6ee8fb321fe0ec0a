//! The filter a runtime builds from a decoded profile: validated actions,
//! architectures and argument comparisons, in the order the runtime adds them
//! to libseccomp. This is the hand-off between runtime translation
//! (`runc`), compilation (`compile`) and prediction (`predict`).

use std::fmt;
use strum::IntoStaticStr;

/// A seccomp action after the runtime's translation (runc's `getAction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    KillThread,
    KillProcess,
    Trap,
    /// Errno carries the low 16 bits runc passes to libseccomp (`int16(*errnoRet)`).
    Errno(u16),
    Trace(u16),
    Allow,
    Log,
    Notify,
}

impl Action {
    /// The 32-bit `SECCOMP_RET_*` value the kernel sees.
    pub fn to_ret(self) -> u32 {
        match self {
            Action::KillThread => 0x0000_0000,
            Action::KillProcess => 0x8000_0000,
            Action::Trap => 0x0003_0000,
            Action::Errno(e) => 0x0005_0000 | u32::from(e),
            Action::Trace(e) => 0x7ff0_0000 | u32::from(e),
            Action::Log => 0x7ffc_0000,
            Action::Allow => 0x7fff_0000,
            Action::Notify => 0x7fc0_0000,
        }
    }

    /// Inverse of [`Action::to_ret`] for the values a filter can return.
    pub fn from_ret(ret: u32) -> Option<Action> {
        let data = (ret & 0xffff) as u16;
        Some(match ret & 0xffff_0000 {
            0x8000_0000 => Action::KillProcess,
            0x0000_0000 => Action::KillThread,
            0x0003_0000 => Action::Trap,
            0x0005_0000 => Action::Errno(data),
            0x7ff0_0000 => Action::Trace(data),
            0x7ffc_0000 => Action::Log,
            0x7fff_0000 => Action::Allow,
            0x7fc0_0000 => Action::Notify,
            _ => return None,
        })
    }

    /// Whether the syscall runs (ALLOW and LOG do; everything else stops it).
    pub fn lets_syscall_run(self) -> bool {
        matches!(self, Action::Allow | Action::Log)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::KillThread => f.write_str("SCMP_ACT_KILL_THREAD"),
            Action::KillProcess => f.write_str("SCMP_ACT_KILL_PROCESS"),
            Action::Trap => f.write_str("SCMP_ACT_TRAP"),
            Action::Errno(e) => write!(f, "SCMP_ACT_ERRNO({e})"),
            Action::Trace(e) => write!(f, "SCMP_ACT_TRACE({e})"),
            Action::Log => f.write_str("SCMP_ACT_LOG"),
            Action::Allow => f.write_str("SCMP_ACT_ALLOW"),
            Action::Notify => f.write_str("SCMP_ACT_NOTIFY"),
        }
    }
}

/// Architectures runc accepts in `architectures` (runc's `archs` map).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Arch {
    X86,
    X86_64,
    X32,
    Arm,
    Aarch64,
    Mips,
    Mips64,
    Mips64N32,
    Mipsel,
    Mipsel64,
    Mipsel64N32,
    Ppc,
    Ppc64,
    Ppc64Le,
    Riscv64,
    S390,
    S390X,
}

impl Arch {
    pub const ALL: [Arch; 17] = [
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
        Arch::Riscv64,
        Arch::S390,
        Arch::S390X,
    ];

    /// The `SCMP_ARCH_*` spelling used in profiles.
    pub fn scmp_name(self) -> &'static str {
        match self {
            Arch::X86 => "SCMP_ARCH_X86",
            Arch::X86_64 => "SCMP_ARCH_X86_64",
            Arch::X32 => "SCMP_ARCH_X32",
            Arch::Arm => "SCMP_ARCH_ARM",
            Arch::Aarch64 => "SCMP_ARCH_AARCH64",
            Arch::Mips => "SCMP_ARCH_MIPS",
            Arch::Mips64 => "SCMP_ARCH_MIPS64",
            Arch::Mips64N32 => "SCMP_ARCH_MIPS64N32",
            Arch::Mipsel => "SCMP_ARCH_MIPSEL",
            Arch::Mipsel64 => "SCMP_ARCH_MIPSEL64",
            Arch::Mipsel64N32 => "SCMP_ARCH_MIPSEL64N32",
            Arch::Ppc => "SCMP_ARCH_PPC",
            Arch::Ppc64 => "SCMP_ARCH_PPC64",
            Arch::Ppc64Le => "SCMP_ARCH_PPC64LE",
            Arch::Riscv64 => "SCMP_ARCH_RISCV64",
            Arch::S390 => "SCMP_ARCH_S390",
            Arch::S390X => "SCMP_ARCH_S390X",
        }
    }

    pub fn from_scmp_name(name: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.scmp_name() == name)
    }

    /// Short names accepted on the command line (`--arch x86_64`), as `uname -m` and Go spell them.
    pub fn from_cli_name(name: &str) -> Option<Arch> {
        Some(match name {
            "x86" | "i386" | "i686" | "386" => Arch::X86,
            "x86_64" | "amd64" => Arch::X86_64,
            "x32" => Arch::X32,
            "arm" => Arch::Arm,
            "aarch64" | "arm64" => Arch::Aarch64,
            "mips" => Arch::Mips,
            "mips64" => Arch::Mips64,
            "mips64n32" => Arch::Mips64N32,
            "mipsel" | "mipsle" => Arch::Mipsel,
            "mipsel64" | "mips64le" => Arch::Mipsel64,
            "mipsel64n32" => Arch::Mipsel64N32,
            "ppc" => Arch::Ppc,
            "ppc64" => Arch::Ppc64,
            "ppc64le" => Arch::Ppc64Le,
            "riscv64" => Arch::Riscv64,
            "s390" => Arch::S390,
            "s390x" => Arch::S390X,
            _ => return Arch::from_scmp_name(name),
        })
    }

    /// `AUDIT_ARCH_*` value the kernel puts in `seccomp_data.arch`.
    pub fn audit_arch(self) -> u32 {
        const EM_386: u32 = 3;
        const EM_MIPS: u32 = 8;
        const EM_PPC: u32 = 20;
        const EM_PPC64: u32 = 21;
        const EM_S390: u32 = 22;
        const EM_ARM: u32 = 40;
        const EM_X86_64: u32 = 62;
        const EM_AARCH64: u32 = 183;
        const EM_RISCV: u32 = 243;
        const B64: u32 = 0x8000_0000;
        const LE: u32 = 0x4000_0000;
        const MIPS_N32: u32 = 0x2000_0000;
        match self {
            Arch::X86 => EM_386 | LE,
            Arch::X86_64 | Arch::X32 => EM_X86_64 | B64 | LE,
            Arch::Arm => EM_ARM | LE,
            Arch::Aarch64 => EM_AARCH64 | B64 | LE,
            Arch::Mips => EM_MIPS,
            Arch::Mips64 => EM_MIPS | B64,
            Arch::Mips64N32 => EM_MIPS | B64 | MIPS_N32,
            Arch::Mipsel => EM_MIPS | LE,
            Arch::Mipsel64 => EM_MIPS | B64 | LE,
            Arch::Mipsel64N32 => EM_MIPS | B64 | LE | MIPS_N32,
            Arch::Ppc => EM_PPC,
            Arch::Ppc64 => EM_PPC64 | B64,
            Arch::Ppc64Le => EM_PPC64 | B64 | LE,
            Arch::Riscv64 => EM_RISCV | B64 | LE,
            Arch::S390 => EM_S390,
            Arch::S390X => EM_S390 | B64,
        }
    }

    /// The architecture this binary runs on.
    pub fn native() -> Arch {
        match std::env::consts::ARCH {
            "x86" => Arch::X86,
            "aarch64" => Arch::Aarch64,
            "arm" => Arch::Arm,
            "riscv64" => Arch::Riscv64,
            "s390x" => Arch::S390X,
            "powerpc64" if cfg!(target_endian = "little") => Arch::Ppc64Le,
            "powerpc64" => Arch::Ppc64,
            "mips64" => Arch::Mips64,
            _ => Arch::X86_64,
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.scmp_name())
    }
}

/// `SCMP_CMP_*` comparison operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Ne,
    Lt,
    Le,
    Eq,
    Ge,
    Gt,
    MaskedEq,
}

impl CmpOp {
    pub fn from_scmp_name(name: &str) -> Option<CmpOp> {
        Some(match name {
            "SCMP_CMP_NE" => CmpOp::Ne,
            "SCMP_CMP_LT" => CmpOp::Lt,
            "SCMP_CMP_LE" => CmpOp::Le,
            "SCMP_CMP_EQ" => CmpOp::Eq,
            "SCMP_CMP_GE" => CmpOp::Ge,
            "SCMP_CMP_GT" => CmpOp::Gt,
            "SCMP_CMP_MASKED_EQ" => CmpOp::MaskedEq,
            _ => return None,
        })
    }
}

/// One argument comparison of a rule (`arg[index] op value [value_two]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cond {
    pub index: u8,
    pub op: CmpOp,
    pub value: u64,
    pub value_two: u64,
}

/// Where in the profile a rule came from, for diagnostics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleOrigin {
    /// JSON pointer of the syscall entry, e.g. `/syscalls/3` (shared by
    /// the rules of each name there).
    pub pointer: std::sync::Arc<str>,
    /// Index into `names` of that entry.
    pub name_index: usize,
}

/// One `seccomp_rule_add` call, in the order the runtime makes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub syscall: String,
    pub action: Action,
    pub conds: Vec<Cond>,
    pub origin: RuleOrigin,
}

/// The filter the runtime asks libseccomp to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterSpec {
    pub default_action: Action,
    /// Extra architectures from the profile, in order (the native one is always present).
    pub arches: Vec<Arch>,
    pub rules: Vec<Rule>,
    /// `listenerPath` when the profile uses SCMP_ACT_NOTIFY.
    pub listener_path: Option<String>,
    /// The libseccomp release the runtime builds it with: its table resolves
    /// the rules' names.
    pub libseccomp: Libseccomp,
}

/// The libseccomp releases the modelled runtimes are linked with, oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord, IntoStaticStr)]
pub enum Libseccomp {
    /// bookworm's 2.5.4 (runc 1.1.5, crun 1.8), the library nodeproof links.
    #[default]
    #[strum(serialize = "2.5.4")]
    V2_5_4,
    /// trixie's 2.6.0 (runc 1.1.15, crun 1.21).
    #[strum(serialize = "2.6.0")]
    V2_6_0,
}

/// A rule runc would drop because libseccomp cannot resolve its syscall name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedRule {
    pub syscall: String,
    pub action: Action,
    pub origin: RuleOrigin,
}
