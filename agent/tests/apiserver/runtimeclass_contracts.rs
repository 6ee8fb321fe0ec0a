//! RuntimeClass contracts end to end: the agent (`nodeproof run`, the real
//! binary) against the test API server judges every annotated RuntimeClass
//! on its node and labels the Node `runtimeclass.nodeproof.dev/<class>` =
//! `ready` / `not-ready` as the node identity (NodeRestriction lets it), with
//! a Warning Node Event naming the cause; a class deleted or un-annotated
//! loses its label; a restart does not flap a label nor repeat an Event; a
//! pod bound here whose class is not ready is reported on the pod.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use nodeproof_report::contract::label_key;
use support::agent::{reporting_config, seccomp_root, Agent};
use support::apiserver::{Identity, TestApiServer};

const DEADLINE: Duration = Duration::from_secs(5);

fn within(what: &str, agent: &Agent, f: impl Fn() -> bool) -> Duration {
    within_for(DEADLINE, what, agent, f)
}

fn within_for(limit: Duration, what: &str, agent: &Agent, f: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < limit,
            "not within {limit:?}: {what}\n--- agent log ---\n{}",
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

/// An annotated RuntimeClass; `extra` is merged into it.
fn class(name: &str, profiles: &str, extra: Value) -> Value {
    let mut v = json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
        "metadata": {"name": name, "annotations": {"nodeproof.dev/localhost-profiles": profiles}},
        "handler": "runc"});
    merge(&mut v, &extra);
    v
}

fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                merge(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (t, p) => *t = p.clone(),
    }
}

fn label(server: &TestApiServer, class: &str) -> Option<String> {
    server.node("n1")["metadata"]["labels"][label_key(class)]
        .as_str()
        .map(str::to_string)
}

/// The Node Events with `reason`, as (message, count).
fn node_events(server: &TestApiServer, reason: &str) -> Vec<String> {
    server
        .events()
        .into_iter()
        .filter(|e| e["involvedObject"]["kind"] == "Node" && e["reason"] == reason)
        .map(|e| e["message"].as_str().unwrap_or("").to_string())
        .collect()
}

fn label_patches(server: &TestApiServer) -> usize {
    server
        .log()
        .iter()
        .filter(|l| l.method == "PATCH" && l.path.ends_with("/nodes/n1") && l.status < 300)
        .filter(|l| l.body["metadata"]["labels"].is_object())
        .count()
}

/// A 253-character RuntimeClass name (the most a DNS subdomain may have).
fn long_name() -> String {
    format!("{}.{}", "a".repeat(126), "b".repeat(126))
}

/// The node identity, its Node (tainted), a seccomp root with a good and a
/// start-failing profile, and the agent's config with one-round hysteresis
/// and room for a test's burst of writes (the daemon's default 0.2 requests
/// a second would space the Events of eight classes over half a minute).
fn setup(dir: &Path) -> (TestApiServer, String) {
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node("n1", json!([]));
    server.merge_node(
        "n1",
        json!({"metadata": {"labels": {"pool": "gpu"}},
               "spec": {"taints": [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]}}),
    );
    let root = seccomp_root(dir, true);
    // Only exit_group allowed: runc cannot even exec the entrypoint.
    std::fs::write(
        root.join("profiles/tiny.json"),
        r#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["exit_group"],"action":"SCMP_ACT_ALLOW"}]}"#,
    )
    .unwrap();
    let kubeconfig = server.kubeconfig(dir, "node-n1");
    let config = reporting_config(&root, &kubeconfig).replacen(
        "[report]\n",
        "[report]\nto-bad = 1\nto-good = 1\nqps = 20\nburst = 50\n",
        1,
    );
    (server, config)
}

/// Classes that tolerate the Node's taint unless said otherwise.
fn tolerant(name: &str, profiles: &str, extra: Value) -> Value {
    let mut v = class(
        name,
        profiles,
        json!({"scheduling": {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}}),
    );
    merge(&mut v, &extra);
    v
}

