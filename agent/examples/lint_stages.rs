//! Where one profile's lint spends its time and allocations, stage by stage:
//! a profiling aid for `cargo xtask bench profile_lint` (run it under `perf record` or
//! `valgrind --tool=callgrind` for instruction counts).
//!
//! `cargo run --release -p nodeproof --example lint_stages -- PROFILE [containerd|crio] [N]`

use nodeproof_bpfgen::Native;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use nodeproof_bpfgen as bpfgen;
use nodeproof_seccomp::filter::Arch;
use nodeproof_seccomp::lint::{lint_source, profile_and_filter, LintOptions, Runtime};
use nodeproof_seccomp::{json, patchbpf};

/// The system allocator, counting calls and bytes.
struct Counting;
static CALLS: AtomicUsize = AtomicUsize::new(0);
static BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed through to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        CALLS.fetch_add(1, Relaxed);
        BYTES.fetch_add(l.size(), Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        CALLS.fetch_add(1, Relaxed);
        BYTES.fetch_add(n, Relaxed);
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn stage(what: &str, n: u32, mut f: impl FnMut()) {
    f();
    let (calls, bytes) = (CALLS.load(Relaxed), BYTES.load(Relaxed));
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    let per = t.elapsed() / n;
    let calls = (CALLS.load(Relaxed) - calls) / n as usize;
    let bytes = (BYTES.load(Relaxed) - bytes) / n as usize;
    println!("{what:<34} {per:>10.1?}  {calls:>6} allocations  {bytes:>8} bytes");
}

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: lint_stages PROFILE [containerd|crio] [N]");
        std::process::exit(2);
    };
    let runtime = match args.next().as_deref() {
        Some("crio") => Runtime::Crio,
        _ => Runtime::Containerd,
    };
    let n: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1000);
    let src = std::fs::read(&path).unwrap_or_else(|e| {
        eprintln!("{path}: {e}");
        std::process::exit(2);
    });
    let opts = LintOptions {
        runtime,
        arch: Arch::X86_64,
        ..LintOptions::default()
    };
    let Some((profile, spec)) = profile_and_filter(&src, &opts) else {
        eprintln!("{path}: no filter to compile");
        std::process::exit(1);
    };
    println!("{path} ({runtime:?}), mean of {n}");
    stage("JSON parse", n, || drop(json::parse(&src)));
    stage("parse, decode, translate", n, || {
        drop(profile_and_filter(&src, &opts))
    });
    stage("compile (native generator)", n, || {
        drop(bpfgen::generate(&spec, Arch::X86_64))
    });
    stage("runc's ENOSYS stub", n, || {
        drop(patchbpf::enosys_stub(&profile))
    });
    stage("whole lint", n, || {
        drop(lint_source(&path, &src, &opts, &Native))
    });
}
