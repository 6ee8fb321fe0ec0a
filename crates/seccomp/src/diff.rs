//! The exact difference between two loaded filters: for every architecture,
//! syscall number and argument region, the action each program returns, where
//! they differ. A pure function over the two programs (runc's -ENOSYS stub
//! and libseccomp's filter, as lint builds them), so two profiles written
//! differently (rules reordered, split, merged, duplicated) that compile to
//! filters deciding the same way have no difference.
//!
//! How it is exact without trying 2^416 inputs: a seccomp program decides
//! only by comparing 32-bit words of `seccomp_data` with constants. The
//! constants each program compares a word with cut that word's values into
//! regions in which every comparison answers the same, so one value of each
//! region (a representative) stands for all of them. Architecture first, then
//! the syscall number for that architecture, then the argument words the
//! programs compare for that syscall: one walk of each program per
//! architecture follows both branches of every comparison, keeping the range
//! of syscall numbers that reaches each instruction, so each argument
//! comparison is known with the numbers it is made for. Both programs then
//! run in the interpreter ([`cbpf::run`]) on every representative. `seccomp-diff` (antitree) compares filters by
//! their BPF too, but instruction by instruction; this compares what they decide.
//!
//! Masked equality (`SCMP_CMP_MASKED_EQ`, compiled to `and` then `jeq`) depends
//! only on the masked bits, so every assignment of the union of the masks' bits
//! (other bits clear) is tried when it has at most [`MAX_MASK_BITS`] bits;
//! where the word is also compared by order, every assignment that some value
//! of each region has. Beyond that, or where the program computes on a word
//! some other way, representatives are sampled and the change says `sampled`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;

use serde::{Serialize, Serializer};

use crate::cbpf::{self, BpfError, SeccompData, SockFilter};
use crate::filter::{Action, Arch, Libseccomp};
use crate::lint::Runtime;
use crate::oci_runtime::OciRuntime;
use crate::syscalls::syscall_name_in;

/// The most mask bits of one argument whose assignments are all tried.
pub const MAX_MASK_BITS: u32 = 12;
/// The most argument cells tried for one syscall number before sampling.
pub const MAX_CELLS: usize = 1 << 16;

/// x32 syscalls are x86_64's audit arch with this bit in the number
/// (`__X32_SYSCALL_BIT`, arch/x86/include/uapi/asm/unistd.h).
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;

/// Which of the two programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    Old,
    New,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Old => "old",
            Side::New => "new",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiffError {
    #[error("the {side} filter is no program the kernel loads")]
    InvalidProgram {
        side: Side,
        #[source]
        source: BpfError,
    },
}

/// How the runtime was modelled when both filters were built: the same for both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Mode {
    pub runtime: Runtime,
    #[serde(serialize_with = "display")]
    pub oci_runtime: OciRuntime,
    pub no_new_privileges: bool,
    /// The node's architecture, the filters' native one.
    #[serde(serialize_with = "display")]
    pub native: Arch,
}

fn display<T: fmt::Display, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// The changes on one architecture (`None`: every architecture neither
/// filter names, which both send to their bad-arch action).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProfileDiff {
    #[serde(serialize_with = "arch_name")]
    pub arch: Option<Arch>,
    pub mode: Mode,
    pub changes: Vec<Change>,
}

fn arch_name<S: Serializer>(a: &Option<Arch>, s: S) -> Result<S::Ok, S::Error> {
    match a {
        Some(a) => s.collect_str(a),
        None => s.serialize_str("other"),
    }
}

/// The syscall (or numbers) a change applies to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Syscall {
    /// A number the arch's libseccomp table names.
    Named { name: String, nr: u32 },
    /// Numbers no comparison of either filter tells apart, or one the table
    /// does not name (such as the -ENOSYS stub's range above the profile's).
    Numbers { first: u32, last: u32 },
}

impl fmt::Display for Syscall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Syscall::Named { name, nr } => write!(f, "{name} ({nr})"),
            Syscall::Numbers { first, last } if first == last => write!(f, "nr {first}"),
            Syscall::Numbers { first, last } => write!(f, "nr {first}..={last}"),
        }
    }
}

/// The values of one argument a change applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ArgValues {
    /// `first..=last`.
    Range { first: u64, last: u64 },
    /// The low 32 bits in `first..=last`, whatever the high ones: neither
    /// filter looks at them (a 32-bit architecture's filter, whose kernel
    /// zero-extends the arguments).
    Low { first: u32, last: u32 },
    /// Every value whose bits under `mask` are `value`.
    Masked { mask: u64, value: u64 },
    /// Every value whose bits under `mask` are not `value`.
    MaskedNot { mask: u64, value: u64 },
    /// Every value but `value`.
    NotEqual { value: u64 },
    /// High word in `high`, low word in `low` (not one range of the 64-bit value).
    Words { high: (u32, u32), low: (u32, u32) },
    /// High word in `high`, low word in `low`, and the bits under `mask` are
    /// `value`: an argument compared both by order and under a mask.
    Bits {
        high: (u32, u32),
        low: (u32, u32),
        mask: u64,
        value: u64,
    },
}

/// One argument's values in a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ArgRange {
    pub index: u8,
    #[serde(flatten)]
    pub values: ArgValues,
}

