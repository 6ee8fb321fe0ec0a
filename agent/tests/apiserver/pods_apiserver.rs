//! Pods and their seccomp references against the test API server: the watch
//! (field selector `spec.nodeName`, as the Node authorizer requires), the
//! `SeccompProfilesReady` condition and Warning Events on the pods, on the
//! real clock, each within 5 s (a pod stuck in CreateContainerError is named
//! before anyone runs `kubectl describe`).

use crate::support;

use nodeproof_findings::ConditionStatus;
use std::time::{Duration, Instant};

use kube::api::{ListParams, WatchParams};
use serde_json::{json, Value};

use nodeproof::observe::profiles::read_reference;
use nodeproof::pods::denials::DenialAggregator;
use nodeproof::pods::state::{self, PodsState};
use nodeproof::pods::verdict::Judge;
use nodeproof::pods::verdict::NodeContext;
use nodeproof::pods::watch::{self, DenialFeed, WatchOptions};
use nodeproof_apiclient::client;
use nodeproof_report::conditions::{Hysteresis, Policy};
use nodeproof_report::credentials;
use nodeproof_report::driver::{LoopConfig, ReportLoop};
use nodeproof_seccomp::lint::LintOptions;
use nodeproof_trace::{Action, SummaryRow};
use support::apiserver::{Fault, Identity, TestApiServer};

const DEADLINE: Duration = Duration::from_secs(5);
const CONTAINER_ID: &str = "5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed";

fn good_profile() -> Vec<u8> {
    std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../profiles/runtime-default-x86_64.json"
    ))
    .unwrap()
}

fn pod(name: &str, node: Option<&str>, annotations: Value, spec: Value) -> Value {
    let mut spec = spec;
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"), "annotations": annotations},
        "spec": spec})
}

fn localhost(p: &str) -> Value {
    json!({"seccompProfile": {"type": "Localhost", "localhostProfile": p}})
}

