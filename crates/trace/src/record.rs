//! `nodeproof record`'s kernel side from user space: loads
//! `bpf/record.bpf.c` (its maps' keys and values generated from
//! `bpf/np_record.h`, see [`crate::abi`]), gives cgroups a slot, sets the watch (which
//! arguments of which syscalls to keep), and reads a slot's sets back as a
//! plain [`SlotRecord`]. The decoding of the maps is pure (tests below); the
//! aya calls are the edge, as in the loader.
//!
//! The kernel keeps sets, not events: one bit per (slot, arch, syscall)
//! and one hash entry per (slot, arch, syscall, argument, value), at most
//! [`RecorderConfig::value_cap`] values per argument. What did not fit is
//! counted per slot ([`SlotRecord::lost`]) or marks the argument incomplete.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use aya::maps::{Array, HashMap, MapData, PerCpuArray, PerCpuValues};
use aya::programs::{BtfTracePoint, TracePoint};
use aya::{Btf, Ebpf, EbpfLoader};

use crate::abi::record::{
    NpRecArg, NpRecBits, NpRecCount, NpRecValue, NP_REC_I386, NP_REC_MAX_VALUES, NP_REC_NRS,
    NP_REC_SLOTS, NP_REC_VALUE_CAP, NP_REC_WORDS, NP_REC_X32, NP_REC_X86_64, NP_X32_BIT,
};
use crate::bpf;
use crate::loader::{
    effective_capabilities, error_chain, missing_capabilities, raise_memlock, step_error,
    FailureReason,
};
use crate::{caps_hint, ProbeAttempt, Strategy};

/// Containers recorded at once.
pub const SLOTS: u32 = NP_REC_SLOTS;
/// Syscall numbers a bitmap holds, the x32 bit stripped.
pub const NRS: u32 = NP_REC_NRS;
/// x32's `__X32_SYSCALL_BIT`, which its numbers carry in `seccomp_data.nr`.
pub const X32_BIT: u32 = NP_X32_BIT;
/// Values kept per argument by default (`np_rec_value_cap`).
pub const DEFAULT_VALUE_CAP: u32 = NP_REC_VALUE_CAP;
/// Entries of the value set when not configured (`np_rec_values`).
pub const DEFAULT_MAX_VALUES: u32 = NP_REC_MAX_VALUES;
const WORDS: usize = NP_REC_WORDS as usize;

/// The kinds of call an x86_64 task makes, each an arch of its own in
/// `seccomp_data` (its index in the maps is `NP_REC_*` of np_record.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecArch {
    X86_64,
    /// i386 compat calls (`TS_COMPAT`: int 0x80, a 32-bit binary).
    I386,
    /// x32 calls (bit 30 in the number).
    X32,
}

impl RecArch {
    pub const ALL: [RecArch; 3] = [RecArch::X86_64, RecArch::I386, RecArch::X32];

    fn index(self) -> u32 {
        match self {
            RecArch::X86_64 => NP_REC_X86_64,
            RecArch::I386 => NP_REC_I386,
            RecArch::X32 => NP_REC_X32,
        }
    }

    fn from_index(i: u8) -> Option<RecArch> {
        RecArch::ALL.into_iter().find(|a| a.index() == u32::from(i))
    }

    /// The number `seccomp_data.nr` carries for the bitmap's `nr`.
    fn full_nr(self, nr: u32) -> u32 {
        match self {
            RecArch::X32 => nr | X32_BIT,
            _ => nr,
        }
    }
}

/// Which attach point the program runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordAttach {
    TpBtf,
    Tracepoint,
}

impl RecordAttach {
    fn strategy(self) -> Strategy {
        match self {
            RecordAttach::TpBtf => Strategy::TpBtf,
            RecordAttach::Tracepoint => Strategy::Tracepoint,
        }
    }
}

impl fmt::Display for RecordAttach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.strategy().fmt(f)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecorderConfig {
    /// Values kept per (container, arch, syscall, argument).
    pub value_cap: u32,
    /// Entries of the kernel's value set, all containers together.
    pub max_values: u32,
    /// Only this attach point (default: tp_btf, then the tracepoint).
    pub attach: Option<RecordAttach>,
}

