//! A differential campaign of our own: a seeded generator of adversarial
//! profiles (decoder corners, one syscall at a time denied with every action
//! and errno class, conditional rules on what runc init passes, allowlists,
//! sizes at the kernel's 4096 per arch set), each judged by real runc in
//! both noNewPrivileges modes against `profile lint`'s prediction.
//!
//! A case where the prediction says the start fails and runc started is run
//! again (up to `reruns` times): a failure among them makes it intermittent
//! (a signal or a futex wake on init's thread), not a disagreement.

use nodeproof_bpfgen::Native;
use nodeproof_seccomp::capability::CapabilitySet;
use nodeproof_seccomp::filter::Arch;
use nodeproof_seccomp::lint::{lint_source, LintOptions, Outcome, Runtime};
use nodeproof_seccomp::oci_runtime::{InitCaller, OciRuntime, OciRuntimeKind};
use nodeproof_seccomp::runc_init::{self, ArgValue, InitSyscall};
use nodeproof_seccomp::syscalls::resolve_syscall;
use serde_json::{json, Value};

use crate::oracle::{OracleError, SeccompOracle, Verdict};

/// xorshift64*: the same cases for the same seed, without a dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // splitmix64 spreads neighbouring seeds; xorshift must not start at 0.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len() as u64) as usize]
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// One generated profile: what it exercises, and its exact bytes.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub profile: Vec<u8>,
    /// The argument of init's call a condition of this case examines that
    /// init does not fix (an address, an unused register), if any: the model
    /// then says the start fails whenever the rule matches, which in the real
    /// runtime is some starts, all or none.
    pub unfixed: Option<(u8, ArgValue)>,
}

/// The families the generator draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Decoder,
    OneDenied,
    Conditional,
    Allowlist,
    Size,
}

const FAMILIES: [Family; 5] = [
    Family::Decoder,
    Family::OneDenied,
    Family::Conditional,
    Family::Allowlist,
    Family::Size,
];

