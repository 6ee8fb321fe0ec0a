//! `profile diff` checked against the filters themselves: for every corpus
//! profile and mutations of it (a rule dropped, an action changed, an
//! argument value changed), both loaded programs (runc's stub and the native
//! compiler's filter) run in the cBPF interpreter on boundary and random
//! (arch, syscall, arguments) vectors, and every vector's pair of actions is
//! what the diff says: the one change that covers it, or the same action
//! where none does.

use std::time::{Duration, Instant};

use nodeproof_bpfgen::Native;
use nodeproof_seccomp::against::against;
use nodeproof_seccomp::cbpf::{self, SeccompData, SockFilter};
use nodeproof_seccomp::diff::{diff_programs, is_harsher, Mode, ProfileDiff};
use nodeproof_seccomp::filter::{Action, Arch, FilterSpec};
use nodeproof_seccomp::lint::{loaded_program, LintOptions};
use nodeproof_seccomp::recording::{
    RecordedArch, RecordedArg, RecordedContainer, RecordedSyscall, Recording, FORMAT,
};
use nodeproof_seccomp::syscalls::resolve_syscall_in;
use nodeproof_testkit::{profiles_in, require, Need};
use serde_json::Value;

const X32_BIT: u32 = 0x4000_0000;

fn opts() -> LintOptions {
    LintOptions {
        arch: Arch::X86_64,
        check_listener: false,
        ..Default::default()
    }
}

// A deterministic generator, so a failure reproduces: the binary's one.
use super::bpfgen_vs_libseccomp::Rng;

fn run(program: &[SockFilter], audit: u32, nr: u32, args: [u64; 6]) -> Action {
    let ret = cbpf::run(program, &SeccompData::new(nr as i32, audit, args)).expect("valid");
    Action::from_ret(ret).unwrap_or(Action::KillProcess)
}

struct Checked {
    vectors: usize,
    changed: usize,
    /// Vectors also judged as recorded calls (`against`).
    against: usize,
}

/// One container recorded making one call, every argument's value kept.
fn recorded(arch: Arch, nr: u32, args: [u64; 6]) -> Recording {
    Recording {
        format: FORMAT.into(),
        node: None,
        pod: None,
        started: String::new(),
        ended: String::new(),
        containers: vec![RecordedContainer {
            name: "c".into(),
            id: None,
            profile: None,
            arches: vec![RecordedArch {
                arch,
                syscalls: vec![RecordedSyscall {
                    nr,
                    name: None,
                    args: (0..6u8)
                        .map(|i| RecordedArg {
                            index: i,
                            values: vec![args[usize::from(i)]],
                            complete: true,
                        })
                        .collect(),
                }],
            }],
            lost: 0,
        }],
    }
}

