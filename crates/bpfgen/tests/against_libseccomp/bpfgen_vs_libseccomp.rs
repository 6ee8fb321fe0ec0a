//! The native generator (`nodeproof_bpfgen::generate`) against libseccomp itself: for
//! the project's own profiles, every corpus profile (where the corpus is
//! present) and thousands of pseudo-random filters, the same program
//! instruction for instruction, or the same refusal.

use nodeproof_bpfgen::libseccomp::compile as compile_with_libseccomp;
use nodeproof_bpfgen::{generate, GenError};
use nodeproof_seccomp::cbpf::SockFilter;
use nodeproof_seccomp::compiler::CompileError;
use nodeproof_seccomp::filter::{Action, Arch, CmpOp, Cond, FilterSpec, Rule, RuleOrigin};
use nodeproof_seccomp::lint::{filter_spec, LintOptions, Runtime};
use nodeproof_seccomp::syscalls::{resolve_syscall, syscall_name, Libseccomp};
use nodeproof_testkit::{own_profiles_dir, profiles_in, require, Need};

fn show(p: &[SockFilter], i: usize) -> String {
    p.get(i).map_or_else(
        || "(end)".to_string(),
        |f| {
            format!(
                "code {:#06x} jt {:3} jf {:3} k {:#010x}",
                f.code, f.jt, f.jf, f.k
            )
        },
    )
}

/// A readable account of the first instruction where the programs differ.
fn first_mismatch(ours: &[SockFilter], theirs: &[SockFilter]) -> Option<String> {
    let i = (0..ours.len().max(theirs.len())).find(|&i| ours.get(i) != theirs.get(i))?;
    let mut s = format!(
        "programs differ at instruction {i} (native {} insns, libseccomp {} insns)\n",
        ours.len(),
        theirs.len()
    );
    // BPFGEN_FULL=1 shows both programs whole.
    let range = if std::env::var_os("BPFGEN_FULL").is_some() {
        0..ours.len().max(theirs.len())
    } else {
        i.saturating_sub(3)..(i + 4)
    };
    for j in range {
        s += &format!(
            "{}{j:4}: native {} | libseccomp {}\n",
            if j == i { ">" } else { " " },
            show(ours, j),
            show(theirs, j)
        );
    }
    Some(s)
}

/// The filter on a few lines, for failure messages.
fn brief(spec: &FilterSpec) -> String {
    let mut s = format!("default {} arches {:?}\n", spec.default_action, spec.arches);
    for r in &spec.rules {
        s += &format!("  {} {} {:?}\n", r.syscall, r.action, r.conds);
    }
    s
}

#[derive(Debug, PartialEq, Eq)]
enum Path2 {
    Native,
    Fallback,
    /// libseccomp would never return (it corrupts a tree level into a cycle).
    Loops,
}

/// Compare both compilers on one filter; panics with `what` and a diff.
fn check(spec: &FilterSpec, native: Arch, what: &str) -> Path2 {
    let ours = generate(spec, native);
    if std::env::var_os("BPFGEN_TRACE").is_some() {
        eprintln!("native generator done");
    }
    if let Err(GenError::Refused(CompileError::RuleAddLoops { .. } | CompileError::ExportLoops)) =
        ours
    {
        return Path2::Loops;
    }
    match (ours, compile_with_libseccomp(spec, native)) {
        (Err(GenError::Unsupported { .. }), _) => Path2::Fallback,
        (Ok(ours), Ok(theirs)) => {
            if let Some(diff) = first_mismatch(&ours.program, &theirs.program) {
                panic!("{what} (native {native}):\n{diff}\nspec: {}", brief(spec));
            }
            assert_eq!(ours, theirs, "{what} (native {native})");
            Path2::Native
        }
        (Err(GenError::Refused(ours)), Err(theirs)) => {
            assert_eq!(ours, theirs, "{what} (native {native}): different refusals");
            Path2::Native
        }
        (ours, theirs) => panic!(
            "{what} (native {native}): native {:?} but libseccomp {:?}\nspec: {}",
            ours.map(|c| c.program.len()),
            theirs.map(|c| c.program.len()),
            brief(spec)
        ),
    }
}