impl fmt::Display for ArgRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = self.index;
        match self.values {
            ArgValues::Range { first, last } if first == last => write!(f, "arg{i} == {first:#x}"),
            ArgValues::Range { first, last } if last == u64::MAX => {
                write!(f, "arg{i} >= {first:#x}")
            }
            ArgValues::Range { first, last } => write!(f, "arg{i} in {first:#x}..={last:#x}"),
            ArgValues::Low { first, last } if first == last => {
                write!(f, "arg{i} (low 32 bits) == {first:#x}")
            }
            ArgValues::Low { first, last } => {
                write!(f, "arg{i} (low 32 bits) in {first:#x}..={last:#x}")
            }
            ArgValues::Masked { mask, value } => write!(f, "arg{i} & {mask:#x} == {value:#x}"),
            ArgValues::MaskedNot { mask, value } => {
                write!(f, "arg{i} & {mask:#x} != {value:#x}")
            }
            ArgValues::NotEqual { value } => write!(f, "arg{i} != {value:#x}"),
            ArgValues::Bits {
                high,
                low,
                mask,
                value,
            } => write!(
                f,
                "arg{i} high word in {:#x}..={:#x}, low word in {:#x}..={:#x}, & {mask:#x} == {value:#x}",
                high.0, high.1, low.0, low.1
            ),
            ArgValues::Words { high, low } => write!(
                f,
                "arg{i} high word in {:#x}..={:#x}, low word in {:#x}..={:#x}",
                high.0, high.1, low.0, low.1
            ),
        }
    }
}

/// A region of inputs whose action changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    pub syscall: Syscall,
    /// Empty: every value of every argument.
    pub args: Vec<ArgRange>,
    #[serde(serialize_with = "display")]
    pub old: Action,
    #[serde(serialize_with = "display")]
    pub new: Action,
    /// Whether `new` stops what `old` let run, or is harsher where both stop it.
    pub harsher: bool,
    /// The region was found by sampling, so the change holds for the values
    /// tried but the region's edges may be coarser than said.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub sampled: bool,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.syscall)?;
        for a in &self.args {
            write!(f, " {a}")?;
        }
        write!(f, ": {} -> {}", self.old, self.new)?;
        if self.harsher {
            f.write_str(" (harsher)")?;
        }
        if self.sampled {
            f.write_str(" (sampled)")?;
        }
        Ok(())
    }
}

/// How hard an action stops a syscall: running (ALLOW, LOG) below a
/// decision left to another process (NOTIFY, TRACE), below a failed call
/// (ERRNO), a signal (TRAP), killing the thread, killing the process.
pub fn severity(a: Action) -> u8 {
    match a {
        Action::Allow | Action::Log => 0,
        Action::Notify | Action::Trace(_) => 1,
        Action::Errno(_) => 2,
        Action::Trap => 3,
        Action::KillThread => 4,
        Action::KillProcess => 5,
    }
}

/// Whether going from `old` to `new` denies something that ran, or is harsher where it was denied.
pub fn is_harsher(old: Action, new: Action) -> bool {
    severity(new) > severity(old)
}

/// Whether any change of `diffs` is harsher (what `profile diff` exits 1 for).
pub fn any_harsher(diffs: &[ProfileDiff]) -> bool {
    diffs.iter().flat_map(|d| &d.changes).any(|c| c.harsher)
}

/// Every difference between what `old` and `new` decide, per architecture,
/// naming numbers with `lib`'s tables. Architectures with no change are left out.
pub fn diff_programs(
    old: &[SockFilter],
    new: &[SockFilter],
    lib: Libseccomp,
    mode: Mode,
) -> Result<Vec<ProfileDiff>, DiffError> {
    cbpf::validate(old).map_err(|source| DiffError::InvalidProgram {
        side: Side::Old,
        source,
    })?;
    cbpf::validate(new).map_err(|source| DiffError::InvalidProgram {
        side: Side::New,
        source,
    })?;
    let programs = [old, new];
    let mut groups: Vec<ProfileDiff> = Vec::new();
    let arch_cmps = compared(&programs, None);
    let arch_cmps: Vec<Found> = arch_cmps.into_iter().collect();
    for (arch_first, arch_last) in regions(cmps_in(&arch_cmps, (0, u32::MAX)).get(&OFF_ARCH)) {
        let audit = arch_first;
        let named = (arch_first == arch_last).then_some(audit);
        // One walk per program for the arch: every comparison, with the
        // syscall numbers that reach it.
        let (on_nr, found): (Vec<Found>, Vec<Found>) = compared(&programs, Some(audit))
            .into_iter()
            .partition(|f| f.off == OFF_NR);
        let mut nr_cmps = cmps_in(&on_nr, (0, u32::MAX))
            .remove(&OFF_NR)
            .unwrap_or_default();
        if named == Some(Arch::X86_64.audit_arch()) {
            // x32 shares x86_64's audit arch: a region must not straddle the
            // x32 bit, or its numbers would be named on the wrong table.
            nr_cmps
                .starts
                .extend([X32_SYSCALL_BIT, 2 * X32_SYSCALL_BIT, 3 * X32_SYSCALL_BIT]);
        }
        let mut rows: Vec<(Option<Arch>, Row)> = Vec::new();
        for (nr_first, nr_last) in regions(Some(&nr_cmps)) {
            let arch = named.and_then(|a| arch_of(a, nr_first));
            let words = cmps_in(&found, (nr_first, nr_last));
            let cells = judge(&programs, audit, nr_first, &words, nr_cmps.opaque)?;
            if cells.is_empty() {
                continue;
            }
            let syscall = match (nr_first == nr_last, arch) {
                (true, Some(arch)) => syscall_name_in(lib, nr_first as i32, arch)
                    .map(|name| Syscall::Named { name, nr: nr_first }),
                _ => None,
            }
            .unwrap_or(Syscall::Numbers {
                first: nr_first,
                last: nr_last,
            });
            rows.push((arch, Row { syscall, cells }));
        }
        for (arch, row) in rows {
            let group = match groups.iter_mut().find(|g| g.arch == arch) {
                Some(g) => g,
                None => {
                    groups.push(ProfileDiff {
                        arch,
                        mode,
                        changes: Vec::new(),
                    });
                    groups.last_mut().expect("just pushed")
                }
            };
            push_row(&mut group.changes, row);
        }
    }
    groups.retain(|g| !g.changes.is_empty());
    // The arch values between the named ones each gave the same account of
    // the architectures neither filter names: say it once.
    for g in groups.iter_mut().filter(|g| g.arch.is_none()) {
        let mut once: Vec<Change> = Vec::with_capacity(g.changes.len());
        for c in g.changes.drain(..) {
            if !once.contains(&c) {
                once.push(c);
            }
        }
        g.changes = once;
    }
    groups.sort_by_key(|g| g.arch.map_or((1, 0), |a| (0, a as usize)));
    Ok(groups)
}