/// Checks `diff` against both programs on vectors built from the specs'
/// rules; panics naming the first vector where they disagree.
fn check(
    label: &str,
    specs: [&FilterSpec; 2],
    programs: [&[SockFilter]; 2],
    diff: &[ProfileDiff],
    rng: &mut Rng,
) -> Checked {
    let native = opts().arch;
    let mut arches: Vec<Arch> = vec![native];
    for s in specs {
        arches.extend(s.arches.iter().copied());
    }
    arches.sort();
    arches.dedup();
    let listed = arches.clone();
    // One architecture neither filter names, and an audit value no arch has.
    let mut audits: Vec<u32> = arches.iter().map(|a| a.audit_arch()).collect();
    audits.extend(
        Arch::ALL
            .iter()
            .find(|a| !listed.iter().any(|l| l.audit_arch() == a.audit_arch()))
            .map(|a| a.audit_arch()),
    );
    audits.push(0xdead_beef);
    audits.sort();
    audits.dedup();
    let lib = specs[0].libseccomp;
    let mut out = Checked {
        vectors: 0,
        changed: 0,
        against: 0,
    };
    for audit in audits {
        let named: Vec<Arch> = Arch::ALL
            .into_iter()
            .filter(|a| a.audit_arch() == audit)
            .collect();
        let compared = listed.iter().any(|l| l.audit_arch() == audit);
        let mut nrs: Vec<u32> = vec![
            0,
            1,
            X32_BIT - 1,
            X32_BIT,
            0x7fff_ffff,
            0x8000_0000,
            u32::MAX,
        ];
        let mut conds = Vec::new();
        for spec in specs {
            for rule in &spec.rules {
                for &arch in &named {
                    if let Some(nr) = resolve_syscall_in(lib, &rule.syscall, arch) {
                        let nr = nr as u32;
                        nrs.extend([nr, nr.wrapping_add(1), nr.wrapping_sub(1)]);
                        conds.push((nr, rule.conds.clone()));
                    }
                }
            }
        }
        for _ in 0..16 {
            nrs.push((rng.next() % 1024) as u32);
            nrs.push(rng.next() as u32);
        }
        nrs.sort_unstable();
        nrs.dedup();
        for nr in nrs {
            let mut vectors: Vec<[u64; 6]> = vec![[0; 6], [u64::MAX; 6]];
            for (_, cs) in conds.iter().filter(|(n, _)| *n == nr) {
                for c in cs {
                    let i = usize::from(c.index.min(5));
                    let r = rng.next();
                    for v in [
                        c.value,
                        c.value.wrapping_add(1),
                        c.value.wrapping_sub(1),
                        c.value_two,
                        c.value | (r & !c.value),
                        (c.value & c.value_two) | (r & !c.value),
                        r,
                        r & 0xffff_ffff,
                    ] {
                        let mut a = [0u64; 6];
                        a[i] = v;
                        vectors.push(a);
                        let mut b = [rng.next() & 0xff; 6];
                        b[i] = v;
                        vectors.push(b);
                    }
                }
            }
            for _ in 0..2 {
                vectors.push(std::array::from_fn(|_| rng.next()));
            }
            let arch = if !compared {
                None
            } else if audit == Arch::X86_64.audit_arch() && nr & X32_BIT != 0 {
                Some(Arch::X32)
            } else {
                named.iter().copied().find(|a| *a != Arch::X32)
            };
            let group = diff.iter().find(|g| g.arch == arch);
            for args in vectors {
                let old = run(programs[0], audit, nr, args);
                let new = run(programs[1], audit, nr, args);
                let covering: Vec<_> = group
                    .map(|g| g.changes.iter().filter(|c| c.covers(nr, &args)).collect())
                    .unwrap_or_default();
                let said = match covering.as_slice() {
                    [] => None,
                    [c] => Some((c.old, c.new)),
                    many => panic!(
                        "{label}: audit {audit:#x} nr {nr} args {args:x?}: {} changes cover it: {many:#?}",
                        many.len()
                    ),
                };
                let expected = (old != new).then_some((old, new));
                assert_eq!(
                    said, expected,
                    "{label}: audit {audit:#x} ({arch:?}) nr {nr} args {args:x?}: the diff says {said:?}, the programs return {old} and {new}"
                );
                // `--against` on the same vector, recorded with every
                // argument: broken exactly when NEW stops it harder.
                if let Some(arch) = arch {
                    let a = against(diff, &[recorded(arch, nr, args)]);
                    assert_eq!(
                        a.broken.len(),
                        usize::from(is_harsher(old, new)),
                        "{label}: {arch} nr {nr} args {args:x?} recorded, {old} -> {new}: against says {:#?}",
                        a.broken
                    );
                    out.against += 1;
                }
                out.vectors += 1;
                out.changed += usize::from(old != new);
            }
        }
    }
    out
}

/// The profile with entry `i` of `syscalls` changed by `f`; `None` when `f` does not apply.
fn mutate(v: &Value, i: usize, f: impl Fn(&mut Value) -> bool) -> Option<String> {
    let mut v = v.clone();
    let entry = v.get_mut("syscalls")?.as_array_mut()?.get_mut(i)?;
    f(entry).then(|| v.to_string())
}