/// Calls worth denying: everything runc init and /bin/true make, the
/// eaccess fallback's, and a few nobody makes here.
fn interesting(r: &mut Rng, table: &'static [InitSyscall]) -> &'static str {
    const OTHERS: &[&str] = &[
        "mmap",
        "exit",
        "getuid",
        "geteuid",
        "getgid",
        "getegid",
        "faccessat",
        "mkdir",
        "kexec_load",
        "clone3",
        "sched_yield",
    ];
    if r.chance(75) {
        table[r.below(table.len() as u64) as usize].name
    } else {
        r.pick(OTHERS)
    }
}

/// An action with its errnoRet, if any: every action and errno class.
fn action(r: &mut Rng) -> (String, Option<u64>) {
    let errno = |r: &mut Rng| r.pick(&[0u64, 1, 1, 38, 38, 22, 13, 4094, 4095, 65537]);
    match r.below(12) {
        0..=4 => ("SCMP_ACT_ERRNO".into(), Some(errno(r))),
        5 => ("SCMP_ACT_ERRNO".into(), None),
        6 => ("SCMP_ACT_KILL_PROCESS".into(), None),
        7 => (
            r.pick(&["SCMP_ACT_KILL", "SCMP_ACT_KILL_THREAD"]).into(),
            None,
        ),
        8 => ("SCMP_ACT_TRAP".into(), None),
        9 => (
            "SCMP_ACT_TRACE".into(),
            r.chance(50).then(|| r.pick(&[0, 1, 5000, 70000])),
        ),
        10 => ("SCMP_ACT_LOG".into(), None),
        _ => ("SCMP_ACT_ALLOW".into(), None),
    }
}

fn rule(names: &[&str], (action, errno): &(String, Option<u64>)) -> Value {
    let mut v = json!({"names": names, "action": action});
    if let Some(e) = errno {
        v["errnoRet"] = json!(e);
    }
    v
}

fn arches(r: &mut Rng) -> Option<Vec<&'static str>> {
    const SETS: &[&[&str]] = &[
        &["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
        &["SCMP_ARCH_X86_64"],
        &["SCMP_ARCH_X86"],
        &["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"],
        &["SCMP_ARCH_X32", "SCMP_ARCH_X86_64"],
        &["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"],
        &[],
    ];
    r.chance(80).then(|| r.pick(SETS).to_vec())
}

fn runtime_default() -> Value {
    let text = include_str!("../../profiles/runtime-default-x86_64.json");
    serde_json::from_str(text).expect("profiles/runtime-default-x86_64.json")
}

fn decoder(r: &mut Rng, table: &'static [InitSyscall]) -> Case {
    let deny = rule(&[interesting(r, table)], &action(r));
    let deny_text = deny.to_string();
    let name = deny["names"][0].as_str().unwrap_or_default().to_string();
    let (what, text) = match r.below(12) {
        0 => (
            "last duplicate wins",
            format!(
                r#"{{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{deny_text}],"defaultAction":"{}"}}"#,
                r.pick(&["SCMP_ACT_ALLOW", "SCMP_ACT_LOG", "SCMP_ACT_ERRNO"])
            ),
        ),
        1 => (
            "case-folded keys",
            format!(r#"{{"DefaultAction":"SCMP_ACT_ALLOW","SYSCALLS":[{deny_text}]}}"#),
        ),
        2 => (
            "long-s key",
            format!("{{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"\u{17f}yscalls\":[{deny_text}]}}"),
        ),
        3 => (
            "null fields",
            format!(
                r#"{{"defaultAction":"SCMP_ACT_ALLOW","architectures":null,"flags":null,"syscalls":[{deny_text},{{"names":null,"action":"SCMP_ACT_ERRNO"}}]}}"#
            ),
        ),
        4 => (
            "NUL inside the name",
            format!(
                r#"{{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{}]}}"#,
                deny_text.replacen(
                    &format!("\"{name}\""),
                    &format!("\"{name}\\u0000{}\"", r.pick(&["x", "", "execve"])),
                    1
                )
            ),
        ),
        5 => (
            "NUL before the name",
            format!(
                r#"{{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{}]}}"#,
                deny_text.replacen(&format!("\"{name}\""), &format!("\"\\u0000{name}\""), 1)
            ),
        ),
        6 => (
            "unknown and misspelled fields",
            format!(
                r#"{{"defaultAction":"SCMP_ACT_ALLOW","comment":"x","syscalls":[{}]}}"#,
                deny_text.replacen(
                    "\"action\"",
                    r#""agrs":[{"index":0,"value":1,"op":"SCMP_CMP_EQ"}],"action""#,
                    1
                )
            ),
        ),
        7 => (
            "byte order mark",
            format!("\u{feff}{{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{deny_text}]}}"),
        ),
        8 => (
            "architectures",
            format!(
                r#"{{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64","{}"],"syscalls":[{deny_text}]}}"#,
                r.pick(&[
                    "SCMP_ARCH_X86",
                    "SCMP_ARCH_RISCV64",
                    "SCMP_ARCH_LOONGARCH64",
                    "SCMP_ARCH_PPC64LE",
                    "SCMP_ARCH_S390X",
                    "x86_64",
                    "SCMP_ARCH_NOPE"
                ])
            ),
        ),
        9 => (
            "flags",
            format!(
                r#"{{"defaultAction":"SCMP_ACT_ALLOW","flags":["{}"],"syscalls":[{deny_text}]}}"#,
                r.pick(&[
                    "SECCOMP_FILTER_FLAG_TSYNC",
                    "SECCOMP_FILTER_FLAG_LOG",
                    "SECCOMP_FILTER_FLAG_SPEC_ALLOW",
                    "SECCOMP_FILTER_FLAG_NOPE"
                ])
            ),
        ),
        10 => (
            "wrong types",
            format!(
                r#"{{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{}]}}"#,
                deny_text.replacen(
                    "\"action\":",
                    &format!(
                        "\"errnoRet\":{},\"action\":",
                        r.pick(&["-1", "1.5", "\"1\"", "true", "70000"])
                    ),
                    1
                )
            ),
        ),
        _ => (
            "trailing bytes",
            format!(
                r#"{{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{deny_text}]}}{}"#,
                r.pick(&["", " ", "\n", "x", "{}"])
            ),
        ),
    };
    Case {
        name: format!("decoder: {what}: {deny_text}"),
        profile: text.into_bytes(),
        unfixed: None,
    }
}

fn one_denied(r: &mut Rng, table: &'static [InitSyscall]) -> Case {
    let mut rules = vec![rule(&[interesting(r, table)], &action(r))];
    if r.chance(30) {
        rules.push(rule(&[interesting(r, table)], &action(r)));
    }
    let default = if r.chance(85) {
        "SCMP_ACT_ALLOW"
    } else {
        "SCMP_ACT_LOG"
    };
    let mut v = json!({"defaultAction": default, "syscalls": rules});
    if let Some(a) = arches(r).filter(|_| r.chance(30)) {
        v["architectures"] = json!(a);
    }
    Case {
        name: format!("denied: {}", v["syscalls"]),
        profile: v.to_string().into_bytes(),
        unfixed: None,
    }
}

fn conditional(r: &mut Rng, table: &'static [InitSyscall], go_init: bool) -> Case {
    let need = table[r.below(table.len() as u64) as usize];
    let zeroed = runc_init::zeroes_unused_slots(go_init, &need);
    let nconds = 1 + r.below(2);
    let mut conds = Vec::new();
    let mut used = Vec::new();
    for _ in 0..nconds {
        let index = r.below(6);
        if used.contains(&index) {
            continue;
        }
        used.push(index);
        let seen = need.args[index as usize];
        let op = r.pick(&[
            "SCMP_CMP_EQ",
            "SCMP_CMP_EQ",
            "SCMP_CMP_NE",
            "SCMP_CMP_LT",
            "SCMP_CMP_LE",
            "SCMP_CMP_GT",
            "SCMP_CMP_GE",
            "SCMP_CMP_MASKED_EQ",
        ]);
        let value = match r.below(5) {
            0 | 1 => seen,
            2 => seen.wrapping_add(1),
            3 => seen.wrapping_sub(1),
            _ => r.pick(&[0, 1, 0xffff_ffff, 0x1_0000_0000, u64::MAX]),
        };
        let mut c = json!({"index": index, "value": value, "op": op});
        if op == "SCMP_CMP_MASKED_EQ" {
            c["value"] = json!(r.pick(&[0, 0xff, 0xffff_ffff, u64::MAX, value]));
            c["valueTwo"] = json!(r.pick(&[seen, seen & 0xff, 0, 5]));
        }
        conds.push(c);
    }
    let mut deny = rule(&[need.name], &action(r));
    deny["args"] = json!(conds);
    let v = json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [deny]});
    // The first condition on an argument init does not fix, as the model names it.
    let unfixed = used.iter().find_map(|&i| {
        let what = runc_init::arg_value(need.name, i as u8, zeroed)?;
        (!what.is_fixed()).then_some((i as u8, what))
    });
    Case {
        name: format!("conditional: {deny}"),
        profile: v.to_string().into_bytes(),
        unfixed,
    }
}