/// What one program decides for syscall `nr` on audit arch `audit`, over
/// every region of the arguments it compares for that number (the same
/// representatives [`diff_programs`] tries): each distinct action once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decisions {
    pub actions: Vec<Action>,
    /// Some regions were sampled (wide masks, computed words, too many
    /// cells): an action not listed may still be taken for other values.
    pub sampled: bool,
}

/// [`Decisions`] of `program` for one syscall number, without argument
/// values: what a denial the tracer saw (number and arch, no arguments)
/// can be judged against.
pub fn decisions(program: &[SockFilter], audit: u32, nr: u32) -> Result<Decisions, DiffError> {
    cbpf::validate(program).map_err(|source| DiffError::InvalidProgram {
        side: Side::Old,
        source,
    })?;
    let mut found = HashSet::new();
    walk(program, Some(audit), &mut found);
    let found: Vec<Found> = found.into_iter().collect();
    let nr_opaque = cmps_in(&found, (0, u32::MAX))
        .get(&OFF_NR)
        .is_some_and(|w| w.opaque);
    let cmps = cmps_in(&found, (nr, nr));
    let mut args: Vec<ArgCandidates> = Vec::new();
    for i in 0..6u32 {
        let (lo, hi) = arg_words(i);
        let (lo, hi) = (cmps.get(&lo), cmps.get(&hi));
        if lo.is_some() || hi.is_some() {
            args.push(candidates(i as u8, lo, hi));
        }
    }
    let total = args
        .iter()
        .try_fold(1usize, |n, a| n.checked_mul(a.values.len()))
        .unwrap_or(usize::MAX);
    let mut sampled = nr_opaque
        || total > MAX_CELLS
        || args.iter().any(|a| a.sampled)
        || cmps.contains_key(&8)
        || cmps.contains_key(&12)
        || cmps
            .iter()
            .any(|(&o, w)| !(16..64).contains(&o) && o != OFF_ARCH && o != OFF_NR && w.opaque);
    let mut actions: Vec<Action> = Vec::new();
    for n in 0..total.min(MAX_CELLS) {
        let cell = coords(n, &args);
        let mut argv = [0u64; 6];
        for (a, &c) in args.iter().zip(&cell) {
            argv[a.index as usize] = a.values[c].0;
        }
        let data = SeccompData::new(nr as i32, audit, argv);
        let action = action_of(program, &data).map_err(|source| DiffError::InvalidProgram {
            side: Side::Old,
            source,
        })?;
        if !actions.contains(&action) {
            actions.push(action);
        }
    }
    sampled |= total > MAX_CELLS;
    Ok(Decisions { actions, sampled })
}

/// The architecture whose syscall `nr` is under audit arch `audit`.
fn arch_of(audit: u32, nr: u32) -> Option<Arch> {
    if audit == Arch::X86_64.audit_arch() && nr & X32_SYSCALL_BIT != 0 {
        return Some(Arch::X32);
    }
    Arch::ALL
        .into_iter()
        .find(|a| a.audit_arch() == audit && *a != Arch::X32)
}

struct Row {
    syscall: Syscall,
    cells: Vec<Change>,
}

/// Appends a number's changes, joining a run of unnamed numbers that change
/// the same way for every argument into one range.
fn push_row(changes: &mut Vec<Change>, row: Row) {
    if let (Syscall::Numbers { first, last }, [only]) = (&row.syscall, row.cells.as_slice()) {
        if only.args.is_empty() {
            if let Some(prev) = changes.last_mut() {
                if let Syscall::Numbers {
                    first: _,
                    last: prev_last,
                } = &mut prev.syscall
                {
                    if prev.args.is_empty()
                        && prev.old == only.old
                        && prev.new == only.new
                        && prev.sampled == only.sampled
                        && prev_last.checked_add(1) == Some(*first)
                    {
                        *prev_last = *last;
                        return;
                    }
                }
            }
        }
    }
    for mut c in row.cells {
        c.syscall = row.syscall.clone();
        changes.push(c);
    }
}

/// What the comparisons of one 32-bit word tell apart.
#[derive(Debug, Default, Clone)]
struct WordCmps {
    /// The first value of each region ordered comparisons cut (0 always is one).
    starts: BTreeSet<u32>,
    /// Bits tested through `and`/`jset`.
    mask: u32,
    /// Compared in some way the regions above do not capture exactly.
    opaque: bool,
}

/// The value a register holds while walking a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Val {
    Const(u32),
    /// The word of `seccomp_data` at this offset.
    Word(u32),
    /// That word `and` a mask.
    Masked(u32, u32),
    Unknown,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct State {
    pc: usize,
    a: Val,
    x: Val,
    /// The syscall numbers that reach here, `first..=last`.
    nr: (u32, u32),
    /// Scratch memory, for the programs that store to it (libseccomp's and
    /// runc's do not).
    mem: Option<Box<[Val; 16]>>,
}

/// What one comparison tells apart about a word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Cut {
    /// A region starts at this value.
    Start(u32),
    /// These bits are tested.
    Mask(u32),
    /// Compared some other way.
    Opaque,
}

/// A comparison on word `off`, made for the syscall numbers `nr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Found {
    nr: (u32, u32),
    off: u32,
    cut: Cut,
}

/// What the comparisons made for numbers overlapping `nr` tell apart, per word.
fn cmps_in(found: &[Found], nr: (u32, u32)) -> HashMap<u32, WordCmps> {
    let mut out: HashMap<u32, WordCmps> = HashMap::new();
    for f in found.iter().filter(|f| f.nr.0 <= nr.1 && f.nr.1 >= nr.0) {
        let w = out.entry(f.off).or_default();
        match f.cut {
            Cut::Start(v) => {
                w.starts.insert(v);
            }
            Cut::Mask(m) => w.mask |= m,
            Cut::Opaque => w.opaque = true,
        }
    }
    out
}