const ARCH_SETS: [&[Arch]; 4] = [
    &[],
    &[Arch::X86_64, Arch::X86, Arch::X32],
    &[Arch::X86_64, Arch::X32],
    &[Arch::X86_64, Arch::X86],
];

/// Both compilers on every filter `files` yield (each runtime, mode, native
/// arch and arch set): the number compared, and the (file, mode) pairs that
/// yield no filter.
fn compare_profiles(files: &[std::path::PathBuf]) -> (usize, Vec<String>) {
    let mut compared = 0;
    let mut no_filter = Vec::new();
    for f in files {
        let src = std::fs::read(f).unwrap();
        for runtime in [Runtime::Containerd, Runtime::Crio] {
            for nnp in [false, true] {
                for native in [Arch::X86_64, Arch::X86] {
                    let opts = LintOptions {
                        runtime,
                        no_new_privileges: nnp,
                        arch: native,
                        check_listener: false,
                        oci_runtime: Default::default(),
                        bounding_set: None,
                    };
                    let what = format!("{} ({runtime:?}, nnp={nnp})", f.display());
                    let Some(spec) = filter_spec(&src, &opts) else {
                        no_filter.push(format!("{what}, native {native}"));
                        continue;
                    };
                    assert_eq!(check(&spec, native, &what), Path2::Native, "{what}");
                    for set in ARCH_SETS {
                        let s = FilterSpec {
                            arches: set.to_vec(),
                            ..spec.clone()
                        };
                        let what = format!("{what}, arches {set:?}");
                        assert_eq!(check(&s, native, &what), Path2::Native, "{what}");
                        compared += 1;
                    }
                }
            }
        }
    }
    (compared, no_filter)
}

/// profiles/ holds profiles that runc accepts: each yields a filter in every
/// mode, so every combination is compared.
#[test]
fn own_profiles_compile_identically() {
    let files = profiles_in(&own_profiles_dir());
    assert!(
        !files.is_empty(),
        "no profiles under {}",
        own_profiles_dir().display()
    );
    let (compared, no_filter) = compare_profiles(&files);
    assert!(no_filter.is_empty(), "no filter for {no_filter:?}");
    assert_eq!(compared, files.len() * 2 * 2 * 2 * ARCH_SETS.len());
}

#[test]
fn corpus_profiles_compile_identically() {
    let Some(granted) = require(&[Need::Corpus]) else {
        return;
    };
    let (compared, _) = compare_profiles(&profiles_in(granted.corpus()));
    eprintln!("{compared} corpus filters identical");
    assert!(compared > 100, "{compared}");
}

/// xorshift64*: reproducible without a dependency (the binary's other
/// modules draw from it too).
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len() as u64) as usize]
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn random_action(r: &mut Rng) -> Action {
    match r.below(12) {
        0 => Action::KillThread,
        1 => Action::KillProcess,
        2 => Action::Trap,
        3 | 4 => Action::Errno(if r.chance(3) {
            r.pick(&[4095, 5000, 65535])
        } else {
            r.below(4) as u16
        }),
        5 => Action::Trace(r.below(3) as u16),
        6 => Action::Log,
        7 => Action::Notify,
        _ => Action::Allow,
    }
}

fn random_value(r: &mut Rng) -> u64 {
    match r.below(6) {
        0 | 1 => r.below(4),
        2 => (r.below(3) << 32) | r.below(4),
        3 => u64::MAX - r.below(2),
        4 => 0xffff_ffff,
        _ => r.next(),
    }
}

fn random_cond(r: &mut Rng) -> Cond {
    let op = r.pick(&[
        CmpOp::Ne,
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Eq,
        CmpOp::Eq,
        CmpOp::Ge,
        CmpOp::Gt,
        CmpOp::MaskedEq,
    ]);
    let value = if op == CmpOp::MaskedEq {
        let any = r.next();
        r.pick(&[0, 0xff, 0xffff_ffff, 0xffff_0000_0000_0000, u64::MAX, any])
    } else {
        random_value(r)
    };
    Cond {
        index: if r.chance(1) { 6 } else { r.below(6) as u8 },
        op,
        value,
        value_two: random_value(r),
    }
}