impl Default for RecorderConfig {
    fn default() -> Self {
        Self {
            value_cap: DEFAULT_VALUE_CAP,
            max_values: DEFAULT_MAX_VALUES,
            attach: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("this nodeproof was built without clang: no eBPF programs embedded")]
    NotBuilt,
    #[error(
        "the syscall recorder loads on no attach point{}: {}",
        caps_hint(missing_caps),
        crate::attempts_line(attempts)
    )]
    NotLoaded {
        missing_caps: Vec<&'static str>,
        attempts: Vec<ProbeAttempt>,
    },
    #[error("eBPF object has no map {name}")]
    MissingMap { name: &'static str },
    #[error("eBPF map {name}")]
    Map {
        name: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    #[error("cannot tell this machine's CPUs")]
    Cpus(#[source] std::io::Error),
    #[error("all {SLOTS} recording slots are in use: record fewer containers at once")]
    SlotsFull,
}

/// One recorded container's place in the kernel maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot(u32);

/// One argument's recorded values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArgValues {
    pub values: BTreeSet<u64>,
    /// False when more values were made than kept.
    pub complete: bool,
}

/// What a slot's maps hold, decoded: a plain per-cgroup result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlotRecord {
    /// Per arch, the syscall numbers as `seccomp_data.nr` carries them.
    pub calls: BTreeMap<RecArch, BTreeSet<u32>>,
    /// Per (arch, nr, argument index), the values kept.
    pub args: BTreeMap<(RecArch, u32, u8), ArgValues>,
    /// Calls the maps had no room for.
    pub lost: u64,
}

impl SlotRecord {
    /// Adds `other` (the same container's cgroup before a restart).
    pub fn merge(&mut self, other: SlotRecord) {
        for (arch, nrs) in other.calls {
            self.calls.entry(arch).or_default().extend(nrs);
        }
        for (k, v) in other.args {
            match self.args.get_mut(&k) {
                Some(mine) => {
                    mine.values.extend(v.values);
                    mine.complete &= v.complete;
                }
                None => {
                    self.args.insert(k, v);
                }
            }
        }
        self.lost += other.lost;
    }

    /// Keeps at most `cap` values per argument (the smallest), marking
    /// any argument cut incomplete: merged restarts each had their own cap.
    pub fn cap_values(&mut self, cap: usize) {
        for v in self.args.values_mut() {
            if v.values.len() > cap {
                v.values = v.values.iter().copied().take(cap).collect();
                v.complete = false;
            }
        }
    }
}

/// The syscall numbers set in a bitmap, as `seccomp_data.nr` carries them.
fn numbers(arch: RecArch, bits: &NpRecBits) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    for (i, w) in bits.w.iter().enumerate() {
        let mut w = *w;
        while w != 0 {
            let b = w.trailing_zeros();
            out.insert(arch.full_nr(i as u32 * 64 + b));
            w &= w - 1;
        }
    }
    out
}

/// One slot's arguments from the value set and the per-argument counts.
fn decode_args(
    slot: u32,
    values: impl IntoIterator<Item = NpRecValue>,
    counts: impl IntoIterator<Item = (NpRecArg, NpRecCount)>,
    cap: u32,
) -> BTreeMap<(RecArch, u32, u8), ArgValues> {
    let mut out: BTreeMap<(RecArch, u32, u8), ArgValues> = BTreeMap::new();
    let key = |a: &NpRecArg| {
        RecArch::from_index(a.arch).map(|arch| (arch, arch.full_nr(u32::from(a.nr)), a.index))
    };
    for v in values.into_iter().filter(|v| v.arg.slot == slot) {
        if let Some(k) = key(&v.arg) {
            out.entry(k)
                .or_insert_with(|| ArgValues {
                    values: BTreeSet::new(),
                    complete: true,
                })
                .values
                .insert(v.value);
        }
    }
    for (a, c) in counts.into_iter().filter(|(a, _)| a.slot == slot) {
        if let Some(k) = key(&a) {
            if c.over != 0 {
                out.entry(k).or_default().complete = false;
            }
        }
    }
    let mut r = SlotRecord {
        args: out,
        ..SlotRecord::default()
    };
    r.cap_values(cap as usize);
    r.args
}

/// The loaded recorder; dropping it detaches the program.
pub struct Recorder {
    _bpf: Ebpf,
    cgroups: HashMap<MapData, u64, u32>,
    bits: Array<MapData, NpRecBits>,
    watch: Array<MapData, u32>,
    values: HashMap<MapData, NpRecValue, u8>,
    counts: HashMap<MapData, NpRecArg, NpRecCount>,
    lost: Array<MapData, u64>,
    last: PerCpuArray<MapData, NpRecValue>,
    used: Vec<bool>,
    attach: RecordAttach,
    value_cap: u32,
}