/// Every comparison `programs` make that they can reach with the arch word
/// `arch` (`None`: any), with the syscall numbers that reach each.
fn compared(programs: &[&[SockFilter]; 2], arch: Option<u32>) -> HashSet<Found> {
    let mut found = HashSet::new();
    for program in programs {
        walk(program, arch, &mut found);
    }
    found
}

fn walk(program: &[SockFilter], arch: Option<u32>, found: &mut HashSet<Found>) {
    use cbpf::op;
    let load = |off: u32| match arch {
        Some(v) if off == OFF_ARCH => Val::Const(v),
        _ => Val::Word(off),
    };
    let stores = program
        .iter()
        .any(|i| i.code == op::ST || i.code == op::STX);
    let start = State {
        pc: 0,
        a: Val::Const(0),
        x: Val::Const(0),
        nr: (0, u32::MAX),
        mem: stores.then(|| Box::new([Val::Unknown; 16])),
    };
    let mut seen: HashSet<State> = HashSet::new();
    let mut todo = vec![start];
    while let Some(mut s) = todo.pop() {
        // Straight-line instructions run here; a branch pushes one successor.
        loop {
            if !seen.insert(s.clone()) {
                break;
            }
            let Some(ins) = program.get(s.pc) else { break };
            let (code, k) = (ins.code, ins.k);
            let next = s.pc + 1;
            let slot = (k & 15) as usize;
            let mem = |s: &State| s.mem.as_ref().map_or(Val::Unknown, |m| m[slot]);
            match code & 0x07 {
                0x00 => {
                    s.a = match code {
                        op::LD_W_ABS => load(k),
                        op::LD_IMM => Val::Const(k),
                        op::LD_MEM => mem(&s),
                        _ => Val::Const(SeccompData::SIZE), // BPF_LEN
                    }
                }
                0x01 => {
                    s.x = match code {
                        op::LDX_IMM => Val::Const(k),
                        op::LDX_MEM => mem(&s),
                        _ => Val::Const(SeccompData::SIZE),
                    }
                }
                0x02 | 0x03 => {
                    let v = if code == op::ST { s.a } else { s.x };
                    if let Some(m) = s.mem.as_mut() {
                        m[slot] = v;
                    }
                }
                0x04 => {
                    let src = if code & 0x08 != 0 { s.x } else { Val::Const(k) };
                    s.a = alu(code, s.a, src);
                }
                0x05 if code == op::JA => {
                    s.pc = next + k as usize;
                    continue;
                }
                0x05 => {
                    let src = if code & 0x08 != 0 { s.x } else { Val::Const(k) };
                    let (jt, jf) = (next + ins.jt as usize, next + ins.jf as usize);
                    let (t, f) = branch(code, s.a, src, s.nr, found);
                    match (t, f) {
                        (Some(nr_t), Some(nr_f)) => {
                            todo.push(State {
                                pc: jf,
                                nr: nr_f,
                                ..s.clone()
                            });
                            s.pc = jt;
                            s.nr = nr_t;
                        }
                        (Some(nr), None) => {
                            s.pc = jt;
                            s.nr = nr;
                        }
                        (None, Some(nr)) => {
                            s.pc = jf;
                            s.nr = nr;
                        }
                        (None, None) => break,
                    }
                    continue;
                }
                0x06 => break,
                _ => {
                    if code & 0xf8 == 0 {
                        s.x = s.a; // TAX
                    } else {
                        s.a = s.x; // TXA
                    }
                }
            }
            s.pc = next;
        }
    }
}

fn alu(code: u16, a: Val, src: Val) -> Val {
    match (a, src) {
        (Val::Const(a), Val::Const(b)) => {
            let v = match code & 0xf0 {
                0x00 => a.wrapping_add(b),
                0x10 => a.wrapping_sub(b),
                0x20 => a.wrapping_mul(b),
                0x30 if b != 0 => a / b,
                0x40 => a | b,
                0x50 => a & b,
                0x60 => a << (b & 31),
                0x70 => a >> (b & 31),
                0x80 => a.wrapping_neg(),
                0xa0 => a ^ b,
                _ => return Val::Unknown,
            };
            Val::Const(v)
        }
        (Val::Word(o), Val::Const(m)) if code & 0xf0 == 0x50 => Val::Masked(o, m),
        (Val::Masked(o, m1), Val::Const(m2)) if code & 0xf0 == 0x50 => Val::Masked(o, m1 & m2),
        _ => Val::Unknown,
    }
}

/// Syscall numbers `first..=last`.
type Numbers = (u32, u32);