fn random_spec(r: &mut Rng, names: &[String]) -> (FilterSpec, Arch) {
    // A small pool per filter, so that syscalls repeat and rules merge.
    let pool: Vec<&String> = (0..1 + r.below(10))
        .map(|_| &names[r.below(names.len() as u64) as usize])
        .collect();
    let default_action = random_action(r);
    let rules = (0..r.below(40))
        .map(|i| {
            let nconds = match r.below(10) {
                0..=3 => 0,
                4..=6 => 1,
                7 => 2,
                8 => 3,
                _ => r.below(8) as usize,
            };
            // Same index several times is a libseccomp refusal; keep it rare.
            let mut conds: Vec<Cond> = Vec::new();
            for k in 0..nconds {
                let mut c = random_cond(r);
                // libseccomp's tree merge is exponential in chained range
                // checks; long rules compare for equality only.
                if k >= 3 && !matches!(c.op, CmpOp::Eq | CmpOp::MaskedEq | CmpOp::Ne) {
                    c.op = CmpOp::Eq;
                }
                if !r.chance(3) {
                    while conds.iter().any(|x| x.index == c.index) && conds.len() < 6 {
                        c.index = r.below(6) as u8;
                    }
                }
                conds.push(c);
            }
            Rule {
                syscall: r.pick(&pool).clone(),
                // Mostly one action per filter, so merges are not all conflicts.
                action: if r.chance(70) {
                    Action::Errno(1)
                } else {
                    random_action(r)
                },
                conds,
                origin: RuleOrigin {
                    pointer: format!("/syscalls/{i}").into(),
                    name_index: 0,
                },
            }
        })
        .collect();
    let mut arches = Vec::new();
    for _ in 0..r.below(4) {
        arches.push(if r.chance(85) {
            r.pick(&[Arch::X86_64, Arch::X86, Arch::X32])
        } else {
            r.pick(&Arch::ALL)
        });
    }
    let native = match r.below(10) {
        0 => Arch::X86,
        1 => Arch::X32,
        _ => Arch::X86_64,
    };
    (
        FilterSpec {
            default_action,
            arches,
            rules,
            listener_path: None,
            libseccomp: Libseccomp::V2_5_4,
        },
        native,
    )
}

fn syscall_names() -> Vec<String> {
    let mut names: Vec<String> = (0..460)
        .filter_map(|n| syscall_name(n, Arch::X86_64))
        .collect();
    // Pseudo syscalls on x86_64, the multiplexed families on x86, and an unknown name.
    for extra in [
        "socketcall",
        "ipc",
        "socket",
        "accept",
        "recvmmsg",
        "sendmmsg",
        "semop",
        "shmget",
        "mmap2",
        "no_such_syscall",
    ] {
        for _ in 0..20 {
            names.push(extra.to_string());
        }
    }
    names
}

#[test]
fn random_filters_compile_identically() {
    let names = syscall_names();
    let cases: u64 = std::env::var("BPFGEN_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4000);
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut native, mut fallback, mut loops) = (0, 0, 0);
    let trace = std::env::var_os("BPFGEN_TRACE").is_some();
    for case in 0..cases {
        let (spec, arch) = random_spec(&mut r, &names);
        if trace {
            eprintln!("case {case}: {}", brief(&spec));
        }
        match check(&spec, arch, &format!("random case {case}")) {
            Path2::Native => native += 1,
            Path2::Fallback => fallback += 1,
            Path2::Loops => loops += 1,
        }
    }
    eprintln!(
        "{cases} random filters: {native} identical on the native path, {fallback} fell back to libseccomp, {loops} where libseccomp never returns"
    );
    assert!(native * 100 >= cases * 95, "{native}/{cases} native");
}