#[test]
fn contracts_are_judged_labelled_cleared_and_said_once() {
    let dir = tempfile::tempdir().unwrap();
    let (server, config) = setup(dir.path());
    // The documented form: the class selects its own contract label. Not circular.
    server.put(
        "runtimeclasses",
        tolerant(
            "vllm",
            "profiles/good.json",
            json!({"scheduling": {"nodeSelector": {label_key("vllm"): "ready", "pool": "gpu"}}}),
        ),
    );
    server.put(
        "runtimeclasses",
        tolerant(
            "missing",
            "profiles/good.json,profiles/gone.json",
            json!({}),
        ),
    );
    server.put(
        "runtimeclasses",
        tolerant("start-failed", "profiles/tiny.json", json!({})),
    );
    server.put(
        "runtimeclasses",
        tolerant(
            "no-handler",
            "profiles/good.json",
            json!({"handler": "nodeproof-test-absent"}),
        ),
    );
    server.put(
        "runtimeclasses",
        class(
            "untolerated",
            "profiles/good.json",
            json!({"scheduling": {}}),
        ),
    );
    server.put(
        "runtimeclasses",
        tolerant(
            "gpu",
            "profiles/good.json",
            json!({"metadata": {"annotations": {"nodeproof.dev/requires": "gpu"}}}),
        ),
    );
    server.put(
        "runtimeclasses",
        tolerant("escapes", "profiles/good.json,../../etc/shadow", json!({})),
    );
    server.put(
        "runtimeclasses",
        tolerant(&long_name(), "profiles/good.json", json!({})),
    );
    // Not annotated: no contract, no label.
    server.put(
        "runtimeclasses",
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
               "metadata": {"name": "plain"}, "handler": "runc"}),
    );

    // Left from a class deleted while no agent ran: removed once the classes are judged.
    server.merge_node(
        "n1",
        json!({"metadata": {"labels": {label_key("ghost"): "ready"}}}),
    );

    let mut agent = Agent::start(dir.path(), &config);
    agent.wait_ready(Duration::from_secs(30));
    let t = within("every contract labelled", &agent, || {
        label(&server, "ghost").is_none()
            && label(&server, "vllm").as_deref() == Some("ready")
            && label(&server, &long_name()).as_deref() == Some("ready")
            && [
                "missing",
                "start-failed",
                "no-handler",
                "untolerated",
                "gpu",
                "escapes",
            ]
            .iter()
            .all(|c| label(&server, c).as_deref() == Some("not-ready"))
    });
    eprintln!("FIGURE contracts labelled after the agent was ready: {t:?}");
    assert_eq!(label(&server, "plain"), None);
    assert!(label_key(&long_name()).len() <= "runtimeclass.nodeproof.dev/".len() + 63);
    // Others' labels stay.
    assert_eq!(server.node("n1")["metadata"]["labels"]["pool"], "gpu");

    // One Warning Node Event per not-ready class, naming its cause.
    within("six RuntimeClassNotReady Events", &agent, || {
        node_events(&server, "RuntimeClassNotReady").len() >= 6
    });
    let events = node_events(&server, "RuntimeClassNotReady");
    let said = |class: &str, cause: &str| {
        let prefix = format!("RuntimeClass {class} is not ready on this node: ");
        let hits: Vec<&String> = events.iter().filter(|m| m.starts_with(&prefix)).collect();
        assert_eq!(hits.len(), 1, "{class}: {events:#?}");
        assert!(hits[0].contains(cause), "{class}: {}", hits[0]);
    };
    said("missing", "profiles/gone.json: not found under");
    said(
        "start-failed",
        "profiles/tiny.json (noNewPrivileges=false): outcome start-failed",
    );
    said(
        "no-handler",
        "handler \"nodeproof-test-absent\" is not configured in the container runtime",
    );
    said(
        "untolerated",
        "this node's taint dedicated=infer:NoSchedule is not tolerated",
    );
    said(
        "gpu",
        "requires gpu: GPUDriverReady is not reported on this Node",
    );
    said(
        "escapes",
        "\"../../etc/shadow\" is not a relative path below the seccomp root",
    );
    assert_eq!(events.len(), 6, "{events:#?}");
    assert!(
        server
            .events()
            .iter()
            .filter(|e| e["reason"] == "RuntimeClassNotReady")
            .all(|e| e["type"] == "Warning"),
        "{:?}",
        server.events()
    );
    // A class first seen ready is not news.
    assert!(node_events(&server, "RuntimeClassReady").is_empty());

    // A pod already bound here whose class is not ready: reported on the pod.
    server.put(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "vllm-0", "namespace": "ml", "uid": "uid-vllm-0"},
            "spec": {"nodeName": "n1", "runtimeClassName": "missing", "containers": [{"name": "vllm"}]}}),
    );
    within("the pod's RuntimeClassNotReady Event", &agent, || {
        server.events().iter().any(|e| {
            e["involvedObject"]["kind"] == "Pod"
                && e["involvedObject"]["name"] == "vllm-0"
                && e["reason"] == "RuntimeClassNotReady"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("profiles/gone.json: not found"))
        })
    });
    within("SeccompProfilesReady False for the pod", &agent, || {
        server
            .condition("n1", "SeccompProfilesReady")
            .is_some_and(|c| c["status"] == "False" && c["reason"] == "RuntimeClassNotReady")
    });

    // Fixed on disk: ready again, with a Normal Event.
    std::fs::copy(
        dir.path().join("seccomp/profiles/good.json"),
        dir.path().join("seccomp/profiles/gone.json"),
    )
    .unwrap();
    // The seccomp root's watch or the 10 s recheck picks the file up.
    within_for(
        Duration::from_secs(15),
        "missing ready once the file is there",
        &agent,
        || label(&server, "missing").as_deref() == Some("ready"),
    );
    // The Event goes out on its own schedule, after or before the label.
    within_for(
        Duration::from_secs(10),
        "the RuntimeClassReady Event",
        &agent,
        || !node_events(&server, "RuntimeClassReady").is_empty(),
    );
    let ready = node_events(&server, "RuntimeClassReady");
    assert_eq!(
        ready,
        ["RuntimeClass missing is ready on this node"],
        "{ready:?}"
    );

    // Un-annotated: the label goes; annotated again: it comes back.
    server.put(
        "runtimeclasses",
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
               "metadata": {"name": "vllm"}, "handler": "runc"}),
    );
    within("vllm's label removed", &agent, || {
        label(&server, "vllm").is_none()
    });
    server.put(
        "runtimeclasses",
        tolerant("vllm", "profiles/good.json", json!({})),
    );
    within("vllm's label back", &agent, || {
        label(&server, "vllm").as_deref() == Some("ready")
    });
    // Deleted: its label goes too, the others stay.
    server.delete("runtimeclasses", "start-failed");
    within("start-failed's label removed", &agent, || {
        label(&server, "start-failed").is_none()
    });
    assert_eq!(label(&server, "gpu").as_deref(), Some("not-ready"));
}

