//! What compiling a [`FilterSpec`] gives and can refuse: the contract
//! between lint (which predicts from the program) and the compilers
//! (`nodeproof-bpfgen`: the native generator and libseccomp itself).

use std::fmt;

use crate::cbpf::{SockFilter, BPF_MAXINSNS};
pub use crate::filter::SkippedRule;
use crate::filter::{Action, Arch, FilterSpec};

/// Turns a filter into the BPF program libseccomp would export for it.
/// The edge to libseccomp: implementations live in `nodeproof-bpfgen` and
/// are chosen by the binary.
pub trait Compiler {
    fn compile(&self, spec: &FilterSpec, native: Arch) -> Result<CompiledFilter, CompileError>;
}

/// The BPF program libseccomp generates for a filter, before runc patches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledFilter {
    /// The architecture syscall names were resolved for.
    pub native: Arch,
    /// Every architecture in the filter, `native` first, then the profile's in order.
    pub arches: Vec<Arch>,
    pub program: Vec<SockFilter>,
    pub skipped: Vec<SkippedRule>,
}

impl CompiledFilter {
    pub fn instruction_count(&self) -> usize {
        self.program.len()
    }

    /// Whether the kernel accepts a program this long (runc's patch adds more).
    pub fn fits_kernel_limit(&self) -> bool {
        self.program.len() <= BPF_MAXINSNS
    }
}

/// A raw errno from libseccomp or the kernel, kept comparable for tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

impl std::error::Error for Errno {}

impl Errno {
    /// The calling thread's current `errno`.
    pub fn last() -> Errno {
        Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    #[error("libseccomp could not create a filter with default action {action}")]
    Init {
        action: Action,
        #[source]
        source: Errno,
    },
    #[error("cannot add architecture {arch} to the filter")]
    AddArch {
        arch: Arch,
        #[source]
        source: Errno,
    },
    #[error("cannot remove the host architecture {arch} from the filter")]
    RemoveArch {
        arch: Arch,
        #[source]
        source: Errno,
    },
    #[error("argument index {index} of syscall {syscall} at {pointer} is out of range (0-5)")]
    BadArgIndex {
        syscall: String,
        pointer: String,
        index: u8,
    },
    #[error("libseccomp rejected the rule for syscall {syscall} ({action}) at {pointer}")]
    AddRule {
        syscall: String,
        action: Action,
        pointer: String,
        #[source]
        source: Errno,
    },
    /// libseccomp 2.5.4 corrupts its rule tree on some rule sequences and
    /// loops forever; the native generator stops and reports it.
    #[error("libseccomp never finishes adding the rule for syscall {syscall} at {pointer}, so runc init hangs")]
    RuleAddLoops { syscall: String, pointer: String },
    /// libseccomp 2.5.4 leaves some rule sets' tree with a level that links
    /// back into itself; generating the BPF then never finishes.
    #[error("libseccomp's rule tree for this filter has a level that loops, so generating its BPF never finishes and runc init hangs")]
    ExportLoops,
    #[error("cannot create a memfd for the exported filter")]
    Memfd {
        #[source]
        source: Errno,
    },
    #[error("libseccomp could not export the filter")]
    Export {
        #[source]
        source: Errno,
    },
    #[error("cannot read back the exported filter")]
    ReadBack {
        #[source]
        source: Errno,
    },
    #[error("exported BPF is {len} bytes, not a whole number of instructions")]
    TruncatedProgram { len: usize },
    #[error("exported pseudo filter code is not UTF-8")]
    PfcNotUtf8,
}