fn allowlist(r: &mut Rng, table: &'static [InitSyscall]) -> Case {
    let mut v = runtime_default();
    let (default, errno) = action(r);
    if default == "SCMP_ACT_ALLOW" {
        v["defaultAction"] = json!("SCMP_ACT_ERRNO");
    } else {
        v["defaultAction"] = json!(default);
    }
    let obj = v.as_object_mut().expect("an object");
    obj.remove("defaultErrnoRet");
    if let Some(e) = errno {
        obj.insert("defaultErrnoRet".into(), json!(e));
    }
    match arches(r) {
        Some(a) => drop(obj.insert("architectures".into(), json!(a))),
        None => drop(obj.remove("architectures")),
    }
    let mut removed = Vec::new();
    for _ in 0..r.below(3) {
        removed.push(interesting(r, table));
    }
    for rule in v["syscalls"].as_array_mut().into_iter().flatten() {
        if let Some(names) = rule["names"].as_array_mut() {
            names.retain(|n| !removed.iter().any(|x| n == x));
        }
    }
    Case {
        name: format!(
            "allowlist: default {} {:?}, arches {}, without {removed:?}",
            v["defaultAction"], errno, v["architectures"]
        ),
        profile: serde_json::to_vec_pretty(&v).expect("serializes"),
        unfixed: None,
    }
}

