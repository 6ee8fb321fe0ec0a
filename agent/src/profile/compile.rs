//! Compile a [`FilterSpec`] with libseccomp without loading it.
//!
//! This mirrors runc 1.1.5's `InitSeccomp` through libseccomp-golang up to,
//! but not including, `patchbpf.PatchAndLoad`:
//!
//! * `NewFilter(default)` = `seccomp_init(default)` plus `SCMP_FLTATR_CTL_TSYNC`;
//!   runc then clears `SCMP_FLTATR_CTL_NNP`. Both only change how the filter
//!   is *loaded*, not the exported BPF, so they are not set here.
//! * runc 1.1.5 never calls `SetOptimize` (binary-tree optimisation came in
//!   runc 1.2), so libseccomp's default optimisation level applies.
//! * `AddArch` treats `-EEXIST` as success (libseccomp-rs does the same).
//! * `GetSyscallFromName` = `seccomp_syscall_resolve_name` on the native arch;
//!   a failure means runc silently skips the rule. Negative pseudo-syscall
//!   numbers (e.g. `socketcall` on x86_64) are *not* failures.
//!
//! runc's patchbpf later prepends an `-ENOSYS` stub for syscalls newer than
//! the profile knows; that is not part of [`CompiledFilter::program`].

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsFd;

use libseccomp::error::SeccompError;
use libseccomp::{
    ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall,
};

use super::bpfgen::{self, GenError};
use super::filter::{Action, Arch, CmpOp, Cond, FilterSpec, Rule, RuleOrigin};

/// The kernel's limit on the length of a classic BPF program (`BPF_MAXINSNS`).
pub const BPF_MAXINSNS: usize = 4096;

/// One classic BPF instruction, laid out like the kernel's `struct sock_filter`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SockFilter {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

impl SockFilter {
    pub const SIZE: usize = 8;

    /// Decode one instruction as `seccomp_export_bpf` writes it (host byte order).
    pub fn from_bytes(b: [u8; 8]) -> SockFilter {
        SockFilter {
            code: u16::from_ne_bytes([b[0], b[1]]),
            jt: b[2],
            jf: b[3],
            k: u32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
        }
    }
}

