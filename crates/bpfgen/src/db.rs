//! libseccomp 2.5.4's per-architecture rule database (`src/db.c`): rules are
//! turned into argument-comparison trees and merged per syscall, with the
//! same pruning, ordering and reference counting, because the tree shape and
//! the node counts (syscall priorities) decide the exported program.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use nodeproof_seccomp::compiler::Errno;
use nodeproof_seccomp::filter::{Arch, CmpOp};
use nodeproof_seccomp::fnv::Fnv;

pub(super) type NodeId = usize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum DbError {
    #[error("libseccomp refuses the rule")]
    Refused(#[from] Errno),
    /// libseccomp 2.5.4 corrupts a tree level into a cycle on some rule
    /// sequences and then walks it forever; this walk stopped instead.
    #[error("libseccomp never finishes adding the rule")]
    Loops,
}

/// Deeper than any real tree (6 arguments, 3 nodes each): a corrupted one.
const MAX_DEPTH: u32 = 4096;

/// `seccomp_data.args[0]`; each argument is 8 bytes.
const ARGS_OFFSET: u32 = 16;
/// The syscall-node part of a priority: fewer comparison nodes sort first.
const PRI_MASK_CHAIN: u32 = 0x0000_ffff;

/// Walk state of `_db_tree_prune` (`struct db_iter_state`).
const IST_MATCH: u32 = 0x01;
const IST_MATCH_ONCE: u32 = 0x02;
const IST_X_FINISHED: u32 = 0x10;
const IST_N_FINISHED: u32 = 0x20;
const IST_X_PREFIX: u32 = 0x100;
const IST_N_PREFIX: u32 = 0x200;
const IST_M_MATCHSET: u32 = IST_MATCH | IST_MATCH_ONCE;
const IST_M_REDUNDANT: u32 = IST_MATCH | IST_X_FINISHED | IST_N_PREFIX;

/// One 32-bit comparison in a syscall's argument tree (`db_arg_chain_tree`).
#[derive(Debug, Clone)]
pub(super) struct Node {
    refcnt: u32,
    pub lvl_prv: Option<NodeId>,
    pub lvl_nxt: Option<NodeId>,
    pub nxt_t: Option<NodeId>,
    pub nxt_f: Option<NodeId>,
    arg: u8,
    arg_h_flg: bool,
    pub arg_offset: u32,
    pub op: CmpOp,
    op_orig: CmpOp,
    pub mask: u32,
    pub datum: u32,
    datum_full: u64,
    pub act_t_flg: bool,
    pub act_t: u32,
    pub act_f_flg: bool,
    pub act_f: u32,
}

impl Node {
    fn new(arg: u8, high: bool, op: CmpOp, op_orig: CmpOp, mask: u32, datum: u64) -> Node {
        let offset = ARGS_OFFSET + 8 * u32::from(arg) + if high { 4 } else { 0 };
        let word = if high {
            (datum >> 32) as u32
        } else {
            datum as u32
        };
        Node {
            refcnt: 0,
            lvl_prv: None,
            lvl_nxt: None,
            nxt_t: None,
            nxt_f: None,
            arg,
            arg_h_flg: high,
            arg_offset: offset,
            op,
            op_orig,
            mask,
            // The datum is stored masked (`_db_node_mask_fixup`).
            datum: word & mask,
            datum_full: datum,
            act_t_flg: false,
            act_t: 0,
            act_f_flg: false,
            act_f: 0,
        }
    }

    fn arg_priority(&self) -> u32 {
        (u32::from(self.arg) << 1) + u32::from(self.arg_h_flg)
    }

    fn is_leaf(&self) -> bool {
        self.nxt_t.is_none() && self.nxt_f.is_none()
    }

    fn is_zombie(&self) -> bool {
        self.is_leaf() && !self.act_t_flg && !self.act_f_flg
    }
}

fn op_priority(op: CmpOp) -> u32 {
    match op {
        CmpOp::MaskedEq | CmpOp::Eq | CmpOp::Ne => 3,
        CmpOp::Le | CmpOp::Lt => 2,
        CmpOp::Ge | CmpOp::Gt => 1,
    }
}

/// `_db_chain_lt`: the order of nodes on one level.
fn chain_lt(a: &Node, b: &Node) -> bool {
    let (aa, ba) = (a.arg_priority(), b.arg_priority());
    if aa != ba {
        return aa < ba;
    }
    let (ao, bo) = (op_priority(a.op_orig), op_priority(b.op_orig));
    if ao != bo {
        return ao < bo;
    }
    match a.op_orig {
        // Inverted so that smaller LT/LE values come first.
        CmpOp::Le | CmpOp::Lt => a.datum > b.datum,
        _ => a.datum < b.datum,
    }
}

/// `_db_chain_eq`: same argument word, operator, datum and mask.
fn chain_eq(a: &Node, b: &Node) -> bool {
    a.arg_priority() == b.arg_priority() && a.op == b.op && a.datum == b.datum && a.mask == b.mask
}

/// One argument comparison of a rule (`struct db_api_arg`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ApiArg {
    pub arg: u8,
    pub op: CmpOp,
    pub mask: u64,
    pub datum: u64,
}

