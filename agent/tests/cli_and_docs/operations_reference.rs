//! The reference section of docs/operations.md, generated from the code's
//! own vocabulary: the condition types and statuses (`nodeproof-findings`),
//! the reasons of the typed checks, the check and subsystem names, the pod
//! Event reasons, the tracing strategies, and the metric families as the
//! agent's `/metrics` renders them. The test fails when the file and the
//! code drift; the fix is to re-run the generator:
//!
//! ```sh
//! NODEPROOF_BLESS=1 cargo test -p nodeproof --test cli_and_docs operations_reference
//! ```
//!
//! Enums that have no `ALL` list are listed here behind an exhaustive
//! `match`, so a new variant stops this file from compiling until it is
//! listed.

use std::fmt::Write;
use std::path::PathBuf;
use std::sync::Arc;

use nodeproof::checks::{registered, Schedule, REGISTRY};
use nodeproof::daemon::logs::JOURNAL_FIELDS;
use nodeproof::daemon::metrics;
use nodeproof::daemon::state::Shared;
use nodeproof::daemon::subsystem::Subsystem;
use nodeproof::judge::profiles::Reason as ProfileReason;
use nodeproof::judge::profiles::RuntimeReason;
use nodeproof::pods::denials::PodDenialTotal;
use nodeproof::pods::gpu_faults::GpuFaultTotal;
use nodeproof::pods::verdict::Reason as PodReason;
use nodeproof_findings::{Check, ConditionStatus, ConditionType};
use nodeproof_gpu::policy::XidClass;
use nodeproof_gpu::reason::{GpuReason, ReasonOf};
use nodeproof_gpu::{DeviceHealth, GpuHealth, GpuMetrics};
use nodeproof_trace::{FailureReason, Strategy};

const BEGIN: &str = "<!-- BEGIN GENERATED REFERENCE: NODEPROOF_BLESS=1 cargo test -p nodeproof --test cli_and_docs operations_reference -->";
const END: &str = "<!-- END GENERATED REFERENCE -->";

fn doc() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md")
}

fn profile_reasons() -> Vec<ProfileReason> {
    use ProfileReason::*;
    let all = vec![
        NoProfiles,
        ProfilesValid,
        ProfileRejected,
        ProfileStartFails,
        ProfileUnreadable,
        ProfileInvalid,
        ProfileOk,
        NotAProfile,
    ];
    for r in &all {
        match r {
            NoProfiles | ProfilesValid | ProfileRejected | ProfileStartFails
            | ProfileUnreadable | ProfileInvalid | ProfileOk | NotAProfile => {}
        }
    }
    all
}

fn pod_reasons() -> Vec<PodReason> {
    use PodReason::*;
    let all = vec![
        ProfileMissing,
        ProfileInvalid,
        RuntimeClassMismatch,
        RuntimeClassNotReady,
    ];
    for r in &all {
        match r {
            ProfileMissing | ProfileInvalid | RuntimeClassMismatch | RuntimeClassNotReady => {}
        }
    }
    all
}

fn tracing_failures() -> Vec<FailureReason> {
    use FailureReason::*;
    let all = vec![
        BpfPermissionDenied,
        KernelUnsupported,
        ProgramsNotBuilt,
        LoadFailed,
    ];
    for r in &all {
        match r {
            BpfPermissionDenied | KernelUnsupported | ProgramsNotBuilt | LoadFailed => {}
        }
    }
    all
}

fn runtime_reasons() -> Vec<RuntimeReason> {
    use RuntimeReason::*;
    let all = vec![Configured, Detected, ReleaseNotModelled, ReleaseUnknown];
    for r in &all {
        match r {
            Configured | Detected | ReleaseNotModelled | ReleaseUnknown => {}
        }
    }
    all
}

