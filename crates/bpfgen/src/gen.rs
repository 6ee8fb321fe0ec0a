//! libseccomp 2.5.4's BPF generator (`src/gen_bpf.c`) at the default
//! optimisation level: instruction blocks per tree node and per syscall,
//! deduplicated by content, pulled in behind their first jumper, long jumps
//! and copied return instructions where a jump exceeds 255.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::db::{ArchDb, NodeId};
use nodeproof_seccomp::cbpf::SockFilter;
use nodeproof_seccomp::filter::{Arch, CmpOp};
use nodeproof_seccomp::fnv::Fnv;

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ: u16 = 0x15;
const BPF_JGT: u16 = 0x25;
const BPF_JGE: u16 = 0x35;
const BPF_JA: u16 = 0x05;
const BPF_RET: u16 = 0x06;
const BPF_AND: u16 = 0x54;

const OFFSET_NR: i32 = 0;
const OFFSET_ARCH: u32 = 4;
const MASK_MAX: u32 = 0xffff_ffff;
const JMP_MAX: u32 = 255;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

type BlkId = usize;
/// A block's identity in the hash table: equal content, equal id.
type Hash = u32;

/// A jump or `k` operand before it is resolved (`struct bpf_jump`).
/// Ids are 32 bits wide so an instruction stays small: blocks are copied,
/// compared and hashed by content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tgt {
    No,
    K(u32),
    Nxt(u32),
    Db(u32),
    Blk(u32),
    Hsh(Hash),
}

impl Tgt {
    fn feed(self, h: &mut Fnv) {
        let (tag, v) = match self {
            Tgt::No => (0, 0),
            Tgt::K(v) => (1, v),
            Tgt::Nxt(v) => (2, v),
            Tgt::Db(v) => (3, v),
            Tgt::Blk(v) => (4, v),
            Tgt::Hsh(v) => (5, v),
        };
        h.write_u64((tag << 32) | u64::from(v));
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ins {
    op: u16,
    jt: Tgt,
    jf: Tgt,
    k: Tgt,
}

impl Ins {
    fn new(op: u16, jt: Tgt, jf: Tgt, k: u32) -> Ins {
        Ins {
            op,
            jt,
            jf,
            k: Tgt::K(k),
        }
    }
}

/// What the accumulator holds (`struct acc_state`); offset -1 is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Acc {
    offset: i32,
    mask: u32,
}

const ACC_UNDEF: Acc = Acc {
    offset: -1,
    mask: MASK_MAX,
};

fn acc_at(offset: i32) -> Acc {
    Acc {
        offset,
        mask: MASK_MAX,
    }
}

/// The most instructions a block holds: a tree node's mask and comparison
/// with a load and a mask put in front of it when pulled in (a node that
/// loads its own word starts with nothing loaded, so it gets none). A block
/// that would need more is a fault: libseccomp then compiles the filter.
const BLK_MAX_INS: usize = 4;

const INS_NONE: Ins = Ins {
    op: 0,
    jt: Tgt::No,
    jf: Tgt::No,
    k: Tgt::No,
};

/// A block's instructions, stored inline: a generation makes about two
/// thousand blocks, and a `Vec` each was an allocation, a free and a
/// pointer to chase per block.
#[derive(Debug, Clone, Copy)]
struct InsList {
    len: u8,
    ins: [Ins; BLK_MAX_INS],
}

impl InsList {
    const EMPTY: InsList = InsList {
        len: 0,
        ins: [INS_NONE; BLK_MAX_INS],
    };

    fn one(ins: Ins) -> InsList {
        let mut l = InsList::EMPTY;
        l.ins[0] = ins;
        l.len = 1;
        l
    }

    fn push(&mut self, ins: Ins) -> Result<(), Fault> {
        let slot = self.ins.get_mut(usize::from(self.len)).ok_or(Fault)?;
        *slot = ins;
        self.len += 1;
        Ok(())
    }

    fn insert_front(&mut self, ins: Ins) -> Result<(), Fault> {
        let len = usize::from(self.len);
        if len == BLK_MAX_INS {
            return Err(Fault);
        }
        self.ins.copy_within(0..len, 1);
        self.ins[0] = ins;
        self.len += 1;
        Ok(())
    }