#[test]
fn a_restart_reads_the_labels_back_and_neither_flaps_nor_repeats() {
    let dir = tempfile::tempdir().unwrap();
    let (server, config) = setup(dir.path());
    server.put(
        "runtimeclasses",
        tolerant("vllm", "profiles/good.json", json!({})),
    );
    server.put(
        "runtimeclasses",
        tolerant("missing", "profiles/gone.json", json!({})),
    );
    let mut agent = Agent::start(dir.path(), &config);
    agent.wait_ready(Duration::from_secs(30));
    within("both labelled", &agent, || {
        label(&server, "vllm").as_deref() == Some("ready")
            && label(&server, "missing").as_deref() == Some("not-ready")
    });
    assert!(agent.stop());
    let contract_events = || {
        server
            .events()
            .into_iter()
            .filter(|e| e["reason"] == "RuntimeClassNotReady" || e["reason"] == "RuntimeClassReady")
            .collect::<Vec<Value>>()
    };
    let events_before = contract_events();
    assert_eq!(events_before.len(), 1, "{events_before:#?}");
    server.clear_log();

    let mut agent = Agent::start(dir.path(), &config);
    agent.wait_ready(Duration::from_secs(30));
    // Until its pods watcher has judged twice (the first round at once, the next at the 10 s recheck
    // or sooner on the seccomp root's lint), nothing about the contracts changes on the Node.
    within("the pods watched again", &agent, || {
        agent.get("/healthz/pods").1.contains("pods 0 watched")
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(label(&server, "vllm").as_deref(), Some("ready"));
    assert_eq!(label(&server, "missing").as_deref(), Some("not-ready"));
    assert_eq!(
        label_patches(&server),
        0,
        "no label written again after a restart\n{}",
        agent.log_text()
    );
    assert_eq!(
        contract_events(),
        events_before,
        "a class still not ready is not news"
    );
}

#[test]
fn runtimeclass_labels_can_be_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    let (server, config) = setup(dir.path());
    server.put(
        "runtimeclasses",
        tolerant("missing", "profiles/gone.json", json!({})),
    );
    // A label left from when it was on: nodeproof's, so removed.
    server.merge_node(
        "n1",
        json!({"metadata": {"labels": {label_key("old"): "ready"}}}),
    );
    let config = config.replacen("[report]\n", "[report]\nruntimeclass-labels = false\n", 1);
    let mut agent = Agent::start(dir.path(), &config);
    agent.wait_ready(Duration::from_secs(30));
    within("the old contract label removed", &agent, || {
        label(&server, "old").is_none()
    });
    within("the pods watched", &agent, || {
        agent.get("/healthz/pods").1.contains("pods 0 watched")
    });
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(label(&server, "missing"), None);
    assert!(node_events(&server, "RuntimeClassNotReady").is_empty());
}

/// NodeRestriction as kube-apiserver enforces it: a node may set labels
/// outside `kubernetes.io`/`k8s.io` (the contract labels), and only the
/// kubelet's own labels inside them.
#[tokio::test]
async fn the_node_identity_may_set_contract_labels_and_no_restricted_ones() {
    use nodeproof_apiclient::client;
    use nodeproof_report::credentials;
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node("n1", json!([]));
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let source = credentials::choose(Some(&kubeconfig), |_| false, |_| None);
    let kube = client::connect(&source).await.unwrap().unwrap();
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(kube);
    let patch = |key: &str| {
        let nodes = nodes.clone();
        let body = json!({"metadata": {"labels": {key: "x"}}});
        async move {
            nodes
                .patch(
                    "n1",
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Strategic(body),
                )
                .await
                .map(|_| ())
                .map_err(|e| match e {
                    kube::Error::Api(s) => (s.code, s.message),
                    e => (0, e.to_string()),
                })
        }
    };
    for allowed in [
        label_key("vllm").as_str(),
        "nodeproof.dev/gpu-healthy",
        "kubernetes.io/hostname",
        "node.kubernetes.io/instance-type",
        "feature.node.kubernetes.io/gpu",
        "example.com/pool",
    ] {
        assert_eq!(patch(allowed).await, Ok(()), "{allowed}");
    }
    for forbidden in [
        "node-role.kubernetes.io/gpu",
        "kubernetes.io/role",
        "example.k8s.io/x",
        "node-restriction.kubernetes.io/pool",
    ] {
        let e = patch(forbidden).await.unwrap_err();
        assert_eq!(e.0, 403, "{forbidden}: {e:?}");
        assert!(
            e.1.contains(&format!("is not allowed to modify labels: {forbidden}")),
            "{e:?}"
        );
    }
}

/// A recording of `pod` (namespace ml) whose container `app` ran under
/// Localhost `profile` and called `read` and `mkdir`, as `[record]` keeps it.
fn kept_recording(state: &Path, pod: &str, profile: &str) {
    let dir = state.join("recordings/ml");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join(format!("{pod}.json")),
        json!({"format": "nodeproof.recording/v1", "node": "n1",
               "pod": {"namespace": "ml", "name": pod},
               "started": "2026-12-06T01:00:00Z", "ended": "2026-12-06T01:10:00Z",
               "containers": [{"name": "app", "profile": format!("localhost/{profile}"),
                   "arches": [{"arch": "SCMP_ARCH_X86_64",
                               "syscalls": [{"nr": 0, "name": "read"}, {"nr": 83, "name": "mkdir"}]}],
                   "lost": 0}]})
        .to_string(),
    )
    .unwrap();
}