fn map_err(name: &'static str) -> impl FnOnce(aya::maps::MapError) -> RecordError {
    move |source| RecordError::Map { name, source }
}

impl Recorder {
    /// Loads the recorder and attaches its program: tp_btf, else the classic tracepoint.
    pub fn start(cfg: &RecorderConfig) -> Result<Self, RecordError> {
        if bpf::is_stub() {
            return Err(RecordError::NotBuilt);
        }
        raise_memlock();
        let order = match cfg.attach {
            Some(a) => vec![a],
            None => vec![RecordAttach::TpBtf, RecordAttach::Tracepoint],
        };
        let refused = |a: RecordAttach, (reason, detail): (FailureReason, String)| ProbeAttempt {
            strategy: a.strategy(),
            reason,
            detail,
        };
        let not_loaded = |attempts| RecordError::NotLoaded {
            missing_caps: missing_capabilities(effective_capabilities()),
            attempts,
        };
        let mut bpf = match EbpfLoader::new()
            .override_global("np_rec_value_cap", &cfg.value_cap, true)
            .map_max_entries("np_rec_values", cfg.max_values.max(1))
            .load(bpf::RECORD)
        {
            Ok(b) => b,
            Err(e) => {
                let why = step_error("creating the maps of", "record.bpf.o", &e);
                return Err(not_loaded(
                    order.iter().map(|a| refused(*a, why.clone())).collect(),
                ));
            }
        };
        let mut attempts = Vec::new();
        let mut attached = None;
        for a in order {
            match attach(&mut bpf, a) {
                Ok(()) => {
                    attached = Some(a);
                    break;
                }
                Err(why) => attempts.push(refused(a, why)),
            }
        }
        let Some(attach) = attached else {
            return Err(not_loaded(attempts));
        };
        for a in &attempts {
            tracing::info!(refused = %a, "syscall recorder attach point refused, fell back");
        }
        let mut take =
            |name: &'static str| bpf.take_map(name).ok_or(RecordError::MissingMap { name });
        let cgroups =
            HashMap::try_from(take("np_rec_cgroups")?).map_err(map_err("np_rec_cgroups"))?;
        let bits = Array::try_from(take("np_rec_bits")?).map_err(map_err("np_rec_bits"))?;
        let watch = Array::try_from(take("np_rec_watch")?).map_err(map_err("np_rec_watch"))?;
        let values = HashMap::try_from(take("np_rec_values")?).map_err(map_err("np_rec_values"))?;
        let counts = HashMap::try_from(take("np_rec_counts")?).map_err(map_err("np_rec_counts"))?;
        let lost = Array::try_from(take("np_rec_lost")?).map_err(map_err("np_rec_lost"))?;
        let last = PerCpuArray::try_from(take("np_rec_last")?).map_err(map_err("np_rec_last"))?;
        let mut r = Self {
            _bpf: bpf,
            cgroups,
            bits,
            watch,
            values,
            counts,
            lost,
            last,
            used: vec![false; SLOTS as usize],
            attach,
            value_cap: cfg.value_cap,
        };
        r.forget_last()?;
        Ok(r)
    }

    /// Empties every CPU's last-kept cache (`np_rec_last`): an index no
    /// argument has, so no call matches it; a cleared slot must not find
    /// its old values there.
    fn forget_last(&mut self) -> Result<(), RecordError> {
        let none = NpRecValue {
            value: 0,
            arg: NpRecArg {
                slot: u32::MAX,
                nr: 0,
                arch: 0,
                index: u8::MAX,
            },
        };
        let cpus = aya::util::nr_cpus().map_err(|(_, e)| RecordError::Cpus(e))?;
        let values = PerCpuValues::try_from(vec![none; cpus]).map_err(RecordError::Cpus)?;
        self.last.set(0, values, 0).map_err(map_err("np_rec_last"))
    }

    /// The attach point the program runs on.
    pub fn attach_point(&self) -> RecordAttach {
        self.attach
    }