/// A rule runc would drop because libseccomp cannot resolve its syscall name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedRule {
    pub syscall: String,
    pub action: Action,
    pub origin: RuleOrigin,
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

    fn from_seccomp(e: &SeccompError) -> Errno {
        // libseccomp reports failures as negative errno values.
        Errno(e.sysrawrc().map_or(libc::EINVAL, |rc| rc.abs()))
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

fn scmp_arch(arch: Arch) -> ScmpArch {
    match arch {
        Arch::X86 => ScmpArch::X86,
        Arch::X86_64 => ScmpArch::X8664,
        Arch::X32 => ScmpArch::X32,
        Arch::Arm => ScmpArch::Arm,
        Arch::Aarch64 => ScmpArch::Aarch64,
        Arch::Mips => ScmpArch::Mips,
        Arch::Mips64 => ScmpArch::Mips64,
        Arch::Mips64N32 => ScmpArch::Mips64N32,
        Arch::Mipsel => ScmpArch::Mipsel,
        Arch::Mipsel64 => ScmpArch::Mipsel64,
        Arch::Mipsel64N32 => ScmpArch::Mipsel64N32,
        Arch::Ppc => ScmpArch::Ppc,
        Arch::Ppc64 => ScmpArch::Ppc64,
        Arch::Ppc64Le => ScmpArch::Ppc64Le,
        Arch::Riscv64 => ScmpArch::Riscv64,
        Arch::S390 => ScmpArch::S390,
        Arch::S390X => ScmpArch::S390X,
    }
}

fn scmp_action(action: Action) -> ScmpAction {
    match action {
        Action::KillThread => ScmpAction::KillThread,
        Action::KillProcess => ScmpAction::KillProcess,
        Action::Trap => ScmpAction::Trap,
        Action::Errno(e) => ScmpAction::Errno(i32::from(e)),
        Action::Trace(e) => ScmpAction::Trace(e),
        Action::Allow => ScmpAction::Allow,
        Action::Log => ScmpAction::Log,
        Action::Notify => ScmpAction::Notify,
    }
}

fn scmp_cond(c: &Cond) -> ScmpArgCompare {
    // libseccomp-golang passes value as datum_a and valueTwo as datum_b; for
    // MASKED_EQ datum_a is the mask, and libseccomp ignores datum_b otherwise.
    let op = match c.op {
        CmpOp::Ne => ScmpCompareOp::NotEqual,
        CmpOp::Lt => ScmpCompareOp::Less,
        CmpOp::Le => ScmpCompareOp::LessOrEqual,
        CmpOp::Eq => ScmpCompareOp::Equal,
        CmpOp::Ge => ScmpCompareOp::GreaterEqual,
        CmpOp::Gt => ScmpCompareOp::Greater,
        CmpOp::MaskedEq => {
            return ScmpArgCompare::new(
                u32::from(c.index),
                ScmpCompareOp::MaskedEqual(c.value),
                c.value_two,
            )
        }
    };
    ScmpArgCompare::new(u32::from(c.index), op, c.value)
}

/// Per syscall name, its number on each architecture (indexed like
/// [`Arch::ALL`]), looked up in libseccomp the first time it is asked for.
type NumberRow = [i32; Arch::ALL.len()];
const NOT_LOOKED_UP: i32 = i32::MIN;
const UNKNOWN: i32 = i32::MIN + 1;

/// Names index their rows, so a hit is one hash lookup.
#[derive(Default)]
struct NameCache {
    index: HashMap<Box<str>, usize, Fnv>,
    rows: Vec<NumberRow>,
}
type Fnv = std::hash::BuildHasherDefault<super::fnv::Fnv>;

thread_local! {
    /// libseccomp's name tables never change; lint asks for the same names
    /// over and over (every rule, every prediction, every arch of runc's
    /// ENOSYS stub), so remember the answers, all arches of a name together.
    static RESOLVED: RefCell<NameCache> = RefCell::new(Default::default());
}

/// The syscall number libseccomp's `seccomp_syscall_resolve_name_arch` gives,
/// possibly a negative pseudo number; `None` when the name is unknown.
pub fn resolve_syscall(name: &str, arch: Arch) -> Option<i32> {
    RESOLVED.with(|cache| number_on(row(&mut cache.borrow_mut(), name), name, arch))
}

/// For each of `arches`, the largest syscall number above 0 among `names`
/// (runc's ENOSYS stub asks this of every name: one lookup per name).
pub fn max_syscall_numbers<'a>(
    names: impl IntoIterator<Item = &'a str>,
    arches: &[Arch],
) -> Vec<Option<i32>> {
    let mut max = vec![None; arches.len()];
    RESOLVED.with(|cache| {
        let mut cache = cache.borrow_mut();
        for name in names {
            let row = row(&mut cache, name);
            for (m, &arch) in max.iter_mut().zip(arches) {
                if let Some(nr) = number_on(row, name, arch).filter(|&nr| nr > 0) {
                    *m = Some(m.map_or(nr, |v: i32| v.max(nr)));
                }
            }
        }
    });
    max
}

/// Names remembered per thread before the cache starts over: libseccomp
/// knows about 500, so only profiles full of made-up names reach it, and a
/// long-running agent must not grow with them.
const MAX_CACHED_NAMES: usize = 1 << 16;

fn row<'c>(cache: &'c mut NameCache, name: &str) -> &'c mut NumberRow {
    let i = match cache.index.get(name) {
        Some(&i) => i,
        None => {
            if cache.rows.len() >= MAX_CACHED_NAMES {
                cache.index.clear();
                cache.rows.clear();
            }
            cache.rows.push([NOT_LOOKED_UP; Arch::ALL.len()]);
            cache.index.insert(name.into(), cache.rows.len() - 1);
            cache.rows.len() - 1
        }
    };
    &mut cache.rows[i]
}