/// The runtime default with an arch set, padded with conditional rules
/// (64-bit EQ alone or with a second condition) to within a few
/// instructions of 4096 as `profile lint` counts them.
fn size(r: &mut Rng, oci_runtime: OciRuntime) -> Case {
    let mut base = runtime_default();
    let set = arches(r);
    match &set {
        Some(a) => base["architectures"] = json!(a),
        None => drop(
            base.as_object_mut()
                .expect("an object")
                .remove("architectures"),
        ),
    }
    let wide = r.chance(50);
    let second = r.chance(50);
    let padded = |n: u64| {
        let mut v = base.clone();
        let rules = v["syscalls"].as_array_mut().expect("syscalls");
        rules.extend((0..n).map(|i| {
            let value = if wide { 0x1_0000_0000 + i } else { 0x10000 + i };
            let mut args = vec![json!({"index": 0, "value": value, "op": "SCMP_CMP_EQ"})];
            if second {
                args.push(json!({"index": 1, "value": 7, "op": "SCMP_CMP_EQ"}));
            }
            // Spread over a few syscalls: one huge tree is slow to build.
            const PADDED: [&str; 12] = [
                "acct",
                "quotactl",
                "syslog",
                "vhangup",
                "swapon",
                "swapoff",
                "reboot",
                "sethostname",
                "setdomainname",
                "iopl",
                "ioperm",
                "kexec_load",
            ];
            let name = PADDED[i as usize % PADDED.len()];
            json!({"names": [name], "action": "SCMP_ACT_ALLOW", "args": args})
        }));
        serde_json::to_vec_pretty(&v).expect("serializes")
    };
    let opts = LintOptions {
        runtime: Runtime::Containerd,
        no_new_privileges: true,
        arch: Arch::X86_64,
        check_listener: false,
        oci_runtime,
        // `runc spec`'s bounding set: the splice oracle runs its config.json.
        bounding_set: Some(CapabilitySet::OCI_SPEC_DEFAULT),
    };
    let len = |n| {
        lint_source("p.json", &padded(n), &opts, &Native)
            .instructions
            .unwrap_or(0)
    };
    // The length grows about linearly with n: a secant search, then a walk
    // to the two paddings either side of 4096 (a binary search costs too
    // many compiles of thousands of rules in a debug build).
    let (mut a, mut la) = (100u64, len(100));
    let (mut b, mut lb) = (1000u64, len(1000));
    for _ in 0..4 {
        if lb == la {
            break;
        }
        let slope = (lb as f64 - la as f64) / (b as f64 - a as f64);
        let guess = (b as f64 + (4096.0 - lb as f64) / slope)
            .round()
            .clamp(1.0, 20000.0) as u64;
        if guess == b {
            break;
        }
        (a, la) = (b, lb);
        (b, lb) = (guess, len(guess));
    }
    let (mut lo, mut hi) = if lb <= 4096 {
        (b, b + 1)
    } else {
        (b.saturating_sub(1), b)
    };
    while len(hi) <= 4096 {
        lo = hi;
        hi += 1;
    }
    while lo > 0 && len(lo) > 4096 {
        hi = lo;
        lo -= 1;
    }
    let n = if r.chance(50) { lo } else { hi };
    Case {
        name: format!(
            "size: {n} padding rules (wide {wide}, second condition {second}), arches {set:?}, {} instructions predicted",
            len(n)
        ),
        profile: padded(n),
        unfixed: None,
    }
}

/// `n` cases from `seed`, the families in turn, aimed at what `oci_runtime`'s
/// init calls after the filter is loaded and at its filter's size limit.
pub fn cases(seed: u64, n: usize, oci_runtime: OciRuntime) -> Vec<Case> {
    let mut r = Rng::new(seed);
    let table = oci_runtime.behaviour().init_syscalls;
    // rseq must resolve for the size family's base to mean anything.
    debug_assert!(resolve_syscall("rseq", Arch::X86_64).is_some());
    (0..n)
        .map(|i| {
            let family = FAMILIES[i % FAMILIES.len()];
            let mut c = match family {
                Family::Decoder => decoder(&mut r, table),
                Family::OneDenied => one_denied(&mut r, table),
                Family::Conditional => conditional(
                    &mut r,
                    table,
                    oci_runtime.behaviour().init_caller == InitCaller::Go,
                ),
                Family::Allowlist => allowlist(&mut r, table),
                Family::Size => size(&mut r, oci_runtime),
            };
            c.name = format!("#{i} {}", c.name);
            c
        })
        .collect()
}

/// What one case in one mode came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    Agree,
    /// Predicted to fail; runc started, then failed in `failed` of `reruns` re-runs.
    Intermittent {
        failed: usize,
        reruns: usize,
    },
    /// Predicted to fail only intermittently (`runtime-syscall-denied-intermittently`
    /// first); runc started in every one of `reruns` + 1 runs.
    IntermittentNotSeen {
        reruns: usize,
    },
    /// runc gave no verdict: it was still running at `RUN_TIMEOUT_S` (libseccomp
    /// adding thousands of rules), so there is nothing to compare.
    NoVerdict(String),
    Disagree(String),
}

/// `profile lint`'s prediction for `profile` in a mode.
pub struct Prediction {
    pub outcome: Outcome,
    /// The first diagnostic, as `profile lint` prints it.
    pub first: String,
    /// Whether the start is said to fail only intermittently.
    pub intermittent: bool,
}

