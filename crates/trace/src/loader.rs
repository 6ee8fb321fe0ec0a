//! The real edge: loads the embedded programs with aya, probes the strategies
//! in order (or the forced one), attaches, and reads samples, counts and stats.

use super::abi::trace::{
    NP_STAT_CGROUP_DROP, NP_STAT_COUNT_MAP_FULL, NP_STAT_DROP_RATELIMIT, NP_STAT_DROP_RINGBUF,
    NP_STAT_MAX, NP_STAT_NOTIFY_EMULATED, NP_STAT_SAMPLES, NP_STAT_STATE_FAIL,
    NP_STAT_UNPAIRED_FIRST,
};
use super::bpf;
use super::event::{
    decode_cgroup_event, decode_count_key, decode_event, CgroupCreated, CountKey, DecodeError,
    Denial, NpCountKey,
};
use super::{EventSource, Stats, Strategy, TraceError};
use aya::maps::{MapData, PerCpuArray, PerCpuHashMap, RingBuf};
use aya::programs::{BtfTracePoint, FExit, TracePoint};
use aya::{Btf, Ebpf, EbpfLoader};
use std::fmt;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the kernel exposes its own BTF.
const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";
/// tracefs mount points; classic tracepoint ids are read from `events/<cat>/<name>/id` there.
const TRACEFS: &[&str] = &["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// Why a strategy did not load (the vocabulary's, `nodeproof_findings::reason`,
/// so the `seccomp-tracing` finding's reason can name it).
pub use nodeproof_findings::reason::FailureReason;

/// Classifies the errno a load or attach failed with.
pub fn failure_of_errno(errno: Option<i32>) -> FailureReason {
    match errno {
        Some(libc::EPERM) | Some(libc::EACCES) => FailureReason::BpfPermissionDenied,
        // 524 is the kernel-internal ENOTSUPP that leaks out of BPF syscalls.
        Some(libc::ENOENT)
        | Some(libc::EINVAL)
        | Some(libc::EOPNOTSUPP)
        | Some(524)
        | Some(libc::E2BIG)
        | Some(libc::ENOSYS) => FailureReason::KernelUnsupported,
        _ => FailureReason::LoadFailed,
    }
}

/// One refused strategy, kept for the log, the metric and `nodeproof check`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeAttempt {
    pub strategy: Strategy,
    pub reason: FailureReason,
    /// The program or step that failed and the kernel's answer.
    pub detail: String,
}

impl fmt::Display for ProbeAttempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} ({})", self.strategy, self.reason, self.detail)
    }
}

/// Loader settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracerConfig {
    /// Force one strategy instead of probing fexit → tp_btf → tracepoint.
    pub strategy: Option<Strategy>,
    /// Samples per CPU per ~1.07 s window; counts are exact regardless.
    pub sample_limit_per_cpu: u64,
    /// Only sample this process (counts still cover every process).
    pub sample_pid: Option<u32>,
    /// Kernel BTF from this file instead of `/sys/kernel/btf/vmlinux` (an
    /// external BTF, e.g. from BTFHub, for a kernel built without
    /// `CONFIG_DEBUG_INFO_BTF`). Only the CO-RE reads of the `tracepoint`
    /// strategy can use it: `fexit` and `tp_btf` attach through the kernel's own BTF.
    pub btf_path: Option<PathBuf>,
}

impl Default for TracerConfig {
    fn default() -> Self {
        Self {
            strategy: None,
            sample_limit_per_cpu: 1000,
            sample_pid: None,
            btf_path: None,
        }
    }
}

enum Attach {
    Fexit(&'static str),
    BtfTp(&'static str),
    Tp(&'static str, &'static str),
}

/// Programs of each strategy, attached in this order: the helpers that mark
/// state (signal, exit) before the pairing pair, enter before exit.
fn programs(strategy: Strategy) -> &'static [(&'static str, Attach)] {
    match strategy {
        Strategy::Fexit => &[
            ("np_btf_signal", Attach::BtfTp("signal_generate")),
            ("np_btf_proc_exit", Attach::BtfTp("sched_process_exit")),
            ("np_fexit_seccomp", Attach::Fexit("__secure_computing")),
        ],
        Strategy::TpBtf => &[
            ("np_btf_signal", Attach::BtfTp("signal_generate")),
            ("np_btf_proc_exit", Attach::BtfTp("sched_process_exit")),
            ("np_btf_switch", Attach::BtfTp("sched_switch")),
            ("np_btf_enter", Attach::BtfTp("sys_enter")),
            ("np_btf_exit", Attach::BtfTp("sys_exit")),
        ],
        Strategy::Tracepoint => &[
            ("np_tp_signal", Attach::Tp("signal", "signal_generate")),
            ("np_tp_proc_exit", Attach::Tp("sched", "sched_process_exit")),
            ("np_tp_enter", Attach::Tp("raw_syscalls", "sys_enter")),
            ("np_tp_exit", Attach::Tp("raw_syscalls", "sys_exit")),
        ],
    }
}

/// fexit for kernels before task storage (5.11), bpf_task_pt_regs (5.15) and
/// bpf_get_func_ret (5.17): the return value from the context, the per-task
/// trap mark in the tid-keyed hash, signal and exit on classic tracepoints.
const FEXIT_COMPAT_PROGRAMS: &[(&str, Attach)] = &[
    ("np_tp_signal", Attach::Tp("signal", "signal_generate")),
    ("np_tp_proc_exit", Attach::Tp("sched", "sched_process_exit")),
    ("np_fexit_compat", Attach::Fexit("__secure_computing")),
];

/// A strategy's variants in the order tried, each with the object that holds
/// its programs: a map only another strategy needs is never created for it.
fn variants(strategy: Strategy) -> Vec<(Object, &'static [(&'static str, Attach)])> {
    match strategy {
        Strategy::Fexit => vec![
            (Object::Full, programs(strategy)),
            (Object::Classic, FEXIT_COMPAT_PROGRAMS),
        ],
        Strategy::TpBtf => vec![(Object::Full, programs(strategy))],
        Strategy::Tracepoint => vec![(Object::Classic, programs(strategy))],
    }
}