fn number_on(row: &mut NumberRow, name: &str, arch: Arch) -> Option<i32> {
    let slot = &mut row[arch as usize];
    if *slot == NOT_LOOKED_UP {
        *slot = ScmpSyscall::from_name_by_arch(name, scmp_arch(arch))
            .ok()
            .map_or(UNKNOWN, i32::from);
    }
    (*slot != UNKNOWN).then_some(*slot)
}

/// The name libseccomp knows for syscall `nr` on `arch`.
pub fn syscall_name(nr: i32, arch: Arch) -> Option<String> {
    ScmpSyscall::from(nr).get_name_by_arch(scmp_arch(arch)).ok()
}

/// The number a rule is added with, or the rule runc skips.
///
/// runc resolves on its own native arch; a name unknown there is skipped.
/// libseccomp then translates rule numbers from the *host* numbering to each
/// filter arch, so this is the host number even when cross-compiling
/// (libseccomp's name table is shared by all arches, so a name known on
/// `native` is known on the host too).
pub(crate) fn rule_number(rule: &Rule, native: Arch, host: Arch) -> Result<i32, SkippedRule> {
    let on_native = resolve_syscall(&rule.syscall, native);
    on_native
        .and_then(|nr| {
            if native == host {
                Some(nr)
            } else {
                resolve_syscall(&rule.syscall, host)
            }
        })
        .ok_or_else(|| SkippedRule {
            syscall: rule.syscall.clone(),
            action: rule.action,
            origin: rule.origin.clone(),
        })
}

/// `__AUDIT_ARCH_LE`: the byte order bit of an audit arch.
const LE_BIT: u32 = 0x4000_0000;

/// Build the libseccomp filter context the way runc does.
fn build(
    spec: &FilterSpec,
    native: Arch,
) -> Result<(ScmpFilterContext, CompiledFilter), CompileError> {
    let host = Arch::native();
    // seccomp_init returns NULL without an errno; its only failure for a
    // well-formed call is an action libseccomp rejects, i.e. EINVAL.
    let mut ctx = ScmpFilterContext::new(scmp_action(spec.default_action)).map_err(|_| {
        CompileError::Init {
            action: spec.default_action,
            source: Errno(libc::EINVAL),
        }
    })?;
    if native != host {
        // libseccomp keeps one byte order per filter: for a target of the other
        // order (s390x on x86_64) the host must go first; otherwise add first so
        // the filter never has zero arches.
        let same_order = (native.audit_arch() & LE_BIT) == (host.audit_arch() & LE_BIT);
        if same_order {
            add_arch(&mut ctx, native)?;
        }
        ctx.remove_arch(ScmpArch::Native)
            .map_err(|e| CompileError::RemoveArch {
                arch: host,
                source: Errno::from_seccomp(&e),
            })?;
        if !same_order {
            add_arch(&mut ctx, native)?;
        }
    }
    let mut arches = vec![native];
    for &arch in &spec.arches {
        add_arch(&mut ctx, arch)?;
        if !arches.contains(&arch) {
            arches.push(arch);
        }
    }

    let mut skipped = Vec::new();
    for rule in &spec.rules {
        match rule_number(rule, native, host) {
            Ok(nr) => add_rule(&mut ctx, rule, nr)?,
            Err(skip) => skipped.push(skip),
        }
    }
    Ok((
        ctx,
        CompiledFilter {
            native,
            arches,
            program: Vec::new(),
            skipped,
        },
    ))
}

fn add_arch(ctx: &mut ScmpFilterContext, arch: Arch) -> Result<(), CompileError> {
    ctx.add_arch(scmp_arch(arch))
        .map(|_| ())
        .map_err(|e| CompileError::AddArch {
            arch,
            source: Errno::from_seccomp(&e),
        })
}

