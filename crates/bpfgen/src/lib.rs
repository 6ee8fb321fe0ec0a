//! Seccomp filters compiled to BPF the way runc 1.1.5 compiles them.
//!
//! [`Native`] is a native replacement for libseccomp 2.5.4's rule adds and
//! `seccomp_export_bpf`: the same `seccomp_init` / `seccomp_arch_add` /
//! `seccomp_arch_remove` / `seccomp_rule_add_array` sequence as
//! [`libseccomp::compile`] makes, and byte for byte the same program, in a
//! fraction of the time (the lint runs on every profile edit, and libseccomp
//! itself was most of a lint's time). [`Libseccomp`] is libseccomp itself:
//! the native generator's fallback and its differential oracle.
//!
//! What [`generate`] covers (checked in this order): an x86_64 host; a
//! native arch and filter arches that are little-endian with a known word
//! size — x86_64, x86, x32 (runc's set on x86_64), aarch64, arm, riscv64,
//! mipsel64, mipsel64n32. MIPS o32 and ppc64le are [`GenError::Unsupported`]
//! and [`compile`] asks libseccomp; a big-endian arch in the filter is
//! refused as libseccomp refuses it (`EDOM`). `tests/against_libseccomp/bpfgen_vs_libseccomp.rs`
//! holds the two to identical output or identical refusals.

mod db;
mod gen;
pub mod libseccomp;

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use db::{ApiArg, ApiRule, ArchDb, DbError, WordSize};
use nodeproof_seccomp::compiler::{CompileError, CompiledFilter, Compiler, Errno};
use nodeproof_seccomp::filter::{Action, Arch, CmpOp, FilterSpec, Rule};
use nodeproof_seccomp::fnv::Fnv;
use nodeproof_seccomp::syscalls::{
    resolve_syscall_in, rule_number, syscall_name_in, Libseccomp as Release,
};

/// The compiler runc's filters are predicted with: natively where
/// [`generate`] reproduces libseccomp, otherwise with libseccomp itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct Native;

impl Compiler for Native {
    fn compile(&self, spec: &FilterSpec, native: Arch) -> Result<CompiledFilter, CompileError> {
        compile(spec, native)
    }
}

/// Compile `spec` as runc 1.1.5 would on a `native` machine ([`Native`]).
pub fn compile(spec: &FilterSpec, native: Arch) -> Result<CompiledFilter, CompileError> {
    match generate(spec, native) {
        Ok(compiled) => Ok(compiled),
        Err(GenError::Refused(e)) => Err(e),
        Err(GenError::Unsupported { reason }) => {
            // The linked libseccomp is 2.5.4: for a runtime linked with 2.6.0
            // the names only 2.6.0 knows are left out of this fallback's
            // program (a MIPS o32 or PowerPC filter, or a host other than x86_64).
            tracing::debug!(reason, %native, libseccomp = spec.libseccomp.as_str(), "compiling the filter with the linked libseccomp");
            libseccomp::compile(spec, native)
        }
    }
}

/// libseccomp alone, as runc calls it (the oracle of [`Native`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Libseccomp;

impl Compiler for Libseccomp {
    fn compile(&self, spec: &FilterSpec, native: Arch) -> Result<CompiledFilter, CompileError> {
        libseccomp::compile(spec, native)
    }
}

