//! End to end on this machine: a real process in a real cgroup laid out like
//! a kubelet's (`kubepods/burstable/pod<uid>/<container id>`), under a real
//! seccomp filter, denied N times, traced by the real tracer, resolved
//! through the watched pod set, aggregated, and written to the test API
//! server: exactly one Warning Event on the right pod with the count N.
//! Needs CAP_BPF + CAP_PERFMON (or root) and a writable cgroup2 hierarchy;
//! without them it says why it skips.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use serde_json::json;

use nodeproof::advise;
use nodeproof::pods::denials::{DenialAggregator, PodIndex};
use nodeproof::pods::watch::record_denials;
use nodeproof_apiclient::client;
use nodeproof_report::conditions::{Hysteresis, Policy};
use nodeproof_report::credentials;
use nodeproof_report::driver::{LoopConfig, ReportLoop};
use nodeproof_seccomp::lint::{LintOptions, Outcome};
use nodeproof_trace::{
    self as trace, CgroupResolver, OutputFormat, TraceOptions, Tracer, TracerConfig,
};
use support::apiserver::{Identity, TestApiServer};
use support::cgroup::{deny_mkdir_in, traceable_kubepods};

const N: usize = 7;

/// The reporter's loop as node `n1` with `kubeconfig`'s credentials, its
/// conditions without hysteresis.
pub(crate) async fn node_report_loop(
    kubeconfig: &std::path::Path,
) -> ReportLoop<client::KubeReporter> {
    let source = credentials::choose(Some(kubeconfig), |_| false, |_| None);
    let kube = client::connect(&source).await.unwrap().unwrap();
    let reporter = client::KubeReporter::new(kube, "n1").with_timeout(Duration::from_secs(5));
    let config = LoopConfig {
        policy: Policy {
            hysteresis: Hysteresis::IMMEDIATE,
            ..Policy::default()
        },
        ..LoopConfig::default()
    };
    ReportLoop::new(reporter, config, 7)
}

/// A child in `cg` named `comm`, denied mkdir [`N`] times, traced by the
/// real tracer with `pods` resolving rows: the summary, the child's pid and
/// what the trace printed in `format`.
fn trace_denied_child(
    cg: &support::cgroup::CgroupDir,
    comm: &'static std::ffi::CStr,
    format: OutputFormat,
    pods: &dyn trace::PodLookup,
) -> (trace::TraceSummary, u32, Vec<u8>) {
    let mut tracer = Tracer::start(&TracerConfig::default()).expect("tracer");
    let stop = AtomicBool::new(false);
    let child = AtomicU32::new(0);
    let opts = TraceOptions {
        comm: Some(comm.to_string_lossy().into_owned()),
        format,
        // Only a bound: the worker stops the trace once the child is done.
        duration: Some(Duration::from_secs(30)),
        ..TraceOptions::default()
    };
    let mut out = Vec::new();
    let summary = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            let pid = deny_mkdir_in(cg, comm, N);
            child.store(pid, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(300));
            stop.store(true, Ordering::SeqCst);
        });
        trace::run_with(
            &mut tracer,
            &opts,
            &mut out,
            &stop,
            CgroupResolver::host(),
            pods,
        )
    })
    .expect("trace");
    (summary, child.load(Ordering::SeqCst), out)
}

