//! Syscall overhead of the tracer, side by side in one run: bare, an empty
//! tp_btf sys_enter/sys_exit pair (the floor of any tracepoint design), and
//! nodeproof's programs, on an unconfined and a confined getppid loop; and
//! the syscall recorder of `nodeproof record` loaded with this cgroup not
//! recorded ("record off": another cgroup is) and recording it ("record
//! on": personality's first argument watched, not getppid's; "record on,
//! watched": getppid's too, so that the loop's every call is a watched call
//! whose value is already kept).
//! Variants alternate round by round (these machines are noisy); the table
//! gives medians, the min–max spread, and per-round ratios to the floor.
//! The loop is timed in its thread's CPU time (CLOCK_THREAD_CPUTIME_ID, user +
//! system): on a machine shared with other builds, wall time also counts the
//! time the loop waited for its CPU, which is most of the spread. Each
//! figure of a round is the fastest of NP_BENCH_REPS loops: interference
//! (another build on the core, the host taking the vCPU) only ever adds time.
//!
//! `cargo bench -p nodeproof-trace --bench trace_overhead` (root or CAP_BPF+CAP_PERFMON).
//! Env: NP_BENCH_ROUNDS (default 9), NP_BENCH_ITERS (getppid calls per variant and round, default
//! 2000000), NP_BENCH_REPS (loops they are split into, default 5).

use libseccomp::{ScmpAction, ScmpFilterContext, ScmpSyscall};
use nodeproof_trace::record::{RecArch, Recorder, RecorderConfig};
use nodeproof_trace::{self as trace, Strategy, Tracer, TracerConfig};

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    Bare,
    Empty,
    Nodeproof(Strategy),
    RecordOff,
    RecordOn { watched: bool },
}

impl Variant {
    fn name(self) -> String {
        match self {
            Self::Bare => "bare".into(),
            Self::Empty => "empty pair".into(),
            Self::Nodeproof(s) => format!("nodeproof {s}"),
            Self::RecordOff => "record off".into(),
            Self::RecordOn { watched: false } => "record on".into(),
            Self::RecordOn { watched: true } => "record on, watched".into(),
        }
    }
}