/// Polls until `f` holds; returns how long it took.
async fn within(what: &str, f: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < DEADLINE,
            "not within {DEADLINE:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

fn pod_events(server: &TestApiServer) -> Vec<(String, String, String)> {
    // POST order is the order the events were first said.
    server
        .log()
        .iter()
        .filter(|l| l.method == "POST" && l.path.ends_with("/events") && l.status < 300)
        .filter(|l| l.body["involvedObject"]["kind"] == "Pod")
        .map(|l| {
            (
                l.body["involvedObject"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string(),
                l.body["reason"].as_str().unwrap().to_string(),
                l.body["message"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_referencing_missing_invalid_and_valid_profiles() {
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node("n1", json!([]));
    // The watcher reads the labels from the Node it watches.
    server.merge_node("n1", json!({"metadata": {"labels": {"gpu": "true"}}}));
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("seccomp");
    std::fs::create_dir_all(root.join("profiles")).unwrap();
    std::fs::write(root.join("profiles/good.json"), good_profile()).unwrap();
    std::fs::write(root.join("profiles/broken.json"), "{\"defaultAction\": ").unwrap();

    // A valid pod and a RuntimeClass that runs here exist before the agent starts.
    server.put(
        "runtimeclasses",
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
               "metadata": {"name": "nvidia"}, "handler": "nvidia",
               "scheduling": {"nodeSelector": {"gpu": "true"}}}),
    );
    server.put(
        "pods",
        pod(
            "ok-pod",
            Some("n1"),
            json!({}),
            json!({"runtimeClassName": "nvidia",
            "securityContext": localhost("profiles/good.json"), "containers": [{"name": "c"}]}),
        ),
    );
    // Another node's pod: not watched, never judged.
    server.put(
        "pods",
        pod(
            "elsewhere",
            Some("n2"),
            json!({}),
            json!({"containers": [{"name": "c",
            "securityContext": localhost("profiles/nope.json")}]}),
        ),
    );

    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let source = credentials::choose(Some(&kubeconfig), |_| false, |_| None);
    let kube = client::connect(&source).await.unwrap().unwrap();
    let reporter =
        client::KubeReporter::new(kube.clone(), "n1").with_timeout(Duration::from_secs(2));
    let config = LoopConfig {
        policy: Policy {
            hysteresis: Hysteresis::IMMEDIATE,
            ..Policy::default()
        },
        ..LoopConfig::default()
    };
    let mut lp = ReportLoop::new(reporter, config, 7);
    let mut state = PodsState::new(
        NodeContext {
            seccomp_root: root.clone(),
            labels: [("gpu".to_string(), "true".to_string())].into(),
            taints: Vec::new(),
            handlers: Some(["runc".to_string(), "nvidia".to_string()].into()),
            lint: LintOptions {
                check_listener: false,
                ..LintOptions::default()
            },
            gpu: Default::default(),
        },
        Judge::new(Default::default(), read_reference),
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let opts = WatchOptions {
        recheck: Duration::from_millis(200),
        ..WatchOptions::default()
    };
    let (rows_tx, rows_rx) = tokio::sync::mpsc::channel(4);
    let feed = DenialFeed::new(rows_rx, DenialAggregator::new(Duration::from_secs(60)));
    let agent = tokio::spawn(async move {
        watch::run(&mut lp, kube, &mut state, &opts, stop_rx, "n1", Some(feed)).await;
        state
    });

    let cond = |s: &TestApiServer| s.condition("n1", "SeccompProfilesReady");
    let t = within("True with one pod", || {
        cond(&server).is_some_and(|c| {
            c["status"] == "True" && c["message"].as_str().unwrap().contains("of 1 pod")
        })
    })
    .await;
    eprintln!("FIGURE initial list → condition True: {t:?}");

    // 1. Container-level reference to a missing file.
    let mut vllm = pod(
        "vllm-0",
        Some("n1"),
        json!({}),
        json!({"containers": [{"name": "vllm",
        "securityContext": localhost("profiles/vllm-strict.json")}]}),
    );
    vllm["status"] = json!({"containerStatuses": [{"name": "vllm",
        "containerID": format!("containerd://{CONTAINER_ID}"), "image": "vllm", "imageID": "",
        "ready": false, "restartCount": 0}]});
    server.put("pods", vllm);
    let t = within("ProfileMissing", || {
        cond(&server).is_some_and(|c| c["reason"] == "ProfileMissing")
            && pod_events(&server)
                .iter()
                .any(|e| e.1 == "SeccompProfileMissing")
    })
    .await;
    eprintln!("FIGURE pod bound → ProfileMissing condition + event: {t:?}");
    let c = cond(&server).unwrap();
    assert_eq!(c["status"], "False");
    let msg = c["message"].as_str().unwrap();
    assert!(
        msg.contains(
            "ml/vllm-0 container vllm: profile localhost/profiles/vllm-strict.json not found"
        ),
        "{msg}"
    );

    // 2. Created unbound with a deprecated annotation to a broken file, bound later.
    let unbound = pod(
        "annotated",
        None,
        json!({"seccomp.security.alpha.kubernetes.io/pod": "localhost/profiles/broken.json"}),
        json!({"containers": [{"name": "app"}]}),
    );
    server.put("pods", unbound.clone());
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        !pod_events(&server).iter().any(|e| e.0 == "annotated"),
        "judged before bound"
    );
    let mut bound = unbound;
    bound["spec"]["nodeName"] = json!("n1");
    server.put("pods", bound);
    let t = within("ProfileInvalid event on the bound pod", || {
        pod_events(&server)
            .iter()
            .any(|e| e.0 == "annotated" && e.1 == "SeccompProfileInvalid")
    })
    .await;
    eprintln!("FIGURE pod bound later → SeccompProfileInvalid event: {t:?}");

    // 3. A RuntimeClass whose handler the runtime does not have, and an init container.
    server.put(
        "runtimeclasses",
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
               "metadata": {"name": "kata"}, "handler": "kata"}),
    );
    server.put(
        "pods",
        pod("sandboxed", Some("n1"), json!({}), json!({"runtimeClassName": "kata",
            "initContainers": [{"name": "setup", "securityContext": localhost("profiles/good.json")}],
            "containers": [{"name": "c", "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}}]})),
    );
    within("RuntimeClassMismatch event", || {
        pod_events(&server).iter().any(|e| {
            e.0 == "sandboxed" && e.1 == "RuntimeClassMismatch" && e.2.contains("handler \"kata\"")
        })
    })
    .await;

    // 4. Fixed: the missing file appears, the broken one is repaired, the kata pod goes.
    std::fs::write(root.join("profiles/vllm-strict.json"), good_profile()).unwrap();
    std::fs::write(root.join("profiles/broken.json"), good_profile()).unwrap();
    server.delete("pods", "ml/sandboxed");
    let t = within("True again", || {
        cond(&server).is_some_and(|c| c["status"] == "True")
    })
    .await;
    eprintln!("FIGURE fixed → condition True: {t:?}");

    let events = pod_events(&server);
    let order: Vec<(&str, &str)> = events
        .iter()
        .map(|e| (e.0.as_str(), e.1.as_str()))
        .collect();
    assert_eq!(
        order,
        vec![
            ("vllm-0", "SeccompProfileMissing"),
            ("annotated", "SeccompProfileInvalid"),
            ("sandboxed", "RuntimeClassMismatch"),
        ],
        "one event per problem, in order: {events:?}"
    );
    assert!(events[1].2.starts_with("container app: profile localhost/profiles/broken.json (noNewPrivileges=false): outcome rejected: error[json-syntax]"), "{}", events[1].2);
    // Nothing about the other node's pod, nor about the valid one.
    assert!(!events.iter().any(|e| e.0 == "elsewhere" || e.0 == "ok-pod"));
    // Every pod list/watch carried the node's field selector (others are refused).
    assert!(server
        .log()
        .iter()
        .filter(|l| l.path == "/api/v1/pods")
        .all(|l| l.status == 200 && l.query.contains("fieldSelector=spec.nodeName")));

    // 5. The tracer's rows (cumulative, cgroup-attributed) → one SeccompDenied Event.
    let row = SummaryRow {
        pid: 42,
        comm: "python3".into(),
        syscall: "mkdir".into(),
        nr: 83,
        arch: "x86_64",
        action: Action::Errno,
        errno: 1,
        count: 12,
        cgroup_id: 7,
        cgroup: None,
        container_id: Some(CONTAINER_ID.into()),
        container: None,
        pod_uid: Some("uid-vllm-0".into()),
        pod: None,
        change: None,
    };
    rows_tx.send(vec![row.clone()]).await.unwrap();
    rows_tx.send(vec![row]).await.unwrap(); // the same counts again: nothing new
    let t = within("SeccompDenied event", || {
        pod_events(&server).iter().any(|e| e.1 == "SeccompDenied")
    })
    .await;
    eprintln!("FIGURE tracer rows → SeccompDenied event: {t:?}");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let denied: Vec<_> = pod_events(&server)
        .into_iter()
        .filter(|e| e.1 == "SeccompDenied")
        .collect();
    assert_eq!(
        denied,
        vec![(
            "vllm-0".to_string(),
            "SeccompDenied".to_string(),
            "denied mkdir ×12 (EPERM) in container vllm, profile localhost/profiles/vllm-strict.json"
                .to_string()
        )]
    );

    stop_tx.send(true).unwrap();
    let state = tokio::time::timeout(Duration::from_secs(5), agent)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(state.index.len(), 3);
}

#[test]
fn a_node_may_not_list_all_pods() {
    // The test server enforces what the Node authorizer does; the agent must not rely on more.
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node("n1", json!([]));
    server.add_node("n2", json!([]));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let source = credentials::choose(Some(&kubeconfig), |_| false, |_| None);
        let kube = client::connect(&source).await.unwrap().unwrap();
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::all(kube.clone());
        let err = pods.list(&Default::default()).await.unwrap_err();
        assert!(
            err.to_string()
                .contains("only list and watch pods bound to it"),
            "{err}"
        );
        // Nodes: its own, by name, and no other.
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(kube);
        let own = ListParams::default().fields("metadata.name=n1");
        assert_eq!(nodes.list(&own).await.unwrap().items.len(), 1);
        for lp in [
            ListParams::default(),
            ListParams::default().fields("metadata.name=n2"),
        ] {
            let err = nodes.list(&lp).await.unwrap_err();
            assert!(
                err.to_string().contains("only list and watch its own Node"),
                "{err}"
            );
            let err = nodes
                .watch(
                    &WatchParams::default().fields(lp.field_selector.as_deref().unwrap_or("")),
                    "0",
                )
                .await
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                err.contains("only list and watch its own Node"),
                "watch {lp:?}: {err}"
            );
        }
    });
}

#[test]
fn pods_once_from_the_command_line() {
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node("n1", json!([]));
    let mut vllm = pod(
        "vllm-0",
        Some("n1"),
        json!({}),
        json!({"containers": [{"name": "vllm",
        "securityContext": localhost("profiles/vllm-strict.json")}]}),
    );
    vllm["status"] = json!({"containerStatuses": [{"name": "vllm",
        "containerID": format!("containerd://{CONTAINER_ID}"), "image": "vllm", "imageID": "",
        "ready": false, "restartCount": 0}]});
    server.put("pods", vllm);
    // A tainted node, and a RuntimeClass whose scheduling tolerates only part of it.
    server.merge_node(
        "n1",
        json!({"spec": {"taints": [
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            {"key": "dedicated", "value": "infer", "effect": "NoExecute"},
            {"key": "soft", "effect": "PreferNoSchedule"}]}}),
    );
    let class = |tolerations: Value| {
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
            "metadata": {"name": "gpu", "annotations":
                {"nodeproof.dev/localhost-profiles": "profiles/vllm-strict.json"}},
            "handler": "runc",
            "scheduling": {"tolerations": tolerations}})
    };
    server.put(
        "runtimeclasses",
        class(json!([{"key": "nvidia.com/gpu", "operator": "Exists"}])),
    );
    server.put(
        "pods",
        pod(
            "sandboxed",
            Some("n1"),
            json!({}),
            json!({"runtimeClassName": "gpu", "containers": [{"name": "c"}]}),
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("seccomp");
    std::fs::create_dir_all(&root).unwrap();
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let run = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_nodeproof"))
            .args(["--seccomp-root", root.to_str().unwrap(), "pods", "--once"])
            .args([
                "--kubeconfig",
                kubeconfig.to_str().unwrap(),
                "--node-name",
                "n1",
            ])
            .env("NODEPROOF_LOG", "off")
            .output()
            .unwrap()
    };
    let out = run();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with("node n1: 2 pods"), "{text}");
    assert!(
        text.contains("ProfileMissing ml/vllm-0 container vllm: profile localhost/profiles/vllm-strict.json not found"),
        "{text}"
    );
    assert!(
        text.contains("RuntimeClassMismatch ml/sandboxed: RuntimeClass gpu: this node's taint dedicated=infer:NoExecute is not tolerated (by scheduling.tolerations nor the pod's)\n"),
        "{text}"
    );
    // The class's contract is not met here either: the pod bound anyway is
    // told so after its own finding, and the contract's verdict is printed.
    assert!(
        text.contains("RuntimeClassNotReady ml/sandboxed: RuntimeClass gpu is not ready on this node: this node's taint dedicated=infer:NoExecute is not tolerated (by scheduling.tolerations nor the pod's); profiles/vllm-strict.json: not found under"),
        "{text}"
    );
    assert!(
        text.contains("\nRuntimeClass gpu not-ready: this node's taint dedicated=infer:NoExecute"),
        "{text}"
    );
    // What the agent reports: the pods' first reason leads the one condition
    // (the root has no profiles, so the files say nothing).
    assert!(
        text.contains("reported: SeccompProfilesReady False RuntimeClassMismatch: 2 of 2 pods"),
        "{text}"
    );
    std::fs::create_dir_all(root.join("profiles")).unwrap();
    std::fs::write(root.join("profiles/vllm-strict.json"), good_profile()).unwrap();
    // The class tolerates the rest (an Equal of the taint's value, any effect).
    server.put(
        "runtimeclasses",
        class(json!([{"key": "nvidia.com/gpu", "operator": "Exists"},
            {"key": "dedicated", "operator": "Equal", "value": "infer"}])),
    );
    let out = run();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("\nRuntimeClass gpu ready\n"), "{text}");
}

/// `advise --pod` without `--profile`: the pod from the API server, the
/// container by name or id prefix, its Localhost profile under the root.
#[test]
fn advise_reads_the_pods_profile_from_the_api_server() {
    let side_id = "51de51de51de51de51de51de51de51de51de51de51de51de51de51de51de51de";
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    let mut vllm = pod(
        "vllm-0",
        Some("n1"),
        json!({}),
        json!({"containers": [
            {"name": "vllm", "securityContext": {"allowPrivilegeEscalation": false,
                "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/vllm-strict.json"}}},
            {"name": "side", "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}}]}),
    );
    let status = |name: &str, id: &str| {
        json!({"name": name, "containerID": format!("containerd://{id}"), "image": "i",
            "imageID": "", "ready": true, "restartCount": 0})
    };
    vllm["status"] =
        json!({"containerStatuses": [status("vllm", CONTAINER_ID), status("side", side_id)]});
    server.put("pods", vllm);
    server.put(
        "pods",
        pod(
            "plain",
            Some("n1"),
            json!({}),
            json!({"containers": [{"name": "app"}]}),
        ),
    );
    server.put(
        "pods",
        pod(
            "elsewhere",
            Some("n2"),
            json!({}),
            json!({"containers": [{"name": "c", "securityContext": localhost("profiles/vllm-strict.json")}]}),
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("seccomp");
    std::fs::create_dir_all(root.join("profiles")).unwrap();
    let profile = root.join("profiles/vllm-strict.json");
    let before = br#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","rmdir"],"action":"SCMP_ACT_ERRNO"},{"names":["ptrace"],"action":"SCMP_ACT_ERRNO"}]}"#;
    std::fs::write(&profile, before).unwrap();
    let row = |container: &str, syscall: &str, nr: u32, count: u32| {
        json!({"pid": 7, "comm": "python3", "syscall": syscall, "nr": nr, "arch": "x86_64",
            "action": "errno", "errno": 1, "count": count, "cgroup_id": 5,
            "container_id": container, "pod_uid": "uid-vllm-0",
            "pod": {"namespace": "ml", "name": "vllm-0"}})
    };
    let trace = dir.path().join("trace.json");
    std::fs::write(
        &trace,
        format!(
            "{}\n",
            json!({"summary": [row(CONTAINER_ID, "mkdir", 83, 12), row(side_id, "ptrace", 101, 2)],
                "dropped": 0, "lost_counts": 0, "samples": 0, "strategy": "tp_btf"})
        ),
    )
    .unwrap();
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let advise = |pod: &str, container: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_nodeproof"));
        cmd.args([
            "--seccomp-root",
            root.to_str().unwrap(),
            "advise",
            "--pod",
            pod,
        ])
        .args(["--from", trace.to_str().unwrap()])
        .args(["--kubeconfig", kubeconfig.to_str().unwrap(), "-o", "json"])
        .env("NODEPROOF_LOG", "off");
        if let Some(c) = container {
            cmd.args(["--container", c]);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            serde_json::from_slice::<Value>(&out.stdout).unwrap_or(Value::Null),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };

    // By name and by id prefix: the vllm container's denial only, against its file.
    for c in ["vllm", &CONTAINER_ID[..12]] {
        let (code, v, err) = advise("ml/vllm-0", Some(c));
        assert_eq!(code, Some(0), "{c}: {err}");
        assert!(
            err.contains(&format!(
                "advising on {} for pod ml/vllm-0 container vllm",
                profile.display()
            )),
            "{err}"
        );
        assert_eq!(v["allowed"], json!(["mkdir"]), "{c}");
        assert_eq!(
            v["patch"][0],
            json!({"op": "remove", "path": "/syscalls/0/names/0"})
        );
        assert_eq!(v["outcome"], "ok");
    }
    assert_eq!(std::fs::read(&profile).unwrap(), before, "never written");

    // Nothing on disk to patch, unknown names, several profiles: said, non-zero exit.
    for (pod, container, want) in [
        ("ml/vllm-0", Some("side"), "container side of pod ml/vllm-0 runs under runtime/default, the container runtime's built-in profile: nothing on disk to patch"),
        ("ml/vllm-0", Some("nope"), "pod ml/vllm-0 has no container \"nope\" (containers: vllm, side)"),
        ("ml/vllm-0", None, "the containers of pod ml/vllm-0 run under different seccomp profiles (vllm localhost/profiles/vllm-strict.json, side runtime/default); choose one with --container"),
        ("ml/plain", None, "container app of pod ml/plain sets no seccomp profile"),
        ("ml/elsewhere", None, "cannot read pod ml/elsewhere with kubeconfig"),
        ("vllm-0", None, "--pod \"vllm-0\" is not NAMESPACE/NAME"),
    ] {
        let (code, _, err) = advise(pod, container);
        assert_ne!(code, Some(0), "{pod} {container:?}");
        assert!(err.contains(want), "{pod} {container:?}: {err}");
    }
}

/// The watcher watches this Node too: a label or taint changed at run time
/// re-judges the pods; a status-only update (the kubelet's heartbeat) does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relabelled_or_tainted_node_is_judged_again() {
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node(
        "n1",
        json!([{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-29T20:00:00Z"}]),
    );
    server.add_node("n2", json!([]));
    server.merge_node("n2", json!({"metadata": {"labels": {"gpu": "true"}}}));
    server.put(
        "runtimeclasses",
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
               "metadata": {"name": "gpu"}, "handler": "runc",
               "scheduling": {"nodeSelector": {"gpu": "true"},
                   "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}}),
    );
    server.put(
        "pods",
        pod(
            "infer",
            Some("n1"),
            json!({}),
            json!({"runtimeClassName": "gpu", "containers": [{"name": "c"}]}),
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("seccomp");
    std::fs::create_dir_all(&root).unwrap();
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let source = credentials::choose(Some(&kubeconfig), |_| false, |_| None);
    let kube = client::connect(&source).await.unwrap().unwrap();
    // As the agent starts: the Node's labels and taints read once (none yet).
    let mut state = PodsState::new(
        NodeContext {
            seccomp_root: root,
            labels: Default::default(),
            taints: Vec::new(),
            handlers: Some(["runc".to_string()].into()),
            lint: LintOptions {
                check_listener: false,
                ..LintOptions::default()
            },
            gpu: Default::default(),
        },
        Judge::new(Default::default(), read_reference),
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // No recheck within the test: every round comes from a change.
    let opts = WatchOptions {
        recheck: Duration::from_secs(3600),
        ..WatchOptions::default()
    };
    let (round_tx, mut rounds) = tokio::sync::mpsc::channel(16);
    let agent = tokio::spawn(async move {
        watch::rounds(kube, &mut state, &opts, stop_rx, "n1", None, round_tx).await;
        state
    });
    async fn next(
        rounds: &mut tokio::sync::mpsc::Receiver<state::Round>,
    ) -> (state::Round, Duration) {
        let start = Instant::now();
        let r = tokio::time::timeout(DEADLINE, rounds.recv())
            .await
            .expect("a judgement round within 5 s")
            .expect("the watcher runs");
        (r, start.elapsed())
    }

    // The class selects gpu=true nodes; n1 has no such label.
    let (r, _) = next(&mut rounds).await;
    assert_eq!(
        (r.condition.status, r.condition.reason.as_str()),
        (ConditionStatus::False, "RuntimeClassMismatch"),
        "{:?}",
        r.condition
    );
    assert_eq!(r.events.len(), 1, "{:?}", r.events);
    assert_eq!(r.events[0].reason, "RuntimeClassMismatch");

    // Labelled: True, without a restart.
    server.merge_node("n1", json!({"metadata": {"labels": {"gpu": "true"}}}));
    let (r, t) = next(&mut rounds).await;
    eprintln!("FIGURE node labelled → judged again, True: {t:?}");
    assert_eq!(
        r.condition.status,
        ConditionStatus::True,
        "{:?}",
        r.condition
    );
    assert!(r.events.is_empty());

    // Tainted with a NoExecute taint the class does not tolerate.
    server.merge_node(
        "n1",
        json!({"spec": {"taints": [{"key": "dedicated", "value": "infer", "effect": "NoExecute"}]}}),
    );
    let (r, t) = next(&mut rounds).await;
    eprintln!("FIGURE node tainted → judged again, RuntimeClassMismatch: {t:?}");
    assert_eq!(
        (r.condition.status, r.condition.reason.as_str()),
        (ConditionStatus::False, "RuntimeClassMismatch")
    );
    assert_eq!(r.events.len(), 1, "{:?}", r.events);
    assert!(
        r.events[0]
            .message
            .contains("this node's taint dedicated=infer:NoExecute is not tolerated"),
        "{}",
        r.events[0].message
    );

    // Heartbeats (status only), then a watch that expires (410 Gone → list again).
    let mut last = 0;
    for beat in [
        "2026-11-29T20:00:10Z",
        "2026-11-29T20:00:20Z",
        "2026-11-29T20:00:30Z",
    ] {
        last = server.merge_node(
            "n1",
            json!({"status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": beat}]}}),
        );
    }
    // The watcher asks for events after the last heartbeat only once it got them all.
    within("the heartbeats delivered", || {
        watched_nodes_from(&server).iter().any(|v| *v >= last)
    })
    .await;
    let lists = || {
        server
            .log()
            .iter()
            .filter(|l| l.path == "/api/v1/nodes" && !l.query.contains("watch="))
            .count()
    };
    let lists_before = lists();
    server.expire_next_watch("nodes");
    within("the Node listed again after 410 Gone", || {
        lists() > lists_before
    })
    .await;
    assert!(
        rounds.try_recv().is_err(),
        "heartbeats and a re-list of an unchanged Node judged nothing"
    );

    // Untainted: the next round is this one (no round came from the heartbeats).
    server.merge_node("n1", json!({"spec": {"taints": null}}));
    let (r, _) = next(&mut rounds).await;
    assert_eq!(
        r.condition.status,
        ConditionStatus::True,
        "the round after the heartbeats: {:?}",
        r.condition
    );

    // Every Node list and watch named this node (others are refused).
    let node_requests: Vec<_> = server
        .log()
        .into_iter()
        .filter(|l| l.path == "/api/v1/nodes")
        .collect();
    assert!(node_requests.len() >= 3, "{node_requests:?}");
    assert!(
        node_requests
            .iter()
            .all(|l| l.status == 200 && l.query.contains("fieldSelector=metadata.name%3Dn1")),
        "{node_requests:?}"
    );

    stop_tx.send(true).unwrap();
    let state = tokio::time::timeout(Duration::from_secs(5), agent)
        .await
        .unwrap()
        .unwrap();
    assert!(state.node.taints.is_empty());
    assert_eq!(
        state.node.labels.get("gpu").map(String::as_str),
        Some("true")
    );
}

/// The resourceVersions the watcher's Node watches started from.
fn watched_nodes_from(server: &TestApiServer) -> Vec<u64> {
    server
        .log()
        .iter()
        .filter(|l| l.path == "/api/v1/nodes" && l.query.contains("watch=true"))
        .filter_map(|l| {
            l.query
                .split('&')
                .find_map(|kv| kv.strip_prefix("resourceVersion="))
                .and_then(|v| v.parse().ok())
        })
        .collect()
}

/// A watcher's rounds for node n1 against `server`, as the agent runs it.
struct Watching {
    rounds: tokio::sync::mpsc::Receiver<state::Round>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<PodsState>,
    _dir: tempfile::TempDir,
}

impl Watching {
    async fn start(server: &TestApiServer) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("seccomp");
        std::fs::create_dir_all(root.join("profiles")).unwrap();
        std::fs::write(root.join("profiles/good.json"), good_profile()).unwrap();
        let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
        let source = credentials::choose(Some(&kubeconfig), |_| false, |_| None);
        let kube = client::connect(&source).await.unwrap().unwrap();
        let mut state = PodsState::new(
            NodeContext {
                seccomp_root: root,
                labels: Default::default(),
                taints: Vec::new(),
                handlers: Some(["runc".to_string()].into()),
                lint: LintOptions {
                    check_listener: false,
                    ..LintOptions::default()
                },
                gpu: Default::default(),
            },
            Judge::new(Default::default(), read_reference),
        );
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let (round_tx, rounds) = tokio::sync::mpsc::channel(64);
        // No recheck within a test: every round comes from a change.
        let opts = WatchOptions {
            recheck: Duration::from_secs(3600),
            ..WatchOptions::default()
        };
        let task = tokio::spawn(async move {
            watch::rounds(kube, &mut state, &opts, stop_rx, "n1", None, round_tx).await;
            state
        });
        Watching {
            rounds,
            stop,
            task,
            _dir: dir,
        }
    }

    /// Rounds until one that `f` accepts, within `limit`: that one, every
    /// round before it, and how long it took.
    async fn until(
        &mut self,
        what: &str,
        limit: Duration,
        f: impl Fn(&state::Round) -> bool,
    ) -> (state::Round, Vec<state::Round>, Duration) {
        let start = Instant::now();
        let mut before = Vec::new();
        loop {
            let left = limit.saturating_sub(start.elapsed());
            let r = tokio::time::timeout(left, self.rounds.recv())
                .await
                .unwrap_or_else(|_| panic!("not within {limit:?}: {what}; rounds: {before:?}"))
                .expect("the watcher runs");
            if f(&r) {
                return (r, before, start.elapsed());
            }
            before.push(r);
        }
    }

    async fn stop(self) -> PodsState {
        self.stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .unwrap()
            .unwrap()
    }
}

fn plain_pod(name: &str, node: &str) -> Value {
    pod(
        name,
        Some(node),
        json!({}),
        json!({"containers": [{"name": "c"}]}),
    )
}

fn missing_profile_pod(name: &str) -> Value {
    pod(
        name,
        Some("n1"),
        json!({}),
        json!({"containers": [{"name": "c", "securityContext": localhost("profiles/missing.json")}]}),
    )
}

fn node_n1() -> TestApiServer {
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node("n1", json!([]));
    server
}

/// The pod list requests (pages), not watches.
fn pod_lists(server: &TestApiServer) -> Vec<support::apiserver::Logged> {
    server
        .log()
        .into_iter()
        .filter(|l| l.path == "/api/v1/pods" && !l.query.contains("watch="))
        .collect()
}

/// The resourceVersions the watcher's watches of `path` started from.
fn watched_from(server: &TestApiServer, path: &str) -> Vec<u64> {
    server
        .log()
        .iter()
        .filter(|l| l.path == path && l.query.contains("watch=true"))
        .filter_map(|l| {
            l.query
                .split('&')
                .find_map(|kv| kv.strip_prefix("resourceVersion="))
                .and_then(|v| v.parse().ok())
        })
        .collect()
}

/// kube's watcher lists in pages of 500 (client-go's pager size), each cut
/// from one snapshot; the selector filters before the limit counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twelve_hundred_pods_are_listed_in_pages_of_500() {
    let server = node_n1();
    // Interleaved with another node's 300: a page holds 500 of this node's.
    for i in 0..1500 {
        let node = if i % 5 == 4 { "n2" } else { "n1" };
        server.put("pods", plain_pod(&format!("p-{i:04}"), node));
    }
    let listed_at = server.resource_version();
    let start = Instant::now();
    let mut w = Watching::start(&server).await;
    let (r, _, _) = w.until("the first round", DEADLINE, |_| true).await;
    eprintln!(
        "FIGURE 1,200 pods in 3 pages of ≤500 → first round: {:?}",
        start.elapsed()
    );
    assert_eq!((r.pods, r.condition.status), (1200, ConditionStatus::True));
    let pages = pod_lists(&server);
    assert_eq!(pages.len(), 3, "{pages:?}");
    for (i, l) in pages.iter().enumerate() {
        assert_eq!(l.status, 200, "{l:?}");
        assert!(l.query.contains("limit=500"), "{l:?}");
        assert!(
            l.query.contains("fieldSelector=spec.nodeName%3Dn1"),
            "{l:?}"
        );
        assert_eq!(l.query.contains("continue="), i > 0, "{l:?}");
    }
    // The watch goes on from the list's version, with bookmarks asked for.
    within("the pods watched", || {
        watched_from(&server, "/api/v1/pods").contains(&listed_at)
    })
    .await;
    assert!(server
        .log()
        .iter()
        .filter(|l| l.path == "/api/v1/pods" && l.query.contains("watch=true"))
        .all(|l| l.query.contains("allowWatchBookmarks=true")));
    let state = w.stop().await;
    assert_eq!(state.index.len(), 1200);
}

/// The API server goes away; a pod is deleted and another created meanwhile,
/// and history is compacted, so the DELETED event is gone: the watch from the
/// old version gets 410 Gone, the watcher lists again, and the relist alone
/// drops the deleted pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_deleted_while_disconnected_is_dropped_by_the_relist_after_410() {
    let server = node_n1();
    server.put("pods", missing_profile_pod("gone"));
    server.put("pods", plain_pod("stays", "n1"));
    let mut w = Watching::start(&server).await;
    let (r, _, _) = w.until("the first round", DEADLINE, |_| true).await;
    assert_eq!(
        (r.pods, r.condition.status, r.condition.reason.as_str()),
        (2, ConditionStatus::False, "ProfileMissing")
    );
    assert_eq!(r.events.len(), 1);
    let lists = pod_lists(&server).len();

    server.set_fault(Fault::Down);
    server.cut_connections();
    server.delete("pods", "ml/gone");
    server.put(
        "pods",
        pod(
            "new",
            Some("n1"),
            json!({}),
            json!({"containers": [{"name": "c", "securityContext": localhost("profiles/good.json")}]}),
        ),
    );
    server.compact();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.clear_fault();
    // The first retry waits 0.8–1.6 s, the 410 after it 1.6–3.2 s more.
    let (r, before, t) = w
        .until("True after the relist", Duration::from_secs(8), |r| {
            r.condition.status == ConditionStatus::True
        })
        .await;
    eprintln!("FIGURE reconnected, 410 Gone, relisted → True: {t:?}");
    assert_eq!(r.pods, 2, "{r:?}");
    assert!(r.events.is_empty(), "{:?}", r.events);
    // Never the deleted pod beside the new one: nothing was learnt from events.
    assert!(before.iter().all(|r| r.pods <= 2), "{before:?}");
    assert!(server.gone_answers() >= 1);
    assert_eq!(pod_lists(&server).len(), lists + 1, "one relist of pods");
    let state = w.stop().await;
    let mut names: Vec<_> = state.index.refs().map(|p| p.name.clone()).collect();
    names.sort();
    assert_eq!(names, ["new", "stays"]);
}

/// Every connection is dropped and the API server stays away: the three
/// watches (pods, RuntimeClasses, the Node) retry with growing delays, not in
/// a loop, and carry on once it is back, with what they knew kept meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_is_retried_with_growing_delays() {
    let server = node_n1();
    server.put("pods", plain_pod("stays", "n1"));
    let mut w = Watching::start(&server).await;
    let (r, _, _) = w.until("the first round", DEADLINE, |_| true).await;
    assert_eq!(r.pods, 1);

    server.set_fault(Fault::Down);
    let cut = Instant::now();
    server.cut_connections();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let tries = server.connections_since(cut);
    eprintln!(
        "FIGURE connections cut, API server down 4 s → {} connection attempts by 3 watches: {tries:?}",
        tries.len()
    );
    // Each watch waits 0.8–1.6 s, then 1.6–3.2 s more (one may try once at
    // once, when its stream just ended): at most 3 tries each in 4 s, one
    // more for a request hyper retries on a fresh connection; a loop would
    // be hundreds.
    assert!((3..=12).contains(&tries.len()), "{tries:?}");
    server.clear_fault();
    server.put("pods", missing_profile_pod("later"));
    // The next try is at most 6.4 s after the last one.
    let (r, _, t) = w
        .until(
            "the pod bound after the outage",
            Duration::from_secs(10),
            |r| r.pods == 2,
        )
        .await;
    eprintln!("FIGURE API server back → the watch caught up: {t:?}");
    assert_eq!(r.condition.reason, "ProfileMissing", "{r:?}");
    assert_eq!(r.events.len(), 1, "{:?}", r.events);
    assert_eq!(pod_lists(&server).len(), 1, "resumed without a relist");
    w.stop().await;
}

/// An API server that is down when the watcher starts: each list attempt
/// fails, and the delays still grow. (kube's `default_backoff()` starts over
/// on the `Init` the watcher yields before every list attempt: 28 attempts in
/// 10 s, one a second per watch; this watcher: 12, gaps 0.8–1.6, 1.6–3.2, 3.2–6.4 s.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_down_from_the_start_is_retried_with_growing_delays() {
    let server = node_n1();
    server.set_fault(Fault::Down);
    let start = Instant::now();
    let w = Watching::start(&server).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let tries = server.connections_since(start);
    eprintln!(
        "FIGURE API server down from the start, 6 s → {} list attempts by 3 watches: {tries:?}",
        tries.len()
    );
    // Each watch: at once, then after 0.8–1.6 s, 1.6–3.2 s and 3.2–6.4 s more.
    assert!((6..=12).contains(&tries.len()), "{tries:?}");
    let state = w.stop().await;
    assert!(!state.synced());
}

/// Bookmarks: another node's pods change, which this watch never sees, yet
/// it resumes from a recent version, so a compaction does not cost a relist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_let_a_quiet_watch_resume_past_a_compaction() {
    let server = node_n1();
    server.put("pods", plain_pod("stays", "n1"));
    let mut w = Watching::start(&server).await;
    w.until("the first round", DEADLINE, |_| true).await;
    for i in 0..20 {
        server.put("pods", plain_pod(&format!("other-{i}"), "n2"));
    }
    let last = server.resource_version();
    within(
        "every watch resumed from a bookmark after the changes",
        || {
            [
                "/api/v1/pods",
                "/apis/node.k8s.io/v1/runtimeclasses",
                "/api/v1/nodes",
            ]
            .iter()
            .all(|p| watched_from(&server, p).iter().any(|v| *v >= last))
        },
    )
    .await;
    server.compact();
    server.cut_connections();
    server.put("pods", missing_profile_pod("new"));
    let (r, _, _) = w.until("the new pod", DEADLINE, |r| r.pods == 2).await;
    assert_eq!(r.condition.reason, "ProfileMissing");
    assert_eq!(server.gone_answers(), 0, "no watch was too old");
    assert_eq!(pod_lists(&server).len(), 1, "no relist");
    w.stop().await;
}

/// What the watcher relies on, as kube-apiserver serves it: pages of one
/// snapshot, a continue token that expires with compaction, a watch from a
/// compacted version answered by a 410 ERROR event, bookmarks when asked.
#[test]
fn the_test_server_pages_and_expires_as_an_api_server_does() {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::WatchEvent;

    let server = node_n1();
    for i in 0..5 {
        server.put("pods", plain_pod(&format!("p-{i}"), "n1"));
    }
    server.put("pods", plain_pod("q", "n2"));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let source = credentials::choose(Some(&kubeconfig), |_| false, |_| None);
        let kube = client::connect(&source).await.unwrap().unwrap();
        let pods: kube::Api<Pod> = kube::Api::all(kube);
        let names = |l: &kube::core::ObjectList<Pod>| {
            l.items
                .iter()
                .map(|p| p.metadata.name.clone().unwrap())
                .collect::<Vec<_>>()
        };
        let lp = ListParams::default().fields("spec.nodeName=n1").limit(2);
        let first = pods.list(&lp).await.unwrap();
        assert_eq!(names(&first), ["p-0", "p-1"]);
        let version = first.metadata.resource_version.clone().unwrap();
        // Changes after the first page do not show in the later ones.
        server.delete("pods", "ml/p-2");
        server.put("pods", plain_pod("p-5", "n1"));
        let token = first.metadata.continue_.clone().unwrap();
        let second = pods.list(&lp.clone().continue_token(&token)).await.unwrap();
        assert_eq!(names(&second), ["p-2", "p-3"]);
        assert_eq!(second.metadata.resource_version.as_ref(), Some(&version));
        let token = second.metadata.continue_.clone().unwrap();
        let third = pods.list(&lp.clone().continue_token(&token)).await.unwrap();
        assert_eq!(names(&third), ["p-4"]);
        assert_eq!(third.metadata.continue_.as_deref().unwrap_or(""), "");
        // Compacted: the old token and a watch from the old version are 410.
        server.compact();
        let err = pods
            .list(&lp.clone().continue_token(&token))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 410),
            "{err}"
        );
        let wp = WatchParams::default().fields("spec.nodeName=n1");
        let mut old = pods.watch(&wp, &version).await.unwrap().boxed();
        match old.next().await {
            Some(Ok(WatchEvent::Error(s))) => {
                assert_eq!(s.code, 410);
                assert!(s.message.starts_with("too old resource version"), "{s:?}");
            }
            other => panic!("{other:?}"),
        }
        // A new list sees the changes; a watch from it ends with a bookmark.
        let fresh = pods
            .list(&ListParams::default().fields("spec.nodeName=n1"))
            .await
            .unwrap();
        assert_eq!(names(&fresh), ["p-0", "p-1", "p-3", "p-4", "p-5"]);
        let now = fresh.metadata.resource_version.unwrap();
        let events: Vec<_> = pods.watch(&wp, &now).await.unwrap().collect().await;
        match events.as_slice() {
            [Ok(WatchEvent::Bookmark(b))] => assert_eq!(b.metadata.resource_version, now),
            other => panic!("{other:?}"),
        }
        let events: Vec<_> = pods
            .watch(&wp.clone().disable_bookmarks(), &now)
            .await
            .unwrap()
            .collect()
            .await;
        assert!(events.is_empty(), "{events:?}");
    });
}