/// Which branches of a jump can be taken, with the syscall numbers on
/// each; records what it compares on a word of `seccomp_data`.
fn branch(
    code: u16,
    a: Val,
    src: Val,
    nr: (u32, u32),
    found: &mut HashSet<Found>,
) -> (Option<Numbers>, Option<Numbers>) {
    let (jeq, jgt, jge, jset) = (0x10, 0x20, 0x30, 0x40);
    let op = code & 0xf0;
    let both = (Some(nr), Some(nr));
    let mut record = |off: u32, cut: Cut| {
        found.insert(Found { nr, off, cut });
    };
    match (a, src) {
        (Val::Const(a), Val::Const(b)) => {
            let taken = match op {
                x if x == jeq => a == b,
                x if x == jgt => a > b,
                x if x == jge => a >= b,
                _ => a & b != 0,
            };
            if taken {
                (Some(nr), None)
            } else {
                (None, Some(nr))
            }
        }
        (Val::Word(OFF_NR), Val::Const(k)) => {
            // The numbers each way: `nr` above `k` or not, equal or not.
            let (lo, hi) = nr;
            let part = |first: u32, last: u32| (first <= last).then_some((first, last));
            match op {
                x if x == jeq => {
                    record(OFF_NR, Cut::Start(k));
                    if let Some(k1) = k.checked_add(1) {
                        record(OFF_NR, Cut::Start(k1));
                    }
                    let t = (lo <= k && k <= hi).then_some((k, k));
                    let f = (nr != (k, k)).then_some(nr);
                    (t, f)
                }
                x if x == jgt => {
                    if let Some(k1) = k.checked_add(1) {
                        record(OFF_NR, Cut::Start(k1));
                    }
                    (
                        k.checked_add(1).and_then(|k1| part(lo.max(k1), hi)),
                        part(lo, hi.min(k)),
                    )
                }
                x if x == jge => {
                    record(OFF_NR, Cut::Start(k));
                    (
                        part(lo.max(k), hi),
                        k.checked_sub(1).and_then(|k0| part(lo, hi.min(k0))),
                    )
                }
                x if x == jset && k.is_power_of_two() && k >= 1 << 20 => {
                    // runc's stub tests x86_64's x32 bit this way: the bit is
                    // constant between multiples of it, at most 4096 regions.
                    let mut m = 0u32;
                    while let Some(next) = m.checked_add(k) {
                        record(OFF_NR, Cut::Start(next));
                        m = next;
                    }
                    both
                }
                _ => {
                    record(OFF_NR, Cut::Opaque);
                    both
                }
            }
        }
        (Val::Word(o), Val::Const(k)) => {
            match op {
                x if x == jeq => {
                    record(o, Cut::Start(k));
                    if let Some(k1) = k.checked_add(1) {
                        record(o, Cut::Start(k1));
                    }
                }
                x if x == jgt => {
                    if let Some(k1) = k.checked_add(1) {
                        record(o, Cut::Start(k1));
                    }
                }
                x if x == jge => record(o, Cut::Start(k)),
                _ => record(o, Cut::Mask(k)),
            }
            both
        }
        (Val::Masked(o, m), Val::Const(k)) => {
            record(o, Cut::Mask(if op == jset { m & k } else { m }));
            // Ordered comparison of masked bits is not what the enumeration covers.
            if op == jgt || op == jge {
                record(o, Cut::Opaque);
            }
            both
        }
        (Val::Word(o) | Val::Masked(o, _), _) => {
            record(o, Cut::Opaque);
            both
        }
        _ => both,
    }
}

/// The regions of a word's values the comparisons cut, as `(first, last)`.
fn regions(w: Option<&WordCmps>) -> Vec<(u32, u32)> {
    let mut starts: Vec<u32> = w.map_or_else(Vec::new, |w| w.starts.iter().copied().collect());
    if starts.first() != Some(&0) {
        starts.insert(0, 0);
    }
    let mut out = Vec::with_capacity(starts.len());
    for (i, &s) in starts.iter().enumerate() {
        let last = starts.get(i + 1).map_or(u32::MAX, |n| n - 1);
        out.push((s, last));
    }
    out
}

/// The byte offsets of argument `i`'s low and high words, as the
/// interpreter (and the kernel) lay `seccomp_data` out on this host.
fn arg_words(i: u32) -> (u32, u32) {
    let base = 16 + 8 * i;
    if cfg!(target_endian = "little") {
        (base, base + 4)
    } else {
        (base + 4, base)
    }
}

/// One argument's representatives: a value and the region it stands for.
struct ArgCandidates {
    index: u8,
    values: Vec<(u64, ArgValues)>,
    sampled: bool,
}

fn candidates(index: u8, lo: Option<&WordCmps>, hi: Option<&WordCmps>) -> ArgCandidates {
    let mask = u64::from(hi.map_or(0, |w| w.mask)) << 32 | u64::from(lo.map_or(0, |w| w.mask));
    let ordered = |w: Option<&WordCmps>| w.is_some_and(|w| w.starts.iter().any(|&s| s != 0));
    let opaque = lo.is_some_and(|w| w.opaque) || hi.is_some_and(|w| w.opaque);
    if !opaque
        && (mask == 0 || ((ordered(lo) || ordered(hi)) && mask.count_ones() <= MAX_MASK_BITS))
    {
        // Each word's regions, split by every assignment of its mask's bits
        // that some value of the region has: exact, since the comparisons
        // see only the region and the masked bits.
        let mut values = Vec::new();
        for (hrep, (hf, hl), hm, hb) in word_sets(hi) {
            for (lrep, (lf, ll), lm, lb) in word_sets(lo) {
                let rep = u64::from(hrep) << 32 | u64::from(lrep);
                let (m, b) = (
                    u64::from(hm) << 32 | u64::from(lm),
                    u64::from(hb) << 32 | u64::from(lb),
                );
                let full = |f: u32, l: u32| f == 0 && l == u32::MAX;
                let v = if m != 0 && hf == hl && lf == ll {
                    // One value: the masked bits are its own.
                    match hi {
                        None => ArgValues::Low {
                            first: lf,
                            last: lf,
                        },
                        Some(_) => ArgValues::Range {
                            first: rep,
                            last: rep,
                        },
                    }
                } else if m != 0 && full(hf, hl) && full(lf, ll) {
                    ArgValues::Masked { mask: m, value: b }
                } else if m != 0 {
                    ArgValues::Bits {
                        high: (hf, hl),
                        low: (lf, ll),
                        mask: m,
                        value: b,
                    }
                } else if hi.is_none() {
                    // Only the low word is checked (a 32-bit arch's filter):
                    // the range is of those bits, whatever the high word.
                    ArgValues::Low {
                        first: lf,
                        last: ll,
                    }
                } else if hf == hl || full(lf, ll) {
                    ArgValues::Range {
                        first: u64::from(hf) << 32 | u64::from(lf),
                        last: u64::from(hl) << 32 | u64::from(ll),
                    }
                } else {
                    ArgValues::Words {
                        high: (hf, hl),
                        low: (lf, ll),
                    }
                };
                values.push((rep, v));
            }
        }
        return ArgCandidates {
            index,
            values,
            sampled: false,
        };
    }
    // Masked: every assignment of the mask's bits, others clear, or a sample.
    let bits: Vec<u32> = (0..64).filter(|b| mask >> b & 1 == 1).collect();
    let spread = |n: u64| {
        bits.iter()
            .enumerate()
            .fold(0u64, |v, (i, &b)| v | ((n >> i) & 1) << b)
    };
    let exact = bits.len() as u32 <= MAX_MASK_BITS;
    let mut values: Vec<(u64, ArgValues)> = if exact {
        (0..1u64 << bits.len())
            .map(|n| {
                let value = spread(n);
                (value, ArgValues::Masked { mask, value })
            })
            .collect()
    } else {
        // A fixed walk through the assignments (an odd step visits distinct ones).
        let step = 0x9e37_79b9_7f4a_7c15u64;
        (0..1u64 << MAX_MASK_BITS)
            .map(|n| {
                let value = spread(n.wrapping_mul(step) ^ (n >> 3));
                (value, ArgValues::Masked { mask, value })
            })
            .collect()
    };
    let mut sampled = !exact || opaque;
    if ordered(lo) || ordered(hi) || opaque {
        sampled = true;
        let word_points = |w: Option<&WordCmps>| -> Vec<u32> {
            w.map_or_else(Vec::new, |w| {
                w.starts
                    .iter()
                    .flat_map(|&s| [s, s.wrapping_sub(1)])
                    .collect()
            })
        };
        for h in word_points(hi).into_iter().chain([0, u32::MAX]) {
            for l in word_points(lo).into_iter().chain([0, u32::MAX]) {
                let v = u64::from(h) << 32 | u64::from(l);
                values.push((v, ArgValues::Range { first: v, last: v }));
            }
        }
    }
    values.sort_by_key(|(v, _)| *v);
    values.dedup_by_key(|(v, _)| *v);
    ArgCandidates {
        index,
        values,
        sampled,
    }
}