/// The tracepoint strategy's programs when there is no BTF: no CO-RE reads,
/// `seccomp.mode` at a probed offset (see `probe_offsets`).
const BTF_FREE_PROGRAMS: &[(&str, Attach)] = &[
    ("np_nb_signal", Attach::Tp("signal", "signal_generate")),
    ("np_nb_proc_exit", Attach::Tp("sched", "sched_process_exit")),
    ("np_nb_enter", Attach::Tp("raw_syscalls", "sys_enter")),
    ("np_nb_exit", Attach::Tp("raw_syscalls", "sys_exit")),
];

/// Bytes of task_struct the offset probe snapshots (np_probe_snap's value size).
const PROBE_BYTES: usize = 16384;

/// A running tracer. Dropping it detaches every program.
pub struct Tracer {
    // Owns the programs and their links; kept alive for the attachment.
    _bpf: Ebpf,
    ring: RingBuf<MapData>,
    /// Cgroup2 creations (`np_cgroups`); `None` when the feed did not attach.
    cgroups: Option<RingBuf<MapData>>,
    counts: PerCpuHashMap<MapData, NpCountKey, u64>,
    stats: PerCpuArray<MapData, u64>,
    strategy: Strategy,
    attempts: Vec<ProbeAttempt>,
    /// The probed offset of task_struct.seccomp.mode when running without BTF.
    btf_free_offset: Option<u32>,
}

