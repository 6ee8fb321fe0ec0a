//! `nodeproof advise`: the smallest change to a profile that allows the
//! denials a trace observed, as an RFC 6902 JSON Patch plus the patched
//! profile. Pure: the caller reads the files; nothing is ever written.
//!
//! The change, per denied syscall:
//! - a rule without conditions that names it with a denying action loses the
//!   name (`remove`): two unconditional rules with different actions for one
//!   syscall are a conflict whatever libseccomp makes of it, and the allow
//!   must be the one that counts;
//! - it is added to the first `SCMP_ACT_ALLOW` rule without conditions
//!   (`args`, `includes`, `excludes`, `errnoRet`), else one new allow rule is
//!   appended for all of them.
//!
//! The patch is built as `json_patch` operations and the patched profile is
//! what the `json_patch` crate makes of the original with them, not a reading
//! of our own: what is printed as patched is what any RFC 6902 tool gives.
//!
//! The result is checked, not trusted: the patched profile is compiled and
//! each syscall run through the BPF interpreter (with runc's ENOSYS stub), and
//! the patched profile is linted again.

use std::collections::BTreeSet;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation};
use serde::Serialize;
use serde_json::{json, Value};

use nodeproof_bpfgen::Native;
use nodeproof_seccomp::cbpf::{self, SeccompData};
use nodeproof_seccomp::compiler::Compiler;
use nodeproof_seccomp::filter::Action;
use nodeproof_seccomp::lint::{self, LintOptions, Outcome};
use nodeproof_seccomp::patchbpf;
use nodeproof_seccomp::syscalls::resolve_syscall;
use nodeproof_trace::summary::Sample;
use nodeproof_trace::{Action as TraceAction, SummaryRow};

#[derive(Debug, thiserror::Error)]
pub enum AdviseError {
    #[error("{path}: not a JSON profile")]
    ProfileJson {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: the profile is not a JSON object")]
    ProfileShape { path: String },
    #[error("{path}:{line}: not a trace JSON line")]
    TraceLine {
        path: String,
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    /// `at` is the serde path in the line (`summary[2].count`, `top level`).
    #[error("{path}:{line}: {at}: not as `nodeproof trace -o json` writes it")]
    TraceRow {
        path: String,
        line: usize,
        at: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: `syscalls` is neither an array nor null")]
    SyscallsShape { path: String },
    /// The operations were built against this very document, so this is a
    /// bug here; it is reported rather than printing a profile that is not
    /// what the patch gives.
    #[error("{path}: the advised JSON Patch does not apply to the profile")]
    PatchApply {
        path: String,
        #[source]
        source: json_patch::PatchError,
    },
}

/// One denied syscall as a trace saw it (summed over processes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Denied {
    pub syscall: String,
    pub count: u64,
    pub action: TraceAction,
    pub errno: i32,
}

/// Which rows of a trace to keep.
#[derive(Debug, Clone, Default)]
pub struct TraceFilter {
    /// `namespace/name`, matched against the row's resolved pod.
    pub pod: Option<String>,
    /// The pod's UID (when read from the API server): matches rows of a
    /// trace that resolved no pod names (a live one), by their cgroup's UID.
    pub pod_uid: Option<String>,
    /// Container id prefix (a trace row carries the id, not the name).
    pub container_id: Option<String>,
}

/// Reads a saved `trace -o json` into its rows: the final `{"summary":[...]}`
/// line when present (exact counts), else the sample lines, one denial each
/// (a run cut short). Every line must be one `trace` writes.
pub fn rows_from_trace(path: &str, text: &str) -> Result<Vec<SummaryRow>, AdviseError> {
    // Only the rows: the run's counters (dropped, strategy, ...) do not change the advice.
    #[derive(serde::Deserialize)]
    struct SummaryLine {
        summary: Vec<SummaryRow>,
    }
    let mut summary = None;
    let mut samples = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line).map_err(|source| AdviseError::TraceLine {
            path: path.into(),
            line: i + 1,
            source,
        })?;
        let bad_row = |e: serde_path_to_error::Error<serde_json::Error>| AdviseError::TraceRow {
            path: path.into(),
            line: i + 1,
            at: match e.path().to_string() {
                // What serde_path_to_error calls the line's own object.
                root if root == "." => "top level".into(),
                at => at,
            },
            source: e.into_inner(),
        };
        if v.get("summary").is_some() {
            let s: SummaryLine = serde_path_to_error::deserialize(v).map_err(bad_row)?;
            summary = Some(s.summary);
        } else {
            let s: Sample = serde_path_to_error::deserialize(v).map_err(bad_row)?;
            samples.push(s.into_row());
        }
    }
    Ok(summary.unwrap_or(samples))
}