fn add_rule(ctx: &mut ScmpFilterContext, rule: &Rule, nr: i32) -> Result<(), CompileError> {
    if let Some(c) = rule.conds.iter().find(|c| c.index > 5) {
        return Err(CompileError::BadArgIndex {
            syscall: rule.syscall.clone(),
            pointer: rule.origin.pointer.to_string(),
            index: c.index,
        });
    }
    let conds: Vec<ScmpArgCompare> = rule.conds.iter().map(scmp_cond).collect();
    ctx.add_rule_conditional(scmp_action(rule.action), ScmpSyscall::from(nr), &conds)
        .map(|_| ())
        .map_err(|e| CompileError::AddRule {
            syscall: rule.syscall.clone(),
            action: rule.action,
            pointer: rule.origin.pointer.to_string(),
            source: Errno::from_seccomp(&e),
        })
}

/// Export through a memfd: a pipe would block once the filter outgrows its buffer.
fn export_with(
    export: impl FnOnce(&File) -> Result<(), SeccompError>,
) -> Result<Vec<u8>, CompileError> {
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let fd = memfd_create(c"nodeproof-seccomp", MFdFlags::MFD_CLOEXEC).map_err(|e| {
        CompileError::Memfd {
            source: Errno(e as i32),
        }
    })?;
    let mut file = File::from(fd);
    export(&file).map_err(|e| CompileError::Export {
        source: Errno::from_seccomp(&e),
    })?;
    let io_err = |e: std::io::Error| CompileError::ReadBack {
        source: Errno(e.raw_os_error().unwrap_or(libc::EIO)),
    };
    file.seek(SeekFrom::Start(0)).map_err(io_err)?;
    let mut buf = Vec::new();
    file.read_to_end(&mut buf).map_err(io_err)?;
    Ok(buf)
}

/// Compile `spec` as runc 1.1.5 would on a `native` machine: natively where
/// [`bpfgen`] reproduces libseccomp, otherwise with libseccomp itself.
pub fn compile(spec: &FilterSpec, native: Arch) -> Result<CompiledFilter, CompileError> {
    match bpfgen::generate(spec, native) {
        Ok(compiled) => Ok(compiled),
        Err(GenError::Refused(e)) => Err(e),
        Err(GenError::Unsupported { reason }) => {
            tracing::debug!(reason, %native, "compiling the filter with libseccomp");
            compile_with_libseccomp(spec, native)
        }
    }
}

/// Compile `spec` with libseccomp (the oracle of [`bpfgen`], and its fallback).
pub fn compile_with_libseccomp(
    spec: &FilterSpec,
    native: Arch,
) -> Result<CompiledFilter, CompileError> {
    let (ctx, mut compiled) = build(spec, native)?;
    let bytes = export_with(|f| ctx.export_bpf(f.as_fd()))?;
    if !bytes.len().is_multiple_of(SockFilter::SIZE) {
        return Err(CompileError::TruncatedProgram { len: bytes.len() });
    }
    compiled.program = bytes
        .chunks_exact(SockFilter::SIZE)
        .map(|c| {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            SockFilter::from_bytes(b)
        })
        .collect();
    Ok(compiled)
}

/// libseccomp's pseudo filter code (PFC) for `spec`, for humans.
pub fn export_pfc(spec: &FilterSpec, native: Arch) -> Result<String, CompileError> {
    let (ctx, _) = build(spec, native)?;
    let bytes = export_with(|f| ctx.export_pfc(f.as_fd()))?;
    String::from_utf8(bytes).map_err(|_| CompileError::PfcNotUtf8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_cache_starts_over_instead_of_growing() {
        for i in 0..MAX_CACHED_NAMES + 10 {
            assert_eq!(resolve_syscall(&format!("made_up_{i}"), Arch::X86_64), None);
        }
        let cached = RESOLVED.with(|c| c.borrow().rows.len());
        assert!(
            (1..=MAX_CACHED_NAMES).contains(&cached),
            "{cached} names cached"
        );
        assert_eq!(resolve_syscall("read", Arch::X86_64), Some(0));
        assert_eq!(resolve_syscall("read", Arch::X86), Some(3));
    }
}