/// `pods --once` (and so `check`) reads every page too: 1,200 pods in pages
/// of 500, none lost past the first page.
#[test]
fn pods_once_reads_every_page() {
    let server = node_n1();
    for i in 0..1200 {
        server.put("pods", plain_pod(&format!("p-{i:04}"), "n1"));
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("seccomp");
    std::fs::create_dir_all(&root).unwrap();
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .args([
            "--seccomp-root",
            root.to_str().unwrap(),
            "pods",
            "--once",
            "-o",
            "json",
        ])
        .args([
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--node-name",
            "n1",
        ])
        .env("NODEPROOF_LOG", "off")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["pods"], 1200, "{v}");
    let pages = pod_lists(&server);
    assert_eq!(pages.len(), 3, "{pages:?}");
    assert!(
        pages.iter().all(|l| l.query.contains("limit=500")),
        "{pages:?}"
    );
}

/// `--context` beside `--kubeconfig` on the node's commands too: `pods
/// --once` and `check` read the named context of the file (its
/// current-context points at a server that does not answer); a context the
/// file lacks is said with those it has, and `check` exits 3 (not judged).
#[test]
fn pods_and_check_take_a_context_of_the_kubeconfig() {
    let server = node_n1();
    server.put("pods", plain_pod("p-0", "n1"));
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("seccomp");
    std::fs::create_dir_all(&root).unwrap();
    let kubeconfig = server.kubeconfig_two_contexts(dir.path(), "node-n1");
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_nodeproof"))
            .args(["--seccomp-root", root.to_str().unwrap()])
            .args(args)
            .args([
                "--kubeconfig",
                kubeconfig.to_str().unwrap(),
                "--node-name",
                "n1",
            ])
            .env("NODEPROOF_LOG", "off")
            .output()
            .unwrap()
    };
    let out = run(&["pods", "--once", "-o", "json", "--context", "test"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["pods"], 1, "{v}");
    let out = run(&["check", "-o", "json", "--context", "test"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["not_judged"], serde_json::json!([]), "{v}");
    assert_eq!(v["credentials"]["context"], "test", "{v}");
    let out = run(&["check", "--context", "prod"]);
    assert_eq!(out.status.code(), Some(3));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("no context \"prod\" in it (it has gone, test): `kubectl config get-contexts` lists them"),
        "{said}"
    );
}