#[test]
fn real_denials_become_one_aggregated_pod_event() {
    let uid = "7c0ffee0-1234-4abc-9def-00000000beef";
    let id = "cd".repeat(32);
    let Some(cg) = traceable_kubepods(uid, &id) else {
        return;
    };

    // The watched pod set, as the watch would have it: the container's id in its status.
    let mut pods = PodIndex::default();
    pods.upsert(
        &serde_json::from_value(json!({
            "metadata": {"name": "vllm-0", "namespace": "ml", "uid": uid},
            "spec": {"nodeName": "n1", "containers": [{"name": "vllm", "securityContext": {
                "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/vllm-strict.json"}}}]},
            "status": {"containerStatuses": [{"name": "vllm", "containerID": format!("containerd://{id}"),
                "image": "vllm", "imageID": "", "ready": true, "restartCount": 0}]}
        }))
        .unwrap(),
    );

    let (summary, child, _) = trace_denied_child(&cg, c"np-pods-e2e", OutputFormat::Json, &pods);
    let rows: Vec<_> = summary
        .summary
        .iter()
        .filter(|r| r.pid == child)
        .cloned()
        .collect();
    assert_eq!(
        rows.iter().map(|r| r.count).sum::<u64>(),
        N as u64,
        "{rows:?}"
    );
    assert_eq!(rows[0].pod_uid.as_deref(), Some(uid));
    // The tracer resolved the name through the pod set (the PodLookup hook).
    let pod = rows[0].pod.as_ref().expect("pod resolved");
    assert_eq!(
        (pod.namespace.as_str(), pod.name.as_str()),
        ("ml", "vllm-0")
    );

    // Aggregate and report to the test API server.
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node("n1", json!([]));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let events = rt.block_on(async {
        let mut lp = node_report_loop(&kubeconfig).await;
        let mut agg = DenialAggregator::new(Duration::from_secs(60));
        let now = SystemTime::now();
        agg.observe(&rows, &pods);
        assert_eq!(record_denials(&mut lp, &mut agg, now), 1);
        lp.flush(now).await.expect("flush");
        // The same counts again (nothing new), then a later interval: still one event.
        agg.observe(&rows, &pods);
        assert_eq!(
            record_denials(&mut lp, &mut agg, now + Duration::from_secs(120)),
            0
        );
        lp.flush(now + Duration::from_secs(120))
            .await
            .expect("flush");
        server.events()
    });
    let pod_events: Vec<_> = events
        .iter()
        .filter(|e| e["involvedObject"]["kind"] == "Pod")
        .collect();
    assert_eq!(pod_events.len(), 1, "{events:?}");
    let e = pod_events[0];
    assert_eq!(e["type"], "Warning");
    assert_eq!(e["reason"], "SeccompDenied");
    assert_eq!(e["involvedObject"]["namespace"], "ml");
    assert_eq!(e["involvedObject"]["name"], "vllm-0");
    assert_eq!(e["involvedObject"]["uid"], uid);
    assert_eq!(
        e["message"],
        format!("denied mkdir ×{N} (EPERM) in container vllm, profile localhost/profiles/vllm-strict.json")
    );
    eprintln!(
        "FIGURE e2e: {N} real denials → 1 pod Event: {}",
        e["message"]
    );

    // advise on the trace of these real denials: the saved `trace -o json`
    // summary line, filtered to the pod, against the profile that denied them.
    let saved = trace::summary::summary_json(&summary);
    let denied = advise::denials_from_trace(
        "trace.json",
        &saved,
        &advise::TraceFilter {
            pod: Some("ml/vllm-0".into()),
            container_id: Some(id[..12].to_string()),
            pod_uid: None,
        },
    )
    .unwrap();
    assert_eq!(denied.len(), 1);
    assert_eq!(
        (denied[0].syscall.as_str(), denied[0].count),
        ("mkdir", N as u64)
    );
    let profile = br#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","rmdir"],"action":"SCMP_ACT_ERRNO"}]}"#;
    let opts = LintOptions {
        check_listener: false,
        ..LintOptions::default()
    };
    let a = advise::advise("vllm-strict.json", profile, &denied, &opts).unwrap();
    assert_eq!(a.outcome, Outcome::Ok);
    assert!(a.still_denied.is_empty());
    assert_eq!(a.patched["syscalls"][0]["names"], json!(["rmdir"]));
}

/// `advise --pod NS/NAME --container NAME --duration D` on real denials: the
/// pod and its profile file come from the test API server, the live trace
/// carries no pod names, so its rows are matched by the pod's UID and the
/// container's id.
#[test]
fn advise_traces_a_pod_read_from_the_api_server_live() {
    let uid = "7c0ffee0-1234-4abc-9def-00000000ad01";
    let id = "ad".repeat(32);
    let Some(cg) = traceable_kubepods(uid, &id) else {
        return;
    };
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.put(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "vllm-0", "namespace": "ml", "uid": uid},
            "spec": {"nodeName": "n1", "containers": [{"name": "vllm", "securityContext": {
                "allowPrivilegeEscalation": false,
                "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/vllm-strict.json"}}}]},
            "status": {"containerStatuses": [{"name": "vllm", "containerID": format!("containerd://{id}"),
                "image": "vllm", "imageID": "", "ready": true, "restartCount": 0}]}}),
    );
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("seccomp");
    std::fs::create_dir_all(root.join("profiles")).unwrap();
    std::fs::write(
        root.join("profiles/vllm-strict.json"),
        br#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","rmdir"],"action":"SCMP_ACT_ERRNO"}]}"#,
    )
    .unwrap();
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let mut advise = std::process::Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .args(["--seccomp-root", root.to_str().unwrap(), "advise"])
        .args([
            "--pod",
            "ml/vllm-0",
            "--container",
            "vllm",
            "--duration",
            "6s",
        ])
        .args(["--kubeconfig", kubeconfig.to_str().unwrap(), "-o", "json"])
        .env("NODEPROOF_LOG", "off")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // When the tracer is attached is not said: deny until the trace ends.
    while advise.try_wait().unwrap().is_none() {
        deny_mkdir_in(&cg, c"np-advise-e2e", N);
        std::thread::sleep(Duration::from_millis(300));
    }
    let out = advise.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["allowed"], json!(["mkdir"]), "{v}");
    assert_eq!(
        v["patch"][0],
        json!({"op": "remove", "path": "/syscalls/0/names/0"})
    );
    assert_eq!(v["outcome"], "ok");
    assert!(stderr.contains("container vllm"), "{stderr}");
}

