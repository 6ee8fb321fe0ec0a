use nodeproof::profile::filter::Arch;
use nodeproof::profile::lint::{lint_source, LintOptions, Runtime};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
struct Count;
static N: AtomicUsize = AtomicUsize::new(0);
static B: AtomicUsize = AtomicUsize::new(0);
unsafe impl GlobalAlloc for Count {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        N.fetch_add(1, Relaxed);
        B.fetch_add(l.size(), Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        N.fetch_add(1, Relaxed);
        B.fetch_add(n, Relaxed);
        System.realloc(p, l, n)
    }
}
#[global_allocator]
static A: Count = Count;
fn stat<F: FnMut()>(what: &str, n: usize, mut f: F) {
    f();
    let (n0, b0) = (N.load(Relaxed), B.load(Relaxed));
    let t = std::time::Instant::now();
    for _ in 0..n {
        f();
    }
    let el = t.elapsed() / n as u32;
    eprintln!(
        "{what:<30} {el:>10.1?}  allocs {:>6}  bytes {:>8}",
        (N.load(Relaxed) - n0) / n,
        (B.load(Relaxed) - b0) / n
    );
}
fn main() {
    let rt = if std::env::args().nth(1).as_deref() == Some("crio") {
        Runtime::Crio
    } else {
        Runtime::Containerd
    };
    let src = std::fs::read("/work/shared/seccomp-corpus/moby/default.json").unwrap();
    let opts = LintOptions {
        runtime: rt,
        no_new_privileges: false,
        arch: Arch::X86_64,
        check_listener: true,
    };
    let n: usize = std::env::args().nth(2).map_or(3000, |s| s.parse().unwrap());
    if std::env::args().nth(3).as_deref() == Some("polluted") {
        let (_, spec) = nodeproof::profile::lint::profile_and_filter(&src, &opts).unwrap();
        for _ in 0..300 {
            nodeproof::profile::compile::compile_with_libseccomp(&spec, Arch::X86_64).unwrap();
        }
        stat("lint after libseccomp", n, || {
            std::hint::black_box(lint_source("d.json", &src, &opts));
        });
        return;
    }
    if std::env::args().nth(3).as_deref() == Some("pf") {
        for _ in 0..n {
            std::hint::black_box(nodeproof::profile::lint::profile_and_filter(&src, &opts));
        }
        return;
    }
    if std::env::args().nth(3).as_deref() == Some("gen") {
        let (_, spec) = nodeproof::profile::lint::profile_and_filter(&src, &opts).unwrap();
        for _ in 0..n {
            std::hint::black_box(
                nodeproof::profile::bpfgen::generate(&spec, Arch::X86_64).unwrap(),
            );
        }
        return;
    }
    if std::env::args().nth(3).is_some() {
        stat("json parse", n, || {
            std::hint::black_box(nodeproof::profile::json::parse(&src).unwrap());
        });
        stat("parse..translate", n, || {
            std::hint::black_box(nodeproof::profile::lint::profile_and_filter(&src, &opts));
        });
        let (p, spec) = nodeproof::profile::lint::profile_and_filter(&src, &opts).unwrap();
        stat("bpfgen", n, || {
            std::hint::black_box(
                nodeproof::profile::bpfgen::generate(&spec, Arch::X86_64).unwrap(),
            );
        });
        stat("enosys", n, || {
            std::hint::black_box(nodeproof::profile::patchbpf::enosys_stub(&p, Arch::X86_64));
        });
        stat("lint", n, || {
            std::hint::black_box(lint_source("d.json", &src, &opts));
        });
        return;
    }
    let t = std::time::Instant::now();
    for _ in 0..n {
        std::hint::black_box(lint_source("d.json", &src, &opts));
    }
    eprintln!("{:?} per lint", t.elapsed() / n as u32);
}