/// The daemon's lints reach the watcher by generation: a new one is judged
/// at once (no recheck, no change of the pods), and the round says which
/// generation it judged against, which is how the agent pairs a lint's round
/// with the pods' judgement of it (docs/architecture.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_lint_generation_is_judged_at_once_and_the_round_names_it() {
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node("n1", json!([]));
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("seccomp");
    std::fs::create_dir_all(&root).unwrap();
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let source = credentials::choose(Some(&kubeconfig), |_| false, |_| None);
    let kube = client::connect(&source).await.unwrap().unwrap();
    let mut state = PodsState::new(
        NodeContext {
            seccomp_root: root,
            labels: Default::default(),
            taints: Vec::new(),
            handlers: None,
            lint: LintOptions::default(),
            gpu: Default::default(),
        },
        Judge::new(Default::default(), read_reference),
    );
    let (linted, lints) = tokio::sync::watch::channel(state::LintGeneration::default());
    let (_stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // No recheck within the test: a round comes from the lists or a lint.
    let opts = WatchOptions {
        recheck: Duration::from_secs(3600),
        lints: Some(lints),
        ..WatchOptions::default()
    };
    let (round_tx, mut rounds) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        watch::rounds(kube, &mut state, &opts, stop_rx, "n1", None, round_tx).await;
    });
    async fn next(rounds: &mut tokio::sync::mpsc::Receiver<state::Round>) -> state::Round {
        tokio::time::timeout(DEADLINE, rounds.recv())
            .await
            .expect("a round within 5 s")
            .expect("the watcher runs")
    }
    assert_eq!(
        next(&mut rounds).await.lint_generation,
        state::LintGeneration(0)
    );
    for generation in [1, 2, 5] {
        let start = Instant::now();
        linted.send_replace(state::LintGeneration(generation));
        let r = next(&mut rounds).await;
        eprintln!(
            "FIGURE lint generation {generation} → judged: {:?}",
            start.elapsed()
        );
        assert_eq!(r.lint_generation, state::LintGeneration(generation));
    }
    // Each lint judged once: nothing more within half a second.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), rounds.recv())
            .await
            .is_err(),
        "one lint, one judgement"
    );
}