/// A word's representatives: the value, its region and the mask's bits
/// (mask, value) it stands for.
fn word_sets(w: Option<&WordCmps>) -> Vec<(u32, (u32, u32), u32, u32)> {
    let m = w.map_or(0, |w| w.mask);
    let bits: Vec<u32> = (0..32).filter(|b| m >> b & 1 == 1).collect();
    let mut out = Vec::new();
    for (first, last) in regions(w) {
        for n in 0..1u32 << bits.len() {
            let b = bits
                .iter()
                .enumerate()
                .fold(0u32, |v, (i, &bit)| v | ((n >> i) & 1) << bit);
            if let Some(v) = least_at_least(first, m, b).filter(|&v| v <= last) {
                out.push((v, (first, last), m, b));
            }
        }
    }
    out
}

/// The least `v >= s` whose bits under `m` are `b`.
fn least_at_least(s: u32, m: u32, b: u32) -> Option<u32> {
    if s & m == b {
        return Some(s);
    }
    // A larger v agrees with s above some bit i, has i set where s has it
    // clear, and below i only b's bits; the lowest such i gives the least v.
    (0..32).find_map(|i| {
        let bit = 1u32 << i;
        let above = !(bit | (bit - 1));
        let fits = s & bit == 0 && (m & bit == 0 || b & bit != 0) && s & above & m == b & above;
        fits.then(|| (s & above) | bit | (b & (bit - 1)))
    })
}

/// The action a program returns, as the kernel reads it: a value no action
/// has is taken as SECCOMP_RET_KILL_PROCESS (`__seccomp_filter`'s default case).
fn action_of(program: &[SockFilter], data: &SeccompData) -> Result<Action, BpfError> {
    Ok(Action::from_ret(cbpf::run(program, data)?).unwrap_or(Action::KillProcess))
}

/// The changes for syscall number `nr` on audit arch `audit`, their
/// `syscall` left for the caller to fill in.
fn judge(
    programs: &[&[SockFilter]; 2],
    audit: u32,
    nr: u32,
    cmps: &HashMap<u32, WordCmps>,
    nr_opaque: bool,
) -> Result<Vec<Change>, DiffError> {
    let mut args: Vec<ArgCandidates> = Vec::new();
    let mut sampled_words = nr_opaque
        || cmps
            .iter()
            .any(|(&o, w)| !(16..64).contains(&o) && o != OFF_ARCH && o != OFF_NR && w.opaque);
    for i in 0..6u32 {
        let (lo, hi) = arg_words(i);
        let (lo, hi) = (cmps.get(&lo), cmps.get(&hi));
        if lo.is_some() || hi.is_some() {
            args.push(candidates(i as u8, lo, hi));
        }
    }
    // The instruction pointer: tried at 0 only; a filter comparing it is sampled.
    sampled_words |= cmps.contains_key(&8) || cmps.contains_key(&12);
    let total = args
        .iter()
        .try_fold(1usize, |n, a| n.checked_mul(a.values.len()))
        .unwrap_or(usize::MAX);
    let sampled = sampled_words || total > MAX_CELLS || args.iter().any(|a| a.sampled);
    let cells: Vec<Vec<usize>> = if total <= MAX_CELLS {
        (0..total).map(|n| coords(n, &args)).collect()
    } else {
        let step = 0x9e37_79b9_7f4a_7c15u64;
        (0..MAX_CELLS as u64)
            .map(|n| {
                let mut r = n.wrapping_mul(step).rotate_left(17) ^ n;
                args.iter()
                    .map(|a| {
                        let c = (r % a.values.len() as u64) as usize;
                        r /= a.values.len() as u64;
                        r = r.rotate_left(29) ^ n;
                        c
                    })
                    .collect()
            })
            .collect()
    };
    let mut changed: Vec<CellBox> = Vec::new();
    for cell in &cells {
        let mut argv = [0u64; 6];
        for (a, &c) in args.iter().zip(cell) {
            argv[a.index as usize] = a.values[c].0;
        }
        let data = SeccompData::new(nr as i32, audit, argv);
        let old = action_of(programs[0], &data).map_err(|source| DiffError::InvalidProgram {
            side: Side::Old,
            source,
        })?;
        let new = action_of(programs[1], &data).map_err(|source| DiffError::InvalidProgram {
            side: Side::New,
            source,
        })?;
        if old != new {
            changed.push((cell.iter().map(|&c| (c, c)).collect(), old, new));
        }
    }
    let boxes = all_but_one(merge(changed, args.len()), &args);
    let mut out = Vec::new();
    for (b, old, new) in boxes {
        for args in expand(&b, &args) {
            out.push(Change {
                syscall: Syscall::Numbers {
                    first: nr,
                    last: nr,
                },
                args,
                old,
                new,
                harsher: is_harsher(old, new),
                sampled,
            });
        }
    }
    Ok(out)
}