/// A rule as one architecture's database receives it (`db_api_rule_list`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ApiRule {
    pub action: u32,
    pub syscall: i32,
    /// Indexed by argument number, as libseccomp stores them.
    pub args: [Option<ApiArg>; 6],
}

/// One syscall's entry (`db_sys_list`).
#[derive(Debug, Clone)]
pub(super) struct SysEntry {
    pub num: i32,
    pub priority: u32,
    pub chains: Option<NodeId>,
    pub action: u32,
    node_cnt: u32,
}

/// Where a tree pointer lives, so helpers can update it in place.
#[derive(Debug, Clone, Copy)]
enum Slot {
    Chains(usize),
    True(NodeId),
    False(NodeId),
}

/// Word size of an architecture's arguments (`arch->size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WordSize {
    Bits32,
    Bits64,
}

/// The rule database of one architecture (`struct db_filter`).
#[derive(Debug, Clone)]
pub(super) struct ArchDb {
    pub arch: Arch,
    size: WordSize,
    pub nodes: Vec<Node>,
    /// In the order first added; libseccomp keeps them sorted by number as
    /// an unsigned value, which the generator's ordering restores.
    pub syscalls: Vec<SysEntry>,
    /// Syscall number → its entry in `syscalls` (a sorted insert per new
    /// syscall moved the whole list).
    index: HashMap<i32, usize, BuildHasherDefault<Fnv>>,
    /// The entry under construction by `rule_add` (`s_new`), not yet linked.
    scratch: Vec<SysEntry>,
    /// Set when a walk met a cycle or runaway recursion (see [`DbError::Loops`]).
    looped: bool,
    depth: u32,
}

impl ArchDb {
    pub fn new(arch: Arch, size: WordSize) -> ArchDb {
        ArchDb {
            arch,
            size,
            nodes: Vec::new(),
            syscalls: Vec::with_capacity(512),
            // a profile names a few hundred syscalls
            index: HashMap::with_capacity_and_hasher(512, Default::default()),
            scratch: Vec::new(),
            looped: false,
            depth: 0,
        }
    }

    /// Counts one step of a level walk; true once the walk is longer than
    /// the arena (a cycle).
    fn runaway(&mut self, steps: &mut usize) -> bool {
        *steps += 1;
        if *steps > self.nodes.len() + 1 {
            self.looped = true;
        }
        self.looped
    }

    /// The first node of `n`'s level.
    fn level_start(&mut self, mut n: NodeId) -> NodeId {
        let mut steps = 0;
        while let Some(p) = self.nodes[n].lvl_prv {
            if self.runaway(&mut steps) {
                break;
            }
            n = p;
        }
        n
    }