    /// The content hash the block table is keyed by.
    fn content_hash(&self) -> u64 {
        let mut h = Fnv::default();
        for ins in self.iter() {
            h.write_u64(u64::from(ins.op));
            ins.jt.feed(&mut h);
            ins.jf.feed(&mut h);
            ins.k.feed(&mut h);
        }
        h.finish()
    }
}

impl std::ops::Deref for InsList {
    type Target = [Ins];
    fn deref(&self) -> &[Ins] {
        &self.ins[..usize::from(self.len)]
    }
}

impl std::ops::DerefMut for InsList {
    fn deref_mut(&mut self) -> &mut [Ins] {
        &mut self.ins[..usize::from(self.len)]
    }
}

#[derive(Debug, Clone)]
struct Blk {
    ins: InsList,
    acc_start: Acc,
    acc_end: Acc,
    hash: Option<Hash>,
    prev: Option<BlkId>,
    next: Option<BlkId>,
    lvl_prv: Option<BlkId>,
    lvl_nxt: Option<BlkId>,
}

/// Where blocks sit before long jumps are added: the last block with each
/// hash, and each block's position.
struct Order {
    last: Vec<Option<BlkId>>,
    ord: Vec<u32>,
    /// Instructions from a block's start to the program's end, for the
    /// blocks after the one being processed (insertions only go before them).
    to_end: Vec<u32>,
    /// The first block with each hash after the one being processed: what
    /// libseccomp's forward search for an existing copy finds first.
    nearest: Vec<Option<BlkId>>,
}

impl Order {
    /// Whether a block with hash `h` starts within a jump's reach of `ins[offset]` of `b`.
    fn copy_in_reach(&self, st: &State<'_>, b: BlkId, offset: usize, h: Hash) -> bool {
        self.nearest
            .get(h as usize)
            .copied()
            .flatten()
            .is_some_and(|x| self.gap(st, b, offset, x) <= JMP_MAX)
    }

    /// Instructions between `ins[offset]` of `b` and the start of `t`.
    fn gap(&self, st: &State<'_>, b: BlkId, offset: usize, t: BlkId) -> u32 {
        let after = (st.blks[b].ins.len() - (offset + 1)) as u32;
        let next = st.blks[b].next.map_or(0, |n| self.to_end[n]);
        after + next - self.to_end[t]
    }
}

/// The generator failed where libseccomp reports `-EFAULT`/`-ENOMEM`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fault;

/// Why [`generate`] gave no program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GenFault {
    /// Where libseccomp reports `-EFAULT`/`-ENOMEM`.
    Fault,
    /// A level of the rule tree links back into itself: libseccomp's
    /// `_gen_bpf_chain` walks `lvl_prv`/`lvl_nxt` until it finds the end and
    /// never does (some rule sets leave such a tree behind in 2.5.4's
    /// `_db_tree_add`; found by the bpfgen_vs_libseccomp fuzz target, where
    /// libseccomp was still generating after 120 s).
    LevelLoops,
}

struct Entry {
    blk: BlkId,
    found: bool,
    /// The next entry whose content hash is the same (a collision chain).
    same_hash: Option<Hash>,
}

/// Content hash → the first entry with it; equal content is then checked
/// against the entry's block, so no key is ever copied.
type BlockTable = HashMap<u64, Hash, BuildHasherDefault<Fnv>>;

/// What one generation allocates, kept per thread: linting a directory or
/// re-checking a node compiles filter after filter.
#[derive(Default)]
struct Buffers {
    blks: Vec<Blk>,
    table: BlockTable,
    entries: Vec<Entry>,
}

thread_local! {
    static BUFFERS: RefCell<Buffers> = RefCell::default();
}

struct State<'a> {
    blks: Vec<Blk>,
    table: BlockTable,
    entries: Vec<Entry>,
    def_hsh: Hash,
    bad_arch_hsh: Hash,
    /// The database whose tree nodes are being generated.
    db: Option<&'a ArchDb>,
    /// A level of that tree was found to loop (see [`GenFault::LevelLoops`]).
    level_loops: bool,
}

/// The filter collection as the generator sees it.
pub(super) struct Collection<'a> {
    pub filters: &'a [ArchDb],
    pub act_default: u32,
    pub act_badarch: u32,
}