fn mutations(v: &Value) -> Vec<(String, String)> {
    let n = v
        .get("syscalls")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let mut picks = vec![0, n / 3, n / 2, n.saturating_sub(1)];
    picks.sort_unstable();
    picks.dedup();
    let mut out = Vec::new();
    for i in picks.into_iter().filter(|&i| i < n) {
        if let Some(m) = mutate(v, i, |_| true).and_then(|_| {
            let mut v = v.clone();
            v["syscalls"].as_array_mut()?.remove(i);
            Some(v.to_string())
        }) {
            out.push((format!("entry {i} dropped"), m));
        }
        if let Some(m) = mutate(v, i, |e| {
            let action = e.get("action").and_then(Value::as_str).unwrap_or("");
            let to = if action == "SCMP_ACT_ALLOW" {
                "SCMP_ACT_ERRNO"
            } else {
                "SCMP_ACT_ALLOW"
            };
            e["action"] = to.into();
            true
        }) {
            out.push((format!("entry {i}'s action changed"), m));
        }
    }
    // The first entry with an argument condition: its value moved by one.
    let with_args = v.get("syscalls").and_then(Value::as_array).and_then(|s| {
        s.iter().position(|e| {
            e.get("args")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty())
        })
    });
    if let Some(i) = with_args {
        if let Some(m) = mutate(v, i, |e| {
            let Some(arg) = e["args"].get_mut(0) else {
                return false;
            };
            let Some(value) = arg.get("value").and_then(Value::as_u64) else {
                return false;
            };
            arg["value"] = (value + 1).into();
            true
        }) {
            out.push((format!("entry {i}'s first argument value + 1"), m));
        }
    }
    out
}

#[test]
fn corpus_diffs_agree_with_the_filters() {
    let Some(granted) = require(&[Need::Corpus]) else {
        return;
    };
    let opts = opts();
    let mut rng = Rng(0x6e6f_6465_7072_6f6f);
    let (mut pairs, mut vectors, mut changed, mut changes, mut sampled) = (0, 0, 0, 0, 0);
    let mut judged_profiles = 0;
    let mut recorded_calls = 0;
    let mut spent = Duration::ZERO;
    for path in profiles_in(granted.corpus()) {
        let src = std::fs::read(&path).expect("corpus file");
        let Some((old_spec, old)) = loaded_program(&src, &opts, &Native) else {
            continue;
        };
        let Ok(value) = serde_json::from_slice::<Value>(&src) else {
            continue;
        };
        judged_profiles += 1;
        let mut seconds = vec![(
            "unchanged".to_string(),
            String::from_utf8_lossy(&src).into_owned(),
        )];
        seconds.extend(mutations(&value));
        for (what, other) in seconds {
            let Some((new_spec, new)) = loaded_program(other.as_bytes(), &opts, &Native) else {
                continue;
            };
            let label = format!("{} ({what})", path.display());
            let t = Instant::now();
            let diff = diff_programs(&old, &new, old_spec.libseccomp, Mode::of(&opts))
                .expect("valid programs");
            spent += t.elapsed();
            if what == "unchanged" {
                assert!(diff.is_empty(), "{label}: {diff:#?}");
            }
            changes += diff.iter().map(|g| g.changes.len()).sum::<usize>();
            sampled += diff
                .iter()
                .flat_map(|g| &g.changes)
                .filter(|c| c.sampled)
                .count();
            let c = check(
                &label,
                [&old_spec, &new_spec],
                [&old, &new],
                &diff,
                &mut rng,
            );
            pairs += 1;
            vectors += c.vectors;
            changed += c.changed;
            recorded_calls += c.against;
        }
    }
    eprintln!(
        "FIGURE profile diff vs the filters: {judged_profiles} corpus profiles, {pairs} (old, new) pairs, \
         {changes} changes said ({sampled} sampled), {vectors} vectors run ({changed} changed, {recorded_calls} also judged as recorded calls by --against), all agree; diff time {:?} in all, {:?} per pair",
        spent,
        spent / pairs.max(1) as u32
    );
    assert!(
        judged_profiles >= 20,
        "only {judged_profiles} corpus profiles build a filter"
    );
    assert!(
        changed > 0,
        "no vector reached a change: the check checks nothing"
    );
}