/// Programs far beyond 255 instructions: long jumps and copied returns.
#[test]
fn long_jumps_compile_identically() {
    let names: Vec<String> = (0..460)
        .filter_map(|n| syscall_name(n, Arch::X86_64))
        .collect();
    let mut r = Rng(7);
    for case in 0..24 {
        let conditional = case % 2 == 1;
        let rules = names
            .iter()
            .enumerate()
            .map(|(i, name)| Rule {
                syscall: name.clone(),
                action: r.pick(&[
                    Action::Allow,
                    Action::Errno(1),
                    Action::Trap,
                    Action::KillProcess,
                    Action::Log,
                ]),
                conds: if conditional && i % 3 == 0 {
                    vec![Cond {
                        index: (i % 6) as u8,
                        op: r.pick(&[CmpOp::Eq, CmpOp::Gt, CmpOp::Ne, CmpOp::MaskedEq]),
                        value: (i as u64) << (case % 40),
                        value_two: i as u64,
                    }]
                } else {
                    vec![]
                },
                origin: RuleOrigin {
                    pointer: format!("/syscalls/{i}").into(),
                    name_index: 0,
                },
            })
            .collect();
        let spec = FilterSpec {
            default_action: Action::Errno(38),
            arches: ARCH_SETS[case % ARCH_SETS.len()].to_vec(),
            rules,
            listener_path: None,
            libseccomp: Libseccomp::V2_5_4,
        };
        let native = if case % 5 == 4 {
            Arch::X86
        } else {
            Arch::X86_64
        };
        let long = generate(&spec, native).map(|c| c.program.len());
        assert!(
            matches!(long, Ok(n) if n > 300),
            "long case {case}: {long:?}"
        );
        assert_eq!(
            check(&spec, native, &format!("long case {case}")),
            Path2::Native
        );
    }
}

/// The shapes where native generators most often differ from libseccomp: a 64-bit EQ combined with a second
/// condition (every operator, 32- and 64-bit values, either order), one to
/// three such rules per syscall, on arch sets that mix 32- and 64-bit arches.
fn wide_eq_specs(rules_per_syscall: u64, syscalls: &[String], arches: &[Arch]) -> Vec<FilterSpec> {
    let seconds = [
        (CmpOp::Eq, 7),
        (CmpOp::Eq, 0x2_0000_0003),
        (CmpOp::Ne, 5),
        (CmpOp::Gt, 0x1_0000_0000),
        (CmpOp::Ge, 9),
        (CmpOp::Lt, 0x3_0000_0000),
        (CmpOp::Le, 2),
        (CmpOp::MaskedEq, 0xff),
        (CmpOp::MaskedEq, 0xffff_0000_0000),
    ];
    let mut specs = Vec::new();
    for (op, value) in seconds {
        for wide_first in [true, false] {
            let conds = |i: u64| {
                let wide = Cond {
                    index: 0,
                    op: CmpOp::Eq,
                    value: 0x1_0000_0000 + i,
                    value_two: 0,
                };
                let other = Cond {
                    index: 1,
                    op,
                    value,
                    value_two: 0x0f,
                };
                if wide_first {
                    vec![wide, other]
                } else {
                    vec![other, wide]
                }
            };
            let rules = syscalls
                .iter()
                .enumerate()
                // Values differ between syscalls: libseccomp shares identical blocks.
                .flat_map(|(s, name)| (0..rules_per_syscall).map(move |i| (name, s as u64 * 8 + i)))
                .enumerate()
                .map(|(k, (name, i))| Rule {
                    syscall: name.clone(),
                    action: if k % 3 == 2 && rules_per_syscall > 3 {
                        Action::Errno(1)
                    } else {
                        Action::Allow
                    },
                    conds: conds(i),
                    origin: RuleOrigin {
                        pointer: format!("/syscalls/{k}").into(),
                        name_index: 0,
                    },
                })
                .collect();
            specs.push(FilterSpec {
                default_action: Action::KillProcess,
                arches: arches.to_vec(),
                rules,
                listener_path: None,
                libseccomp: Libseccomp::V2_5_4,
            });
        }
    }
    specs
}