/// The rollout guard (`[record] rollout-guard = true`): a profile edit that
/// stops a call recorded by a pod running under it turns the classes that
/// list it not-ready, naming profile, call and pod; an edit that stops only
/// what no recorded pod of the profile calls does not; putting the call back
/// makes the class ready again.
#[test]
fn the_rollout_guard_holds_a_class_whose_profile_change_stops_a_recorded_call() {
    let dir = tempfile::tempdir().unwrap();
    let (server, config) = setup(dir.path());
    let state = dir.path().join("state");
    let root = dir.path().join("seccomp");
    let v1 = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../profiles/runtime-default-x86_64.json"
    ))
    .unwrap();
    let without_mkdir = v1.replacen("\"mkdir\",", "", 1);
    assert_ne!(v1, without_mkdir);
    std::fs::write(root.join("profiles/app.json"), &v1).unwrap();
    std::fs::write(root.join("profiles/db.json"), &v1).unwrap();
    // web-0 ran under app.json and called mkdir; no pod of db.json is recorded.
    kept_recording(&state, "web-0", "profiles/app.json");
    kept_recording(&state, "other-0", "profiles/elsewhere.json");
    server.put(
        "runtimeclasses",
        tolerant("web", "profiles/app.json", json!({})),
    );
    server.put(
        "runtimeclasses",
        tolerant("db", "profiles/db.json", json!({})),
    );
    let config = format!(
        "{config}[daemon]\nstate-dir = \"{}\"\n[record]\nrollout-guard = true\n",
        state.display()
    );
    let mut agent = Agent::start(dir.path(), &config);
    agent.wait_ready(Duration::from_secs(30));
    within_for(
        Duration::from_secs(15),
        "both classes ready",
        &agent,
        || {
            label(&server, "web").as_deref() == Some("ready")
                && label(&server, "db").as_deref() == Some("ready")
        },
    );

    // Both profiles lose mkdir: only web's pods were recorded making it.
    std::fs::write(root.join("profiles/app.json"), &without_mkdir).unwrap();
    std::fs::write(root.join("profiles/db.json"), &without_mkdir).unwrap();
    let t = within_for(
        Duration::from_secs(15),
        "web held not-ready",
        &agent,
        || label(&server, "web").as_deref() == Some("not-ready"),
    );
    eprintln!("FIGURE rollout guard: web not-ready {t:?} after the edit");
    within("web's RuntimeClassNotReady Event", &agent, || {
        node_events(&server, "RuntimeClassNotReady")
            .iter()
            .any(|m| m.starts_with("RuntimeClass web is not ready on this node: "))
    });
    let said = node_events(&server, "RuntimeClassNotReady");
    let web = said
        .iter()
        .find(|m| m.starts_with("RuntimeClass web "))
        .unwrap();
    assert!(
        web.contains("profiles/app.json changed (sha256 ")
            && web
                .contains(") and stops mkdir that pod ml/web-0 made: new pods of this class wait"),
        "{web}"
    );
    assert_eq!(label(&server, "db").as_deref(), Some("ready"), "{said:#?}");
    assert!(
        agent
            .log_text()
            .contains("the rollout guard holds the profile's classes"),
        "{}",
        agent.log_text()
    );

    // mkdir allowed again: nothing recorded is stopped, web is ready again.
    std::fs::write(root.join("profiles/app.json"), &v1).unwrap();
    within_for(Duration::from_secs(15), "web ready again", &agent, || {
        label(&server, "web").as_deref() == Some("ready")
    });
}