/// The denials of the rows `filter` keeps, summed per (syscall, action, errno)
/// in the order first seen.
pub fn denials(rows: &[SummaryRow], filter: &TraceFilter) -> Vec<Denied> {
    let mut out: Vec<Denied> = Vec::new();
    for r in rows.iter().filter(|r| keep(r, filter)) {
        match out
            .iter_mut()
            .find(|d| d.syscall == r.syscall && d.action == r.action && d.errno == r.errno)
        {
            Some(d) => d.count += r.count,
            None => out.push(Denied {
                syscall: r.syscall.clone(),
                count: r.count,
                action: r.action,
                errno: r.errno,
            }),
        }
    }
    out
}

/// [`rows_from_trace`], then [`denials`].
pub fn denials_from_trace(
    path: &str,
    text: &str,
    filter: &TraceFilter,
) -> Result<Vec<Denied>, AdviseError> {
    Ok(denials(&rows_from_trace(path, text)?, filter))
}

fn keep(row: &SummaryRow, f: &TraceFilter) -> bool {
    let by_uid = f
        .pod_uid
        .as_deref()
        .is_some_and(|uid| row.pod_uid.as_deref() == Some(uid));
    let pod_ok = by_uid
        || f.pod.as_deref().is_none_or(|want| {
            row.pod.as_ref().is_some_and(|p| {
                want.split_once('/') == Some((p.namespace.as_str(), p.name.as_str()))
            })
        });
    let container_ok = f.container_id.as_deref().is_none_or(|want| {
        row.container_id
            .as_deref()
            .is_some_and(|id| id.starts_with(want))
    });
    pod_ok && container_ok
}

/// Syscalls that widen what a container can do to the node, not just to itself.
pub const DANGEROUS: &[(&str, &str)] = &[
    ("mount", "mounts can hide or expose host paths"),
    ("umount2", "unmounts can expose what a mount hid"),
    ("move_mount", "new mount API: same as mount"),
    ("fsmount", "new mount API: same as mount"),
    ("fsopen", "new mount API: same as mount"),
    ("fsconfig", "new mount API: same as mount"),
    ("open_tree", "new mount API: same as mount"),
    ("pivot_root", "changes the root the runtime set up"),
    ("chroot", "a classic step in container escapes"),
    (
        "ptrace",
        "lets the container read and rewrite other processes",
    ),
    ("process_vm_readv", "reads other processes' memory"),
    ("process_vm_writev", "writes other processes' memory"),
    ("bpf", "loads programs into the kernel"),
    (
        "perf_event_open",
        "kernel profiling; a frequent exploit primitive",
    ),
    ("kexec_load", "replaces the running kernel"),
    ("kexec_file_load", "replaces the running kernel"),
    ("init_module", "loads kernel modules"),
    ("finit_module", "loads kernel modules"),
    ("delete_module", "unloads kernel modules"),
    (
        "unshare",
        "new namespaces: the start of most user-namespace exploits",
    ),
    ("setns", "joins other namespaces"),
    ("keyctl", "the kernel keyring is not namespaced"),
    ("add_key", "the kernel keyring is not namespaced"),
    ("request_key", "the kernel keyring is not namespaced"),
    (
        "open_by_handle_at",
        "escapes bind mounts (the shocker exploit)",
    ),
    ("userfaultfd", "a frequent exploit primitive"),
    (
        "io_uring_setup",
        "bypasses seccomp for the operations it submits",
    ),
    ("reboot", "reboots the node"),
    ("swapon", "node-wide swap"),
    ("swapoff", "node-wide swap"),
    ("settimeofday", "the clock is not namespaced"),
    ("clock_settime", "the clock is not namespaced"),
    ("syslog", "reads the kernel log"),
    ("iopl", "raw I/O port access"),
    ("ioperm", "raw I/O port access"),
    ("acct", "node-wide process accounting"),
    ("quotactl", "node-wide quotas"),
];

