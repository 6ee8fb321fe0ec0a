//! libseccomp 2.6.0, the release runc 1.1.15 and crun 1.21 run with
//! (trixie's, fetched under `target/oci-runtimes/`), against nodeproof's
//! model of it: its name table (`syscalls::Libseccomp::V2_6_0`: 2.5.4's,
//! which nodeproof links, with the rows 2.6.0 changed) and the native
//! generator compiling with that table.
//!
//! Each test runs itself a second time through trixie's loader with trixie's
//! libraries first, so that the second process links the real 2.6.0 where
//! this one links 2.5.4. Both build the same inputs from the same seed and
//! the same 2.6 names; the child answers with the real library (names
//! resolved, filters exported), the parent with the model, and the answers
//! must be equal line for line.

use std::fmt::Write as _;
use std::path::PathBuf;

use nodeproof_bpfgen::libseccomp::compile as compile_with_libseccomp;
use nodeproof_bpfgen::{generate, GenError};
use nodeproof_e2e::campaign::Rng;
use nodeproof_e2e::lintset::variants;
use nodeproof_e2e::runtimes::{default_cache_dir, RuntimeBuild, TrixieLibraries};
use nodeproof_seccomp::compiler::{CompileError, CompiledFilter};
use nodeproof_seccomp::filter::{Action, Arch, CmpOp, Cond, FilterSpec, Rule, RuleOrigin};
use nodeproof_seccomp::lint::{filter_spec, LintOptions, Runtime};
use nodeproof_seccomp::oci_runtime::{CrunVersion, OciRuntime, RuncVersion};
use nodeproof_seccomp::syscalls::{
    resolve_syscall, resolve_syscall_in, syscall_name, syscall_name_in, Libseccomp,
};
use nodeproof_testkit::{own_profiles_dir, profiles_in, require};

/// x86_64's syscalls libseccomp 2.6.0 knows and 2.5.4 does not, by number.
const NEW_ON_X86_64: [&str; 11] = [
    "uretprobe",
    "statmount",
    "listmount",
    "lsm_get_self_attr",
    "lsm_set_self_attr",
    "lsm_list_modules",
    "mseal",
    "setxattrat",
    "getxattrat",
    "listxattrat",
    "removexattrat",
];

/// Set in the child: where it writes its answers.
const CHILD_OUT: &str = "NP_LIBSECCOMP_CHILD_OUT";
/// Set in the child of the compile test: the filters it must not hand the
/// real library (the model says libseccomp never returns on them).
const CHILD_SKIP: &str = "NP_LIBSECCOMP_CHILD_SKIP";
/// Set in the child of the compile test: where the parent wrote the lint set.
const CHILD_SOURCES: &str = "NP_LIBSECCOMP_CHILD_SOURCES";
const X32_BIT: i32 = 0x4000_0000;

/// In the child, `Some(path)` to write to; in the parent, `None`.
fn child_out() -> Option<PathBuf> {
    std::env::var_os(CHILD_OUT).map(PathBuf::from)
}

/// The path of the libseccomp this process has mapped.
fn mapped_libseccomp() -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("libseccomp.so"))
        .map(|p| std::fs::canonicalize(p).map_or(p.to_string(), |c| c.display().to_string()))
        .unwrap_or_default()
}

/// Runs `test` of this binary again under trixie's libraries; its answers.
fn run_child(test: &str, env: &[(&str, String)]) -> Option<Vec<String>> {
    require(&RuntimeBuild::Crun1_21.needs())?;
    let libs = TrixieLibraries::of(RuntimeBuild::Crun1_21, &default_cache_dir())
        .expect("trixie's libraries");
    let out = tempfile::NamedTempFile::new().expect("temp file");
    let exe = std::env::current_exe().expect("test binary");
    let status = libs
        .command(&exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_OUT, out.path())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .status()
        .expect("run the child");
    assert!(
        status.success(),
        "the child under trixie's libraries failed: {status}"
    );
    let text = std::fs::read_to_string(out.path()).expect("child's answers");
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let lib = lines.first().cloned().unwrap_or_default();
    let dir = std::fs::canonicalize(&libs.lib_dir).expect("trixie's library directory");
    assert!(
        lib.starts_with(&format!("libseccomp {}/", dir.display())) && lib.ends_with(".so.2.6.0"),
        "the child did not run with trixie's libseccomp 2.6.0: {lib}"
    );
    Some(lines[1..].to_vec())
}