pub(super) fn generate(col: &Collection<'_>) -> Result<Vec<SockFilter>, GenFault> {
    let mut bufs = BUFFERS.with(|b| std::mem::take(&mut *b.borrow_mut()));
    bufs.blks.clear();
    bufs.table.clear();
    bufs.entries.clear();
    let mut st = State {
        blks: bufs.blks,
        table: bufs.table,
        entries: bufs.entries,
        def_hsh: 0,
        bad_arch_hsh: 0,
        db: None,
        level_loops: false,
    };
    let prog = st.build(col).map_err(|Fault| {
        if st.level_loops {
            GenFault::LevelLoops
        } else {
            GenFault::Fault
        }
    });
    let bufs = Buffers {
        blks: st.blks,
        table: st.table,
        entries: st.entries,
    };
    BUFFERS.with(|b| *b.borrow_mut() = bufs);
    prog
}

impl<'a> State<'a> {
    fn alloc(&mut self, ins: InsList) -> BlkId {
        self.blks.push(Blk {
            ins,
            acc_start: ACC_UNDEF,
            acc_end: ACC_UNDEF,
            hash: None,
            prev: None,
            next: None,
            lvl_prv: None,
            lvl_nxt: None,
        });
        self.blks.len() - 1
    }

    fn hash(&self, b: BlkId) -> Hash {
        self.blks[b].hash.unwrap_or(0)
    }

    /// `_hsh_add`: a duplicate of an existing block is replaced by it unless
    /// `found` (then both stay, sharing the hash). A duplicate has the same
    /// instructions *and* the same accumulator state at both ends: libseccomp
    /// 2.5.4 hashes and compares `acc_start` and `acc_end` with the
    /// instructions (gen_bpf.c `_hsh_add`). Without them a node that finds its
    /// word already loaded (a 64-bit comparison's hi-word EQ after its GT)
    /// merges with a like node of another arch that loaded another word, and
    /// the shared block later gets a load put in front of it: one instruction
    /// fewer than libseccomp, and on the other arch the wrong argument word.
    fn hsh_add(&mut self, b: BlkId, found: bool) -> BlkId {
        if self.blks[b].hash.is_some() {
            return b;
        }
        let content = self.blks[b].ins.content_hash();
        let first = self.table.get(&content).copied();
        let mut it = first;
        while let Some(h) = it {
            let e = &self.entries[(h - 1) as usize];
            let (old, new) = (&self.blks[e.blk], &self.blks[b]);
            if *old.ins == *new.ins && old.acc_start == new.acc_start && old.acc_end == new.acc_end
            {
                self.blks[b].hash = Some(h);
                if found {
                    return b;
                }
                return e.blk;
            }
            it = e.same_hash;
        }
        self.entries.push(Entry {
            blk: b,
            found,
            same_hash: first,
        });
        let h = self.entries.len() as Hash;
        self.table.insert(content, h);
        self.blks[b].hash = Some(h);
        b
    }

    fn hsh_find_once(&mut self, h: Hash) -> Option<BlkId> {
        let e = self.entries.get_mut((h as usize).checked_sub(1)?)?;
        if e.found {
            return None;
        }
        e.found = true;
        Some(e.blk)
    }

    fn action(&mut self, action: u32) -> BlkId {
        self.alloc(InsList::one(Ins::new(BPF_RET, Tgt::No, Tgt::No, action)))
    }

    fn action_hsh(&mut self, action: u32) -> Hash {
        let b = self.action(action);
        let b = self.hsh_add(b, false);
        self.hash(b)
    }

    /// `_gen_bpf_node`.
    fn node(&mut self, n: NodeId, acc: &mut Acc) -> Result<BlkId, Fault> {
        let node = &self.db.ok_or(Fault)?.nodes[n];
        let b = self.alloc(InsList::EMPTY);
        self.blks[b].acc_start = *acc;
        let act_t = node.act_t_flg.then(|| self.action_hsh(node.act_t));
        let act_f = node.act_f_flg.then(|| self.action_hsh(node.act_f));
        let offset = node.arg_offset as i32;
        if offset != acc.offset || (node.mask & acc.mask) != node.mask {
            *acc = acc_at(offset);
            self.blks[b]
                .ins
                .push(Ins::new(BPF_LD_W_ABS, Tgt::No, Tgt::No, node.arg_offset))?;
            self.blks[b].acc_start = ACC_UNDEF;
        }
        if node.mask != acc.mask {
            acc.mask = node.mask;
            self.blks[b]
                .ins
                .push(Ins::new(BPF_AND, Tgt::No, Tgt::No, node.mask))?;
        }
        let op = match node.op {
            CmpOp::MaskedEq | CmpOp::Eq => BPF_JEQ,
            CmpOp::Gt => BPF_JGT,
            CmpOp::Ge => BPF_JGE,
            CmpOp::Ne | CmpOp::Lt | CmpOp::Le => return Err(Fault),
        };
        let jt = match (node.nxt_t, act_t) {
            (Some(t), _) => Tgt::Db(t as u32),
            (None, Some(h)) => Tgt::Hsh(h),
            (None, None) => Tgt::Nxt(0),
        };
        let jf = match (node.nxt_f, act_f) {
            (Some(f), _) => Tgt::Db(f as u32),
            (None, Some(h)) => Tgt::Hsh(h),
            (None, None) => Tgt::Nxt(0),
        };
        self.blks[b].ins.push(Ins::new(op, jt, jf, node.datum))?;
        self.blks[b].acc_end = *acc;
        Ok(b)
    }