/// What `advise` prints.
#[derive(Debug, Clone, Serialize)]
pub struct Advice {
    /// RFC 6902 operations, to apply in order.
    pub patch: Patch,
    pub patched: Value,
    /// Syscalls the patch allows, sorted.
    pub allowed: Vec<String>,
    pub warnings: Vec<String>,
    /// The patched profile's lint outcome (`ok` is the point).
    pub outcome: Outcome,
    /// Syscalls the patched filter still does not let run (should be none).
    pub still_denied: Vec<String>,
    /// Denials the advice rests on (summed counts): 0 means nothing was
    /// observed, so there was nothing to advise.
    pub denials: u64,
}

fn conditionless_allow(rule: &Value) -> bool {
    let empty = |k: &str| match rule.get(k) {
        None | Some(Value::Null) => true,
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(o)) => o.values().all(|v| match v {
            Value::Array(a) => a.is_empty(),
            Value::Null => true,
            Value::String(s) => s.is_empty(),
            Value::Number(n) => n.as_u64() == Some(0),
            _ => false,
        }),
        _ => false,
    };
    rule.get("action").and_then(Value::as_str) == Some("SCMP_ACT_ALLOW")
        && rule.get("names").is_some_and(Value::is_array)
        && ["args", "includes", "excludes"].iter().all(|k| empty(k))
        && rule.get("errnoRet").is_none_or(Value::is_null)
}

fn names_of(rule: &Value) -> Vec<&str> {
    let mut out: Vec<&str> = rule
        .get("names")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    // The pre-`names` spelling runc still reads.
    if let Some(n) = rule.get("name").and_then(Value::as_str) {
        out.push(n);
    }
    out
}