/// The first lines where the model's answers and the library's differ.
fn differences(ours: &[String], theirs: &[String]) -> Vec<String> {
    let mut d: Vec<String> = ours
        .iter()
        .zip(theirs)
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .take(8)
        .map(|(i, (a, b))| format!("line {i}:\n  nodeproof: {a}\n  libseccomp 2.6.0: {b}"))
        .collect();
    if ours.len() != theirs.len() {
        d.push(format!(
            "{} lines from nodeproof, {} from libseccomp 2.6.0",
            ours.len(),
            theirs.len()
        ));
    }
    d
}

/// Numbers scanned on every arch: pseudo numbers, every arch's real range
/// (MIPS from 4000 up), and x32's.
fn scanned() -> impl Iterator<Item = i32> {
    (-11_000..7_200).chain(X32_BIT..X32_BIT + 1_200)
}

/// The table as one library gives it: every number of [`scanned`] with a
/// name on some arch, then every name so found (and every name given) with
/// its number on each arch.
fn table(
    name_of: &dyn Fn(i32, Arch) -> Option<String>,
    number_of: &dyn Fn(&str, Arch) -> Option<i32>,
) -> Vec<String> {
    let mut lines = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    for arch in Arch::ALL {
        for nr in scanned() {
            if let Some(name) = name_of(nr, arch) {
                lines.push(format!("{arch} {nr} is {name}"));
                names.insert(name);
            }
        }
    }
    for name in names {
        let mut line = name.clone();
        for arch in Arch::ALL {
            let _ = match number_of(&name, arch) {
                Some(nr) => write!(line, " {nr}"),
                None => write!(line, " -"),
            };
        }
        lines.push(line);
    }
    lines
}

/// nodeproof's 2.6.0 table is trixie's libseccomp's: every number to its
/// name and every name to its number, on every modelled arch.
#[test]
fn the_2_6_table_is_trixies_libseccomp() {
    if let Some(out) = child_out() {
        let mut text = format!("libseccomp {}\n", mapped_libseccomp());
        for l in table(&syscall_name, &resolve_syscall) {
            text += &l;
            text.push('\n');
        }
        std::fs::write(out, text).expect("write the answers");
        return;
    }
    let Some(theirs) = run_child("the_2_6_table_is_trixies_libseccomp", &[]) else {
        return;
    };
    let v26 = Libseccomp::V2_6_0;
    let ours = table(&|nr, a| syscall_name_in(v26, nr, a), &|n, a| {
        resolve_syscall_in(v26, n, a)
    });
    // Not the linked 2.5.4's table: the comparison could catch a difference.
    assert_ne!(ours, table(&syscall_name, &resolve_syscall));
    let d = differences(&ours, &theirs);
    assert!(d.is_empty(), "{}", d.join("\n"));
    eprintln!(
        "libseccomp 2.6.0: {} lines of its table, all as nodeproof models them",
        ours.len()
    );
}

/// One compiled filter: a line that says what it is, then its instructions
/// (the same lines from either compiler).
fn answer(compiled: Result<CompiledFilter, CompileError>) -> String {
    match compiled {
        Ok(c) => {
            let mut s = format!(
                "{} insns, arches {:?}, skipped [",
                c.program.len(),
                c.arches
            );
            for k in &c.skipped {
                let _ = write!(s, "{} ", k.syscall);
            }
            s += "]";
            // One instruction a line, so a difference shows where it is.
            for (j, f) in c.program.iter().enumerate() {
                let _ = write!(
                    s,
                    "\n  {j:4}: code {:#06x} jt {:3} jf {:3} k {:#010x}",
                    f.code, f.jt, f.jf, f.k
                );
            }
            s
        }
        Err(e) => format!("refused: {e:?}"),
    }
}

/// The lint set: the project's profiles and the variants. Made by the parent
/// only: some variants are sized with `profile lint`, which in the child
/// would resolve names with 2.6.0 where the parent's 2.5.4 does.
fn lint_set() -> Vec<(String, Vec<u8>)> {
    let mut sources: Vec<(String, Vec<u8>)> = profiles_in(&own_profiles_dir())
        .into_iter()
        .map(|f| (f.display().to_string(), std::fs::read(&f).expect("profile")))
        .collect();
    sources.extend(variants().into_iter().map(|(n, b)| (n.to_string(), b)));
    sources
}