    /// `_gen_bpf_chain_lvl_res`: turn tree and level pointers into hashes.
    fn lvl_res(&mut self, b: BlkId, sys_action: u32, nxt: Tgt) -> Result<BlkId, Fault> {
        if self.blks[b].hash.is_some() {
            return Ok(b);
        }
        for i in 0..self.blks[b].ins.len() {
            for true_branch in [true, false] {
                let ins = self.blks[b].ins[i];
                let t = if true_branch { ins.jt } else { ins.jf };
                let resolved = match t {
                    Tgt::No | Tgt::Hsh(_) => continue,
                    Tgt::Blk(target) => {
                        let nb = self.lvl_res(target as BlkId, sys_action, nxt)?;
                        Tgt::Hsh(self.hash(nb))
                    }
                    Tgt::Db(node) => {
                        // the child starts with what this block leaves loaded
                        let mut acc = self.blks[b].acc_end;
                        let nb = self.chain(sys_action, Some(node as NodeId), nxt, &mut acc)?;
                        Tgt::Hsh(self.hash(nb))
                    }
                    Tgt::K(_) | Tgt::Nxt(_) => return Err(Fault),
                };
                let ins = &mut self.blks[b].ins[i];
                if true_branch {
                    ins.jt = resolved;
                } else {
                    ins.jf = resolved;
                }
            }
            if !matches!(self.blks[b].ins[i].k, Tgt::No | Tgt::K(_) | Tgt::Hsh(_)) {
                return Err(Fault);
            }
        }
        Ok(self.hsh_add(b, false))
    }

    /// `_gen_bpf_chain`: the blocks of one tree level and everything below.
    fn chain(
        &mut self,
        sys_action: u32,
        chain: Option<NodeId>,
        nxt: Tgt,
        a_state: &mut Acc,
    ) -> Result<BlkId, Fault> {
        let mut acc = *a_state;
        let (mut head, tail);
        match chain {
            None => {
                head = self.action(sys_action);
                tail = head;
            }
            Some(c) => {
                let db = self.db.ok_or(Fault)?;
                // A level is a list of distinct nodes: a walk longer than
                // the tree has nodes is going round a loop.
                let bound = db.nodes.len();
                let mut start = c;
                let mut steps = 0;
                while let Some(p) = db.nodes[start].lvl_prv {
                    start = p;
                    steps += 1;
                    if steps > bound {
                        self.level_loops = true;
                        return Err(Fault);
                    }
                }
                let mut it = Some(start);
                let mut first: Option<BlkId> = None;
                let mut last: Option<BlkId> = None;
                let mut steps = 0;
                while let Some(n) = it {
                    steps += 1;
                    if steps > bound {
                        self.level_loops = true;
                        return Err(Fault);
                    }
                    let b = self.node(n, &mut acc)?;
                    if let Some(l) = last {
                        self.blks[b].lvl_prv = Some(l);
                        self.blks[l].lvl_nxt = Some(b);
                    } else {
                        first = Some(b);
                    }
                    last = Some(b);
                    it = db.nodes[n].lvl_nxt;
                }
                head = first.ok_or(Fault)?;
                tail = last.ok_or(Fault)?;
                // resolve the fall-through (TGT_NXT) jumps
                let mut bi = Some(head);
                while let Some(b) = bi {
                    let next = self.blks[b].lvl_nxt;
                    let fall = next.map_or(nxt, |n| Tgt::Blk(n as u32));
                    for ins in self.blks[b].ins.iter_mut() {
                        for t in [&mut ins.jt, &mut ins.jf] {
                            match *t {
                                Tgt::Nxt(0) => *t = fall,
                                Tgt::Nxt(_) => return Err(Fault),
                                _ => {}
                            }
                        }
                    }
                    bi = next;
                }
            }
        }
        // resolve the level from its tail
        let mut bi = Some(tail);
        while let Some(b) = bi {
            let prev = self.blks[b].lvl_prv;
            let next = self.blks[b].lvl_nxt;
            let fall = next.map_or(nxt, |n| Tgt::Blk(n as u32));
            let r = self.lvl_res(b, sys_action, fall)?;
            if let Some(p) = prev {
                self.blks[p].lvl_nxt = Some(r);
            }
            self.blks[r].lvl_prv = prev;
            self.blks[r].lvl_nxt = next;
            if let Some(n) = next {
                self.blks[n].lvl_prv = Some(r);
            }
            if prev.is_none() {
                head = r;
            }
            bi = prev;
        }
        Ok(head)
    }