/// Computes the patch for `denied` against the profile `src`.
pub fn advise(
    path: &str,
    src: &[u8],
    denied: &[Denied],
    opts: &LintOptions,
) -> Result<Advice, AdviseError> {
    let profile: Value =
        serde_json::from_slice(src).map_err(|source| AdviseError::ProfileJson {
            path: path.into(),
            source,
        })?;
    if !profile.is_object() {
        return Err(AdviseError::ProfileShape { path: path.into() });
    }
    let wanted: BTreeSet<String> = denied
        .iter()
        .map(|d| d.syscall.clone())
        .filter(|s| s != "unknown" && !s.is_empty())
        .collect();
    let rules: Vec<Value> = match profile.get("syscalls") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(_) => return Err(AdviseError::SyscallsShape { path: path.into() }),
    };
    let mut patch = Vec::new();
    let mut warnings = Vec::new();
    for d in denied.iter().filter(|d| d.syscall == "unknown") {
        warnings.push(format!(
            "{} denial(s) of an unknown syscall ({}) cannot be advised: the tracer could not read its number",
            d.count, d.action
        ));
    }
    // Removals first, highest index first, so earlier indices stay valid.
    let mut removals = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        let action = rule.get("action").and_then(Value::as_str).unwrap_or("");
        if action == "SCMP_ACT_ALLOW" || !unconditional(rule) {
            continue;
        }
        if let Some(names) = rule.get("names").and_then(Value::as_array) {
            for (j, n) in names.iter().enumerate() {
                if n.as_str().is_some_and(|n| wanted.contains(n)) {
                    removals.push((i, j));
                }
            }
        }
    }
    for (i, j) in removals.iter().rev() {
        patch.push(PatchOperation::Remove(RemoveOperation {
            path: pointer(&["syscalls", &i.to_string(), "names", &j.to_string()]),
        }));
    }
    let already: BTreeSet<&str> = rules
        .iter()
        .filter(|r| conditionless_allow(r))
        .flat_map(names_of)
        .collect();
    let to_add: Vec<&String> = wanted
        .iter()
        .filter(|s| !already.contains(s.as_str()))
        .collect();
    if !to_add.is_empty() {
        match rules.iter().position(conditionless_allow) {
            Some(i) => {
                for s in &to_add {
                    patch.push(PatchOperation::Add(AddOperation {
                        path: pointer(&["syscalls", &i.to_string(), "names", "-"]),
                        value: json!(s),
                    }));
                }
            }
            None => {
                let rule = json!({"names": to_add, "action": "SCMP_ACT_ALLOW"});
                // `add` on an existing `"syscalls": null` replaces it in place,
                // so the key keeps its position.
                patch.push(PatchOperation::Add(
                    if profile.get("syscalls").is_none_or(Value::is_null) {
                        AddOperation {
                            path: pointer(&["syscalls"]),
                            value: json!([rule]),
                        }
                    } else {
                        AddOperation {
                            path: pointer(&["syscalls", "-"]),
                            value: rule,
                        }
                    },
                ));
            }
        }
    }
    for s in &wanted {
        if let Some((_, why)) = DANGEROUS.iter().find(|(n, _)| n == s) {
            warnings.push(format!("allowing {s} is dangerous: {why}"));
        }
    }
    let patch = Patch(patch);
    let mut patched = profile;
    json_patch::patch(&mut patched, &patch).map_err(|source| AdviseError::PatchApply {
        path: path.into(),
        source,
    })?;
    let bytes = serde_json::to_vec_pretty(&patched).expect("a Value serializes");
    let outcome = lint::lint_source(path, &bytes, opts, &Native).outcome;
    let still_denied = still_denied(&bytes, &wanted, opts);
    Ok(Advice {
        patch,
        patched,
        allowed: wanted.into_iter().collect(),
        warnings,
        outcome,
        still_denied,
        denials: denied.iter().map(|d| d.count).sum(),
    })
}

/// A rule whose action applies to every call of its syscalls.
fn unconditional(rule: &Value) -> bool {
    let mut probe = rule.clone();
    if let Some(o) = probe.as_object_mut() {
        o.insert("action".into(), json!("SCMP_ACT_ALLOW"));
        o.remove("errnoRet");
    }
    conditionless_allow(&probe)
}

/// The syscalls in `names` that the filter built from `src` does not let run
/// (with zero arguments; every rule the patch touches is unconditional).
fn still_denied(src: &[u8], names: &BTreeSet<String>, opts: &LintOptions) -> Vec<String> {
    let Some((profile, spec)) = lint::profile_and_filter(src, opts) else {
        return names.iter().cloned().collect();
    };
    let Ok(compiled) = Native.compile(&spec, opts.arch) else {
        return names.iter().cloned().collect();
    };
    let mut program = patchbpf::enosys_stub(&profile);
    program.extend(compiled.program);
    names
        .iter()
        .filter(|n| {
            let Some(nr) = resolve_syscall(n, opts.arch) else {
                return false;
            };
            let data = SeccompData::new(nr, opts.arch.audit_arch(), [0; 6]);
            !cbpf::run(&program, &data)
                .ok()
                .and_then(Action::from_ret)
                .is_some_and(Action::lets_syscall_run)
        })
        .cloned()
        .collect()
}

/// An RFC 6901 pointer from unescaped tokens.
fn pointer(tokens: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().copied())
}