    fn enter(&mut self) -> bool {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            self.looped = true;
        }
        !self.looped
    }

    fn alloc(&mut self, node: Node) -> NodeId {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    fn get(&mut self, n: Option<NodeId>) -> Option<NodeId> {
        if let Some(n) = n {
            self.nodes[n].refcnt += 1;
        }
        n
    }

    fn slot(&self, s: Slot) -> Option<NodeId> {
        match s {
            Slot::Chains(i) => self.syscalls[i].chains,
            Slot::True(n) => self.nodes[n].nxt_t,
            Slot::False(n) => self.nodes[n].nxt_f,
        }
    }

    fn set_slot(&mut self, s: Slot, v: Option<NodeId>) {
        match s {
            Slot::Chains(i) => self.syscalls[i].chains = v,
            Slot::True(n) => self.nodes[n].nxt_t = v,
            Slot::False(n) => self.nodes[n].nxt_f = v,
        }
    }

    /// `_db_level_clean`: drop a whole level nobody else points at.
    fn level_clean(&mut self, node: NodeId) -> u32 {
        let start = self.level_start(node);
        let mut it = Some(start);
        let mut steps = 0;
        while let Some(c) = it {
            if self.runaway(&mut steps) {
                return 0;
            }
            let links = u32::from(self.nodes[c].lvl_prv.is_some())
                + u32::from(self.nodes[c].lvl_nxt.is_some());
            if self.nodes[c].refcnt > links {
                return 0;
            }
            it = self.nodes[c].lvl_nxt;
        }
        let mut cnt = 0;
        let mut it = Some(start);
        let mut steps = 0;
        while it.is_some() {
            if self.runaway(&mut steps) {
                return cnt;
            }
            let (c, next) = self.node_put(it);
            cnt += c;
            it = next;
        }
        cnt
    }

    /// `_db_tree_put`: returns (nodes freed, the updated pointer).
    fn tree_put(&mut self, tree: Option<NodeId>) -> (u32, Option<NodeId>) {
        let (mut cnt, t) = self.node_put(tree);
        if let Some(t) = t {
            cnt += self.level_clean(t);
        }
        (cnt, t)
    }

    /// `_db_node_put`: returns (nodes freed, the updated pointer).
    fn node_put(&mut self, node: Option<NodeId>) -> (u32, Option<NodeId>) {
        let Some(n) = node else { return (0, None) };
        self.nodes[n].refcnt = self.nodes[n].refcnt.wrapping_sub(1);
        if self.nodes[n].refcnt != 0 {
            return (0, node);
        }
        if !self.enter() {
            self.depth -= 1;
            return (0, None);
        }
        let r = self.node_free(n);
        self.depth -= 1;
        r
    }

    fn node_free(&mut self, n: NodeId) -> (u32, Option<NodeId>) {
        let mut cnt = 0;
        let Node {
            lvl_prv: mut lvl_p,
            lvl_nxt: mut lvl_n,
            nxt_t,
            nxt_f,
            ..
        } = self.nodes[n];
        if let Some(p) = lvl_p {
            self.nodes[p].lvl_nxt = None;
        }
        if let Some(q) = lvl_n {
            self.nodes[q].lvl_prv = None;
        }
        if lvl_p.is_some() {
            let (c, p) = self.node_put(lvl_p);
            cnt += c;
            lvl_p = p;
        }
        if lvl_n.is_some() {
            let (c, q) = self.node_put(lvl_n);
            cnt += c;
            lvl_n = q;
        }
        if let Some(p) = lvl_p {
            self.nodes[p].lvl_nxt = self.get(lvl_n);
        }
        if let Some(q) = lvl_n {
            self.nodes[q].lvl_prv = self.get(lvl_p);
        }
        let updated = lvl_p.or(lvl_n);
        cnt += self.tree_put(nxt_t).0;
        cnt += self.tree_put(nxt_f).0;
        cnt += 1;
        (cnt, updated)
    }

    /// `_db_tree_remove`: remove `node` (and zombies met on the way) below `tree`.
    fn tree_remove(&mut self, tree: Slot, node: NodeId) -> u32 {
        let Some(c) = self.slot(tree) else {
            return 0;
        };
        if !self.enter() {
            self.depth -= 1;
            return 0;
        }
        let cnt = self.tree_remove_level(tree, node, c);
        self.depth -= 1;
        cnt
    }

    fn tree_remove_level(&mut self, tree: Slot, node: NodeId, c: NodeId) -> u32 {
        let mut c = self.level_start(c);
        let mut cnt = 0;
        let mut steps = 0;
        loop {
            if self.runaway(&mut steps) {
                return cnt;
            }
            if c == node {
                break;
            }
            cnt += self.tree_remove(Slot::True(c), node);
            cnt += self.tree_remove(Slot::False(c), node);
            if self.nodes[c].is_zombie() {
                break;
            }
            match self.nodes[c].lvl_nxt {
                Some(n) if cnt == 0 => c = n,
                _ => return cnt,
            }
        }
        // remove `c` from its level
        if self.slot(tree) == Some(c) {
            let repl = self.nodes[c].lvl_prv.or(self.nodes[c].lvl_nxt);
            self.set_slot(tree, repl);
        }
        let (p, n) = (self.nodes[c].lvl_prv, self.nodes[c].lvl_nxt);
        if let Some(p) = p {
            self.nodes[p].lvl_nxt = n;
        }
        if let Some(n) = n {
            self.nodes[n].lvl_prv = p;
        }
        self.nodes[c].lvl_prv = None;
        self.nodes[c].lvl_nxt = None;
        cnt + self.node_put(Some(c)).0
    }

    /// `_db_tree_act_check`: every action below `tree` equals `action`.
    fn tree_act_check(&self, tree: Option<NodeId>, action: u32) -> Result<(), Errno> {
        self.act_check_at(tree, action, 0)
    }

    fn act_check_at(&self, tree: Option<NodeId>, action: u32, depth: u32) -> Result<(), Errno> {
        let Some(mut c) = tree else { return Ok(()) };
        // a corrupted tree is reported by the mutating walks; stop here
        let limit = self.nodes.len() + 1;
        if depth > MAX_DEPTH {
            return Ok(());
        }
        let mut steps = 0;
        while let Some(p) = self.nodes[c].lvl_prv {
            steps += 1;
            if steps > limit {
                return Ok(());
            }
            c = p;
        }
        let mut it = Some(c);
        let mut steps = 0;
        while let Some(c) = it {
            steps += 1;
            if steps > limit {
                return Ok(());
            }
            let n = &self.nodes[c];
            if (n.act_t_flg && n.act_t != action) || (n.act_f_flg && n.act_f != action) {
                return Err(Errno(libc::EEXIST));
            }
            self.act_check_at(n.nxt_t, action, depth + 1)?;
            self.act_check_at(n.nxt_f, action, depth + 1)?;
            it = n.lvl_nxt;
        }
        Ok(())
    }

    /// `_db_tree_prune`: drop parts of the existing tree the new one makes redundant.
    fn tree_prune(
        &mut self,
        existing: Option<NodeId>,
        new: Option<NodeId>,
        flags: &mut u32,
        action: u32,
        sx: usize,
    ) -> u32 {
        if !self.enter() {
            self.depth -= 1;
            return 0;
        }
        let cnt = self.prune_level(existing, new, flags, action, sx);
        self.depth -= 1;
        cnt
    }

    fn prune_level(
        &mut self,
        existing: Option<NodeId>,
        new: Option<NodeId>,
        flags: &mut u32,
        action: u32,
        sx: usize,
    ) -> u32 {
        let mut cnt = 0;
        let mut new_flags = *flags;
        let (Some(x0), Some(n)) = (existing, new) else {
            return self.prune_return(cnt, new_flags, flags);
        };
        if (*flags & IST_M_MATCHSET) == IST_MATCH_ONCE {
            return self.prune_return(cnt, new_flags, flags);
        }
        let x0 = self.level_start(x0);
        let mut x_iter = Some(x0);
        let mut steps = 0;
        'level: while let Some(mut x) = x_iter {
            if self.runaway(&mut steps) {
                return cnt;
            }
            let x_next = self.nodes[x].lvl_nxt;
            if chain_eq(&self.nodes[x], &self.nodes[n]) {
                new_flags |= IST_M_MATCHSET;
                if self.nodes[n].is_leaf() {
                    new_flags |= IST_N_FINISHED;
                }
                if self.nodes[x].is_leaf() {
                    new_flags |= IST_X_FINISHED;
                }
                let (xn, nn) = (&self.nodes[x], &self.nodes[n]);
                if (xn.act_t_flg || xn.nxt_t.is_some()) && !(nn.act_t_flg || nn.nxt_t.is_some()) {
                    return self.prune_return(cnt, new_flags, flags);
                }
                if (xn.act_f_flg || xn.nxt_f.is_some()) && !(nn.act_f_flg || nn.nxt_f.is_some()) {
                    return self.prune_return(cnt, new_flags, flags);
                }
                if (new_flags & IST_N_FINISHED) != 0
                    && (new_flags & IST_X_FINISHED) != 0
                    && (nn.act_t_flg != xn.act_t_flg
                        || nn.act_t != xn.act_t
                        || nn.act_f_flg != xn.act_f_flg
                        || nn.act_f != xn.act_f)
                {
                    return self.prune_return(cnt, new_flags, flags);
                }
                for branch in [true, false] {
                    let n_sub = if branch {
                        self.nodes[n].nxt_t
                    } else {
                        self.nodes[n].nxt_f
                    };
                    if n_sub.is_none() {
                        continue;
                    }
                    self.get(Some(x));
                    let mut nxt_flags = *flags | IST_M_MATCHSET;
                    let x_sub = if branch {
                        self.nodes[x].nxt_t
                    } else {
                        self.nodes[x].nxt_f
                    };
                    cnt += self.tree_prune(x_sub, n_sub, &mut nxt_flags, action, sx);
                    let (c, xp) = self.node_put(Some(x));
                    cnt += c;
                    if nxt_flags & IST_MATCH != 0 {
                        new_flags |= nxt_flags;
                    }
                    match xp {
                        Some(xp) => x = xp,
                        None => {
                            x_iter = x_next;
                            continue 'level;
                        }
                    }
                }
                let acts_match = self.tree_act_check(Some(x), action).is_ok();
                if acts_match
                    && new_flags & IST_MATCH != 0
                    && new_flags & IST_N_FINISHED != 0
                    && new_flags & IST_X_PREFIX != 0
                {
                    // the new tree is "shorter"
                    cnt += self.tree_remove(Slot::Chains(sx), x);
                    if self.syscalls[sx].chains.is_none() {
                        return self.prune_return(cnt, new_flags, flags);
                    }
                } else if acts_match
                    && new_flags & IST_MATCH != 0
                    && new_flags & IST_X_FINISHED != 0
                    && new_flags & IST_N_PREFIX != 0
                {
                    // the new tree is "longer"
                    return self.prune_return(cnt, new_flags, flags);
                }
            } else if chain_lt(&self.nodes[x], &self.nodes[n]) {
                if *flags & IST_N_PREFIX != 0 {
                    return self.prune_return(cnt, new_flags, flags);
                }
                for branch in [true, false] {
                    let x_sub = if branch {
                        self.nodes[x].nxt_t
                    } else {
                        self.nodes[x].nxt_f
                    };
                    if x_sub.is_none() {
                        continue;
                    }
                    self.get(Some(x));
                    let mut nxt_flags = (*flags & !IST_MATCH) | IST_X_PREFIX;
                    cnt += self.tree_prune(x_sub, Some(n), &mut nxt_flags, action, sx);
                    let (c, xp) = self.node_put(Some(x));
                    cnt += c;
                    if nxt_flags & IST_MATCH != 0 {
                        new_flags |= nxt_flags;
                        return self.prune_return(cnt, new_flags, flags);
                    }
                    match xp {
                        Some(xp) => x = xp,
                        None => {
                            x_iter = x_next;
                            continue 'level;
                        }
                    }
                }
            } else {
                if *flags & IST_X_PREFIX != 0 {
                    return self.prune_return(cnt, new_flags, flags);
                }
                for branch in [true, false] {
                    let n_sub = if branch {
                        self.nodes[n].nxt_t
                    } else {
                        self.nodes[n].nxt_f
                    };
                    if n_sub.is_none() {
                        continue;
                    }
                    self.get(Some(x));
                    let mut nxt_flags = (*flags & !IST_MATCH) | IST_N_PREFIX;
                    cnt += self.tree_prune(Some(x), n_sub, &mut nxt_flags, action, sx);
                    let (c, xp) = self.node_put(Some(x));
                    cnt += c;
                    if nxt_flags & IST_MATCH != 0 {
                        new_flags |= nxt_flags;
                        return self.prune_return(cnt, new_flags, flags);
                    }
                    match xp {
                        Some(xp) => x = xp,
                        None => {
                            x_iter = x_next;
                            continue 'level;
                        }
                    }
                }
            }
            x_iter = x_next;
        }
        // falling through: nothing matched on this level
        new_flags &= !IST_MATCH;
        self.prune_return(cnt, new_flags, flags)
    }

    fn prune_return(&self, cnt: u32, new_flags: u32, flags: &mut u32) -> u32 {
        if new_flags & IST_MATCH != 0 {
            *flags |= new_flags;
        } else {
            *flags &= !IST_MATCH;
        }
        cnt
    }

    /// `_db_tree_add`: merge the new tree into the existing one at `existing`.
    fn tree_add(&mut self, existing: Slot, new: NodeId, sx: usize) -> Result<(), Errno> {
        if !self.enter() {
            self.depth -= 1;
            return Ok(());
        }
        let r = self.tree_add_level(existing, new, sx);
        self.depth -= 1;
        r
    }

    fn tree_add_level(&mut self, existing: Slot, new: NodeId, sx: usize) -> Result<(), Errno> {
        let mut x_iter = self.slot(existing);
        let n = new;
        let mut steps = 0;
        while let Some(x) = x_iter {
            if self.runaway(&mut steps) {
                return Ok(());
            }
            if chain_eq(&self.nodes[x], &self.nodes[n]) {
                if self.nodes[n].act_t_flg {
                    if !self.nodes[x].act_t_flg {
                        self.tree_act_check(self.nodes[x].nxt_t, self.nodes[n].act_t)?;
                        let (rc, _) = self.node_put(self.nodes[x].nxt_t);
                        self.nodes[x].nxt_t = None;
                        self.nodes[x].act_t = self.nodes[n].act_t;
                        self.nodes[x].act_t_flg = true;
                        let e = &mut self.syscalls[sx];
                        e.node_cnt = e.node_cnt.wrapping_sub(rc);
                    } else if self.nodes[n].act_t != self.nodes[x].act_t {
                        // 64-bit GT/GE: the action follows the larger full value
                        if self.nodes[n].arg_h_flg
                            && self.nodes[n].datum_full > self.nodes[x].datum_full
                        {
                            self.nodes[x].act_t = self.nodes[n].act_t;
                        }
                        if self.nodes[x].is_leaf() || self.nodes[n].is_leaf() {
                            return Err(Errno(libc::EEXIST));
                        }
                    }
                }
                if self.nodes[n].act_f_flg {
                    if !self.nodes[x].act_f_flg {
                        self.tree_act_check(self.nodes[x].nxt_f, self.nodes[n].act_f)?;
                        let (rc, _) = self.node_put(self.nodes[x].nxt_f);
                        self.nodes[x].nxt_f = None;
                        self.nodes[x].act_f = self.nodes[n].act_f;
                        self.nodes[x].act_f_flg = true;
                        let e = &mut self.syscalls[sx];
                        e.node_cnt = e.node_cnt.wrapping_sub(rc);
                    } else if self.nodes[n].act_f != self.nodes[x].act_f {
                        // libseccomp updates act_t here, not act_f; kept as is
                        if self.nodes[n].arg_h_flg
                            && self.nodes[n].datum_full < self.nodes[x].datum_full
                        {
                            self.nodes[x].act_t = self.nodes[n].act_t;
                        }
                        if self.nodes[x].is_leaf() || self.nodes[n].is_leaf() {
                            return Err(Errno(libc::EEXIST));
                        }
                    }
                }
                if let Some(nt) = self.nodes[n].nxt_t {
                    if self.nodes[x].nxt_t.is_some() {
                        self.tree_add(Slot::True(x), nt, sx)?;
                    } else if !self.nodes[x].act_t_flg {
                        self.nodes[x].nxt_t = self.get(Some(nt));
                    } else {
                        return Ok(());
                    }
                }
                if let Some(nf) = self.nodes[n].nxt_f {
                    if self.nodes[x].nxt_f.is_some() {
                        self.tree_add(Slot::False(x), nf, sx)?;
                    } else if !self.nodes[x].act_f_flg {
                        self.nodes[x].nxt_f = self.get(Some(nf));
                    } else {
                        return Ok(());
                    }
                }
                return Ok(());
            } else if !chain_lt(&self.nodes[x], &self.nodes[n]) {
                match self.nodes[x].lvl_nxt {
                    None => {
                        self.nodes[n].lvl_prv = self.get(Some(x));
                        self.nodes[x].lvl_nxt = self.get(Some(n));
                        return Ok(());
                    }
                    Some(next) => x_iter = Some(next),
                }
            } else {
                // insert before x on this level
                if let Some(p) = self.nodes[x].lvl_prv {
                    self.nodes[p].lvl_nxt = self.get(Some(n));
                    self.nodes[n].lvl_prv = Some(p);
                    self.nodes[x].lvl_prv = self.get(Some(n));
                    self.nodes[n].lvl_nxt = Some(x);
                } else {
                    self.nodes[x].lvl_prv = self.get(Some(n));
                    self.nodes[n].lvl_nxt = self.get(Some(x));
                }
                if self.slot(existing) == Some(x) {
                    let head = self.get(Some(n));
                    self.set_slot(existing, head);
                    self.node_put(Some(x));
                }
                return Ok(());
            }
        }
        Ok(())
    }

    /// `_db_rule_gen_arg_64`: the hi/lo word comparisons of one argument.
    fn gen_arg_64(&mut self, a: &ApiArg, prev: &mut Vec<NodeId>, tf: &mut bool) {
        let need_lo = !(a.op == CmpOp::MaskedEq && (a.mask as u32) == 0);
        let need_hi = !(a.op == CmpOp::MaskedEq && (a.mask >> 32) == 0);
        if !need_hi && !need_lo {
            return;
        }
        let (mh, ml) = ((a.mask >> 32) as u32, a.mask as u32);
        let (c0, c1, c2);
        match a.op {
            CmpOp::Gt | CmpOp::Ge | CmpOp::Le | CmpOp::Lt => {
                let lo_op = if matches!(a.op, CmpOp::Gt | CmpOp::Le) {
                    CmpOp::Gt
                } else {
                    CmpOp::Ge
                };
                c0 = self.alloc(Node::new(a.arg, true, CmpOp::Gt, a.op, mh, a.datum));
                c1 = self.alloc(Node::new(a.arg, true, CmpOp::Eq, a.op, mh, a.datum));
                let lo = self.alloc(Node::new(a.arg, false, lo_op, a.op, ml, a.datum));
                c2 = Some(lo);
            }
            CmpOp::Eq | CmpOp::MaskedEq | CmpOp::Ne => {
                let op = if a.op == CmpOp::MaskedEq {
                    CmpOp::MaskedEq
                } else {
                    CmpOp::Eq
                };
                c0 = self.alloc(Node::new(a.arg, true, op, a.op, mh, a.datum));
                c1 = self.alloc(Node::new(a.arg, false, op, a.op, ml, a.datum));
                c2 = None;
            }
        }
        for &p in prev.iter() {
            let link = self.get(Some(c0));
            if *tf {
                self.nodes[p].nxt_t = link;
            } else {
                self.nodes[p].nxt_f = link;
            }
        }
        prev.clear();
        if let Some(c2) = c2 {
            self.nodes[c0].nxt_f = self.get(Some(c1));
            self.nodes[c1].nxt_t = self.get(Some(c2));
        } else {
            self.nodes[c0].nxt_t = self.get(Some(c1));
        }
        if self.scratch[0].chains.is_none() {
            self.scratch[0].chains = self.get(Some(c0));
        }
        match (a.op, c2) {
            (CmpOp::Gt | CmpOp::Ge, Some(c2)) => {
                prev.extend([c0, c2]);
                *tf = true;
            }
            (CmpOp::Le | CmpOp::Lt, Some(c2)) => {
                prev.extend([c1, c2]);
                *tf = false;
            }
            (CmpOp::Ne, _) => {
                prev.extend([c0, c1]);
                *tf = false;
            }
            _ => {
                prev.push(c1);
                *tf = true;
            }
        }
        self.scratch[0].node_cnt += if c2.is_some() { 3 } else { 2 };
    }

    /// `_db_rule_gen_arg_32`: one comparison on a 32-bit architecture.
    fn gen_arg_32(&mut self, a: &ApiArg, prev: &mut Vec<NodeId>, tf: &mut bool) {
        if a.op == CmpOp::MaskedEq && (a.mask as u32) == 0 {
            return;
        }
        let op = match a.op {
            CmpOp::Ne => CmpOp::Eq,
            CmpOp::Lt => CmpOp::Ge,
            CmpOp::Le => CmpOp::Gt,
            op => op,
        };
        let c = self.alloc(Node::new(a.arg, false, op, a.op, a.mask as u32, a.datum));
        for &p in prev.iter() {
            let link = self.get(Some(c));
            if *tf {
                self.nodes[p].nxt_t = link;
            } else {
                self.nodes[p].nxt_f = link;
            }
        }
        prev.clear();
        prev.push(c);
        if self.scratch[0].chains.is_none() {
            self.scratch[0].chains = self.get(Some(c));
        }
        self.scratch[0].node_cnt += 1;
        // NE, LT and LE are tested as their negations: the rule matches on false.
        *tf = !matches!(a.op, CmpOp::Ne | CmpOp::Lt | CmpOp::Le);
    }

    /// `_db_rule_gen`: the new rule's tree in the scratch entry.
    fn rule_gen(&mut self, rule: &ApiRule) {
        self.scratch.clear();
        self.scratch.push(SysEntry {
            num: rule.syscall,
            priority: 0,
            chains: None,
            action: 0,
            node_cnt: 0,
        });
        // empty until a rule has conditions: most have none
        let mut prev: Vec<NodeId> = Vec::new();
        let mut tf = false;
        for a in rule.args.iter().flatten() {
            match self.size {
                WordSize::Bits32 => self.gen_arg_32(a, &mut prev, &mut tf),
                WordSize::Bits64 => self.gen_arg_64(a, &mut prev, &mut tf),
            }
        }
        if self.scratch[0].chains.is_some() {
            for &p in &prev {
                let n = &mut self.nodes[p];
                if tf {
                    n.act_t_flg = true;
                    n.act_t = rule.action;
                } else {
                    n.act_f_flg = true;
                    n.act_f = rule.action;
                }
            }
        } else {
            self.scratch[0].action = rule.action;
        }
    }

    /// `db_rule_add`: add one rule (syscall number already translated).
    pub fn rule_add(&mut self, rule: &ApiRule) -> Result<(), DbError> {
        let r = self.rule_add_inner(rule);
        if self.looped {
            return Err(DbError::Loops);
        }
        r.map_err(DbError::Refused)
    }

    fn rule_add_inner(&mut self, rule: &ApiRule) -> Result<(), Errno> {
        self.rule_gen(rule);
        self.scratch[0].priority = PRI_MASK_CHAIN.wrapping_sub(self.scratch[0].node_cnt);
        let Some(&pos) = self.index.get(&rule.syscall) else {
            let s_new = self.scratch.pop().expect("scratch entry");
            self.index.insert(rule.syscall, self.syscalls.len());
            self.syscalls.push(s_new);
            return Ok(());
        };
        let mut rm_flag = false;
        loop {
            let (x_chains, n_chains) = (self.syscalls[pos].chains, self.scratch[0].chains);
            match (x_chains, n_chains) {
                (None, _) => {
                    if rm_flag {
                        let s_new = self.scratch.pop().expect("scratch entry");
                        let s = &mut self.syscalls[pos];
                        s.chains = s_new.chains;
                        s.action = s_new.action;
                        s.node_cnt = s_new.node_cnt;
                        s.priority = s_new.priority;
                    } else {
                        // an unconditional entry already covers the new rule
                        let c = self.scratch[0].chains;
                        self.tree_put(c);
                        self.scratch.clear();
                    }
                    self.update_priority(pos);
                    return Ok(());
                }
                (Some(_), None) => {
                    // the new rule is unconditional: it replaces the tree
                    self.tree_put(x_chains);
                    let s = &mut self.syscalls[pos];
                    s.chains = None;
                    s.node_cnt = 0;
                    s.action = rule.action;
                    self.scratch.clear();
                    self.update_priority(pos);
                    return Ok(());
                }
                (Some(_), Some(_)) => {}
            }
            let mut flags = 0;
            let pruned = self.tree_prune(x_chains, n_chains, &mut flags, rule.action, pos);
            if pruned > 0 {
                rm_flag = true;
                let s = &mut self.syscalls[pos];
                s.node_cnt = s.node_cnt.wrapping_sub(pruned);
                if s.chains.is_none() {
                    continue;
                }
            } else if flags & IST_M_REDUNDANT == IST_M_REDUNDANT {
                let c = self.scratch[0].chains;
                self.tree_put(c);
                self.scratch.clear();
                self.update_priority(pos);
                return Ok(());
            }
            let new_root = n_chains.expect("new tree");
            self.tree_add(Slot::Chains(pos), new_root, pos)?;
            let added = self.scratch[0].node_cnt;
            let (freed, _) = self.tree_put(Some(new_root));
            self.scratch.clear();
            let s = &mut self.syscalls[pos];
            s.node_cnt = s.node_cnt.wrapping_add(added).wrapping_sub(freed);
            self.update_priority(pos);
            return Ok(());
        }
    }

    fn update_priority(&mut self, pos: usize) {
        let s = &mut self.syscalls[pos];
        s.priority = (s.priority & !PRI_MASK_CHAIN) | (PRI_MASK_CHAIN.wrapping_sub(s.node_cnt));
    }
}
