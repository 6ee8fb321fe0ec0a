//! The libseccomp backend: compile a [`FilterSpec`] with libseccomp
//! without loading it, the oracle of the native generator and its fallback.
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

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsFd;

use libseccomp::error::SeccompError;
use libseccomp::{
    ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall,
};

use nodeproof_seccomp::cbpf::SockFilter;
use nodeproof_seccomp::compiler::{CompileError, CompiledFilter, Errno};
use nodeproof_seccomp::filter::{Action, Arch, CmpOp, Cond, FilterSpec, Rule};
use nodeproof_seccomp::syscalls::{rule_number, scmp_arch, Libseccomp};

/// libseccomp reports failures as negative errno values.
fn errno_of(e: &SeccompError) -> Errno {
    Errno(e.sysrawrc().map_or(libc::EINVAL, |rc| rc.abs()))
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
                source: errno_of(&e),
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
        // Names resolve with the linked library's own table whatever
        // `spec.libseccomp` says (2.5.4's lookups, no release's changes on top):
        // this is the library itself, and the oracle of the release it is.
        match rule_number(Libseccomp::V2_5_4, rule, native, host) {
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
            source: errno_of(&e),
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
            source: errno_of(&e),
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
        source: errno_of(&e),
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
/// Compile `spec` with libseccomp (the oracle of [`bpfgen`], and its fallback).
pub fn compile(spec: &FilterSpec, native: Arch) -> Result<CompiledFilter, CompileError> {
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