/// A profile of `n` rules over x86_64, x86 and x32, one name each, cycling
/// through the x86_64 names: every 8th rule allows its syscall only for one
/// value of arg0, every 16th (of the others) only for flags clear under a
/// mask, the rest outright; a name's second rule allows it for one value of
/// arg2, or of arg1 where the first masked arg1 (the same action as its
/// first, so libseccomp takes both).
fn generated(n: usize) -> Value {
    let lib = nodeproof_seccomp::syscalls::Libseccomp::V2_5_4;
    let names: Vec<&String> = nodeproof_seccomp::syscalls::known_names(lib)
        .iter()
        .filter(|name| resolve_syscall_in(lib, name, Arch::X86_64).is_some_and(|nr| nr >= 0))
        .collect();
    assert!(
        names.len() > 300,
        "libseccomp names {} x86_64 syscalls",
        names.len()
    );
    let rules: Vec<Value> = (0..n)
        .map(|i| {
            let name = names[i % names.len()];
            let mut rule = serde_json::json!({"names": [name], "action": "SCMP_ACT_ALLOW"});
            if i >= names.len() {
                // Where the first rule was a mask on arg1, the second compares arg1 by value.
                let index = if (i - names.len()) % 16 == 1 { 1 } else { 2 };
                rule["args"] = serde_json::json!([{"index": index, "value": i, "op": "SCMP_CMP_EQ"}]);
            } else if i % 8 == 0 {
                rule["args"] = serde_json::json!([{"index": 0, "value": i, "op": "SCMP_CMP_EQ"}]);
            } else if i % 16 == 1 {
                rule["args"] = serde_json::json!([{"index": 1, "value": 0x0f00, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]);
            }
            rule
        })
        .collect();
    serde_json::json!({
        "defaultAction": "SCMP_ACT_ERRNO",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
        "syscalls": rules,
    })
}

#[test]
fn figure_diff_of_two_400_rule_profiles() {
    let opts = opts();
    let old = generated(400);
    let mut new = old.clone();
    let rules = new["syscalls"].as_array_mut().expect("rules");
    // Two rules dropped, two actions changed, two argument values changed.
    rules[200]["args"][0]["value"] = 201.into();
    rules[17]["args"][0]["valueTwo"] = 0x0100.into();
    rules[150]["action"] = "SCMP_ACT_KILL_PROCESS".into();
    rules[51]["action"] = "SCMP_ACT_LOG".into();
    rules.remove(300);
    rules.remove(10);
    let (old_spec, old_program) =
        loaded_program(old.to_string().as_bytes(), &opts, &Native).expect("old builds");
    let (new_spec, new_program) =
        loaded_program(new.to_string().as_bytes(), &opts, &Native).expect("new builds");
    let mut times = Vec::new();
    let mut diff = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        diff = diff_programs(
            &old_program,
            &new_program,
            old_spec.libseccomp,
            Mode::of(&opts),
        )
        .expect("valid programs");
        times.push(t.elapsed());
    }
    let changes: Vec<String> = diff
        .iter()
        .flat_map(|g| g.changes.iter().map(move |c| format!("{:?}: {c}", g.arch)))
        .collect();
    // Per arch: the two argument values, the two actions and the two dropped rules.
    for arch in [Arch::X86_64, Arch::X86, Arch::X32] {
        let n = diff
            .iter()
            .find(|g| g.arch == Some(arch))
            .map_or(0, |g| g.changes.len());
        assert!(n >= 6, "{arch}: {n} changes: {changes:#?}");
    }
    // arg1 of the masked rules' names is compared by value too: still exact.
    assert!(
        diff.iter().flat_map(|g| &g.changes).all(|c| !c.sampled),
        "{changes:#?}"
    );
    let c = check(
        "400 rules",
        [&old_spec, &new_spec],
        [&old_program, &new_program],
        &diff,
        &mut Rng(400),
    );
    eprintln!(
        "FIGURE profile diff of two 400-rule profiles ({} and {} BPF instructions, 3 arches): {} changes; \
         diff times {times:?} ({} build); checked on {} vectors",
        old_program.len(),
        new_program.len(),
        changes.len(),
        if cfg!(debug_assertions) { "debug" } else { "release" },
        c.vectors
    );
}