/// The prediction for `oci_runtime` behind its CRI runtime: runc behind
/// containerd, crun behind CRI-O (as the splice oracle hands it over).
pub fn predict(profile: &[u8], nnp: bool, oci_runtime: OciRuntime) -> Prediction {
    let opts = LintOptions {
        runtime: match oci_runtime.kind() {
            OciRuntimeKind::Runc => Runtime::Containerd,
            OciRuntimeKind::Crun => Runtime::Crio,
        },
        no_new_privileges: nnp,
        arch: Arch::native(),
        check_listener: true,
        oci_runtime,
        // `runc spec`'s bounding set: the splice oracle runs its config.json.
        bounding_set: Some(CapabilitySet::OCI_SPEC_DEFAULT),
    };
    let r = lint_source("p.json", profile, &opts, &Native);
    let first = r.diagnostics.first().map_or_else(String::new, |d| {
        format!("{}[{}]: {}", d.severity, d.code, d.message)
    });
    let intermittent = r.diagnostics.iter().any(|d| d.code.fails_only_sometimes());
    Prediction {
        outcome: r.outcome,
        first,
        intermittent,
    }
}

pub fn expected(v: Verdict) -> Outcome {
    match v {
        Verdict::Accepted => Outcome::Ok,
        Verdict::Rejected => Outcome::Rejected,
        Verdict::StartFailed => Outcome::StartFailed,
    }
}

/// One case in one mode through a real runtime, re-run as the module doc
/// says, against the prediction for `modelled`.
pub fn judge(
    oracle: &dyn SeccompOracle,
    modelled: OciRuntime,
    case: &Case,
    nnp: bool,
    reruns: usize,
) -> Judgement {
    let Prediction {
        outcome: got,
        first: why,
        intermittent,
    } = predict(&case.profile, nnp, modelled);
    let run_once = |patient: bool| {
        if patient {
            oracle.judge_patiently(&case.profile, nnp)
        } else {
            oracle.judge(&case.profile, nnp)
        }
    };
    // The oracle's own plumbing failing is no verdict: it must not agree with a
    // predicted failure.
    let no_verdict = |e: OracleError| {
        Judgement::NoVerdict(format!(
            "{} nnp={nnp}: {}: the oracle itself failed: {e}",
            case.name,
            oracle.name()
        ))
    };
    let mut run = match run_once(false) {
        Ok(run) => run,
        Err(e) => return no_verdict(e),
    };
    if run.timed_out && got != Outcome::StartFailed {
        // libseccomp takes seconds on thousands of rules: give the runtime its usual time.
        run = match run_once(true) {
            Ok(run) => run,
            Err(e) => return no_verdict(e),
        };
    }
    let want = expected(run.verdict);
    if got == want {
        return Judgement::Agree;
    }
    if got == Outcome::StartFailed && run.verdict == Verdict::Accepted {
        let failed = (0..reruns)
            .filter(|_| run_once(false).is_ok_and(|r| r.verdict != Verdict::Accepted))
            .count();
        if failed > 0 {
            return Judgement::Intermittent { failed, reruns };
        }
        if intermittent {
            return Judgement::IntermittentNotSeen { reruns };
        }
    }
    let said = format!(
        "{} nnp={nnp}: {} {} (exit {}, {}), nodeproof {got:?} ({why})\n  profile: {}",
        case.name,
        oracle.name(),
        run.verdict,
        run.exit,
        run.stderr.trim(),
        String::from_utf8_lossy(&case.profile).replace('\n', "")
    );
    if run.timed_out && got != Outcome::StartFailed {
        return Judgement::NoVerdict(said);
    }
    match case.unfixed {
        Some((index, what)) => Judgement::Disagree(format!(
            "{said}\n  (a condition on args[{index}], {})",
            what.describe()
        )),
        None => Judgement::Disagree(said),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_cases() {
        let a = cases(42, 25, OciRuntime::default());
        let b = cases(42, 25, OciRuntime::default());
        assert_eq!(a.len(), 25);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.profile, y.profile);
        }
        assert_ne!(
            cases(43, 25, OciRuntime::default())[1].profile,
            a[1].profile
        );
        // Every family is drawn, and the size family lands at the boundary.
        assert!(a.iter().any(|c| c.name.contains("size:")));
        for c in a.iter().filter(|c| c.name.contains(" size:")) {
            let n: usize = c
                .name
                .rsplit(", ")
                .next()
                .and_then(|s| s.split(' ').next())
                .and_then(|s| s.parse().ok())
                .unwrap();
            assert!((4080..=4110).contains(&n), "{}", c.name);
        }
    }
}