fn code(items: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    items
        .into_iter()
        .map(|s| format!("`{}`", s.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `(name, type, help)` of every family `/metrics` renders for a fresh
/// agent, from the OpenMetrics text itself.
fn metric_families() -> Vec<(String, String, String)> {
    let shared = Arc::new(Shared::default());
    // Every source has run once: a GPU node, API credentials (pods watched),
    // the main loop gone round.
    shared.main_progress(
        std::time::Instant::now(),
        std::time::SystemTime::now(),
        std::time::Duration::from_secs(1),
    );
    shared.metrics(|m| {
        m.gpu = Some(GpuMetrics {
            driver_ready: Some(true),
            health: vec![GpuHealth {
                gpu: 0,
                uuid: "GPU-0".into(),
                check: "all",
                ok: true,
            }],
            xid_totals: [((0, XidClass::Fatal), 1)].into(),
            devices: vec![DeviceHealth {
                plugin: "nvidia.com/gpu".into(),
                device: "GPU-0".into(),
                healthy: true,
            }],
            node: "n1".into(),
        });
        m.pod_denials = Some(vec![PodDenialTotal {
            namespace: "ml".into(),
            pod: "p".into(),
            container: "c".into(),
            syscall: "mkdir".into(),
            action: "errno",
            count: 1,
        }]);
        m.pod_denials_after_change =
            Some([(nodeproof_report::denial_change::PreviousVerdict::Allowed, 1)].into());
        m.gpu_faults = Some(vec![GpuFaultTotal {
            namespace: "ml".into(),
            pod: "p".into(),
            container: "c".into(),
            xid: "79".into(),
            count: 1,
        }]);
    });
    let text = metrics::render(&metrics::registry(shared)).unwrap();
    let mut families: Vec<(String, String, String)> = Vec::new();
    for line in text.lines() {
        let (field, rest) = if let Some(rest) = line.strip_prefix("# TYPE ") {
            (1, rest)
        } else if let Some(rest) = line.strip_prefix("# HELP ") {
            (2, rest)
        } else {
            continue;
        };
        let (name, value) = rest.split_once(' ').unwrap();
        let i = match families.iter().position(|f| f.0 == name) {
            Some(i) => i,
            None => {
                families.push((name.to_owned(), String::new(), String::new()));
                families.len() - 1
            }
        };
        let f = &mut families[i];
        if field == 1 {
            f.1 = value.to_owned();
        } else {
            f.2 = value.to_owned();
        }
    }
    families
}

fn gpu_reasons(of: ReasonOf) -> impl Iterator<Item = &'static str> {
    GpuReason::ALL
        .into_iter()
        .filter(move |r| r.of() == of)
        .map(GpuReason::as_str)
}

fn generate() -> String {
    let mut s = String::new();
    s.push_str(BEGIN);
    s.push_str("\n\n### Node conditions\n\n");
    s.push_str("Written to `status.conditions` of this node's Node, and nowhere else; every one is positive (`True` = good).\n");
    let _ = writeln!(
        s,
        "Statuses: {}.\n",
        code(
            [
                ConditionStatus::True,
                ConditionStatus::False,
                ConditionStatus::Unknown
            ]
            .map(ConditionStatus::as_str)
        )
    );
    s.push_str("| condition | reasons (from the code's enums) |\n| --- | --- |\n");
    for t in ConditionType::ALL {
        let reasons = match t {
            ConditionType::SeccompProfilesReady => format!(
                "files: {}; pods' references: {}",
                code(profile_reasons().into_iter().map(ProfileReason::as_str)),
                code(pod_reasons().into_iter().map(PodReason::as_str))
            ),
            ConditionType::SeccompTracingReady => format!(
                "`StrategyLoaded` (True); False: {}",
                code(tracing_failures().into_iter().map(FailureReason::as_str))
            ),
            ConditionType::GPUDriverReady => format!(
                "{} (see [GPU reasons](#gpu-reasons))",
                code(gpu_reasons(ReasonOf::Driver))
            ),
            ConditionType::GPUHealthy => format!(
                "{}; `AdvertisedUnhealthy` when the kubelet offers an unhealthy device (see [GPU reasons](#gpu-reasons))",
                code(gpu_reasons(ReasonOf::Health))
            ),
        };
        let _ = writeln!(s, "| `{t}` | {reasons} |");
    }
    s.push_str("\n### GPU reasons\n\n");
    s.push_str("The reasons of `GPUDriverReady`, `GPUHealthy` and the `gpu-driver`, `gpu-health` and `gpu-advertised` \
                findings (`nodeproof_gpu::GpuReason`); docs/gpu.md says how each check decides.\n\n");
    s.push_str("| reason | where | meaning |\n| --- | --- | --- |\n");
    for r in GpuReason::ALL {
        let wher = match r.of() {
            ReasonOf::Driver => "`GPUDriverReady`, `gpu-driver`",
            ReasonOf::Health => "`GPUHealthy`, `gpu-health`",
            ReasonOf::Advertised => "`gpu-advertised`",
        };
        let _ = writeln!(s, "| `{}` | {wher} | {} |", r.as_str(), r.meaning());
    }
    s.push_str("\n### Pod Events\n\n");
    s.push_str("Warning Events on a pod whose seccomp reference is unusable here:\n\n");
    s.push_str("| condition reason | Event reason |\n| --- | --- |\n");
    for r in pod_reasons() {
        let _ = writeln!(s, "| `{}` | `{}` |", r.as_str(), r.event_reason());
    }
    s.push_str("\n### Checks and subsystems\n\n");
    s.push_str("Every check, from the registry (`agent/src/checks/mod.rs`, `REGISTRY`), in the order `check` and \
                `preflight` list their findings. `run`: how `nodeproof run` runs it (its own task, or the check \
                runner every period), each with `/healthz/<check>`, its part of `STATUS=` and \
                `nodeproof_check_findings{check,status}`:\n\n");
    s.push_str("| check | run by | `run` | findings' `CHECK` | conditions | what it judges |\n| --- | --- | --- | --- | --- | --- |\n");
    for c in REGISTRY {
        let run = match c.schedule() {
            Schedule::OwnTask => "its own task".to_string(),
            Schedule::Every(p) => format!("every {} s", p.as_secs()),
            Schedule::NotRun => "—".to_string(),
        };
        let conditions = if c.conditions().is_empty() {
            "—".to_string()
        } else {
            code(c.conditions().iter().map(|t| t.as_str()))
        };
        let _ = writeln!(
            s,
            "| `{}` | {} | {run} | {} | {conditions} | {} |",
            c.name(),
            c.commands()
                .iter()
                .map(|c| c.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            code(c.findings().iter().map(|f| f.as_str())),
            c.about()
        );
    }
    s.push('\n');
    for c in REGISTRY.iter().filter(|c| !c.reasons().is_empty()) {
        let _ = writeln!(
            s,
            "`{}` findings' reasons: {}.\n",
            c.findings()
                .iter()
                .map(|f| f.as_str())
                .collect::<Vec<_>>()
                .join("`, `"),
            c.reasons()
                .iter()
                .map(|(r, m)| format!("`{r}`: {m}"))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    let _ = writeln!(
        s,
        "`oci-runtime` findings' reasons (which runtime and release profiles are judged for, and how it was chosen; \
         the last two are warnings): {}.\n",
        code(runtime_reasons().into_iter().map(RuntimeReason::as_str))
    );
    let _ = writeln!(
        s,
        "Subsystems (`/healthz/<name>`, `STATUS=`, journald `NODEPROOF_CHECK=`): {}.\n",
        code(Subsystem::all().into_iter().map(Subsystem::as_str))
    );
    let _ = writeln!(
        s,
        "Tracing strategies, in the order they are tried (`--strategy`, `nodeproof_seccomp_tracing_strategy{{strategy}}`): {}.",
        code(Strategy::ALL.map(Strategy::as_str))
    );
    s.push_str("\n### Metrics\n\n");
    s.push_str("The families `/metrics` serves (OpenMetrics; counters' samples end in `_total`). A family whose source has \
                not run is absent: the GPU families on a node without NVIDIA devices, the pods' families without API \
                credentials, the heartbeat before the first round (docs/gpu.md, docs/pods.md, docs/daemon.md):\n\n");
    s.push_str("| family | type | help |\n| --- | --- | --- |\n");
    for (name, kind, help) in metric_families() {
        let _ = writeln!(s, "| `{name}` | {kind} | {help} |");
    }
    s.push_str("\n### Journal fields\n\n");
    s.push_str("Under systemd the agent logs to the journal with native fields: every tracing field below, upper-cased \
                (`journalctl -u nodeproof XID=79`), plus journald's own (`_SYSTEMD_UNIT=`, `PRIORITY=`, \
                `SYSLOG_IDENTIFIER=nodeproof`) and `MESSAGE=`. Spans' fields are on the lines logged inside them.\n\n");
    s.push_str("| field | holds |\n| --- | --- |\n");
    for (name, holds) in JOURNAL_FIELDS {
        let _ = writeln!(s, "| `{}=` | {holds} |", name.to_uppercase());
    }
    s.push('\n');
    s.push_str(END);
    s
}

/// The field names of every `tracing` event and span macro in the agent's
/// and the crates' sources: the arguments before the message (`name = v`,
/// `%name`, `?name`, `name`), as the macros read them.
fn logged_fields() -> std::collections::BTreeSet<String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut dirs = vec![root.join("agent/src")];
    for c in std::fs::read_dir(root.join("crates")).unwrap() {
        dirs.push(c.unwrap().path().join("src"));
    }
    let mut files = Vec::new();
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    let mut names = std::collections::BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for level in ["trace", "debug", "info", "warn", "error"] {
            for suffix in ["!(", "_span!("] {
                let pat = format!("tracing::{level}{suffix}");
                for (at, _) in text.match_indices(&pat) {
                    for arg in macro_args(&text[at + pat.len()..]) {
                        if arg.starts_with('"') {
                            break;
                        }
                        if let Some(name) = field_name(&arg) {
                            names.insert(name);
                        }
                    }
                }
            }
        }
    }
    names
}

/// The top-level, comma-separated arguments up to the closing parenthesis.
fn macro_args(text: &str) -> Vec<String> {
    let (mut args, mut cur, mut depth, mut string) = (Vec::new(), String::new(), 0, false);
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if string {
            cur.push(c);
            if c == '\\' {
                cur.extend(chars.next());
            } else if c == '"' {
                string = false;
            }
            continue;
        }
        match c {
            '"' => {
                string = true;
                cur.push(c);
            }
            '(' | '[' | '{' => {
                depth += 1;
                cur.push(c);
            }
            ')' | ']' | '}' if depth == 0 => break,
            ')' | ']' | '}' => {
                depth -= 1;
                cur.push(c);
            }
            ',' if depth == 0 => args.push(std::mem::take(&mut cur).trim().to_owned()),
            _ => cur.push(c),
        }
    }
    args.push(cur.trim().to_owned());
    args
}

fn field_name(arg: &str) -> Option<String> {
    let ident = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.')
    };
    if let Some((name, _)) = arg.split_once('=') {
        let name = name.trim();
        return (ident(name) && !arg.contains("==")).then(|| name.to_owned());
    }
    let bare = arg.trim_start_matches(['%', '?']);
    ident(bare).then(|| bare.to_owned())
}

#[test]
fn every_field_the_code_logs_is_in_the_journal_reference_and_no_other() {
    let logged = logged_fields();
    let listed: std::collections::BTreeSet<String> =
        JOURNAL_FIELDS.iter().map(|(n, _)| n.to_string()).collect();
    let missing: Vec<&String> = logged.difference(&listed).collect();
    let stale: Vec<&String> = listed.difference(&logged).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "agent/src/daemon/logs.rs JOURNAL_FIELDS drifted from the code: \
         logged but not listed {missing:?}; listed but not logged {stale:?}"
    );
    // The scanner itself: fields before the message, not the format arguments after it.
    assert_eq!(
        macro_args(r#"xid = x.xid, %strategy, ?e, outcome, "a {} b", n) tail"#),
        [
            "xid = x.xid",
            "%strategy",
            "?e",
            "outcome",
            "\"a {} b\"",
            "n"
        ]
    );
    assert_eq!(field_name("xid = x.xid").as_deref(), Some("xid"));
    assert_eq!(field_name("%strategy").as_deref(), Some("strategy"));
    assert_eq!(field_name("a == b"), None);
}

#[test]
fn the_reference_in_operations_md_is_the_codes() {
    let path = doc();
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text
        .find(BEGIN)
        .expect("the BEGIN marker in docs/operations.md");
    let end = text
        .find(END)
        .expect("the END marker in docs/operations.md")
        + END.len();
    let generated = generate();
    if std::env::var_os("NODEPROOF_BLESS").is_some() {
        let mut out = String::from(&text[..start]);
        out.push_str(&generated);
        out.push_str(&text[end..]);
        std::fs::write(&path, out).unwrap();
        return;
    }
    assert!(
        text[start..end] == generated,
        "docs/operations.md's reference differs from the code: re-run \
         NODEPROOF_BLESS=1 cargo test -p nodeproof --test cli_and_docs operations_reference\n\
         --- generated:\n{generated}"
    );
}

/// Every check the crates name is one a registered check makes, and every
/// registered check is in the reference's table.
#[test]
fn every_check_is_registered_and_in_the_reference() {
    for c in Check::BUILT_IN {
        assert!(registered(c), "{c} is made by no check of the registry");
    }
    let text = std::fs::read_to_string(doc()).unwrap();
    for c in REGISTRY {
        assert!(
            text.contains(&format!("| `{}` |", c.name())),
            "docs/operations.md's table of checks lacks {}",
            c.name()
        );
    }
}

#[test]
fn the_reference_names_every_condition_type_and_metric() {
    let generated = generate();
    for t in ConditionType::ALL {
        assert!(generated.contains(&format!("`{t}`")), "{t}");
    }
    let families = metric_families();
    assert!(
        families.iter().any(|f| f.0 == "nodeproof_condition"),
        "{families:?}"
    );
    for (name, kind, help) in &families {
        assert!(
            !kind.is_empty() && !help.is_empty(),
            "{name}: no TYPE or HELP"
        );
    }
}

/// The troubleshooting table quotes runc: every message in its first column
/// is what runc 1.1.5 printed in the learned runs (docs/data), word for word.
#[test]
fn the_troubleshooting_table_quotes_runcs_real_messages() {
    let text = std::fs::read_to_string(doc()).unwrap();
    let learned = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/data/learn-runc-init-1.1.5.txt"),
    )
    .unwrap();
    let section = text
        .split("## Troubleshooting")
        .nth(1)
        .expect("a Troubleshooting section");
    let mut quoted = 0;
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let message = row.split('`').nth(1).unwrap();
        // The table of nodeproof's own symptoms quotes its conditions, not runc.
        if message.starts_with("SeccompTracingReady") {
            continue;
        }
        quoted += 1;
        assert!(
            learned.contains(message),
            "{message:?} is not a message runc printed in docs/data/learn-runc-init-1.1.5.txt"
        );
    }
    assert!(
        quoted >= 10,
        "only {quoted} runc messages found in the table"
    );
}