impl Tracer {
    /// Probes the strategies (or loads the forced one) and attaches the first that loads.
    pub fn start(cfg: &TracerConfig) -> Result<Self, TraceError> {
        if bpf::is_stub() {
            return Err(TraceError::NotBuilt);
        }
        raise_memlock();
        let order: Vec<Strategy> = match cfg.strategy {
            Some(s) => vec![s],
            None => Strategy::ALL.to_vec(),
        };
        let started = Instant::now();
        let btf_file = cfg.btf_path.as_deref().unwrap_or(Path::new(KERNEL_BTF));
        // aya's loader parses the kernel's BTF for itself when it is made
        // (`EbpfLoader::new` has no way around it), and the programs are
        // loaded against ours. One copy at a time, on one thread: aya's is
        // dropped and its pages handed back before ours is parsed, so the
        // heap holds one parse (a 5.4 MiB vmlinux BTF becomes ~17 MiB of
        // types), not two side by side. Parsing both at once on two threads
        // saved ~100 ms of start-up and cost most of the agent's memory peak
        // (agent_memory bench: VmHWM 53-57 MiB before, 39 MiB after).
        let (mut loader, btf) = std::thread::scope(|s| {
            s.spawn(|| {
                let mut loader = EbpfLoader::new();
                loader.btf(None);
                // SAFETY: malloc_trim only releases free heap pages.
                unsafe { libc::malloc_trim(0) };
                // Why there is no BTF, kept for the refusal detail of every strategy that needs it.
                let btf = Btf::parse_file(btf_file, aya::Endianness::default())
                    .map_err(|e| format!("no BTF at {}: {}", btf_file.display(), error_chain(&e)));
                (loader, btf)
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        });
        let sample_pid = cfg.sample_pid.unwrap_or(0);
        loader
            .allow_unsupported_maps() // task storage: aya 0.14 has no userspace type for it
            .override_global("np_sample_limit", &cfg.sample_limit_per_cpu, true)
            .override_global("np_sample_tgid", &sample_pid, true);
        let btf_parse_ms = millis(started.elapsed());
        // The object loaded with the kernel's BTF, shared by the BTF
        // strategies: its maps are created once, not per strategy.
        let mut object = None;
        let mut attempts = Vec::new();
        for strategy in order {
            let attempt = Instant::now();
            match try_strategy(strategy, cfg, btf.as_ref(), &mut loader, &mut object) {
                Ok((mut bpf, btf_free_offset)) => {
                    let feed = attach_cgroup_feed(&mut bpf, btf.as_ref().ok());
                    if let Err(why) = &feed {
                        tracing::warn!(
                            error = %why,
                            "cgroup creation feed not attached: a container gone before its \
                             denials are read loses its pod attribution (counts stay exact)"
                        );
                    }
                    for a in &attempts {
                        tracing::info!(refused = %a, "seccomp tracing strategy refused, fell back");
                    }
                    // The start-up breakdown: READY=1 waits for this.
                    tracing::info!(
                        %strategy,
                        btf_parse_ms,
                        strategy_ms = millis(attempt.elapsed()),
                        load_ms = millis(started.elapsed()),
                        "seccomp tracing strategy loaded"
                    );
                    let tracer =
                        Self::from_loaded(bpf, strategy, attempts, feed.is_ok()).map(|t| Self {
                            btf_free_offset,
                            ..t
                        });
                    drop(btf);
                    // Parsing kernel BTF (twice: aya's loader parses its own copy)
                    // peaks at tens of MiB of heap; hand it back so a long-running agent
                    // stays within its RSS budget.
                    // SAFETY: malloc_trim only releases free heap pages.
                    unsafe { libc::malloc_trim(0) };
                    return tracer;
                }
                Err(a) => {
                    tracing::debug!(refused = %a, ms = millis(attempt.elapsed()), "seccomp tracing strategy refused");
                    attempts.push(a)
                }
            }
        }
        Err(TraceError::NoStrategy {
            missing_caps: missing_capabilities(effective_capabilities()),
            attempts,
        })
    }

    fn from_loaded(
        mut bpf: Ebpf,
        strategy: Strategy,
        attempts: Vec<ProbeAttempt>,
        cgroup_feed: bool,
    ) -> Result<Self, TraceError> {
        let mut take =
            |name: &'static str| bpf.take_map(name).ok_or(TraceError::MissingMap { name });
        let ring = RingBuf::try_from(take("np_events")?).map_err(|source| TraceError::Map {
            name: "np_events",
            source,
        })?;
        let counts =
            PerCpuHashMap::try_from(take("np_counts")?).map_err(|source| TraceError::Map {
                name: "np_counts",
                source,
            })?;
        let stats = PerCpuArray::try_from(take("np_stats")?).map_err(|source| TraceError::Map {
            name: "np_stats",
            source,
        })?;
        let cgroups = if cgroup_feed {
            Some(
                RingBuf::try_from(take("np_cgroups")?).map_err(|source| TraceError::Map {
                    name: "np_cgroups",
                    source,
                })?,
            )
        } else {
            None
        };
        Ok(Self {
            _bpf: bpf,
            ring,
            cgroups,
            counts,
            stats,
            strategy,
            attempts,
            btf_free_offset: None,
        })
    }

    /// `Some(offset of task_struct.seccomp.mode)` when the tracepoint strategy
    /// runs without BTF (arch, mnt_ns, notify-error and a KILL's syscall are then unknown).
    pub fn btf_free_offset(&self) -> Option<u32> {
        self.btf_free_offset
    }

    /// Whether cgroup2 creations are fed to user space (see [`EventSource::created_cgroups`]).
    pub fn cgroup_feed(&self) -> bool {
        self.cgroups.is_some()
    }

    /// Strategies refused before this one loaded (empty when the first loaded).
    pub fn attempts(&self) -> &[ProbeAttempt] {
        &self.attempts
    }
}

fn millis(d: Duration) -> u64 {
    d.as_millis().try_into().unwrap_or(u64::MAX)
}

fn try_strategy<'a>(
    strategy: Strategy,
    cfg: &TracerConfig,
    btf: Result<&'a Btf, &String>,
    loader: &mut EbpfLoader<'a>,
    object: &mut Option<(Object, Ebpf)>,
) -> Result<(Ebpf, Option<u32>), ProbeAttempt> {
    let fail = |reason, detail: String| ProbeAttempt {
        strategy,
        reason,
        detail,
    };
    if strategy == Strategy::Tracepoint {
        if let Some(detail) = tracefs_unreadable() {
            return Err(fail(FailureReason::BpfPermissionDenied, detail));
        }
    }
    // The CO-RE programs read task_struct fields through relocations
    // (seccomp.mode, stack, thread_info.status, nsproxy): without BTF aya would
    // load them unrelocated, at the offsets of np_core.h's partial structs, and
    // they would read the wrong bytes. fexit and tp_btf need the kernel's BTF
    // anyway; the tracepoint strategy has a BTF-free variant with one probed offset.
    let btf = match btf {
        Ok(btf) => btf,
        Err(why) if strategy == Strategy::Tracepoint => {
            return load_btf_free(cfg).map_err(|(reason, detail)| {
                fail(reason, format!("{why}; BTF-free variant: {detail}"))
            });
        }
        Err(why) => {
            return Err(fail(
                FailureReason::KernelUnsupported,
                format!("{why} (attaching to BTF-typed points needs the kernel's BTF)"),
            ))
        }
    };
    // The first variant that loads wins; a refusal names every variant's reason.
    let mut refused: Option<(FailureReason, String)> = None;
    for (kind, progs) in variants(strategy) {
        match load_variant(strategy, kind, progs, btf, loader, object) {
            Ok(bpf) => {
                if let Some((_, detail)) = &refused {
                    tracing::info!(%strategy, variant = ?kind, first = %detail, "seccomp tracing strategy loaded its fallback variant");
                }
                return Ok((bpf, None));
            }
            Err((reason, detail)) => {
                refused = Some(match refused {
                    None => (reason, detail),
                    Some((first, before)) => (
                        first,
                        format!("{before}; without task storage, bpf_get_func_ret and bpf_task_pt_regs: {detail}"),
                    ),
                })
            }
        }
    }
    let (reason, detail) = refused.expect("every strategy has a variant");
    Err(fail(reason, detail))
}

/// One variant of a strategy: its object's maps (shared with the strategies
/// tried before it when the object is the same), then its programs.
fn load_variant<'a>(
    strategy: Strategy,
    kind: Object,
    progs: &[(&'static str, Attach)],
    btf: &'a Btf,
    loader: &mut EbpfLoader<'a>,
    object: &mut Option<(Object, Ebpf)>,
) -> Result<Ebpf, (FailureReason, String)> {
    if object.as_ref().is_some_and(|(k, _)| *k != kind) {
        *object = None;
    }
    let bpf = match object {
        Some((_, bpf)) => bpf,
        None => {
            let loaded = load_object(loader, btf, kind, strategy)?;
            &mut object.insert((kind, loaded)).1
        }
    };
    // Every program is verified before any is attached: a refusal (fexit
    // under lockdown, say) then leaves nothing running, and the programs it
    // did load stay loaded for the next strategy that shares them.
    load_programs(bpf, progs, Some(btf))?;
    if let Err(e) = attach_programs(bpf, progs) {
        // Some of its programs ran for a moment and wrote to the maps: the
        // next strategy starts from a fresh object.
        *object = None;
        return Err(e);
    }
    let (_, mut bpf) = object.take().expect("the object was just loaded");
    unload_others(&mut bpf, progs);
    Ok(bpf)
}

/// The two embedded objects. Each strategy loads the one that holds its
/// programs, so a map only another strategy needs (task storage) is never
/// created for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Object {
    /// Every program and map: fexit and tp_btf.
    Full,
    /// The classic-tracepoint programs and their maps (no task storage).
    Classic,
}

impl Object {
    fn bytes(self) -> &'static [u8] {
        match self {
            Self::Full => bpf::SECCOMP_TRACE,
            Self::Classic => bpf::SECCOMP_TRACE_CLASSIC,
        }
    }
}

/// The task-storage map of the fexit and tp_btf programs (kernel 5.11+).
const TASK_STORAGE_MAP: &str = "np_task_store";

/// An embedded object with the kernel's BTF: maps created, no program loaded.
fn load_object<'a>(
    loader: &mut EbpfLoader<'a>,
    btf: &'a Btf,
    kind: Object,
    strategy: Strategy,
) -> Result<Ebpf, (FailureReason, String)> {
    loader.btf(Some(btf));
    loader
        .load(kind.bytes())
        .map_err(|e| map_creation_error(&e, strategy))
}