/// `nodeproof trace` on a node where the agent keeps the profiles'
/// versions: a container that started after its profile's edit, denied a
/// call the version before allowed, has its rows name the change (`-o json`
/// `change`, and a line of the text summary), through the same lookup the
/// command builds (`TraceChanges`: names from the kubelet's logs, the pods
/// read once when the first row asks).
#[test]
fn trace_rows_name_the_profile_change_the_container_started_after() {
    use nodeproof::judge::versions::ProfileVersions;
    use nodeproof::pods::denials::TraceChanges;
    use nodeproof_bpfgen::Native;
    use nodeproof_findings::denial_change::PreviousVerdict;
    use nodeproof_seccomp::lint::loaded_program;

    let uid = "7c0ffee0-1234-4abc-9def-00000000c4a9";
    let id = "ce".repeat(32);
    let Some(cg) = traceable_kubepods(uid, &id) else {
        return;
    };
    // v1 allowed mkdir, v2 (what the child's filter does) denies it; the
    // container started a minute after v2 was first seen.
    let v1 = br#"{"defaultAction":"SCMP_ACT_ALLOW"}"#;
    let v2 = br#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO"}]}"#;
    let now = SystemTime::now();
    let t = |ago: u64| now - Duration::from_secs(ago);
    let program = |b: &[u8]| loaded_program(b, &LintOptions::default(), &Native).map(|(_, p)| p);
    let mut versions = ProfileVersions::default();
    versions.observe("profiles/app.json", v1, None, t(600), || program(v1));
    versions.observe("profiles/app.json", v2, None, t(120), || program(v2));
    let started = nodeproof_report::conditions::rfc3339(t(60));
    let reads = std::cell::Cell::new(0);
    let read = || {
        reads.set(reads.get() + 1);
        let mut pods = PodIndex::default();
        pods.upsert(
            &serde_json::from_value(json!({
                "metadata": {"name": "web-0", "namespace": "ml", "uid": uid},
                "spec": {"nodeName": "n1", "containers": [{"name": "app", "securityContext": {
                    "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/app.json"}}}]},
                "status": {"containerStatuses": [{"name": "app", "containerID": format!("containerd://{id}"),
                    "image": "app", "imageID": "", "ready": true, "restartCount": 1,
                    "state": {"running": {"startedAt": started}}}]}
            }))
            .unwrap(),
        );
        pods
    };
    let names = trace::NoPodLookup;
    let lookup = TraceChanges::new(&names, versions, read);

    let (summary, child, out) =
        trace_denied_child(&cg, c"np-trace-chg", OutputFormat::Text, &lookup);
    let row = summary
        .summary
        .iter()
        .find(|r| r.pid == child)
        .expect("the child's row");
    assert_eq!(row.count, N as u64);
    let change = row.change.as_ref().expect("the row names the change");
    assert_eq!(change.profile, "profiles/app.json");
    assert_eq!(change.previous_verdict, PreviousVerdict::Allowed);
    assert_eq!(reads.get(), 1, "the pods are read once, at the end");
    let json = serde_json::to_value(&summary).unwrap();
    let rows = json["summary"].as_array().unwrap();
    assert!(
        rows.iter()
            .any(|r| r["change"]["previous_verdict"] == "allowed"
                && r["change"]["syscall"] == "mkdir"),
        "{json}"
    );
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains(&format!(
            "pid {} mkdir: profile profiles/app.json as of ",
            row.pid
        )) && text.contains("allowed mkdir\n"),
        "{text}"
    );
}