/// `a` and `b` as one condition, when `b` follows on from `a`.
fn joined(a: ArgValues, b: ArgValues) -> Option<ArgValues> {
    let words = |v: ArgValues| match v {
        ArgValues::Range { first, last } => Some((first, last)),
        // High words in a range, low words all: one range of the 64-bit value.
        ArgValues::Words {
            high,
            low: (0, u32::MAX),
        } => Some((
            u64::from(high.0) << 32,
            u64::from(high.1) << 32 | u64::from(u32::MAX),
        )),
        _ => None,
    };
    match (a, b) {
        (
            ArgValues::Low { first, last },
            ArgValues::Low {
                first: f2,
                last: l2,
            },
        ) if last.checked_add(1) == Some(f2) => Some(ArgValues::Low { first, last: l2 }),
        (ArgValues::Words { high, low }, ArgValues::Words { high: h2, low: l2 })
            if high == h2 && low.1.checked_add(1) == Some(l2.0) =>
        {
            let w = ArgValues::Words {
                high,
                low: (low.0, l2.1),
            };
            Some(words(w).map_or(w, |(first, last)| ArgValues::Range { first, last }))
        }
        _ => {
            let ((f1, l1), (f2, l2)) = (words(a)?, words(b)?);
            (l1.checked_add(1) == Some(f2)).then_some(ArgValues::Range {
                first: f1,
                last: l2,
            })
        }
    }
}

/// Cell `n` of the product of the arguments' candidates, last argument fastest.
fn coords(mut n: usize, args: &[ArgCandidates]) -> Vec<usize> {
    let mut c = vec![0; args.len()];
    for (i, a) in args.iter().enumerate().rev() {
        c[i] = n % a.values.len();
        n /= a.values.len();
    }
    c
}

/// Per argument, a span of its regions; the old and the new action there.
type CellBox = (Vec<(usize, usize)>, Action, Action);

/// Joins boxes of changed cells with the same old and new action that touch
/// along one argument, one argument at a time.
fn merge(mut boxes: Vec<CellBox>, dims: usize) -> Vec<CellBox> {
    for d in (0..dims).rev() {
        let mut groups: HashMap<CellBox, Vec<(usize, usize)>> = HashMap::new();
        let mut order = Vec::new();
        for (b, old, new) in boxes {
            let mut key = b.clone();
            key[d] = (0, 0);
            let k = (key, old, new);
            if !groups.contains_key(&k) {
                order.push(k.clone());
            }
            groups.entry(k).or_default().push(b[d]);
        }
        boxes = Vec::new();
        for k in order {
            let mut spans = groups.remove(&k).expect("grouped");
            spans.sort_unstable();
            let mut joined: Vec<(usize, usize)> = Vec::new();
            for s in spans {
                match joined.last_mut() {
                    Some(last) if last.1 + 1 == s.0 => last.1 = s.1,
                    _ => joined.push(s),
                }
            }
            for s in joined {
                let mut b = k.0.clone();
                b[d] = s;
                boxes.push((b, k.1, k.2));
            }
        }
    }
    boxes.sort_by(|a, b| a.0.cmp(&b.0));
    boxes
}

/// A span standing for every region of an argument but the one at `.1`.
const ALL_BUT: usize = usize::MAX;

/// Boxes that together cover every region of an argument but one that is a
/// single value or flag assignment, the same elsewhere, as one box with that
/// one left out: a mask rule dropped changes every flag combination it
/// refused, an equality dropped every other value, said once.
fn all_but_one(mut boxes: Vec<CellBox>, args: &[ArgCandidates]) -> Vec<CellBox> {
    for (d, a) in args.iter().enumerate() {
        let n = a.values.len();
        if n < 3 {
            continue;
        }
        let mut groups: HashMap<CellBox, Vec<usize>> = HashMap::new();
        for (i, (b, old, new)) in boxes.iter().enumerate() {
            let mut key = b.clone();
            key[d] = (0, 0);
            groups.entry((key, *old, *new)).or_default().push(i);
        }
        let mut drop = vec![false; boxes.len()];
        let mut added = Vec::new();
        for ((key, old, new), members) in groups {
            if members.iter().any(|&i| boxes[i].0[d].0 == ALL_BUT) {
                continue;
            }
            let covered: usize = members
                .iter()
                .map(|&i| boxes[i].0[d].1 - boxes[i].0[d].0 + 1)
                .sum();
            if covered + 1 != n {
                continue;
            }
            let mut hit = vec![false; n];
            for &i in &members {
                let (s, e) = boxes[i].0[d];
                hit[s..=e].iter_mut().for_each(|h| *h = true);
            }
            let missing = hit.iter().position(|h| !h).expect("one left out");
            let single = match a.values[missing].1 {
                ArgValues::Masked { .. } => true,
                ArgValues::Range { first, last } => first == last,
                _ => false,
            };
            if !single {
                continue;
            }
            for &i in &members {
                drop[i] = true;
            }
            let mut b = key;
            b[d] = (ALL_BUT, missing);
            added.push((b, old, new));
        }
        let mut kept: Vec<CellBox> = boxes
            .into_iter()
            .zip(drop)
            .filter(|(_, d)| !d)
            .map(|(b, _)| b)
            .collect();
        kept.extend(added);
        kept.sort_by(|a, b| a.0.cmp(&b.0));
        boxes = kept;
    }
    boxes
}

