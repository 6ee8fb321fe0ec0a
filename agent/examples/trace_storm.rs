//! Denial storm: forked workers call a denied mkdir as fast as they can for
//! D seconds while the tracer runs in this process, rendering every delivered
//! sample as JSON (to a sink). Prints the workers' own call counts against the
//! exact in-kernel counts, samples and drops, and this process's CPU and RSS.
//! `cargo run --release --example trace_storm -- [SECS] [WORKERS]`

use libseccomp::{ScmpAction, ScmpFilterContext, ScmpSyscall};
use nodeproof_trace::{
    self, Action, CgroupResolver, EventSource, NoPodLookup, OutputFormat, TraceOptions, Tracer,
    TracerConfig,
};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

fn cpu_secs() -> f64 {
    // SAFETY: getrusage with a valid pointer. RUSAGE_SELF excludes the forked workers.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .unwrap_or(0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().map_or(10.0, |s| s.parse().unwrap());
    let workers: usize = args.next().map_or(2, |s| s.parse().unwrap());
    let mut tracer = Tracer::start(&TracerConfig::default()).expect("start tracer");
    let mut pids = Vec::new();
    let mut pipes = Vec::new();
    for _ in 0..workers {
        let mut fds = [0; 2];
        // SAFETY: pipe/fork; the worker only loops on a syscall and writes its count.
        unsafe {
            libc::pipe(fds.as_mut_ptr());
            let pid = libc::fork();
            if pid == 0 {
                let mut f = ScmpFilterContext::new(ScmpAction::Allow).unwrap();
                f.add_rule(
                    ScmpAction::Errno(libc::EPERM),
                    ScmpSyscall::from_name("mkdir").unwrap(),
                )
                .unwrap();
                f.load().unwrap();
                let p = c"/nonexistent-nodeproof/x";
                let end = Instant::now() + Duration::from_secs_f64(secs);
                let mut n: u64 = 0;
                while Instant::now() < end {
                    for _ in 0..1000 {
                        libc::syscall(libc::SYS_mkdir, p.as_ptr(), 0o755);
                    }
                    n += 1000;
                }
                libc::write(fds[1], (&n as *const u64).cast(), 8);
                libc::_exit(0);
            }
            pids.push(pid as u32);
            pipes.push(fds);
        }
    }
    let cpu0 = cpu_secs();
    let t0 = Instant::now();
    let opts = TraceOptions {
        duration: Some(Duration::from_secs_f64(secs + 0.5)),
        format: OutputFormat::Json,
        ..TraceOptions::default()
    };
    let mut sink = std::io::sink();
    let summary = nodeproof_trace::run_with(
        &mut tracer,
        &opts,
        &mut sink,
        &AtomicBool::new(false),
        CgroupResolver::host(),
        &NoPodLookup,
    )
    .unwrap();
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_secs() - cpu0;
    let rss = status_kib("VmRSS:");
    let hwm = status_kib("VmHWM:");
    let mut made = 0u64;
    let mut counted = 0u64;
    for (pid, fds) in pids.iter().zip(&pipes) {
        let mut n = 0u64;
        // SAFETY: reading the worker's count and reaping it.
        unsafe {
            libc::read(fds[0], (&mut n as *mut u64).cast(), 8);
            libc::waitpid(*pid as i32, std::ptr::null_mut(), 0);
        }
        made += n;
        counted += summary.count(*pid, libc::SYS_mkdir as i32, libc::EPERM, Action::Errno);
    }
    let st = tracer.stats().unwrap();
    println!(
        "storm: {workers} workers × {secs} s: {made} denials made ({:.2} M/s), {counted} counted in kernel ({}), samples {} delivered / {} dropped (rate limit {}, ring {}), lost counts {}",
        made as f64 / secs / 1e6,
        if made == counted { "exact" } else { "MISMATCH" },
        st.samples,
        st.dropped(),
        st.dropped_ratelimit,
        st.dropped_ringbuf,
        st.lost_counts
    );
    println!(
        "agent: {:.3} CPU-s over {:.1} s = {:.1}% of a core; RSS {} KiB now, {} KiB peak; strategy {}",
        cpu,
        wall,
        100.0 * cpu / wall,
        rss,
        hwm,
        tracer.strategy()
    );
    std::process::exit(i32::from(made != counted));
}