const MIXED_ARCH_SETS: [&[Arch]; 5] = [
    &[Arch::X86_64, Arch::X86],
    &[Arch::X86_64, Arch::X86, Arch::X32],
    &[Arch::X86],
    &[Arch::X86, Arch::X86_64],
    &[Arch::X32, Arch::X86],
];

/// Small filters of those shapes: the same program from both compilers.
/// Shape 8 (64-bit EQ, then GE 9 on another argument) on x86_64 + x86 gives
/// 74 instructions natively and 75 from libseccomp: the native generator
/// reaches the hi-word EQ after the hi-word GT through a block it shares
/// with the x86 section (load included), libseccomp emits it inline.
#[test]
fn wide_eq_with_a_second_condition_compiles_identically() {
    let names: Vec<String> = ["acct", "ioctl", "socket"].map(String::from).to_vec();
    let mut checked = 0;
    for arches in MIXED_ARCH_SETS {
        for per in 1..=3 {
            for (k, spec) in wide_eq_specs(per, &names, arches).iter().enumerate() {
                let what = format!("shape {k}, {per} per syscall, arches {arches:?}");
                assert_eq!(check(spec, Arch::X86_64, &what), Path2::Native, "{what}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, MIXED_ARCH_SETS.len() * 3 * 18);
}

/// The same shapes on one rule per syscall, as many syscalls as it takes to
/// reach either side of the kernel's 4096: identical programs, so the same
/// count, at every size next to the boundary.
#[test]
fn wide_eq_with_a_second_condition_compiles_identically_at_4096() {
    // Syscalls with a real number on every arch of the sets (no socketcall/ipc multiplexing).
    let all: Vec<String> = (0..460)
        .filter_map(|n| syscall_name(n, Arch::X86_64))
        .filter(|n| {
            [Arch::X86, Arch::X32]
                .iter()
                .all(|&a| resolve_syscall(n, a).is_some_and(|nr| nr >= 0))
        })
        .collect();
    let mut at_boundary = 0;
    for arches in [MIXED_ARCH_SETS[0], MIXED_ARCH_SETS[1]] {
        // Shape 8 is the one item 7 was found with.
        for shape in [0, 3, 8, 9, 14] {
            let spec = |n: usize| wide_eq_specs(3, &all[..n], arches).swap_remove(shape);
            // The boundary is searched with the native generator: a libseccomp
            // export of 1,400 rules takes seconds, and a native count that is
            // off would show at lo or hi, where both compilers are compared.
            let len = |n: usize| {
                generate(&spec(n), Arch::X86_64)
                    .map(|c| c.program.len())
                    .unwrap()
            };
            let (mut lo, mut hi) = (1, all.len());
            if len(hi) <= 4096 {
                continue;
            }
            while hi - lo > 1 {
                let mid = (lo + hi) / 2;
                if len(mid) <= 4096 {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            for n in [lo, hi] {
                let what = format!("{n} syscalls, shape {shape}, arches {arches:?}");
                assert_eq!(
                    check(&spec(n), Arch::X86_64, &what),
                    Path2::Native,
                    "{what}"
                );
                at_boundary += 1;
            }
        }
    }
    assert!(at_boundary >= 10, "{at_boundary} filters reached 4096");
}

/// The bpfgen_vs_libseccomp fuzz target's hang (its input, as the target
/// prints it with NP_FUZZ_TIMES=1): two accept rules with a GT, a GE and a
/// MASKED_EQ condition on riscv64 + x86 (each twice) on an x86_64 host.
/// Both libseccomp 2.5.4 and the native generator walked a level of the
/// rule tree that links back into itself, forever; the native generator now
/// notices the loop and says runc init would hang, instead of hanging.
#[test]
fn a_looping_rule_tree_is_refused_not_hung() {
    let rule = |pointer: &str, ge: u64, masked: (u64, u64)| Rule {
        syscall: "accept".into(),
        action: Action::KillThread,
        conds: vec![
            Cond {
                index: 3,
                op: CmpOp::Gt,
                value: 4294967295,
                value_two: 4294967295,
            },
            Cond {
                index: 0,
                op: CmpOp::Ge,
                value: ge,
                value_two: 7274426052228936691,
            },
            Cond {
                index: 5,
                op: CmpOp::MaskedEq,
                value: masked.0,
                value_two: masked.1,
            },
        ],
        origin: RuleOrigin {
            pointer: pointer.into(),
            name_index: 0,
        },
    };
    let base = filter_spec(
        br#"{"defaultAction": "SCMP_ACT_TRAP"}"#,
        &LintOptions::default(),
    )
    .expect("a filter spec");
    let spec = FilterSpec {
        default_action: Action::Trap,
        arches: vec![Arch::Riscv64, Arch::X86, Arch::X86, Arch::Riscv64],
        rules: vec![
            rule(
                "/syscalls/0",
                17105468536813613919,
                (18446534355842002431, 12884901891),
            ),
            rule(
                "/syscalls/1",
                17105468536813613929,
                (17578654779293396479, 7995001992608216051),
            ),
        ],
        ..base
    };
    let started = std::time::Instant::now();
    let got = generate(&spec, Arch::X86_64);
    assert!(
        matches!(got, Err(GenError::Refused(CompileError::ExportLoops))),
        "{got:?} after {:?}",
        started.elapsed()
    );
}

/// The fuzzer's `bpfgen_vs_libseccomp-libseccomp-loops-3`
/// (fuzz/open-findings/README.md): libseccomp 2.5.4 never returns from it
/// (an endless `lvl_prv` walk in `_db_tree_put`), so it is not compared with
/// libseccomp here. The native generator must answer, with the refusal of
/// the first rule it cannot add.
#[test]
fn a_rule_set_libseccomp_never_returns_from_is_answered_natively() {
    let cond = |index, op, value, value_two| Cond {
        index,
        op,
        value,
        value_two,
    };
    let rule = |i: usize, syscall: &str, action, conds| Rule {
        syscall: syscall.into(),
        action,
        conds,
        origin: RuleOrigin {
            pointer: format!("/syscalls/{i}").into(),
            name_index: 0,
        },
    };
    let base = filter_spec(
        br#"{"defaultAction": "SCMP_ACT_TRAP"}"#,
        &LintOptions::default(),
    )
    .expect("a filter spec");
    let spec = FilterSpec {
        default_action: Action::Trace(15677),
        arches: vec![Arch::Mipsel64N32, Arch::Arm, Arch::Riscv64, Arch::X32],
        rules: vec![
            rule(
                0,
                "sendmmsg",
                Action::KillProcess,
                vec![
                    cond(2, CmpOp::Lt, 4, 12884901891),
                    cond(3, CmpOp::Ge, 4294967295, 0),
                    cond(1, CmpOp::Le, 8589934593, 0),
                    cond(5, CmpOp::Eq, 4294967295, 4294967295),
                ],
            ),
            rule(
                1,
                "sendmmsg",
                Action::KillProcess,
                vec![
                    cond(2, CmpOp::Lt, 4, 12884901891),
                    cond(3, CmpOp::Lt, 14250864334433484799, 0),
                    cond(1, CmpOp::Le, 8589934595, 18446744073709551614),
                ],
            ),
            rule(
                2,
                "socketcall",
                Action::Trace(12349),
                vec![
                    cond(1, CmpOp::Ge, 4294967295, 12884901891),
                    cond(2, CmpOp::Lt, 1, 14250864334433484799),
                    cond(1, CmpOp::Eq, 4294967295, 18446744073709551613),
                    cond(6, CmpOp::MaskedEq, 67317169913855, 7),
                ],
            ),
            rule(3, "epoll_wait_old", Action::KillThread, vec![]),
            rule(
                4,
                "close_range",
                Action::Notify,
                vec![cond(0, CmpOp::Lt, 16777215, 0)],
            ),
        ],
        ..base
    };
    let got = generate(&spec, Arch::X86);
    assert!(
        matches!(
            &got,
            Err(GenError::Refused(CompileError::BadArgIndex { syscall, index: 6, .. })) if syscall == "socketcall"
        ),
        "{got:?}"
    );
}