/// The argument conditions a box stands for: an argument whose every
/// region is in it is left out; a run of regions that is one range is one
/// condition; other runs are one change per region.
fn expand(b: &[(usize, usize)], args: &[ArgCandidates]) -> Vec<Vec<ArgRange>> {
    let mut out: Vec<Vec<ArgRange>> = vec![Vec::new()];
    for (&(s, e), a) in b.iter().zip(args) {
        if s == 0 && e + 1 == a.values.len() {
            continue;
        }
        if s == ALL_BUT {
            let values = match a.values[e].1 {
                ArgValues::Masked { mask, value } => ArgValues::MaskedNot { mask, value },
                ArgValues::Range { first, .. } => ArgValues::NotEqual { value: first },
                other => other,
            };
            for p in &mut out {
                p.push(ArgRange {
                    index: a.index,
                    values,
                });
            }
            continue;
        }
        let run = &a.values[s..=e];
        let mut conds: Vec<ArgValues> = Vec::new();
        for &(_, v) in run {
            match conds.last().and_then(|&last| joined(last, v)) {
                Some(j) => *conds.last_mut().expect("checked") = j,
                None => conds.push(v),
            }
        }
        out = out
            .into_iter()
            .flat_map(|prefix| {
                conds.iter().map(move |&values| {
                    let mut p = prefix.clone();
                    p.push(ArgRange {
                        index: a.index,
                        values,
                    });
                    p
                })
            })
            .collect();
    }
    out
}

impl ArgValues {
    /// Whether `v` is among the values.
    pub fn contains(&self, v: u64) -> bool {
        let (high, low) = ((v >> 32) as u32, v as u32);
        match *self {
            ArgValues::Range { first, last } => (first..=last).contains(&v),
            ArgValues::Low { first, last } => (first..=last).contains(&low),
            ArgValues::Masked { mask, value } => v & mask == value,
            ArgValues::MaskedNot { mask, value } => v & mask != value,
            ArgValues::NotEqual { value } => v != value,
            ArgValues::Bits {
                high: h,
                low: l,
                mask,
                value,
            } => (h.0..=h.1).contains(&high) && (l.0..=l.1).contains(&low) && v & mask == value,
            ArgValues::Words { high: h, low: l } => {
                (h.0..=h.1).contains(&high) && (l.0..=l.1).contains(&low)
            }
        }
    }
}

impl Change {
    /// Whether the change holds for syscall number `nr` called with `args`.
    pub fn covers(&self, nr: u32, args: &[u64; 6]) -> bool {
        let number = match self.syscall {
            Syscall::Named { nr: n, .. } => n == nr,
            Syscall::Numbers { first, last } => (first..=last).contains(&nr),
        };
        number
            && self
                .args
                .iter()
                .all(|a| a.values.contains(args[usize::from(a.index)]))
    }
}

impl Mode {
    /// The mode lint's options describe.
    pub fn of(opts: &crate::lint::LintOptions) -> Mode {
        Mode {
            runtime: opts.runtime,
            oci_runtime: opts.oci_runtime,
            no_new_privileges: opts.no_new_privileges,
            native: opts.arch,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_of_one_number_list_each_action_its_argument_regions_take() {
        use crate::filter::Arch;
        let audit = Arch::X86_64.audit_arch();
        let load = |off: u32| SockFilter {
            code: cbpf::op::LD_W_ABS,
            jt: 0,
            jf: 0,
            k: off,
        };
        let jeq = |k: u32, jt: u8, jf: u8| SockFilter {
            code: cbpf::op::JEQ_K,
            jt,
            jf,
            k,
        };
        let ret = |k: u32| SockFilter {
            code: cbpf::op::RET_K,
            jt: 0,
            jf: 0,
            k,
        };
        const ALLOW: u32 = 0x7fff_0000;
        const EPERM: u32 = 0x0005_0001;
        // nr 83 denied outright; nr 84 denied only when arg0's low word is 7.
        let (lo, _) = arg_words(0);
        let program = [
            load(OFF_NR),
            jeq(83, 0, 1),
            ret(EPERM),
            jeq(84, 0, 3),
            load(lo),
            jeq(7, 0, 1),
            ret(EPERM),
            ret(ALLOW),
        ];
        let d = decisions(&program, audit, 83).unwrap();
        assert_eq!(
            (d.actions.as_slice(), d.sampled),
            ([Action::Errno(1)].as_slice(), false)
        );
        let d = decisions(&program, audit, 84).unwrap();
        assert_eq!(d.actions.len(), 2, "{d:?}");
        assert!(d.actions.contains(&Action::Allow) && d.actions.contains(&Action::Errno(1)));
        let d = decisions(&program, audit, 85).unwrap();
        assert_eq!(d.actions, [Action::Allow]);
        assert!(decisions(&[], audit, 1).is_err());
    }

    #[test]
    fn least_at_least_is_the_least_value_with_those_masked_bits() {
        // Every start, mask and assignment over 6 bits, against a search.
        for m in 0..64u32 {
            for b in (0..64u32).filter(|b| b & !m == 0) {
                for s in 0..64u32 {
                    let want = (s..64).find(|v| v & m == b);
                    let got = least_at_least(s, m, b).filter(|&v| v < 64);
                    assert_eq!(got, want, "s {s:#b} m {m:#b} b {b:#b}");
                }
            }
        }
        assert_eq!(least_at_least(u32::MAX, 1, 0), None);
        assert_eq!(least_at_least(0xffff_fff0, 0xf, 0x3), Some(0xffff_fff3));
    }

    #[test]
    fn regions_start_at_every_cut_and_end_at_the_top() {
        let w = WordCmps {
            starts: [5, 6, u32::MAX].into_iter().collect(),
            ..Default::default()
        };
        assert_eq!(
            regions(Some(&w)),
            [(0, 4), (5, 5), (6, u32::MAX - 1), (u32::MAX, u32::MAX)]
        );
        assert_eq!(regions(None), [(0, u32::MAX)]);
    }
}