/// The text `advise` prints: warnings, the patch, the patched profile.
pub fn render(a: &Advice) -> String {
    let mut s = String::new();
    for w in &a.warnings {
        s.push_str(&format!("warning: {w}\n"));
    }
    if a.denials == 0 {
        // An empty patch here would read as "the profile allows everything".
        s.push_str(
            "# no denial observed: nothing to advise, the profile is unchanged \
             (a live trace sees only what runs while it traces: run the workload meanwhile, \
             or give a saved trace with --from)\n",
        );
        return s;
    }
    if a.patch.is_empty() {
        s.push_str("# nothing to change: the profile already allows every denied syscall\n");
    }
    s.push_str(&format!(
        "# JSON Patch (RFC 6902) allowing {}\n{}\n# patched profile (lint outcome: {})\n{}\n",
        a.allowed.join(", "),
        serde_json::to_string_pretty(&a.patch).expect("serializes"),
        a.outcome.as_str(),
        serde_json::to_string_pretty(&a.patched).expect("serializes"),
    ));
    if !a.still_denied.is_empty() {
        s.push_str(&format!(
            "warning: the patched filter still denies {}\n",
            a.still_denied.join(", ")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> LintOptions {
        LintOptions {
            check_listener: false,
            ..LintOptions::default()
        }
    }

    fn denied(names: &[&str]) -> Vec<Denied> {
        names
            .iter()
            .map(|n| Denied {
                syscall: n.to_string(),
                count: 3,
                action: TraceAction::Errno,
                errno: 1,
            })
            .collect()
    }

    fn default_profile() -> Vec<u8> {
        std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../profiles/runtime-default-x86_64.json"
        ))
        .expect("default profile")
    }

    #[test]
    fn default_profile_gets_names_added_to_its_allow_rule() {
        let src = default_profile();
        assert_eq!(
            lint::lint_source("d", &src, &opts(), &Native).outcome,
            Outcome::Ok
        );
        let a = advise("d", &src, &denied(&["mount", "ptrace", "bpf"]), &opts()).unwrap();
        assert_eq!(a.outcome, Outcome::Ok, "{}", render(&a));
        assert!(a.still_denied.is_empty(), "{:?}", a.still_denied);
        assert!(a
            .patch
            .iter()
            .all(|op| matches!(op, PatchOperation::Add(_) | PatchOperation::Remove(_))));
        for s in ["mount", "ptrace", "bpf"] {
            assert!(
                a.warnings
                    .iter()
                    .any(|w| w.starts_with(&format!("allowing {s} is dangerous"))),
                "{:?}",
                a.warnings
            );
        }
    }

    #[test]
    fn the_patched_profile_keeps_the_authors_key_order() {
        // "syscalls" before "defaultAction", "action" before "names": a
        // reviewer diffs the printed profile against the file.
        let src = br#"{"syscalls":[{"action":"SCMP_ACT_ALLOW","names":["read"]}],"defaultAction":"SCMP_ACT_ERRNO"}"#;
        let a = advise("p", src, &denied(&["mkdir"]), &opts()).unwrap();
        let printed = serde_json::to_string(&a.patched).unwrap();
        assert!(
            printed.starts_with(r#"{"syscalls":[{"action":"SCMP_ACT_ALLOW","names":["#),
            "{printed}"
        );
        assert!(
            printed.ends_with(r#""defaultAction":"SCMP_ACT_ERRNO"}"#),
            "{printed}"
        );
    }

    #[test]
    fn a_null_syscalls_key_is_replaced_where_it_stands() {
        let src = br#"{"syscalls":null,"defaultAction":"SCMP_ACT_ALLOW"}"#;
        let a = advise("p", src, &denied(&["mkdir"]), &opts()).unwrap();
        assert_eq!(
            serde_json::to_string(&a.patched).unwrap(),
            r#"{"syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ALLOW"}],"defaultAction":"SCMP_ACT_ALLOW"}"#
        );
    }

    #[test]
    fn explicit_deny_rule_loses_the_name() {
        let src = br#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[
            {"names":["mkdir","rmdir"],"action":"SCMP_ACT_ERRNO","errnoRet":1}]}"#;
        let a = advise("p", src, &denied(&["mkdir"]), &opts()).unwrap();
        assert_eq!(
            serde_json::to_value(&a.patch).unwrap(),
            json!([
                {"op":"remove","path":"/syscalls/0/names/0"},
                {"op":"add","path":"/syscalls/-","value":{"names":["mkdir"],"action":"SCMP_ACT_ALLOW"}},
            ])
        );
        assert_eq!(a.patched["syscalls"][0]["names"], json!(["rmdir"]));
        assert!(a.still_denied.is_empty());
        assert_eq!(a.outcome, Outcome::Ok);
    }

    #[test]
    fn no_syscalls_key_adds_one_and_conditions_are_not_reused() {
        let base = r#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["read","write","close","exit_group","exit","futex","rt_sigreturn","brk","mmap","munmap","execve","arch_prctl","set_tid_address","getppid","fstat","newfstatat","openat","capget","capset","prctl","setgroups","setgid","setuid","getdents64","fcntl","chdir","nanosleep","clock_nanosleep","rt_sigaction","rt_sigprocmask","sigaltstack","getpid","gettid","tgkill","epoll_pwait","sched_yield","access","faccessat2","dup3","pipe2","mprotect","close_range"],"action":"SCMP_ACT_ALLOW"},
            {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":0,"op":"SCMP_CMP_EQ"}]}]}"#;
        let a = advise(
            "p",
            base.as_bytes(),
            &denied(&["personality", "mkdir"]),
            &opts(),
        )
        .unwrap();
        // The conditional personality rule is not reused; the plain allow rule gets both.
        assert_eq!(
            serde_json::to_value(&a.patch).unwrap(),
            json!([
                {"op":"add","path":"/syscalls/0/names/-","value":"mkdir"},
                {"op":"add","path":"/syscalls/0/names/-","value":"personality"},
            ])
        );
        assert!(a.still_denied.is_empty(), "{:?}", a.still_denied);
        let none = advise(
            "p",
            br#"{"defaultAction":"SCMP_ACT_ALLOW"}"#,
            &denied(&["mkdir"]),
            &opts(),
        )
        .unwrap();
        assert_eq!(none.patch[0].path().as_str(), "/syscalls");
    }

    #[test]
    fn already_allowed_needs_no_change() {
        let a = advise("d", &default_profile(), &denied(&["read"]), &opts()).unwrap();
        assert!(a.patch.is_empty());
        assert!(render(&a).contains("nothing to change"));
    }

    #[test]
    fn trace_file_summary_wins_over_samples_and_filters_by_pod() {
        let text = r#"{"time":"t","pid":1,"tid":1,"comm":"a","syscall":"mkdir","nr":83,"arch":"x86_64","action":"errno","errno":1,"cgroup_id":5,"mnt_ns":4,"container_id":"abcdef0123456","pod_uid":"u1","pod":{"namespace":"ml","name":"vllm-0"}}
{"summary":[{"pid":1,"comm":"a","syscall":"mkdir","nr":83,"arch":"x86_64","action":"errno","errno":1,"count":12,"cgroup_id":5,"container_id":"abcdef0123456","pod_uid":"u1","pod":{"namespace":"ml","name":"vllm-0"}},{"pid":2,"comm":"b","syscall":"mount","nr":165,"arch":"x86_64","action":"errno","errno":1,"count":2,"cgroup_id":6,"container_id":null,"pod_uid":null}],"dropped":0,"lost_counts":0,"samples":1,"strategy":"tp_btf"}"#;
        let all = denials_from_trace("t", text, &TraceFilter::default()).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].count, 12);
        let pod = TraceFilter {
            pod: Some("ml/vllm-0".into()),
            container_id: Some("abcdef".into()),
            pod_uid: None,
        };
        let one = denials_from_trace("t", text, &pod).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!((one[0].syscall.as_str(), one[0].count), ("mkdir", 12));
        // A live trace resolves no names: the pod's UID (read from the API server) selects.
        let unnamed = text.replace(r#","pod":{"namespace":"ml","name":"vllm-0"}"#, "");
        assert!(denials_from_trace("t", &unnamed, &pod).unwrap().is_empty());
        let by_uid = TraceFilter {
            pod_uid: Some("u1".into()),
            ..pod.clone()
        };
        let one = denials_from_trace("t", &unnamed, &by_uid).unwrap();
        assert_eq!((one[0].syscall.as_str(), one[0].count), ("mkdir", 12));
        let err = denials_from_trace("t", "{\n", &pod).unwrap_err();
        assert_eq!(err.to_string(), "t:1: not a trace JSON line");
    }

    const SAMPLE: &str = r#"{"time":"2023-11-14T22:13:20.123Z","pid":1,"tid":1,"comm":"a","syscall":"mkdir","nr":83,"arch":"x86_64","action":"errno","errno":1,"cgroup_id":5,"mnt_ns":4,"container_id":null,"pod_uid":null}"#;

    #[test]
    fn samples_alone_count_one_denial_each() {
        let kill = SAMPLE
            .replace(
                r#""action":"errno","errno":1"#,
                r#""action":"kill","errno":0"#,
            )
            .replace("mkdir", "mount");
        let text = format!("{SAMPLE}\n\n{SAMPLE}\n{kill}\n");
        let d = denials_from_trace("t", &text, &TraceFilter::default()).unwrap();
        assert_eq!(
            d,
            vec![
                Denied {
                    syscall: "mkdir".into(),
                    count: 2,
                    action: TraceAction::Errno,
                    errno: 1
                },
                Denied {
                    syscall: "mount".into(),
                    count: 1,
                    action: TraceAction::Kill,
                    errno: 0
                },
            ]
        );
    }

    #[test]
    fn a_bad_trace_row_is_named_by_file_line_and_place() {
        let summary = |rows: &str| {
            format!(
                r#"{{"summary":[{rows}],"dropped":0,"lost_counts":0,"samples":0,"strategy":"tp_btf"}}"#
            )
        };
        let row = r#"{"pid":1,"comm":"a","syscall":"mkdir","nr":83,"arch":"x86_64","action":"errno","errno":1,"count":12,"cgroup_id":5,"container_id":null,"pod_uid":null}"#;
        let msg = |text: &str| {
            let e = rows_from_trace("trace.json", text).unwrap_err();
            let cause = std::error::Error::source(&e).map(|s| s.to_string());
            (e.to_string(), cause.unwrap_or_default())
        };
        let wrong_type = row.replace(r#""count":12"#, r#""count":"12""#);
        let (e, cause) = msg(&format!(
            "{SAMPLE}\n{}",
            summary(&format!("{row},{wrong_type}"))
        ));
        assert_eq!(
            e,
            "trace.json:2: summary[1].count: not as `nodeproof trace -o json` writes it"
        );
        assert!(
            cause.starts_with("invalid type: string \"12\", expected u64"),
            "{cause}"
        );
        let (e, cause) = msg(&summary(
            &row.replace(r#""action":"errno""#, r#""action":"deny""#),
        ));
        assert_eq!(
            e,
            "trace.json:1: summary[0].action: not as `nodeproof trace -o json` writes it"
        );
        assert!(cause.starts_with("unknown variant `deny`"), "{cause}");
        let (e, cause) = msg(&SAMPLE.replace(r#""tid":1,"#, ""));
        assert_eq!(
            e,
            "trace.json:1: top level: not as `nodeproof trace -o json` writes it"
        );
        assert_eq!(cause, "missing field `tid`");
    }
}