/// `sources` into `dir`, a name file and a profile file each.
fn hand_over(sources: &[(String, Vec<u8>)], dir: &std::path::Path) {
    for (i, (name, bytes)) in sources.iter().enumerate() {
        std::fs::write(dir.join(format!("{i}.name")), name).expect("write a name");
        std::fs::write(dir.join(format!("{i}.profile")), bytes).expect("write a profile");
    }
}

/// What [`hand_over`] wrote.
fn taken_over(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    (0..)
        .map_while(|i| {
            let name = std::fs::read_to_string(dir.join(format!("{i}.name"))).ok()?;
            Some((
                name,
                std::fs::read(dir.join(format!("{i}.profile"))).expect("a profile"),
            ))
        })
        .collect()
}

/// The filters both sides compile: the lint set (own profiles and variants)
/// as runc 1.1.15 and crun 1.21 build it, both modes, on x86_64 and x86;
/// random filters over every name 2.6.0 knows on x86_64, the names only
/// 2.6.0 knows drawn often; and each of those names alone and together.
fn filters(sources: &[(String, Vec<u8>)]) -> Vec<(String, FilterSpec, Arch)> {
    let v26 = Libseccomp::V2_6_0;
    let mut out = Vec::new();
    for (name, src) in sources {
        for oci_runtime in [
            OciRuntime::Runc(RuncVersion::V1_1_15),
            OciRuntime::Crun(CrunVersion::V1_21),
        ] {
            for nnp in [false, true] {
                for native in [Arch::X86_64, Arch::X86] {
                    let opts = LintOptions {
                        runtime: Runtime::Containerd,
                        no_new_privileges: nnp,
                        arch: native,
                        check_listener: false,
                        oci_runtime,
                        ..Default::default()
                    };
                    if let Some(spec) = filter_spec(src, &opts) {
                        assert_eq!(spec.libseccomp, v26, "{oci_runtime} links 2.6.0");
                        out.push((format!("{name} ({oci_runtime}, nnp={nnp})"), spec, native));
                    }
                }
            }
        }
    }
    let all: Vec<String> = (0..500)
        .filter_map(|n| syscall_name_in(v26, n, Arch::X86_64))
        .collect();
    // Not worked out with the linked library: the child links 2.6.0.
    let new: Vec<String> = NEW_ON_X86_64.iter().map(|n| n.to_string()).collect();
    if child_out().is_none() {
        let known: Vec<&String> = all
            .iter()
            .filter(|n| resolve_syscall(n, Arch::X86_64).is_none())
            .collect();
        assert_eq!(
            known,
            new.iter().collect::<Vec<_>>(),
            "the x86_64 names only 2.6.0 knows"
        );
    }
    let extra = [
        "map_shadow_stack",
        "riscv_hwprobe",
        "getpagesize",
        "atomic_barrier",
        "uretprobe",
    ];
    let sets: [&[Arch]; 4] = [
        &[],
        &[Arch::X86_64, Arch::X86, Arch::X32],
        &[Arch::X86_64, Arch::X32],
        &[Arch::X86],
    ];
    let rule = |i: usize, syscall: &str, action: Action, conds: Vec<Cond>| Rule {
        syscall: syscall.to_string(),
        action,
        conds,
        origin: RuleOrigin {
            pointer: format!("/syscalls/{i}").into(),
            name_index: 0,
        },
    };
    let spec = |default_action, arches: &[Arch], rules| FilterSpec {
        default_action,
        arches: arches.to_vec(),
        rules,
        listener_path: None,
        libseccomp: v26,
    };
    for (s, set) in sets.iter().enumerate() {
        let alone = new.iter().map(String::as_str).chain(extra);
        for n in alone.clone() {
            out.push((
                format!("{n} alone, set {s}"),
                spec(
                    Action::Errno(1),
                    set,
                    vec![rule(0, n, Action::Allow, vec![])],
                ),
                Arch::X86_64,
            ));
        }
        let together = alone
            .enumerate()
            .map(|(i, n)| rule(i, n, Action::Errno(i as u16 + 2), vec![]))
            .collect();
        out.push((
            format!("all new names, set {s}"),
            spec(Action::Allow, set, together),
            Arch::X86_64,
        ));
    }
    let mut r = Rng::new(0x2_6000);
    for case in 0..1500 {
        let pool: Vec<&str> = (0..1 + r.below(8))
            .map(|_| {
                if r.chance(40) {
                    new[r.below(new.len() as u64) as usize].as_str()
                } else if r.chance(10) {
                    r.pick(&extra)
                } else {
                    all[r.below(all.len() as u64) as usize].as_str()
                }
            })
            .collect();
        let default = r.pick(&[
            Action::Errno(1),
            Action::KillProcess,
            Action::Allow,
            Action::Log,
        ]);
        let rules = (0..r.below(30) as usize)
            .map(|i| {
                let conds = (0..r.below(3))
                    .map(|k| Cond {
                        index: k as u8 + r.below(2) as u8,
                        op: r.pick(&[CmpOp::Eq, CmpOp::Ne, CmpOp::Gt, CmpOp::MaskedEq]),
                        value: r.pick(&[0, 1, 0xffff_ffff, 1 << 32, u64::MAX]),
                        value_two: r.below(4),
                    })
                    .collect();
                let action = r.pick(&[
                    Action::Allow,
                    Action::Errno(1),
                    Action::Errno(38),
                    Action::Trap,
                    Action::KillThread,
                    Action::Log,
                ]);
                rule(i, r.pick(&pool), action, conds)
            })
            .collect();
        let set = r.pick(&sets);
        let native = if r.chance(15) {
            Arch::X86
        } else {
            Arch::X86_64
        };
        out.push((format!("random {case}"), spec(default, set, rules), native));
    }
    out
}