    /// A free slot, its maps cleared.
    pub fn new_slot(&mut self) -> Result<Slot, RecordError> {
        let i = self
            .used
            .iter()
            .position(|u| !u)
            .ok_or(RecordError::SlotsFull)?;
        self.used[i] = true;
        let slot = Slot(i as u32);
        self.clear(slot)?;
        Ok(slot)
    }

    /// Records the tasks of cgroup `id` (a cgroup2 directory's inode) into `slot`.
    pub fn add_cgroup(&mut self, slot: Slot, id: u64) -> Result<(), RecordError> {
        self.cgroups
            .insert(id, slot.0, 0)
            .map_err(map_err("np_rec_cgroups"))
    }

    /// Stops recording cgroup `id` (gone or no longer wanted).
    pub fn remove_cgroup(&mut self, id: u64) {
        let _ = self.cgroups.remove(&id);
    }

    /// Stops recording into `slot` and frees it; read it first.
    pub fn free_slot(&mut self, slot: Slot) -> Result<(), RecordError> {
        let ids: Vec<u64> = self
            .cgroups
            .iter()
            .filter_map(Result::ok)
            .filter(|(_, s)| *s == slot.0)
            .map(|(id, _)| id)
            .collect();
        for id in ids {
            self.remove_cgroup(id);
        }
        self.clear(slot)?;
        self.used[slot.0 as usize] = false;
        Ok(())
    }

    fn clear(&mut self, slot: Slot) -> Result<(), RecordError> {
        let zero = NpRecBits { w: [0; WORDS] };
        for arch in RecArch::ALL {
            self.bits
                .set(slot.0 * 3 + arch.index(), zero, 0)
                .map_err(map_err("np_rec_bits"))?;
        }
        self.lost
            .set(slot.0, 0, 0)
            .map_err(map_err("np_rec_lost"))?;
        let values: Vec<NpRecValue> = self
            .values
            .keys()
            .filter_map(Result::ok)
            .filter(|k| k.arg.slot == slot.0)
            .collect();
        for k in values {
            let _ = self.values.remove(&k);
        }
        let counts: Vec<NpRecArg> = self
            .counts
            .keys()
            .filter_map(Result::ok)
            .filter(|k| k.slot == slot.0)
            .collect();
        for k in counts {
            let _ = self.counts.remove(&k);
        }
        self.forget_last()
    }

    /// Keeps the values of the arguments in `mask` (bit i: `args[i]`) of
    /// syscall `nr` on `arch` (x32 numbers with or without their bit), in
    /// every slot. A number beyond the bitmap is refused with `false`.
    pub fn watch(&mut self, arch: RecArch, nr: u32, mask: u8) -> Result<bool, RecordError> {
        let nr = nr & !X32_BIT;
        if nr >= NRS {
            return Ok(false);
        }
        self.watch
            .set(arch.index() * NRS + nr, u32::from(mask & 0x3f), 0)
            .map_err(map_err("np_rec_watch"))?;
        Ok(true)
    }

    /// What `slot` recorded so far.
    pub fn read(&self, slot: Slot) -> Result<SlotRecord, RecordError> {
        let mut calls = BTreeMap::new();
        for arch in RecArch::ALL {
            let bits = self
                .bits
                .get(&(slot.0 * 3 + arch.index()), 0)
                .map_err(map_err("np_rec_bits"))?;
            let nrs = numbers(arch, &bits);
            if !nrs.is_empty() {
                calls.insert(arch, nrs);
            }
        }
        let values: Vec<NpRecValue> = self.values.keys().filter_map(Result::ok).collect();
        let counts: Vec<(NpRecArg, NpRecCount)> =
            self.counts.iter().filter_map(Result::ok).collect();
        Ok(SlotRecord {
            calls,
            args: decode_args(slot.0, values, counts, self.value_cap),
            lost: self.lost.get(&slot.0, 0).map_err(map_err("np_rec_lost"))?,
        })
    }
}