/// libseccomp's `MAX_ERRNO`: ERRNO data from here up is refused.
const MAX_ERRNO: u16 = 4095;
/// `SCMP_ACT_KILL`, libseccomp's default bad-arch action.
const ACT_BADARCH: u32 = 0;
/// x86's multiplexer syscalls.
const X86_SOCKETCALL: i32 = 102;
const X86_IPC: i32 = 117;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GenError {
    /// Outside what this generator reproduces; libseccomp must compile it.
    #[error("the native BPF generator does not cover {reason}")]
    Unsupported { reason: &'static str },
    /// libseccomp would refuse the same calls with this error.
    #[error("libseccomp would refuse the filter")]
    Refused(#[source] CompileError),
}

fn unsupported(reason: &'static str) -> GenError {
    GenError::Unsupported { reason }
}

/// libseccomp's `arch->size` for the little-endian architectures this
/// generator covers (x32 is an ILP32 ABI, compared 32 bits wide). MIPS o32,
/// PowerPC and s390 multiplex socket calls like x86 and are not reproduced.
fn word_size(arch: Arch) -> Option<WordSize> {
    match arch {
        Arch::X86 | Arch::X32 | Arch::Arm | Arch::Mipsel64N32 => Some(WordSize::Bits32),
        Arch::X86_64 | Arch::Aarch64 | Arch::Mipsel64 | Arch::Riscv64 => Some(WordSize::Bits64),
        _ => None,
    }
}

/// `__AUDIT_ARCH_LE`: libseccomp keeps one byte order per filter.
fn little_endian(arch: Arch) -> bool {
    arch.audit_arch() & 0x4000_0000 != 0
}

/// Whether libseccomp accepts `action` (`sys_chk_seccomp_action`; the other
/// actions are supported by every kernel nodeproof runs on).
fn action_valid(action: Action) -> bool {
    !matches!(action, Action::Errno(e) if e >= MAX_ERRNO)
}

/// Compile `spec` for `native` exactly as [`libseccomp::compile`] would.
pub fn generate(spec: &FilterSpec, native: Arch) -> Result<CompiledFilter, GenError> {
    let host = Arch::native();
    if host != Arch::X86_64 {
        return Err(unsupported("hosts other than x86_64"));
    }
    if !action_valid(spec.default_action) {
        return Err(GenError::Refused(CompileError::Init {
            action: spec.default_action,
            source: Errno(libc::EINVAL),
        }));
    }
    if word_size(native).is_none() {
        return Err(unsupported("this native architecture"));
    }
    // A big-endian arch cannot join a little-endian filter: seccomp_arch_add
    // fails with EDOM there, before anything else is looked at.
    let added = spec.arches.iter().take_while(|&&a| little_endian(a));
    if added.clone().any(|&a| word_size(a).is_none()) {
        return Err(unsupported("MIPS o32 and PowerPC filters"));
    }
    if let Some(&arch) = spec.arches.iter().find(|&&a| !little_endian(a)) {
        return Err(GenError::Refused(CompileError::AddArch {
            arch,
            source: Errno(libc::EDOM),
        }));
    }
    // seccomp_init: the host's filter; runc swaps it for `native` (same byte order here).
    let mut filters = vec![host];
    if native != host {
        filters.push(native);
        filters.retain(|&a| a != host);
    }
    let mut arches = vec![native];
    for &arch in &spec.arches {
        if !filters.contains(&arch) {
            filters.push(arch);
        }
        if !arches.contains(&arch) {
            arches.push(arch);
        }
    }
    let mut dbs: Vec<ArchDb> = filters
        .iter()
        .map(|&a| ArchDb::new(a, word_size(a).unwrap_or(WordSize::Bits64)))
        .collect();

    let mut skipped = Vec::new();
    let default_ret = spec.default_action.to_ret();
    for rule in &spec.rules {
        let nr = match rule_number(spec.libseccomp, rule, native, host) {
            Ok(nr) => nr,
            Err(skip) => {
                skipped.push(skip);
                continue;
            }
        };
        add_rule(&mut dbs, spec.libseccomp, rule, nr, host, default_ret)
            .map_err(GenError::Refused)?;
    }

    let program = gen::generate(&gen::Collection {
        filters: &dbs,
        act_default: default_ret,
        act_badarch: ACT_BADARCH,
    })
    .map_err(|e| match e {
        gen::GenFault::LevelLoops => GenError::Refused(CompileError::ExportLoops),
        gen::GenFault::Fault => unsupported("a filter whose export libseccomp fails"),
    })?;
    Ok(CompiledFilter {
        native,
        arches,
        program,
        skipped,
    })
}

/// `seccomp_rule_add_array` (non-strict) for one rule on every filter.
fn add_rule(
    dbs: &mut [ArchDb],
    lib: Release,
    rule: &Rule,
    nr: i32,
    host: Arch,
    default_ret: u32,
) -> Result<(), CompileError> {
    if let Some(c) = rule.conds.iter().find(|c| c.index > 5) {
        return Err(CompileError::BadArgIndex {
            syscall: rule.syscall.clone(),
            pointer: rule.origin.pointer.to_string(),
            index: c.index,
        });
    }
    let refuse = |errno: i32| CompileError::AddRule {
        syscall: rule.syscall.clone(),
        action: rule.action,
        pointer: rule.origin.pointer.to_string(),
        source: Errno(errno),
    };
    if rule.conds.len() > 6 || (-99..=-1).contains(&nr) || !action_valid(rule.action) {
        return Err(refuse(libc::EINVAL));
    }
    let action = rule.action.to_ret();
    if action == default_ret {
        return Err(refuse(libc::EACCES));
    }
    let mut args: [Option<ApiArg>; 6] = [None; 6];
    for c in &rule.conds {
        let slot = &mut args[usize::from(c.index)];
        if slot.is_some() {
            return Err(refuse(libc::EINVAL));
        }
        // runc passes the mask as the value and the expected value as value_two.
        let (mask, datum) = match c.op {
            CmpOp::MaskedEq => (c.value, c.value_two),
            _ => (u64::MAX, c.value),
        };
        *slot = Some(ApiArg {
            arg: c.index,
            op: c.op,
            mask,
            datum,
        });
    }
    for db in dbs.iter_mut() {
        let syscall = translate(lib, nr, host, db.arch).map_err(|e| refuse(e.0))?;
        let api = ApiRule {
            action,
            syscall,
            args,
        };
        let rc = match db.arch {
            Arch::X86 => x86_rule_add(db, api),
            // no arch hook: pseudo numbers are added as they are (non-strict)
            _ => db.rule_add(&api),
        };
        rc.map_err(|e| match e {
            DbError::Refused(errno) => refuse(errno.0),
            DbError::Loops => CompileError::RuleAddLoops {
                syscall: rule.syscall.clone(),
                pointer: rule.origin.pointer.to_string(),
            },
        })?;
    }
    Ok(())
}

/// Host syscall numbers below this are translated through a dense table.
const DENSE_NR: i32 = 1024;
const NOT_LOOKED_UP: i32 = i32::MIN;
const UNKNOWN: i32 = i32::MIN + 1;

/// (release, host number, arch) → arch number, for numbers outside the dense table.
type TranslatedMap = HashMap<(Release, i32, Arch), Option<i32>, BuildHasherDefault<Fnv>>;

thread_local! {
    /// libseccomp's tables never change: (release, arch, host number) → arch
    /// number, in a flat table for the usual numbers (this runs for every
    /// rule and every extra arch) and a map for pseudo numbers.
    static TRANSLATED_DENSE: RefCell<Vec<i32>> = const { RefCell::new(Vec::new()) };
    static TRANSLATED: RefCell<TranslatedMap> = RefCell::new(HashMap::default());
}

/// `arch_syscall_translate`: the host number to `arch`'s, through the name,
/// in `lib`'s table.
fn translate(lib: Release, nr: i32, host: Arch, arch: Arch) -> Result<i32, Errno> {
    if nr == -1 || arch == host {
        return Ok(nr);
    }
    let lookup =
        || syscall_name_in(lib, nr, host).and_then(|name| resolve_syscall_in(lib, &name, arch));
    let found = if (0..DENSE_NR).contains(&nr) {
        let table = lib as usize * Arch::ALL.len() + arch as usize;
        let slot = table * DENSE_NR as usize + nr as usize;
        let cached = TRANSLATED_DENSE.with(|t| {
            let mut t = t.borrow_mut();
            if t.is_empty() {
                let tables = Release::ALL.len() * Arch::ALL.len();
                t.resize(tables * DENSE_NR as usize, NOT_LOOKED_UP);
            }
            t[slot]
        });
        match cached {
            NOT_LOOKED_UP => {
                let found = lookup();
                TRANSLATED_DENSE.with(|t| t.borrow_mut()[slot] = found.unwrap_or(UNKNOWN));
                found
            }
            UNKNOWN => None,
            n => Some(n),
        }
    } else {
        TRANSLATED.with(|t| *t.borrow_mut().entry((lib, nr, arch)).or_insert_with(lookup))
    };
    found.ok_or(Errno(libc::EFAULT))
}

/// A multiplexed socket/ipc call on x86: its `socketcall`/`ipc` form (the
/// multiplexer and its call number) and its direct syscall (Linux 4.3+).
/// Without a direct syscall libseccomp 2.5.4 adds the pseudo number itself:
/// it never reaches the program but takes part in the ordering.
struct Muxed {
    via: (i32, u64),
    direct: i32,
}

/// Pseudo number ↔ direct x86 syscall for the socketcall and ipc families.
const X86_MUX: [(i32, Option<i32>); 32] = [
    (-101, Some(359)),
    (-102, Some(361)),
    (-103, Some(362)),
    (-104, Some(363)),
    (-105, None),
    (-106, Some(367)),
    (-107, Some(368)),
    (-108, Some(360)),
    (-109, None),
    (-110, None),
    (-111, Some(369)),
    (-112, Some(371)),
    (-113, Some(373)),
    (-114, Some(366)),
    (-115, Some(365)),
    (-116, Some(370)),
    (-117, Some(372)),
    (-118, Some(364)),
    (-119, Some(337)),
    (-120, Some(345)),
    (-201, None),
    (-202, Some(393)),
    (-203, Some(394)),
    (-204, None),
    (-211, Some(400)),
    (-212, Some(401)),
    (-213, Some(399)),
    (-214, Some(402)),
    (-221, Some(397)),
    (-222, Some(398)),
    (-223, Some(395)),
    (-224, Some(396)),
];

fn x86_muxed(sys: i32) -> Option<Result<Muxed, Errno>> {
    let socket = (-120..=-100).contains(&sys) || (359..=373).contains(&sys);
    let ipc = (-224..=-200).contains(&sys) || (393..=402).contains(&sys);
    if !socket && !ipc {
        return None;
    }
    let (mux, modulus) = if socket {
        (X86_SOCKETCALL, 100)
    } else {
        (X86_IPC, 200)
    };
    let entry = if sys > 0 {
        X86_MUX.iter().find(|(_, d)| *d == Some(sys))
    } else {
        X86_MUX.iter().find(|(p, _)| *p == sys)
    };
    // libseccomp's __NR_SCMP_ERROR, collapsed to EFAULT by the API
    let Some(&(pseudo, direct)) = entry else {
        return Some(Err(Errno(libc::EFAULT)));
    };
    Some(Ok(Muxed {
        via: (mux, u64::from(pseudo.unsigned_abs() % modulus)),
        direct: if sys > 0 { sys } else { direct.unwrap_or(sys) },
    }))
}

/// `x86_rule_add`: socket and ipc calls go in both forms.
fn x86_rule_add(db: &mut ArchDb, rule: ApiRule) -> Result<(), DbError> {
    match x86_muxed(rule.syscall) {
        Some(m) => {
            let m = m.map_err(DbError::Refused)?;
            let (mux, call) = m.via;
            let mut via = rule;
            via.syscall = mux;
            via.args[0] = Some(ApiArg {
                arg: 0,
                op: CmpOp::Eq,
                mask: u64::MAX,
                datum: call,
            });
            db.rule_add(&via)?;
            db.rule_add(&ApiRule {
                syscall: m.direct,
                ..rule
            })
        }
        None if rule.syscall >= 0 => db.rule_add(&rule),
        // a pseudo syscall x86 lacks: silently nothing (non-strict)
        None => Ok(()),
    }
}
