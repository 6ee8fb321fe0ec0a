//! Benchmark of `profile lint`, side by side in one run:
//! - lint + compile of Docker's default profile for its three x86 arches
//!   (CRI-O evaluates the template's archMap) and as containerd reads it;
//! - a directory of 1,000 profiles;
//! - `runc run` of the same default profile (the oracle this replaces), and the ratio;
//! - peak memory (max RSS) of this process.
//!
//! Run: `cargo xtask bench` (or `cargo bench -p nodeproof-e2e --bench profile_lint`).

use nodeproof_bpfgen::Native;
use nodeproof_seccomp::compiler::Compiler;
use std::time::{Duration, Instant};

use nodeproof::observe::profiles;
use nodeproof_bpfgen::libseccomp;
use nodeproof_e2e::splice::{self, SpliceOracle, Verdict};
use nodeproof_seccomp::filter::Arch;
use nodeproof_seccomp::lint::{lint_source, LintOptions, Outcome, Runtime};
use nodeproof_testkit::{require, Need};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn spread(v: &[Duration]) -> (Duration, Duration) {
    (*v.iter().min().unwrap(), *v.iter().max().unwrap())
}

fn time<F: FnMut()>(n: usize, mut f: F) -> Vec<Duration> {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect()
}

fn max_rss_kib() -> i64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    u.ru_maxrss
}

fn main() {
    // Docker's default profile is the corpus's: there is nothing to measure without it.
    let Some(granted) = require(&[Need::Corpus]) else {
        return;
    };
    let corpus = granted.corpus();
    let default = std::fs::read(corpus.join("moby/default.json")).expect("moby/default.json");
    let opts = |runtime| LintOptions {
        runtime,
        no_new_privileges: false,
        arch: Arch::X86_64,
        check_listener: true,
        ..Default::default()
    };

    // Warm up libseccomp's tables.
    for _ in 0..20 {
        lint_source("default.json", &default, &opts(Runtime::Crio), &Native);
    }
    let crio = lint_source("default.json", &default, &opts(Runtime::Crio), &Native);
    assert_eq!(crio.outcome, Outcome::Ok);
    assert_eq!(crio.architectures.len(), 3, "{:?}", crio.architectures);
    let t_crio = time(300, || {
        lint_source("default.json", &default, &opts(Runtime::Crio), &Native);
    });
    // The compile step alone, both ways, for the same filter.
    let (_, spec) = nodeproof_seccomp::lint::profile_and_filter(&default, &opts(Runtime::Crio))
        .expect("a filter");
    let t_native_compile = time(300, || {
        nodeproof_bpfgen::generate(&spec, Arch::X86_64).expect("native path");
    });
    let t_libseccomp = time(300, || {
        libseccomp::compile(&spec, Arch::X86_64).expect("compiles");
    });
    let (_, spec_native) =
        nodeproof_seccomp::lint::profile_and_filter(&default, &opts(Runtime::Containerd))
            .expect("a filter");
    let t_native_compile1 = time(300, || {
        nodeproof_bpfgen::generate(&spec_native, Arch::X86_64).expect("native path");
    });
    let t_libseccomp1 = time(300, || {
        libseccomp::compile(&spec_native, Arch::X86_64).expect("compiles");
    });
    let t_containerd = time(300, || {
        lint_source(
            "default.json",
            &default,
            &opts(Runtime::Containerd),
            &Native,
        );
    });

    // 1,000 profiles: the corpus, copied round-robin.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sources = Vec::new();
    for sub in std::fs::read_dir(corpus)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
    {
        for f in std::fs::read_dir(sub.path()).unwrap().flatten() {
            sources.push(std::fs::read(f.path()).unwrap());
        }
    }
    for i in 0..1000 {
        std::fs::write(
            dir.path().join(format!("p{i:04}.json")),
            &sources[i % sources.len()],
        )
        .unwrap();
    }
    let t_dir = time(5, || {
        let reports = profiles::lint_root(dir.path(), &opts(Runtime::Containerd));
        assert_eq!(reports.len(), 1000);
    });
    // The compile step of those 1,000 profiles, both ways (one thread).
    let specs: Vec<_> = (0..1000)
        .filter_map(|i| {
            nodeproof_seccomp::lint::filter_spec(
                &sources[i % sources.len()],
                &opts(Runtime::Containerd),
            )
        })
        .collect();
    let t_dir_native = time(3, || {
        for s in &specs {
            let _ = Native.compile(s, Arch::X86_64);
        }
    });
    let t_dir_libseccomp = time(3, || {
        for s in &specs {
            let _ = libseccomp::compile(s, Arch::X86_64);
        }
    });

    println!(
        "profile lint benchmark (release build, {} CPUs)",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let row = |what: &str, v: &[Duration]| {
        let (lo, hi) = spread(v);
        println!(
            "  {what:<58} median {:>10.3?}  [min {:.3?}, max {:.3?}, n={}]",
            median(v.to_vec()),
            lo,
            hi,
            v.len()
        );
    };
    row(
        "moby default, lint+compile, 3 x86 arches (--runtime crio)",
        &t_crio,
    );
    row(
        "  compile step: native generator (bpfgen)",
        &t_native_compile,
    );
    row(
        "  compile step: libseccomp rule adds + export",
        &t_libseccomp,
    );
    let with_libseccomp = |lint: &[Duration], native: &[Duration], lib: &[Duration]| {
        median(lint.to_vec()) - median(native.to_vec()) + median(lib.to_vec())
    };
    println!(
        "  {:<58} median {:>10.3?}  [derived: lint - native compile + libseccomp compile]",
        "  lint+compile as it was with libseccomp",
        with_libseccomp(&t_crio, &t_native_compile, &t_libseccomp)
    );
    row(
        "moby default, lint+compile, native arch (containerd)",
        &t_containerd,
    );
    row(
        "  compile step: native generator (bpfgen)",
        &t_native_compile1,
    );
    row(
        "  compile step: libseccomp rule adds + export",
        &t_libseccomp1,
    );
    println!(
        "  {:<58} median {:>10.3?}  [derived]",
        "  lint+compile as it was with libseccomp",
        with_libseccomp(&t_containerd, &t_native_compile1, &t_libseccomp1)
    );
    row("directory of 1,000 profiles", &t_dir);
    row(
        &format!(
            "  compile step of {} filters, compile() (native)",
            specs.len()
        ),
        &t_dir_native,
    );
    row(
        &format!("  compile step of {} filters, libseccomp", specs.len()),
        &t_dir_libseccomp,
    );
    println!(
        "  BPF instructions of moby default (3 arches, with runc's stub): {}",
        crio.instructions.unwrap_or(0)
    );

    // A run without runc measures the rest, and is counted as a skip.
    match require(splice::ORACLE) {
        None => println!("  runc comparison skipped (see the SKIPPED line)"),
        Some(_) => {
            let oracle = SpliceOracle::runc(splice::default_oracle_dir()).expect("oracle");
            let t_runc = time(7, || {
                let run = oracle.run(&default, false, &["/bin/true"]);
                assert_eq!(run.verdict, Verdict::Accepted);
            });
            row(
                "runc run of the same profile (/bin/true, NNP=false)",
                &t_runc,
            );
            let ratio = median(t_runc).as_secs_f64() / median(t_containerd).as_secs_f64();
            println!("  ratio runc run / nodeproof lint (containerd): {ratio:.0}x faster");
        }
    }
    println!("  peak RSS of this process: {} KiB", max_rss_kib());
}