/// The native generator with the 2.6.0 table exports what trixie's
/// libseccomp 2.6.0 exports, or refuses what it refuses.
#[test]
fn bpfgen_2_6_compiles_as_trixies_libseccomp() {
    if let Some(out) = child_out() {
        let dir = std::env::var_os(CHILD_SOURCES).expect("the parent's lint set");
        let filters = filters(&taken_over(std::path::Path::new(&dir)));
        let skip: Vec<usize> = std::env::var(CHILD_SKIP)
            .unwrap_or_default()
            .split(',')
            .filter_map(|s| s.parse().ok())
            .collect();
        let mut text = format!("libseccomp {}\n", mapped_libseccomp());
        for (i, (what, spec, native)) in filters.iter().enumerate() {
            let a = if skip.contains(&i) {
                "loops".to_string()
            } else {
                answer(compile_with_libseccomp(spec, *native))
            };
            let _ = writeln!(text, "{i} {what}: {a}");
        }
        std::fs::write(out, text).expect("write the answers");
        return;
    }
    let sources = lint_set();
    let filters = filters(&sources);
    let (mut ours, mut skip, mut fallback) = (Vec::new(), Vec::new(), 0);
    for (i, (what, spec, native)) in filters.iter().enumerate() {
        let a = match generate(spec, *native) {
            Ok(c) => answer(Ok(c)),
            Err(GenError::Refused(
                CompileError::RuleAddLoops { .. } | CompileError::ExportLoops,
            )) => {
                skip.push(i.to_string());
                "loops".to_string()
            }
            Err(GenError::Refused(e)) => answer(Err(e)),
            Err(GenError::Unsupported { reason }) => {
                fallback += 1;
                format!("unsupported: {reason}")
            }
        };
        ours.push(format!("{i} {what}: {a}"));
    }
    assert_eq!(fallback, 0, "every filter here is on the native path");
    let ours: Vec<String> = ours.join("\n").lines().map(str::to_string).collect();
    let handed = tempfile::tempdir().expect("temp dir");
    hand_over(&sources, handed.path());
    let Some(theirs) = run_child(
        "bpfgen_2_6_compiles_as_trixies_libseccomp",
        &[
            (CHILD_SKIP, skip.join(",")),
            (CHILD_SOURCES, handed.path().display().to_string()),
        ],
    ) else {
        return;
    };
    let d = differences(&ours, &theirs);
    assert!(d.is_empty(), "{}", d.join("\n"));
    let refused = ours.iter().filter(|l| l.contains(": refused: ")).count();
    let new = filters
        .iter()
        .filter(|(_, spec, _)| {
            spec.rules.iter().any(|r| {
                resolve_syscall(&r.syscall, Arch::X86_64).is_none()
                    && resolve_syscall_in(Libseccomp::V2_6_0, &r.syscall, Arch::X86_64).is_some()
            })
        })
        .count();
    eprintln!(
        "libseccomp 2.6.0: {} filters ({new} naming a syscall only 2.6.0 knows), the same program or refusal from both ({refused} refusals, {} where libseccomp never returns, not run)",
        filters.len(),
        skip.len()
    );
}