    /// `_gen_bpf_syscall`: the syscall check and its argument blocks.
    fn syscall(
        &mut self,
        sys: &super::db::SysEntry,
        nxt_hash: Hash,
        acc_reset: bool,
    ) -> Result<BlkId, Fault> {
        let b = self.alloc(InsList::EMPTY);
        let mut a_state;
        if acc_reset {
            self.blks[b]
                .ins
                .push(Ins::new(BPF_LD_W_ABS, Tgt::No, Tgt::No, OFFSET_NR as u32))?;
            a_state = acc_at(OFFSET_NR);
            self.blks[b].acc_start = ACC_UNDEF;
        } else {
            a_state = ACC_UNDEF;
            self.blks[b].acc_start = acc_at(OFFSET_NR);
        }
        self.blks[b].acc_end = acc_at(OFFSET_NR);
        let c = self.chain(sys.action, sys.chains, Tgt::Hsh(self.def_hsh), &mut a_state)?;
        let ch = self.hash(c);
        self.blks[b].ins.push(Ins::new(
            BPF_JEQ,
            Tgt::Hsh(ch),
            Tgt::Hsh(nxt_hash),
            sys.num as u32,
        ))?;
        Ok(self.hsh_add(b, true))
    }

    /// `_gen_bpf_arch`: one architecture's (or x86_64+x32's) block list.
    fn arch(&mut self, db: &'a ArchDb, secondary: Option<&'a ArchDb>) -> Result<BlkId, Fault> {
        self.db = Some(db);
        // libseccomp's list order: by priority, highest first; on a tie the
        // primary's entries, then the secondary's, each by number as an
        // unsigned value (pseudo syscalls last)
        // One word per entry, sorted as integers: priority (descending),
        // secondary, number, then the entry's index to find it again.
        const IDX_BITS: u32 = 15;
        let count = db.syscalls.len() + secondary.map_or(0, |s| s.syscalls.len());
        if count >= 1 << IDX_BITS {
            return Err(Fault);
        }
        let mut keys: Vec<u64> = Vec::with_capacity(count);
        for (sec, d) in [(0u64, Some(db)), (1, secondary)] {
            for (i, sys) in d.into_iter().flat_map(|d| d.syscalls.iter().enumerate()) {
                // libseccomp's priorities fit 16 bits unless a tree has 65,536 nodes
                let pri = u64::from(0xffff_u32.checked_sub(sys.priority).ok_or(Fault)?);
                keys.push(
                    (pri << 48) | (sec << 47) | (u64::from(sys.num as u32) << IDX_BITS) | i as u64,
                );
            }
        }
        keys.sort_unstable();
        let order: Vec<(&'a ArchDb, usize)> = keys
            .iter()
            .map(|&k| {
                let d = match (k >> 47) & 1 {
                    0 => db,
                    _ => secondary.unwrap_or(db),
                };
                (d, (k & ((1 << IDX_BITS) - 1)) as usize)
            })
            .collect();
        let x86_64_family = matches!(db.arch, Arch::X86_64 | Arch::X32);
        let acc_reset = !(x86_64_family && secondary.is_none());

        let mut blk_cnt: u32 = 0;
        let mut head: Option<BlkId> = None;
        let first = order.first().copied();
        for &(d, i) in order.iter().rev() {
            let sys = &d.syscalls[i];
            // pseudo syscalls (negative numbers) never reach the program,
            // though the first in order still takes the accumulator reset
            if sys.num < 0 {
                continue;
            }
            self.db = Some(d);
            let is_head = first.is_some_and(|(fd, fi)| std::ptr::eq(fd, d) && fi == i);
            let nxt_hash = head.map_or(self.def_hsh, |h| self.hash(h));
            let b = self.syscall(sys, nxt_hash, is_head && acc_reset)?;
            self.blks[b].prev = None;
            self.blks[b].next = head;
            if let Some(h) = head {
                self.blks[h].prev = Some(b);
            }
            head = Some(b);
            blk_cnt += 1;
        }
        self.db = Some(db);

        let target = head.map_or(self.def_hsh, |h| self.hash(h));
        if x86_64_family && secondary.is_none() {
            let mut ins = InsList::one(Ins::new(BPF_LD_W_ABS, Tgt::No, Tgt::No, OFFSET_NR as u32));
            if db.arch == Arch::X86_64 {
                // x32 syscalls are a bad arch here, except -1 (a tracer's skip)
                ins.push(Ins::new(
                    BPF_JGE,
                    Tgt::No,
                    Tgt::Hsh(target),
                    X32_SYSCALL_BIT,
                ))?;
                ins.push(Ins::new(
                    BPF_JEQ,
                    Tgt::Hsh(target),
                    Tgt::Hsh(self.bad_arch_hsh),
                    u32::MAX,
                ))?;
            } else {
                ins.push(Ins::new(
                    BPF_JGE,
                    Tgt::Hsh(target),
                    Tgt::Hsh(self.bad_arch_hsh),
                    X32_SYSCALL_BIT,
                ))?;
            }
            blk_cnt += 1;
            let b = self.alloc(ins);
            self.blks[b].acc_end = acc_at(OFFSET_NR);
            self.blks[b].next = head;
            if let Some(h) = head {
                self.blks[h].prev = Some(b);
            }
            head = Some(self.hsh_add(b, true));
        }

        let target = head.map_or(self.def_hsh, |h| self.hash(h));
        let b = self.alloc(InsList::one(Ins::new(
            BPF_JEQ,
            Tgt::Hsh(target),
            Tgt::Nxt(blk_cnt),
            db.arch.audit_arch(),
        )));
        self.blks[b].next = head;
        if let Some(h) = head {
            self.blks[h].prev = Some(b);
        }
        let b = self.hsh_add(b, true);
        self.db = None;
        Ok(b)
    }

    fn find_nxt(&self, b: BlkId, mut nxt: u32) -> Option<BlkId> {
        let mut it = self.blks[b].next;
        while let Some(i) = it {
            if nxt == 0 {
                break;
            }
            it = self.blks[i].next;
            nxt -= 1;
        }
        it
    }

    fn insert_after(&mut self, b: BlkId, new: BlkId) {
        let next = self.blks[b].next;
        self.blks[new].prev = Some(b);
        self.blks[new].next = next;
        if let Some(n) = next {
            self.blks[n].prev = Some(new);
        }
        self.blks[b].next = Some(new);
    }

    /// Place `n` right after `b` during the long-jump pass.
    fn insert_copy(&mut self, order: &mut Order, b: BlkId, n: BlkId) {
        let next = self.blks[b].next.map_or(0, |x| order.to_end[x]);
        order.to_end.resize(self.blks.len(), 0);
        order.to_end[n] = self.blks[n].ins.len() as u32 + next;
        if let Some(h) = self.blks[n].hash {
            order.nearest[h as usize] = Some(n);
        }
        self.insert_after(b, n);
    }

    /// `_gen_bpf_build_jmp_ret`: copy a return closer when it is too far.
    fn jmp_ret(
        &mut self,
        order: &mut Order,
        b: BlkId,
        offset: usize,
        ret: BlkId,
    ) -> Result<bool, Fault> {
        let tgt = self.hash(ret);
        if order.gap(self, b, offset, ret) <= JMP_MAX || order.copy_in_reach(self, b, offset, tgt) {
            return Ok(false);
        }
        let Tgt::K(k) = self.blks[ret].ins[0].k else {
            return Err(Fault);
        };
        let n = self.action(k);
        self.blks[n].hash = Some(tgt);
        self.insert_copy(order, b, n);
        Ok(true)
    }

    /// `_gen_bpf_build_jmp`: add a long jump when a target is out of reach.
    fn jmp(
        &mut self,
        order: &mut Order,
        b: BlkId,
        offset: usize,
        tgt: Hash,
    ) -> Result<bool, Fault> {
        let t = order
            .last
            .get(tgt as usize)
            .copied()
            .flatten()
            .ok_or(Fault)?;
        // a target at or before the jumper: libseccomp's search hits the jumper
        if order.ord[t] <= order.ord[b] {
            return Err(Fault);
        }
        if self.blks[t].ins.len() == 1
            && self.blks[t].ins[0].op == BPF_RET
            && self.jmp_ret(order, b, offset, t)?
        {
            return Ok(true);
        }
        if order.gap(self, b, offset, t) <= JMP_MAX || order.copy_in_reach(self, b, offset, tgt) {
            return Ok(false);
        }
        let n = self.alloc(InsList::one(Ins {
            op: BPF_JA,
            jt: Tgt::No,
            jf: Tgt::No,
            k: Tgt::Hsh(tgt),
        }));
        self.blks[n].hash = Some(tgt);
        self.insert_copy(order, b, n);
        Ok(true)
    }

    /// `_gen_bpf_build_bpf`.
    fn build(&mut self, col: &Collection<'a>) -> Result<Vec<SockFilter>, Fault> {
        if col.filters.is_empty() {
            return Err(Fault);
        }
        let badarch = self.action(col.act_badarch);
        let badarch = self.hsh_add(badarch, true);
        self.bad_arch_hsh = self.hash(badarch);
        let default = self.action(col.act_default);
        let default = self.hsh_add(default, false);
        self.def_hsh = self.hash(default);

        let head = self.alloc(InsList::one(Ins::new(
            BPF_LD_W_ABS,
            Tgt::No,
            Tgt::No,
            OFFSET_ARCH,
        )));
        self.blks[head].acc_end = acc_at(OFFSET_ARCH as i32);
        let head = self.hsh_add(head, true);
        let mut tail = head;

        let pos = |a: Arch| col.filters.iter().position(|f| f.arch == a);
        let (x86_64, x32) = (pos(Arch::X86_64), pos(Arch::X32));
        let mut secondary: Option<&'a ArchDb> = None;
        for (i, f) in col.filters.iter().enumerate() {
            if Some(i) == x86_64 {
                match x32 {
                    Some(j) if j > i => secondary = Some(&col.filters[j]),
                    Some(_) => continue,
                    None => {}
                }
            } else if Some(i) == x32 {
                match x86_64 {
                    Some(j) if j > i => secondary = Some(&col.filters[j]),
                    Some(_) => continue,
                    None => {}
                }
            } else {
                secondary = None;
            }
            let b = self.arch(f, secondary)?;
            self.blks[b].prev = Some(tail);
            self.blks[tail].next = Some(b);
            tail = b;
            while let Some(n) = self.blks[tail].next {
                tail = n;
            }
        }
        self.blks[badarch].prev = Some(tail);
        self.blks[badarch].next = None;
        self.blks[tail].next = Some(badarch);
        tail = badarch;

        // top-level fall-through jumps (the arch checks)
        let mut bi = Some(head);
        while let Some(b) = bi {
            if self.blks[b].next.is_none() {
                break;
            }
            for i in 0..self.blks[b].ins.len() {
                for true_branch in [true, false] {
                    let ins = self.blks[b].ins[i];
                    let t = if true_branch { ins.jt } else { ins.jf };
                    if let Tgt::Nxt(n) = t {
                        let j = self.find_nxt(b, n).ok_or(Fault)?;
                        let h = Tgt::Hsh(self.hash(j));
                        let ins = &mut self.blks[b].ins[i];
                        if true_branch {
                            ins.jt = h;
                        } else {
                            ins.jf = h;
                        }
                    }
                }
            }
            bi = self.blks[b].next;
        }

        // pull in every jump target behind its first jumper, from the end
        let mut bi = Some(tail);
        while let Some(b) = bi {
            let mut jumped: Option<BlkId> = None;
            for i in (0..self.blks[b].ins.len()).rev() {
                let ins = self.blks[b].ins[i];
                for t in [ins.jt, ins.jf, ins.k] {
                    if let Tgt::Hsh(h) = t {
                        jumped = self.hsh_find_once(h);
                        if jumped.is_some() {
                            break;
                        }
                    }
                }
                if let Some(j) = jumped {
                    let start = self.blks[j].acc_start;
                    if start.offset != -1 && self.blks[b].acc_end != start {
                        if start.mask != MASK_MAX {
                            self.blks[j].ins.insert_front(Ins::new(
                                BPF_AND,
                                Tgt::No,
                                Tgt::No,
                                start.mask,
                            ))?;
                        }
                        self.blks[j].ins.insert_front(Ins::new(
                            BPF_LD_W_ABS,
                            Tgt::No,
                            Tgt::No,
                            start.offset as u32,
                        ))?;
                        self.blks[j].acc_start = ACC_UNDEF;
                    }
                    self.insert_after(b, j);
                    break;
                }
            }
            match jumped {
                // libseccomp rescans from the tail; every block after the
                // one just pulled in has no unresolved target left, so the
                // rescan would pass them by: start at the new block.
                Some(j) => bi = Some(j),
                None => bi = self.blks[b].prev,
            }
        }
        while let Some(n) = self.blks[tail].next {
            tail = n;
        }

        // long jumps; libseccomp looks for each target from the tail, which
        // finds the last block with that hash: the copies this phase adds
        // always land before it, so it can be looked up once.
        let mut last: Vec<Option<BlkId>> = vec![None; self.entries.len() + 1];
        let mut ord: Vec<u32> = vec![u32::MAX; self.blks.len()];
        let (mut bi, mut pos) = (Some(head), 0);
        while let Some(b) = bi {
            if let Some(h) = self.blks[b].hash {
                last[h as usize] = Some(b);
            }
            ord[b] = pos;
            pos += 1;
            bi = self.blks[b].next;
        }
        let mut order = Order {
            nearest: vec![None; last.len()],
            last,
            ord,
            to_end: vec![0; self.blks.len()],
        };
        let mut bi = Some(tail);
        while let Some(b) = bi {
            let mut added = 0;
            for i in (0..self.blks[b].ins.len()).rev() {
                let ins = self.blks[b].ins[i];
                for t in [ins.jt, ins.jf] {
                    match t {
                        Tgt::No => {}
                        Tgt::Hsh(h) => added += u32::from(self.jmp(&mut order, b, i, h)?),
                        _ => return Err(Fault),
                    }
                }
            }
            if added == 0 {
                let next = self.blks[b].next.map_or(0, |n| order.to_end[n]);
                order.to_end[b] = self.blks[b].ins.len() as u32 + next;
                if let Some(h) = self.blks[b].hash {
                    order.nearest[h as usize] = Some(b);
                }
                bi = self.blks[b].prev;
            }
        }

        // emit: block starts, then every jump resolved from the end, where
        // the nearest following block with each hash is known
        let mut list = Vec::with_capacity(self.blks.len());
        let mut start = Vec::with_capacity(self.blks.len());
        let (mut bi, mut pos) = (Some(head), 0u32);
        while let Some(b) = bi {
            list.push(b);
            start.push(pos);
            pos += self.blks[b].ins.len() as u32;
            bi = self.blks[b].next;
        }
        // a JA targets the last block with its hash (libseccomp searches from the tail)
        let mut last_start: Vec<Option<u32>> = vec![None; self.entries.len() + 1];
        for (&b, &p) in list.iter().zip(&start) {
            if let Some(h) = self.blks[b].hash {
                last_start[h as usize] = Some(p);
            }
        }
        let mut prog = vec![
            SockFilter {
                code: 0,
                jt: 0,
                jf: 0,
                k: 0
            };
            pos as usize
        ];
        let mut nearest: Vec<Option<u32>> = vec![None; self.entries.len() + 1];
        for (&b, &p) in list.iter().zip(&start).rev() {
            for (i, ins) in self.blks[b].ins.iter().enumerate() {
                let here = p + i as u32 + 1;
                let jump = |t: Tgt| -> Result<u8, Fault> {
                    match t {
                        Tgt::No => Ok(0),
                        Tgt::Hsh(h) => {
                            let to = nearest.get(h as usize).copied().flatten().ok_or(Fault)?;
                            u8::try_from(to - here).map_err(|_| Fault)
                        }
                        _ => Err(Fault),
                    }
                };
                let k = match ins.k {
                    Tgt::No => 0,
                    Tgt::K(k) => k,
                    Tgt::Hsh(h) => {
                        let to = last_start.get(h as usize).copied().flatten().ok_or(Fault)?;
                        to.checked_sub(here).ok_or(Fault)?
                    }
                    _ => return Err(Fault),
                };
                prog[(p as usize) + i] = SockFilter {
                    code: ins.op,
                    jt: jump(ins.jt)?,
                    jf: jump(ins.jf)?,
                    k,
                };
            }
            if let Some(h) = self.blks[b].hash {
                nearest[h as usize] = Some(p);
            }
        }
        Ok(prog)
    }
}