/// What the three watches cost the API server per node, measured: the
/// requests and the TCP connections of a start and of the steady state.
/// The test server ends every watch after 0.5 s (`WATCH_WINDOW`) where
/// kube-apiserver ends it at the `timeoutSeconds` asked (kube-runtime's
/// watcher: 290 s): each watch ended is followed by one watch from the last
/// version and nothing else, so the steady state per node is three watch
/// requests every 290 s (37.2 an hour; 186,000 an hour, 52 a second, at
/// 5,000 nodes) on three open connections. Why the watches are
/// kube-runtime's `watcher` and not its `reflector`: see
/// `nodeproof_apiclient::watch`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watches_cost_per_node_is_one_list_and_a_watch_every_290_s_per_kind() {
    const PODS: usize = 110; // the kubelet's default maxPods
    let server = node_n1();
    for i in 0..PODS {
        server.put("pods", plain_pod(&format!("p{i}"), "n1"));
    }
    let start = Instant::now();
    let mut w = Watching::start(&server).await;
    w.until("every pod", DEADLINE, |r| r.pods == PODS).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let elapsed = start.elapsed();
    let connections = server.connections_since(start).len();
    let log = server.log();
    w.stop().await;
    let requests = log.len();
    let windows = elapsed.as_secs_f64() / support::apiserver::watch::WATCH_WINDOW.as_secs_f64();
    let mut per_hour = 0.0;
    for kind in [
        "/api/v1/pods",
        "/apis/node.k8s.io/v1/runtimeclasses",
        "/api/v1/nodes",
    ] {
        let (watches, lists): (Vec<_>, Vec<_>) = log
            .iter()
            .filter(|l| l.path == kind)
            .partition(|l| l.query.contains("watch=true"));
        // One page (the selector filters before the limit of 500 counts), never again.
        assert_eq!(lists.len(), 1, "{kind}: {lists:?}");
        // A watch per window the server ended, no more.
        assert!(
            (1.0..=windows + 1.0).contains(&(watches.len() as f64)),
            "{kind}: {} watches in {windows:.1} windows",
            watches.len()
        );
        for l in &watches {
            let timeout: u64 = l
                .query
                .split('&')
                .find_map(|kv| kv.strip_prefix("timeoutSeconds="))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{kind}: a watch without timeoutSeconds: {l:?}"));
            assert_eq!(timeout, 290, "{kind}: {l:?}");
        }
        per_hour += 3600.0 / 290.0;
    }
    eprintln!(
        "FIGURE pods watch, {PODS} pods, {:.1} s ({windows:.1} test-server watch windows): 3 lists, \
         a watch per kind per window, {connections} TCP connections → steady state {per_hour:.1} watch \
         requests per node per hour, {:.0} an hour ({:.0}/s) at 5,000 nodes, 15,000 open watch connections",
        elapsed.as_secs_f64(),
        per_hour * 5000.0,
        per_hour * 5000.0 / 3600.0,
    );
    // A connection per open watch (kube-rs speaks HTTP/1.1 here), reused by
    // the next watch and the lists: at most one more per kind when a watch
    // starts before its connection is back in the pool, not one per request.
    assert!(
        connections <= 6,
        "{connections} connections for {requests} requests"
    );
}