/// Held only to keep the programs attached; dropping detaches.
enum Attached {
    None,
    Empty(#[allow(dead_code)] Box<aya::Ebpf>),
    Tracer(#[allow(dead_code)] Box<Tracer>),
    Recorder(#[allow(dead_code)] Box<Recorder>),
}

/// This process's cgroup2 id: the inode of its directory under the cgroup2
/// mount (the measured children are forked from it, into the same cgroup).
fn own_cgroup_id() -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let root = trace::attribution::cgroup2_mount(&mounts).expect("a cgroup2 mount");
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let path = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .expect("a cgroup2 line in /proc/self/cgroup");
    std::fs::metadata(format!("{root}{path}")).unwrap().ino()
}

/// The recorder with one slot: this process's cgroup in it (`on`), or an id
/// no cgroup has, so that the lookup misses as it does for an unrecorded
/// task; personality's first argument watched, and getppid's if `watched`.
fn recorder(on: bool, watched: bool) -> Recorder {
    let mut r = Recorder::start(&RecorderConfig::default()).expect("load the recorder");
    let slot = r.new_slot().unwrap();
    r.add_cgroup(slot, if on { own_cgroup_id() } else { u64::MAX - 1 })
        .unwrap();
    if watched {
        r.watch(RecArch::X86_64, libc::SYS_getppid as u32, 0b1)
            .unwrap();
    }
    r.watch(RecArch::X86_64, libc::SYS_personality as u32, 0b1)
        .unwrap();
    r
}

fn attach(v: Variant) -> Attached {
    match v {
        Variant::Bare => Attached::None,
        Variant::Empty => {
            let mut bpf = aya::Ebpf::load(trace::bpf::EMPTY_PAIR).expect("load empty pair");
            let btf = aya::Btf::from_sys_fs().expect("kernel BTF");
            for (prog, tp) in [
                ("np_empty_enter", "sys_enter"),
                ("np_empty_exit", "sys_exit"),
            ] {
                let p: &mut aya::programs::BtfTracePoint =
                    bpf.program_mut(prog).unwrap().try_into().unwrap();
                p.load(tp, &btf).expect("load");
                p.attach().expect("attach");
            }
            Attached::Empty(Box::new(bpf))
        }
        Variant::Nodeproof(s) => Attached::Tracer(Box::new(
            Tracer::start(&TracerConfig {
                strategy: Some(s),
                ..TracerConfig::default()
            })
            .expect("start tracer"),
        )),
        Variant::RecordOff => Attached::Recorder(Box::new(recorder(false, false))),
        Variant::RecordOn { watched } => Attached::Recorder(Box::new(recorder(true, watched))),
    }
}

/// ns per getppid in a fresh child pinned to the last CPU, confined or not.
fn measure(confined: bool, iters: u64) -> f64 {
    let mut fds = [0; 2];
    // SAFETY: pipe/fork/read/waitpid with valid arguments; the child only loops and exits.
    unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        let pid = libc::fork();
        if pid == 0 {
            let ncpu = libc::sysconf(libc::_SC_NPROCESSORS_ONLN).max(1) as usize;
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(ncpu - 1, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
            if confined {
                // A filter that allows everything this loop does: only the bookkeeping costs.
                let mut f = ScmpFilterContext::new(ScmpAction::Allow).unwrap();
                f.add_rule(
                    ScmpAction::Errno(libc::EPERM),
                    ScmpSyscall::from_name("reboot").unwrap(),
                )
                .unwrap();
                f.load().unwrap();
            }
            for _ in 0..iters / 10 {
                libc::getppid();
            }
            let t = thread_cpu_ns();
            for _ in 0..iters {
                libc::getppid();
            }
            let ns = (thread_cpu_ns() - t) as f64 / iters as f64;
            libc::write(fds[1], (&ns as *const f64).cast(), 8);
            libc::_exit(0);
        }
        let mut ns = 0f64;
        assert_eq!(libc::read(fds[0], (&mut ns as *mut f64).cast(), 8), 8);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
        libc::close(fds[0]);
        libc::close(fds[1]);
        ns
    }
}

/// This thread's CPU time (user + system) in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec for the kernel to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "CLOCK_THREAD_CPUTIME_ID");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo test --benches` runs bench targets with no `--bench`: stay quick then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("trace_overhead: run with `cargo bench` to measure");
        return;
    }
    let Some(_) = nodeproof_testkit::require(&[nodeproof_testkit::TRACING]) else {
        return;
    };
    let rounds = env("NP_BENCH_ROUNDS", 9) as usize;
    let iters = env("NP_BENCH_ITERS", 2_000_000);
    let reps = env("NP_BENCH_REPS", 5).max(1);
    let fastest = |confined| {
        (0..reps)
            .map(|_| measure(confined, iters / reps))
            .fold(f64::INFINITY, f64::min)
    };
    let mut variants = vec![
        Variant::Bare,
        Variant::Empty,
        Variant::Nodeproof(Strategy::TpBtf),
        Variant::RecordOff,
        Variant::RecordOn { watched: false },
        Variant::RecordOn { watched: true },
    ];
    if std::env::var_os("NP_BENCH_TRACEPOINT").is_some() {
        variants.push(Variant::Nodeproof(Strategy::Tracepoint));
    }
    // samples[variant][confined] = ns per call, one per round
    let mut samples = vec![[Vec::new(), Vec::new()]; variants.len()];
    for round in 0..rounds {
        // Rotate the order each round so drift does not favour one variant.
        for k in 0..variants.len() {
            let i = (k + round) % variants.len();
            let attached = attach(variants[i]);
            samples[i][0].push(fastest(false));
            samples[i][1].push(fastest(true));
            drop(attached);
        }
    }
    let empty = variants.iter().position(|v| *v == Variant::Empty).unwrap();
    println!("getppid, {rounds} rounds × {iters} calls (fastest of {reps} loops), variants alternated; thread CPU ns/call median [min–max]; ratio = median of per-round ratios to the empty pair [min–max]");
    for (c, label) in ["unconfined", "confined"].iter().enumerate() {
        println!("\n{label}:");
        for (i, v) in variants.iter().enumerate() {
            let mut s = samples[i][c].clone();
            let (lo, hi) = (
                s.iter().cloned().fold(f64::INFINITY, f64::min),
                s.iter().cloned().fold(0.0, f64::max),
            );
            let med = median(&mut s);
            let mut ratios: Vec<f64> = samples[i][c]
                .iter()
                .zip(&samples[empty][c])
                .map(|(a, b)| a / b)
                .collect();
            let (rlo, rhi) = (
                ratios.iter().cloned().fold(f64::INFINITY, f64::min),
                ratios.iter().cloned().fold(0.0, f64::max),
            );
            let rmed = median(&mut ratios);
            println!(
                "  {:<22} {:>7.1} ns [{:>6.1}–{:>6.1}]   {:>5.3}× [{:.3}–{:.3}]",
                v.name(),
                med,
                lo,
                hi,
                rmed,
                rlo,
                rhi
            );
        }
    }
}