fn attach(bpf: &mut Ebpf, a: RecordAttach) -> Result<(), (FailureReason, String)> {
    let missing = |name: &str| (FailureReason::LoadFailed, format!("{name} not in object"));
    match a {
        RecordAttach::TpBtf => {
            const NAME: &str = "np_rec_btf_enter";
            let btf = Btf::from_sys_fs().map_err(|e| {
                (
                    FailureReason::KernelUnsupported,
                    format!("no kernel BTF: {}", error_chain(&e)),
                )
            })?;
            let p: &mut BtfTracePoint = bpf
                .program_mut(NAME)
                .ok_or_else(|| missing(NAME))?
                .try_into()
                .map_err(|e| step_error("type of", NAME, &e))?;
            p.load("sys_enter", &btf)
                .map_err(|e| step_error("loading", NAME, &e))?;
            p.attach().map_err(|e| step_error("attaching", NAME, &e))?;
        }
        RecordAttach::Tracepoint => {
            const NAME: &str = "np_rec_tp_enter";
            let p: &mut TracePoint = bpf
                .program_mut(NAME)
                .ok_or_else(|| missing(NAME))?
                .try_into()
                .map_err(|e| step_error("type of", NAME, &e))?;
            p.load().map_err(|e| step_error("loading", NAME, &e))?;
            p.attach("raw_syscalls", "sys_enter")
                .map_err(|e| step_error("attaching", NAME, &e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arg(slot: u32, arch: u8, nr: u16, index: u8) -> NpRecArg {
        NpRecArg {
            slot,
            nr,
            arch,
            index,
        }
    }

    #[test]
    fn bitmaps_decode_to_numbers_with_the_x32_bit_put_back() {
        let mut b = NpRecBits { w: [0; WORDS] };
        b.w[0] = 1 | 1 << 39;
        b.w[2] = 1 << 7; // 135
        b.w[WORDS - 1] = 1 << 63; // 1023
        assert_eq!(
            numbers(RecArch::X86_64, &b).into_iter().collect::<Vec<_>>(),
            vec![0, 39, 135, 1023]
        );
        assert!(numbers(RecArch::X32, &b).contains(&(135 | X32_BIT)));
    }

    #[test]
    fn values_are_grouped_per_argument_of_one_slot_and_capped() {
        let values = vec![
            NpRecValue {
                value: 8,
                arg: arg(1, 0, 135, 0),
            },
            NpRecValue {
                value: 0,
                arg: arg(1, 0, 135, 0),
            },
            NpRecValue {
                value: 99,
                arg: arg(2, 0, 135, 0), // another slot
            },
            NpRecValue {
                value: 5,
                arg: arg(1, 2, 41, 1), // x32 socket
            },
            NpRecValue {
                value: 6,
                arg: arg(1, 2, 41, 1),
            },
            NpRecValue {
                value: 7,
                arg: arg(1, 2, 41, 1),
            },
        ];
        let counts = vec![
            (arg(1, 0, 135, 0), NpRecCount { n: 2, over: 0 }),
            (arg(1, 1, 136, 0), NpRecCount { n: 0, over: 1 }),
        ];
        let a = decode_args(1, values, counts, 2);
        let p = &a[&(RecArch::X86_64, 135, 0)];
        assert_eq!(p.values.iter().copied().collect::<Vec<_>>(), vec![0, 8]);
        assert!(p.complete);
        // three values, cap two: the smallest two, incomplete.
        let s = &a[&(RecArch::X32, 41 | X32_BIT, 1)];
        assert_eq!(s.values.iter().copied().collect::<Vec<_>>(), vec![5, 6]);
        assert!(!s.complete);
        // over the kernel's cap with no value kept: present, empty, incomplete.
        let over = &a[&(RecArch::I386, 136, 0)];
        assert!(over.values.is_empty() && !over.complete);
        assert_eq!(a.len(), 3);
    }

    #[test]
    fn a_restart_merges_into_the_union() {
        let mut a = SlotRecord::default();
        a.calls.insert(RecArch::X86_64, [0, 1].into());
        a.args.insert(
            (RecArch::X86_64, 135, 0),
            ArgValues {
                values: [8].into(),
                complete: true,
            },
        );
        let mut b = SlotRecord {
            lost: 3,
            ..SlotRecord::default()
        };
        b.calls.insert(RecArch::X86_64, [1, 2].into());
        b.calls.insert(RecArch::I386, [20].into());
        b.args.insert(
            (RecArch::X86_64, 135, 0),
            ArgValues {
                values: [0].into(),
                complete: false,
            },
        );
        a.merge(b);
        assert_eq!(a.calls[&RecArch::X86_64], [0, 1, 2].into());
        assert_eq!(a.calls[&RecArch::I386], [20].into());
        let p = &a.args[&(RecArch::X86_64, 135, 0)];
        assert_eq!(p.values, [0, 8].into());
        assert!(!p.complete);
        assert_eq!(a.lost, 3);
    }
}