/// A map the kernel would not create; task storage, which kernels before
/// 5.11 lack (BPF_MAP_TYPE_TASK_STORAGE came with bpf-lsm task storage in
/// 5.11; older kernels answer EINVAL for the unknown map type), is named.
fn map_creation_error(e: &aya::EbpfError, strategy: Strategy) -> (FailureReason, String) {
    let reason = failure_of_errno(errno_in(e));
    match e {
        // EPERM/EACCES is this process's lack of CAP_BPF, whatever the map:
        // only an unknown map type (EINVAL, ...) says the kernel lacks it.
        aya::EbpfError::MapError(aya::maps::MapError::CreateError { name, .. })
            if name == TASK_STORAGE_MAP && reason != FailureReason::BpfPermissionDenied =>
        {
            (
                FailureReason::KernelUnsupported,
                format!(
                    "no task storage maps on this kernel (BPF_MAP_TYPE_TASK_STORAGE, Linux 5.11+), \
                     where the {strategy} programs keep per-task state: {}",
                    error_chain(e)
                ),
            )
        }
        _ => (reason, format!("creating maps: {}", error_chain(e))),
    }
}

/// Unloads what refused strategies loaded and the chosen one does not use.
fn unload_others(bpf: &mut Ebpf, keep: &[(&'static str, Attach)]) {
    use aya::programs::Program;
    for (name, prog) in bpf.programs_mut() {
        if keep.iter().any(|(k, _)| *k == name) || prog.fd().is_err() {
            continue;
        }
        let unloaded = match prog {
            Program::FExit(p) => p.unload(),
            Program::BtfTracePoint(p) => p.unload(),
            Program::TracePoint(p) => p.unload(),
            _ => Ok(()),
        };
        if let Err(e) = unloaded {
            tracing::debug!(program = name, error = %error_chain(&e), "unloading an unused program failed");
        }
    }
}

/// Loads and attaches `progs` in order; the error is the refusal's reason and detail.
fn attach_all(
    bpf: &mut Ebpf,
    progs: &[(&'static str, Attach)],
    btf: Option<&Btf>,
) -> Result<(), (FailureReason, String)> {
    load_programs(bpf, progs, btf)?;
    attach_programs(bpf, progs)
}

/// How a program's load or attach failed: the errno's reason and what failed.
pub(crate) fn step_error(
    what: &str,
    name: &str,
    e: &(dyn std::error::Error + 'static),
) -> (FailureReason, String) {
    (
        failure_of_errno(errno_in(e)),
        format!("{what} {name}: {}", error_chain(e)),
    )
}

fn program<'a>(
    bpf: &'a mut Ebpf,
    name: &str,
) -> Result<&'a mut aya::programs::Program, (FailureReason, String)> {
    bpf.program_mut(name)
        .ok_or_else(|| (FailureReason::LoadFailed, format!("{name} not in object")))
}

/// Verifies and loads `progs` (those not loaded yet), attaching none.
fn load_programs(
    bpf: &mut Ebpf,
    progs: &[(&'static str, Attach)],
    btf: Option<&Btf>,
) -> Result<(), (FailureReason, String)> {
    let need_btf = || {
        btf.ok_or_else(|| {
            (
                FailureReason::KernelUnsupported,
                "BTF-typed attach point without BTF".to_string(),
            )
        })
    };
    for (name, attach) in progs {
        let prog = program(bpf, name)?;
        if prog.fd().is_ok() {
            continue;
        }
        let step = |what: &str, e: &(dyn std::error::Error + 'static)| step_error(what, name, e);
        match attach {
            Attach::Fexit(func) => {
                let p: &mut FExit = prog.try_into().map_err(|e| step("type of", &e))?;
                p.load(func, need_btf()?).map_err(|e| step("loading", &e))?;
            }
            Attach::BtfTp(tp) => {
                let p: &mut BtfTracePoint = prog.try_into().map_err(|e| step("type of", &e))?;
                p.load(tp, need_btf()?).map_err(|e| step("loading", &e))?;
            }
            Attach::Tp(..) => {
                let p: &mut TracePoint = prog.try_into().map_err(|e| step("type of", &e))?;
                p.load().map_err(|e| step("loading", &e))?;
            }
        }
    }
    Ok(())
}

/// Attaches loaded `progs` in order.
fn attach_programs(
    bpf: &mut Ebpf,
    progs: &[(&'static str, Attach)],
) -> Result<(), (FailureReason, String)> {
    for (name, attach) in progs {
        let prog = program(bpf, name)?;
        let step = |what: &str, e: &(dyn std::error::Error + 'static)| step_error(what, name, e);
        match attach {
            Attach::Fexit(_) => {
                let p: &mut FExit = prog.try_into().map_err(|e| step("type of", &e))?;
                p.attach().map_err(|e| step("attaching", &e))?;
            }
            Attach::BtfTp(_) => {
                let p: &mut BtfTracePoint = prog.try_into().map_err(|e| step("type of", &e))?;
                p.attach().map_err(|e| step("attaching", &e))?;
            }
            Attach::Tp(cat, tp) => {
                let p: &mut TracePoint = prog.try_into().map_err(|e| step("type of", &e))?;
                p.attach(cat, tp).map_err(|e| step("attaching", &e))?;
            }
        }
    }
    Ok(())
}

/// Attaches the cgroup-creation program of the object the strategy loaded:
/// `tp_btf/cgroup_mkdir` in the full object, else the classic tracepoint,
/// once its record layout is checked against tracefs. Best effort: without it
/// only attribution of cgroups gone before their denials are read suffers.
fn attach_cgroup_feed(bpf: &mut Ebpf, btf: Option<&Btf>) -> Result<(), String> {
    const BTF_PROG: &str = "np_btf_cgroup_mkdir";
    if bpf.program(BTF_PROG).is_some() {
        return attach_all(bpf, &[(BTF_PROG, Attach::BtfTp("cgroup_mkdir"))], btf)
            .map_err(|(_, detail)| detail);
    }
    let format = TRACEFS
        .iter()
        .map(|t| Path::new(t).join("events/cgroup/cgroup_mkdir/format"))
        .find_map(|p| std::fs::read_to_string(&p).ok())
        .ok_or_else(|| "no readable events/cgroup/cgroup_mkdir/format in tracefs".to_string())?;
    check_cgroup_mkdir_format(&format)?;
    attach_all(
        bpf,
        &[("np_tp_cgroup_mkdir", Attach::Tp("cgroup", "cgroup_mkdir"))],
        btf,
    )
    .map_err(|(_, detail)| detail)
}

/// The classic `cgroup_mkdir` record's fields where `struct np_tp_cgroup`
/// reads them: (declaration in the format file, offset, size).
const CGROUP_MKDIR_FIELDS: [(&str, u32, u32); 4] = [
    ("int root", 8, 4),
    ("int level", 12, 4),
    ("u64 id", 16, 8),
    ("__data_loc char[] path", 24, 4),
];

/// Checks a tracefs `format` text of `cgroup/cgroup_mkdir` against the
/// layout `np_tp_cgroup_mkdir` reads (no CO-RE there: the BTF-free variant
/// uses it too).
pub fn check_cgroup_mkdir_format(format: &str) -> Result<(), String> {
    let fields: Vec<(&str, u32, u32)> = format
        .lines()
        .filter_map(|l| {
            let mut parts = l.trim().split(';').map(str::trim);
            let decl = parts.next()?.strip_prefix("field:")?;
            let offset = parts.next()?.strip_prefix("offset:")?.parse().ok()?;
            let size = parts.next()?.strip_prefix("size:")?.parse().ok()?;
            Some((decl, offset, size))
        })
        .collect();
    for want in CGROUP_MKDIR_FIELDS {
        if !fields.contains(&want) {
            return Err(format!(
                "cgroup_mkdir record has no `{}` at offset {} (size {}): {fields:?}",
                want.0, want.1, want.2
            ));
        }
    }
    Ok(())
}

/// The tracepoint strategy without BTF: probe the offset of
/// task_struct.seccomp.mode, then load the CO-RE-free programs with it.
fn load_btf_free(cfg: &TracerConfig) -> Result<(Ebpf, Option<u32>), (FailureReason, String)> {
    let off = probe_offsets()?;
    let offset = off.seccomp_mode;
    let stack = off.stack.unwrap_or(0);
    tracing::info!(seccomp_mode = offset, stack = ?off.stack, "no BTF: task_struct offsets probed");
    if off.stack.is_none() {
        tracing::warn!("no BTF and task->stack not found: a KILL's syscall is reported as unknown");
    }
    let sample_pid = cfg.sample_pid.unwrap_or(0);
    let mut bpf = EbpfLoader::new()
        .allow_unsupported_maps()
        .btf(None)
        .override_global("np_sample_limit", &cfg.sample_limit_per_cpu, true)
        .override_global("np_sample_tgid", &sample_pid, true)
        .override_global("np_off_seccomp_mode", &offset, true)
        .override_global("np_off_stack", &stack, true)
        .load(bpf::SECCOMP_TRACE_CLASSIC)
        .map_err(|e| {
            (
                failure_of_errno(errno_in(&e)),
                format!("creating maps: {}", error_chain(&e)),
            )
        })?;
    attach_all(&mut bpf, BTF_FREE_PROGRAMS, None)?;
    Ok((bpf, Some(offset)))
}

/// Offsets the BTF-free variant reads task_struct at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProbedOffsets {
    seccomp_mode: u32,
    /// `task->stack`, for a KILL's syscall; `None` when no candidate proved itself.
    stack: Option<u32>,
}

/// What the probe thread does next; np_nb_probe runs on each of its syscalls.
enum ProbeStep {
    /// Any syscall: a snapshot before the filter.
    Snapshot,
    /// `close(PROBE_FD)`: a syscall with a known first argument for the stack check.
    KnownArgs,
    /// Install an allow-all filter, then a syscall: the snapshot after.
    Filter,
}

/// A file descriptor nobody has open: `close` on it fails with EBADF, and its
/// value in `di` tells the right pt_regs from chance matches.
const PROBE_FD: libc::c_long = 0x7ead_beef;
const PROBE_CANDIDATES: u32 = 32;

/// Finds task_struct.seccomp.mode (and task->stack) without BTF: one of our
/// own threads has its task_struct bytes snapshotted (np_nb_probe, on its
/// syscalls) before and after it installs an allow-all filter;
/// `find_seccomp_mode` diffs them. Stack candidates (kernel addresses aligned
/// to the 16 KiB stack in the first snapshot) are checked in the kernel
/// against the pt_regs of a `close(PROBE_FD)`. The thread keeps its filter and
/// no_new_privs and exits; no other thread is affected.
fn probe_offsets() -> Result<ProbedOffsets, (FailureReason, String)> {
    use std::sync::mpsc;
    let (tid_tx, tid_rx) = mpsc::channel::<u32>();
    let (go_tx, go_rx) = mpsc::channel::<ProbeStep>();
    let (done_tx, done_rx) = mpsc::channel::<Result<(), String>>();
    let worker = std::thread::spawn(move || {
        let _ = tid_tx.send(nix::unistd::gettid().as_raw() as u32);
        while let Ok(step) = go_rx.recv() {
            let r = match step {
                ProbeStep::Snapshot => {
                    nix::unistd::getppid();
                    Ok(())
                }
                ProbeStep::KnownArgs => {
                    // SAFETY: no pointer is passed; PROBE_FD is no descriptor
                    // of ours (EBADF). Raw, not nix's close: the stack probe
                    // checks exactly this nr and first argument in pt_regs.
                    unsafe { libc::syscall(libc::SYS_close, PROBE_FD) };
                    Ok(())
                }
                ProbeStep::Filter => install_allow_all_filter().map(|()| {
                    nix::unistd::getppid();
                }),
            };
            if done_tx.send(r).is_err() {
                return;
            }
        }
    });
    let tid = tid_rx
        .recv()
        .map_err(|_| (FailureReason::LoadFailed, "probe thread died".to_string()))?;
    let result = (|| {
        let mut bpf = EbpfLoader::new()
            .allow_unsupported_maps()
            .btf(None)
            .override_global("np_probe_tid", &tid, true)
            .load(bpf::SECCOMP_TRACE_CLASSIC)
            .map_err(|e| {
                (
                    failure_of_errno(errno_in(&e)),
                    format!("creating maps: {}", error_chain(&e)),
                )
            })?;
        attach_all(
            &mut bpf,
            &[("np_nb_probe", Attach::Tp("raw_syscalls", "sys_enter"))],
            None,
        )?;
        let map_err = |e: aya::maps::MapError| (FailureReason::LoadFailed, error_chain(&e));
        let missing = |name: &str| (FailureReason::LoadFailed, format!("no {name} map"));
        let run = |step: ProbeStep| -> Result<(), (FailureReason, String)> {
            let broken = || (FailureReason::LoadFailed, "probe thread died".to_string());
            go_tx.send(step).map_err(|_| broken())?;
            done_rx
                .recv()
                .map_err(|_| broken())?
                .map_err(|e| (FailureReason::LoadFailed, e))
        };
        let snapshot = |bpf: &Ebpf| -> Result<Box<[u8; PROBE_BYTES]>, (FailureReason, String)> {
            let snap = aya::maps::Array::<_, [u8; PROBE_BYTES]>::try_from(
                bpf.map("np_probe_snap")
                    .ok_or_else(|| missing("np_probe_snap"))?,
            )
            .map_err(map_err)?;
            snap.get(&0, 0).map(Box::new).map_err(map_err)
        };

        run(ProbeStep::Snapshot)?;
        let before = snapshot(&bpf)?;
        let candidates = stack_candidates(&before[..], PROBE_CANDIDATES as usize);
        {
            let mut cand = aya::maps::Array::<_, u64>::try_from(
                bpf.map_mut("np_probe_cand")
                    .ok_or_else(|| missing("np_probe_cand"))?,
            )
            .map_err(map_err)?;
            for (i, (_, addr)) in candidates.iter().enumerate() {
                cand.set(i as u32, addr, 0).map_err(map_err)?;
            }
        }
        run(ProbeStep::KnownArgs)?;
        let hits = {
            let hit = aya::maps::Array::<_, u64>::try_from(
                bpf.map("np_probe_hit")
                    .ok_or_else(|| missing("np_probe_hit"))?,
            )
            .map_err(map_err)?;
            let mut hits = Vec::new();
            for (i, (off, _)) in candidates.iter().enumerate() {
                if hit.get(&(i as u32), 0).map_err(map_err)? == 1 {
                    hits.push(*off);
                }
            }
            hits
        };
        run(ProbeStep::Filter)?;
        let after = snapshot(&bpf)?;
        let seccomp_mode = find_seccomp_mode(&before[..], &after[..])
            .map_err(|e| (FailureReason::KernelUnsupported, e))?;
        Ok(ProbedOffsets {
            seccomp_mode,
            stack: match hits.as_slice() {
                [one] => Some(*one),
                _ => None,
            },
        })
    })();
    drop(go_tx);
    let _ = worker.join();
    result
}

/// 8-aligned fields of a task_struct snapshot that look like `task->stack`:
/// kernel addresses aligned to the 16 KiB x86_64 stack. (offset, value), at most `max`.
fn stack_candidates(snap: &[u8], max: usize) -> Vec<(u32, u64)> {
    const STACK_SIZE: u64 = 16384;
    snap.chunks_exact(8)
        .enumerate()
        .map(|(i, c)| ((i * 8) as u32, u64::from_ne_bytes(c.try_into().unwrap())))
        .filter(|&(_, v)| v >= 0xffff_8000_0000_0000 && v % STACK_SIZE == 0)
        .take(max)
        .collect()
}

/// Puts the calling thread under an allow-all filter (with no_new_privs,
/// which an unprivileged filter needs).
fn install_allow_all_filter() -> Result<(), String> {
    const SECCOMP_SET_MODE_FILTER: libc::c_long = 1;
    const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    let mut insn = [libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k: SECCOMP_RET_ALLOW,
    }];
    let prog = libc::sock_fprog {
        len: 1,
        filter: insn.as_mut_ptr(),
    };
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("PR_SET_NO_NEW_PRIVS: {e}"))?;
    // SAFETY: seccomp with a valid one-instruction program that outlives the
    // call (the kernel copies it); nix has no seccomp(2) wrapper.
    if unsafe { libc::syscall(libc::SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) } != 0 {
        return Err(format!("seccomp(): {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The offset of `struct seccomp` in two task_struct snapshots taken before
/// and after a filter was installed: `int mode` 0 → 2 (SECCOMP_MODE_FILTER),
/// `atomic_t filter_count` 0 → 1 (0 → 0 before 5.9, where it is padding),
/// `struct seccomp_filter *filter` NULL → a kernel address. Exactly one match
/// or an error (other fields change between snapshots too: times, counters).
pub fn find_seccomp_mode(before: &[u8], after: &[u8]) -> Result<u32, String> {
    let u32_at = |s: &[u8], o: usize| u32::from_ne_bytes(s[o..o + 4].try_into().unwrap());
    let u64_at = |s: &[u8], o: usize| u64::from_ne_bytes(s[o..o + 8].try_into().unwrap());
    let len = before.len().min(after.len());
    let found: Vec<usize> = (0..len.saturating_sub(16))
        .step_by(8)
        .filter(|&o| {
            u32_at(before, o) == 0
                && u32_at(after, o) == 2
                && u32_at(before, o + 4) == 0
                && u32_at(after, o + 4) <= 1
                && u64_at(before, o + 8) == 0
                && u64_at(after, o + 8) >= 0xffff_8000_0000_0000
        })
        .collect();
    match found.as_slice() {
        [o] => Ok(*o as u32),
        [] => Err("no struct seccomp signature in the task_struct snapshots".to_string()),
        many => Err(format!(
            "struct seccomp signature is ambiguous at offsets {many:?}"
        )),
    }
}

/// Why classic tracepoints cannot be attached by this process, when the
/// reason is tracefs permissions: tracefs is mode 0700 root by default, and
/// the event ids live there, so a non-root agent with CAP_BPF + CAP_PERFMON
/// cannot use this strategy (tp_btf needs no tracefs).
fn tracefs_unreadable() -> Option<String> {
    let mut seen = None;
    for dir in TRACEFS {
        let events = Path::new(dir).join("events");
        match std::fs::metadata(&events) {
            Ok(_) => return None, // readable: attach will find the ids
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                seen = Some(format!(
                    "{} is not readable by this user (tracefs is root-only by default; classic tracepoint ids live there): {e}",
                    events.display()
                ));
            }
            Err(_) => {}
        }
    }
    seen
}

/// The first OS error in a chain of sources.
fn errno_in(e: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if let Some(n) = io.raw_os_error() {
                return Some(n);
            }
        }
        cur = err.source();
    }
    None
}

pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    // Verifier logs can run to megabytes; the first lines say enough here.
    nodeproof_findings::errors::error_chain_capped(e, 600)
}

/// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; newer ones use
/// memcg and ignore it. Raise it where allowed (infinity needs
/// CAP_SYS_RESOURCE; else soft up to hard) and carry on either way.
pub(crate) fn raise_memlock() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let memlock = Resource::RLIMIT_MEMLOCK;
    if setrlimit(memlock, libc::RLIM_INFINITY, libc::RLIM_INFINITY).is_ok() {
        return;
    }
    if let Ok((_, hard)) = getrlimit(memlock) {
        let _ = setrlimit(memlock, hard, hard);
    }
}

pub(crate) const CAP_SYS_ADMIN: u32 = 21;
pub(crate) const CAP_PERFMON: u32 = 38;
pub(crate) const CAP_BPF: u32 = 39;

/// The calling thread's effective capability mask (0 when unreadable).
pub fn effective_capabilities() -> u64 {
    std::fs::read_to_string("/proc/thread-self/status")
        .ok()
        .and_then(|s| parse_cap_eff(&s))
        .unwrap_or(0)
}

/// `CapEff:` from a `/proc/<pid>/status` text.
pub fn parse_cap_eff(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

/// Capabilities a tracer needs and the mask lacks: CAP_BPF and CAP_PERFMON,
/// both covered by CAP_SYS_ADMIN (root).
pub fn missing_capabilities(cap_eff: u64) -> Vec<&'static str> {
    let has = |c: u32| cap_eff & (1u64 << c) != 0;
    if has(CAP_SYS_ADMIN) {
        return Vec::new();
    }
    let mut missing = Vec::new();
    if !has(CAP_BPF) {
        missing.push("CAP_BPF");
    }
    if !has(CAP_PERFMON) {
        missing.push("CAP_PERFMON");
    }
    missing
}

impl EventSource for Tracer {
    fn strategy(&self) -> Strategy {
        self.strategy
    }

    fn poll(&mut self, timeout: Duration, sink: &mut dyn FnMut(Denial)) -> Result<(), TraceError> {
        let mut drained = self.drain(sink)?;
        if drained == 0 && !timeout.is_zero() {
            use nix::poll::{PollFd, PollFlags, PollTimeout};
            let mut pfd = [PollFd::new(self.ring.as_fd(), PollFlags::POLLIN)];
            let ms = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
            match nix::poll::poll(&mut pfd, ms) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(TraceError::Poll { source: e.into() }),
            }
            drained = self.drain(sink)?;
        }
        let _ = drained;
        Ok(())
    }

    fn counts(&self) -> Result<Vec<(CountKey, u64)>, TraceError> {
        let mut out = Vec::new();
        for item in self.counts.iter() {
            let (raw, per_cpu) = item.map_err(|source| TraceError::Map {
                name: "np_counts",
                source,
            })?;
            let key = decode_count_key(&raw).map_err(|source| TraceError::Decode { source })?;
            out.push((key, per_cpu.iter().sum()));
        }
        Ok(out)
    }

    fn retire(&mut self, exited: &dyn Fn(u32) -> bool) -> Result<Vec<(CountKey, u64)>, TraceError> {
        let map_err = |source| TraceError::Map {
            name: "np_counts",
            source,
        };
        // Keys first: deleting while iterating would make the kernel's
        // get_next_key restart from the first key.
        let gone: Vec<NpCountKey> = self
            .counts
            .keys()
            .filter_map(Result::ok)
            .filter(|k| exited(k.tgid))
            .collect();
        let mut out = Vec::with_capacity(gone.len());
        for raw in gone {
            // Read, then delete: the process is gone, so nothing adds to the
            // key in between (a reused pid would, within microseconds).
            let per_cpu = match self.counts.get(&raw, 0) {
                Ok(v) => v,
                Err(aya::maps::MapError::KeyNotFound) => continue,
                Err(e) => return Err(map_err(e)),
            };
            let key = decode_count_key(&raw).map_err(|source| TraceError::Decode { source })?;
            match self.counts.remove(&raw) {
                Ok(()) => out.push((key, per_cpu.iter().sum())),
                // Deleted since the keys were listed: nothing to hand over.
                Err(aya::maps::MapError::SyscallError(e))
                    if e.io_error.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(map_err(e)),
            }
        }
        Ok(out)
    }

    fn stats(&self) -> Result<Stats, TraceError> {
        let mut v = [0u64; NP_STAT_MAX as usize];
        for (i, slot) in v.iter_mut().enumerate() {
            let per_cpu = self
                .stats
                .get(&(i as u32), 0)
                .map_err(|source| TraceError::Map {
                    name: "np_stats",
                    source,
                })?;
            *slot = per_cpu.iter().sum();
        }
        Ok(Stats {
            samples: v[NP_STAT_SAMPLES as usize],
            dropped_ratelimit: v[NP_STAT_DROP_RATELIMIT as usize],
            dropped_ringbuf: v[NP_STAT_DROP_RINGBUF as usize],
            lost_counts: v[NP_STAT_COUNT_MAP_FULL as usize],
            unjudged_first_exits: v[NP_STAT_UNPAIRED_FIRST as usize],
            state_failures: v[NP_STAT_STATE_FAIL as usize],
            notify_emulated: v[NP_STAT_NOTIFY_EMULATED as usize],
            cgroup_feed_dropped: v[NP_STAT_CGROUP_DROP as usize],
        })
    }

    fn created_cgroups(&mut self, sink: &mut dyn FnMut(CgroupCreated)) -> Result<(), TraceError> {
        let Some(ring) = self.cgroups.as_mut() else {
            return Ok(());
        };
        while let Some(item) = ring.next() {
            match decode_cgroup_event(&item) {
                Ok(c) => sink(c),
                // A path the kernel cut or could not read is not cached wrong:
                // that cgroup is resolved by walking the tree, while it exists.
                Err(e @ DecodeError::CgroupPath { .. }) => {
                    tracing::debug!(error = %e, "cgroup creation not cached")
                }
                Err(source) => return Err(TraceError::Decode { source }),
            }
        }
        Ok(())
    }
}

impl Tracer {
    fn drain(&mut self, sink: &mut dyn FnMut(Denial)) -> Result<usize, TraceError> {
        let mut n = 0;
        while let Some(item) = self.ring.next() {
            let d = decode_event(&item).map_err(|source| TraceError::Decode { source })?;
            drop(item);
            sink(d);
            n += 1;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This kernel's (6.18) format file, and the same with the id moved.
    #[test]
    fn cgroup_mkdir_format_checked() {
        let host = "name: cgroup_mkdir\nID: 544\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\tfield:int root;\toffset:8;\tsize:4;\tsigned:1;\n\tfield:int level;\toffset:12;\tsize:4;\tsigned:1;\n\tfield:u64 id;\toffset:16;\tsize:8;\tsigned:0;\n\tfield:__data_loc char[] path;\toffset:24;\tsize:4;\tsigned:0;\n\nprint fmt: \"root=%d id=%llu level=%d path=%s\", REC->root, REC->id, REC->level, __get_str(path)\n";
        assert_eq!(check_cgroup_mkdir_format(host), Ok(()));
        let moved = host.replace("field:u64 id;\toffset:16", "field:u64 id;\toffset:20");
        let e = check_cgroup_mkdir_format(&moved).unwrap_err();
        assert!(e.contains("`u64 id` at offset 16"), "{e}");
        assert!(check_cgroup_mkdir_format("").is_err());
    }

    /// Seen as nobody: EPERM creating the task storage map is the missing
    /// capability, not a kernel before 5.11 (which answers EINVAL).
    #[test]
    fn task_storage_refused_for_permission_is_no_kernel_limit() {
        let refused = |errno| {
            let e = aya::EbpfError::MapError(aya::maps::MapError::CreateError {
                name: TASK_STORAGE_MAP.into(),
                io_error: std::io::Error::from_raw_os_error(errno),
            });
            map_creation_error(&e, Strategy::TpBtf)
        };
        let (reason, text) = refused(libc::EPERM);
        assert_eq!(reason, FailureReason::BpfPermissionDenied, "{text}");
        assert!(
            !text.contains("no task storage maps on this kernel"),
            "{text}"
        );
        let (reason, text) = refused(libc::EINVAL);
        assert_eq!(reason, FailureReason::KernelUnsupported);
        assert!(
            text.contains("no task storage maps on this kernel"),
            "{text}"
        );
    }

    #[test]
    fn reasons_from_errno() {
        assert_eq!(
            failure_of_errno(Some(libc::EPERM)),
            FailureReason::BpfPermissionDenied
        );
        assert_eq!(
            failure_of_errno(Some(libc::ENOENT)),
            FailureReason::KernelUnsupported
        );
        assert_eq!(
            failure_of_errno(Some(524)),
            FailureReason::KernelUnsupported
        );
        assert_eq!(failure_of_errno(None), FailureReason::LoadFailed);
        assert_eq!(
            FailureReason::BpfPermissionDenied.as_str(),
            "BPFPermissionDenied"
        );
    }

    #[test]
    fn capabilities() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(parse_cap_eff(status), Some(0x1ff_ffff_ffff));
        assert!(missing_capabilities(1 << CAP_SYS_ADMIN).is_empty());
        assert!(missing_capabilities((1 << CAP_BPF) | (1 << CAP_PERFMON)).is_empty());
        assert_eq!(missing_capabilities(1 << CAP_BPF), vec!["CAP_PERFMON"]);
        assert_eq!(missing_capabilities(0), vec!["CAP_BPF", "CAP_PERFMON"]);
    }

    #[test]
    fn seccomp_signature_found_once() {
        let mut before = vec![0u8; 256];
        let mut after = vec![0u8; 256];
        // Noise that changes between snapshots (a counter, a time).
        before[16] = 7;
        after[16] = 9;
        after[40..44].copy_from_slice(&2u32.to_ne_bytes()); // mode 0 -> 2 but no filter pointer
        after[96..100].copy_from_slice(&2u32.to_ne_bytes());
        after[100..104].copy_from_slice(&1u32.to_ne_bytes());
        after[104..112].copy_from_slice(&0xffff_8881_0000_1000u64.to_ne_bytes());
        assert_eq!(find_seccomp_mode(&before, &after), Ok(96));
        assert!(find_seccomp_mode(&before, &before).is_err());
        // A second match is refused, not guessed.
        after[160..164].copy_from_slice(&2u32.to_ne_bytes());
        after[168..176].copy_from_slice(&0xffff_8881_0000_2000u64.to_ne_bytes());
        assert!(find_seccomp_mode(&before, &after)
            .unwrap_err()
            .contains("ambiguous"));
    }

    #[test]
    fn stack_candidates_are_aligned_kernel_addresses() {
        let mut snap = vec![0u8; 64];
        snap[8..16].copy_from_slice(&0xffff_c900_0012_4000u64.to_ne_bytes()); // 16 KiB aligned
        snap[16..24].copy_from_slice(&0xffff_c900_0012_4008u64.to_ne_bytes()); // not aligned
        snap[24..32].copy_from_slice(&0x0000_7fff_0000_4000u64.to_ne_bytes()); // user address
        snap[40..48].copy_from_slice(&0xffff_8881_0000_8000u64.to_ne_bytes());
        assert_eq!(
            stack_candidates(&snap, 8),
            vec![(8, 0xffff_c900_0012_4000), (40, 0xffff_8881_0000_8000)]
        );
        assert_eq!(stack_candidates(&snap, 1).len(), 1);
    }

    #[test]
    fn errno_found_through_sources() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] std::io::Error);
        let e = Outer(std::io::Error::from_raw_os_error(libc::EPERM));
        assert_eq!(errno_in(&e), Some(libc::EPERM));
    }
}
