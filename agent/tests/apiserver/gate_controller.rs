//! The real `nodeproof gate-controller` against the test API server: gates
//! released when a matching node turns ready and not before, never on a
//! stale heartbeat, foreign gates untouched, the aggregated Event updated
//! and not repeated, two replicas with the leader killed, and
//! deploy/base/gate-controller.yaml: its types, its config, and its RBAC
//! against every request the controller made.

use crate::support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use serde_json::{json, Value};

use support::agent::{free_port, get};
use support::apiserver::{Fault, Identity, Logged, TestApiServer};
use support::rbac::{coverage, request_info, rule_allows, RequestInfo};

const MANIFEST: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../deploy/base/gate-controller.yaml"
);
const GPU_GATE: &str = "nodeproof.dev/gpu-driver-ready";
const FOREIGN_GATE: &str = "example.com/quota";
const NS: &str = "nodeproof";
const LEASE: &str = "nodeproof-gate-controller";
/// The tests' lease: 3 s, renewed 1 s before expiry.
const LEASE_S: u64 = 3;

/// A running controller; SIGKILLed on drop (or by the test).
struct Controller {
    child: Child,
    log: PathBuf,
    port: u16,
}

impl Controller {
    fn start(server: &TestApiServer, dir: &Path, identity: &str, config: &str) -> Controller {
        let kubeconfig = server.kubeconfig(dir, "sa-gate");
        let config_path = dir.join(format!("{identity}.toml"));
        std::fs::write(&config_path, config).unwrap();
        let log = dir.join(format!("{identity}.log"));
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_nodeproof"))
            .arg("gate-controller")
            .arg("--config")
            .arg(&config_path)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--namespace", NS, "--identity", identity])
            .arg(format!("--lease-duration={LEASE_S}s"))
            .arg("--lease-grace=1s")
            .arg(format!("--listen=127.0.0.1:{port}"))
            .env("NODEPROOF_LOG", "info,nodeproof_cluster=debug")
            .env_remove("JOURNAL_STREAM")
            .env_remove("POD_NAME")
            .env_remove("POD_NAMESPACE")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Controller { child, log, port }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.kill();
    }
}

fn server() -> TestApiServer {
    let server = TestApiServer::start();
    server.add_token("sa-gate", Identity::GateControllerServiceAccount);
    server
}

fn config(heartbeat_s: u64, stale_heartbeats: u32) -> String {
    format!(
        "[gate]\nheartbeat-s = {heartbeat_s}\nstale-heartbeats = {stale_heartbeats}\n\
         [gate.gates.\"{GPU_GATE}\"]\nconditions = [\"GPUDriverReady\", \"GPUHealthy\"]\n"
    )
}

/// RFC 3339, `age` seconds ago.
fn ago(age: u64) -> String {
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    k8s_openapi::jiff::Timestamp::from_second(now - age as i64)
        .unwrap()
        .to_string()
}

/// nodeproof's GPU conditions as the agent writes them, heartbeat `age` seconds ago.
fn gpu_conditions(driver: &str, reason: &str, age: u64) -> Value {
    json!([
        {"type": "Ready", "status": "True", "reason": "KubeletReady"},
        {"type": "GPUDriverReady", "status": driver, "reason": reason,
         "lastHeartbeatTime": ago(age), "lastTransitionTime": ago(600)},
        {"type": "GPUHealthy", "status": "True", "reason": "Healthy",
         "lastHeartbeatTime": ago(age), "lastTransitionTime": ago(600)},
    ])
}

/// A node with `gpus` allocatable and a `pool` label.
fn add_node(server: &TestApiServer, name: &str, pool: &str, gpus: u32, conditions: Value) {
    server.add_node(name, conditions);
    let mut alloc = json!({"cpu": "16"});
    if gpus > 0 {
        alloc["nvidia.com/gpu"] = json!(gpus.to_string());
    }
    server.merge_node(
        name,
        json!({"metadata": {"labels": {"pool": pool}}, "status": {"allocatable": alloc}}),
    );
}

fn set_conditions(server: &TestApiServer, name: &str, conditions: Value) {
    // merge_json replaces arrays whole, as a status update by the agent would leave them.
    server.merge_node(name, json!({"status": {"conditions": conditions}}));
}

/// A pending pod with the foreign gate first, then ours, asking for one GPU in `pool`.
fn put_pod(server: &TestApiServer, name: &str, pool: &str) {
    server.put(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "ml", "name": name, "uid": format!("uid-{name}"),
                         "creationTimestamp": ago(0)},
            "spec": {"nodeSelector": {"pool": pool},
                     "schedulingGates": [{"name": FOREIGN_GATE}, {"name": GPU_GATE}],
                     "containers": [{"name": "vllm", "image": "vllm",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}),
    );
}

fn gates(server: &TestApiServer, key: &str) -> Vec<String> {
    server.pod(key).unwrap()["spec"]["schedulingGates"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| g["name"].as_str().unwrap().to_string())
        .collect()
}

fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    done()
}

/// The Events about pod `name`.
fn pod_events(server: &TestApiServer, name: &str) -> Vec<Value> {
    server
        .events()
        .into_iter()
        .filter(|e| e["involvedObject"]["kind"] == "Pod" && e["involvedObject"]["name"] == name)
        .collect()
}

/// Waits up to `timeout` for an Event on pod `name` saying `message`; fails
/// with the pod's Events and the controller's log.
fn await_event(
    server: &TestApiServer,
    c: &Controller,
    name: &str,
    message: &str,
    timeout: Duration,
) {
    assert!(
        wait_until(timeout, || pod_events(server, name)
            .iter()
            .any(|e| e["message"] == message)),
        "no Event {message:?} on {name}: {:#?}\n{}",
        pod_events(server, name),
        c.log_text()
    );
}

fn lease_holder(server: &TestApiServer) -> Option<String> {
    lease_holder_of(server, LEASE)
}

/// Successful gate removals of pod `name`.
fn removals(log: &[Logged], name: &str) -> usize {
    log.iter()
        .filter(|l| {
            l.method == "PATCH"
                && l.path == format!("/api/v1/namespaces/ml/pods/{name}")
                && l.status == 200
        })
        .count()
}

#[test]
fn gate_released_when_a_matching_node_turns_ready_and_not_before_foreign_gates_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let server = server();
    add_node(
        &server,
        "gpu-1",
        "gpu",
        8,
        gpu_conditions("False", "NVMLInitFailed", 0),
    );
    // Ready, but in another pool: never a reason to release.
    add_node(
        &server,
        "other-1",
        "other",
        8,
        gpu_conditions("True", "Ok", 0),
    );
    // In the pool, without GPUs.
    add_node(&server, "cpu-1", "gpu", 0, gpu_conditions("True", "Ok", 0));
    put_pod(&server, "vllm-0", "gpu");
    let c = Controller::start(&server, dir.path(), "a", &config(60, 3));
    let want = format!(
        "waiting for {GPU_GATE}: 0 of 3 nodes ready for the pod: 1 lacks nvidia.com/gpu, \
         1 GPUDriverReady=False (NVMLInitFailed), 1 ready but excluded by the pod's own nodeSelector or affinity"
    );
    await_event(&server, &c, "vllm-0", &want, Duration::from_secs(20));
    // Judged and waiting: still gated a while later.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(gates(&server, "ml/vllm-0"), [FOREIGN_GATE, GPU_GATE]);
    assert_eq!(removals(&server.log(), "vllm-0"), 0);

    let ready = Instant::now();
    set_conditions(&server, "gpu-1", gpu_conditions("True", "Ok", 0));
    assert!(
        wait_until(Duration::from_secs(10), || gates(&server, "ml/vllm-0")
            == [FOREIGN_GATE]),
        "{}",
        c.log_text()
    );
    let latency = ready.elapsed();
    eprintln!("gate release latency after the node turned ready: {latency:?}");
    assert!(latency <= Duration::from_secs(2), "{latency:?}");
    // The other controller's gate stays, so the pod is not schedulable yet.
    assert_eq!(server.schedulable_at("ml/vllm-0"), None);
    assert_eq!(removals(&server.log(), "vllm-0"), 1);
    // Once the other controller removes its gate, the pod is schedulable.
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(gates(&server, "ml/vllm-0"), [FOREIGN_GATE], "never touched");
    assert_eq!(removals(&server.log(), "vllm-0"), 1, "removed once");
    let (code, metrics) = get(c.port, "/metrics");
    assert_eq!(code, 200);
    for line in [
        format!("nodeproof_gate_releases_total{{gate=\"{GPU_GATE}\"}} 1"),
        format!("nodeproof_gate_gated_pods{{gate=\"{GPU_GATE}\"}} 0"),
        "nodeproof_gate_leader 1".to_string(),
    ] {
        assert!(metrics.contains(&line), "{line} in\n{metrics}");
    }
}

#[test]
fn a_stale_heartbeat_never_releases() {
    let dir = tempfile::tempdir().unwrap();
    let server = server();
    // Every condition True, but last written 30 s ago with heartbeats every 2 s:
    // the agent is gone, and so is what it said.
    add_node(&server, "gpu-1", "gpu", 8, gpu_conditions("True", "Ok", 30));
    put_pod(&server, "vllm-0", "gpu");
    let c = Controller::start(&server, dir.path(), "a", &config(2, 3));
    let want = format!(
        "waiting for {GPU_GATE}: 0 of 1 nodes ready for the pod: 1 with a GPUDriverReady heartbeat older than 6s (its agent stopped reporting)"
    );
    await_event(&server, &c, "vllm-0", &want, Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(gates(&server, "ml/vllm-0"), [FOREIGN_GATE, GPU_GATE]);
    // Meanwhile the other controller removes its gate: ours moves to index 0.
    let mut pod = server.pod("ml/vllm-0").unwrap();
    pod["spec"]["schedulingGates"]
        .as_array_mut()
        .unwrap()
        .remove(0);
    server.put("pods", pod);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(gates(&server, "ml/vllm-0"), [GPU_GATE]);
    assert_eq!(
        server.schedulable_at("ml/vllm-0"),
        None,
        "still gated by ours"
    );
    // The agent comes back: fresh heartbeats release it, and with the last
    // gate gone the pod is schedulable.
    set_conditions(&server, "gpu-1", gpu_conditions("True", "Ok", 0));
    assert!(
        wait_until(Duration::from_secs(5), || server
            .schedulable_at("ml/vllm-0")
            .is_some()),
        "{}",
        c.log_text()
    );
    assert!(gates(&server, "ml/vllm-0").is_empty());
    // A pod waiting on a node whose agent then falls silent: with no Node
    // write at all, the heartbeat ages past 3 × 2 s and the Event says so
    // (found by the controller's clock, not by a watch event).
    add_node(
        &server,
        "gpu-2",
        "slow",
        8,
        gpu_conditions("False", "NVMLInitFailed", 0),
    );
    put_pod(&server, "vllm-1", "slow");
    let silent = Instant::now();
    // gpu-1 (another pool) counts too, ready or stale as its own heartbeat ages.
    let before = format!(
        "waiting for {GPU_GATE}: 0 of 2 nodes ready for the pod: 1 GPUDriverReady=False (NVMLInitFailed), "
    );
    let stale =
        "1 with a GPUDriverReady heartbeat older than 6s (its agent stopped reporting)".to_string();
    let says = |m: &str| {
        pod_events(&server, "vllm-1")
            .iter()
            .any(|e| e["message"].as_str().is_some_and(|t| t.contains(m)))
    };
    assert!(
        wait_until(Duration::from_secs(5), || says(&before)),
        "{:#?}\n{}",
        pod_events(&server, "vllm-1"),
        c.log_text()
    );
    assert!(
        wait_until(Duration::from_secs(12), || says(&stale)),
        "{:#?}\n{}",
        pod_events(&server, "vllm-1"),
        c.log_text()
    );
    // metav1.Time has whole seconds: the heartbeat written is up to 1 s older than the write.
    let after = silent.elapsed();
    assert!(
        after >= Duration::from_secs(5),
        "not before 3 heartbeats: {after:?}"
    );
    // One Event, updated (the pod may first have been judged before the
    // node's labels arrived on their own watch: "0 of 0", then the reason).
    let events = pod_events(&server, "vllm-1");
    assert_eq!(events.len(), 1, "{events:#?}");
    assert!(events[0]["count"].as_i64() >= Some(2), "{events:#?}");
    assert_eq!(gates(&server, "ml/vllm-1"), [FOREIGN_GATE, GPU_GATE]);
}

/// The Event scenario; its request log feeds the RBAC test.
fn event_scenario() -> Vec<Logged> {
    let dir = tempfile::tempdir().unwrap();
    let server = server();
    add_node(
        &server,
        "gpu-1",
        "gpu",
        8,
        gpu_conditions("False", "NVMLInitFailed", 0),
    );
    put_pod(&server, "vllm-0", "gpu");
    let c = Controller::start(&server, dir.path(), "a", &config(60, 3));
    let first = format!(
        "waiting for {GPU_GATE}: 0 of 1 nodes ready for the pod: 1 GPUDriverReady=False (NVMLInitFailed)"
    );
    await_event(&server, &c, "vllm-0", &first, Duration::from_secs(20));
    // Heartbeats alone, many times: nothing new to say, nothing written.
    for _ in 0..5 {
        set_conditions(
            &server,
            "gpu-1",
            gpu_conditions("False", "NVMLInitFailed", 0),
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let events = pod_events(&server, "vllm-0");
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["count"], 1);
    // A new reason: the same Event, patched.
    set_conditions(
        &server,
        "gpu-1",
        gpu_conditions("False", "DriverNotLoaded", 0),
    );
    let second = format!(
        "waiting for {GPU_GATE}: 0 of 1 nodes ready for the pod: 1 GPUDriverReady=False (DriverNotLoaded)"
    );
    await_event(&server, &c, "vllm-0", &second, Duration::from_secs(5));
    let events = pod_events(&server, "vllm-0");
    assert_eq!(events.len(), 1, "updated, not repeated: {events:#?}");
    assert_eq!(events[0]["count"], 2);
    assert_eq!(events[0]["reason"], "SchedulingGated");
    assert_eq!(events[0]["involvedObject"]["uid"], "uid-vllm-0");
    let log = server.log();
    let posts = log
        .iter()
        .filter(|l| l.method == "POST" && l.path.ends_with("/events"))
        .count();
    assert_eq!(posts, 1);
    // And released, the release condition written after the gate's removal
    // (the RBAC test below reads that pods/status PATCH in this log).
    set_conditions(&server, "gpu-1", gpu_conditions("True", "Ok", 0));
    assert!(
        wait_until(Duration::from_secs(5), || gates(&server, "ml/vllm-0")
            == [FOREIGN_GATE]),
        "{}",
        c.log_text()
    );
    assert!(
        wait_until(Duration::from_secs(5), || server
            .log()
            .iter()
            .any(
                |l| l.method == "PATCH" && l.path.ends_with("/pods/vllm-0/status")
            )),
        "{}",
        c.log_text()
    );
    server.log()
}

/// The device taints' scenario (agent/tests/apiserver/gate_device_taints.rs tells it
/// in full); its request log feeds the RBAC test: resourceslices and
/// devicetaintrules listed and watched, one rule created, then deleted.
fn device_taint_scenario() -> Vec<Logged> {
    let dir = tempfile::tempdir().unwrap();
    let server = server();
    server.serve_dra(&["v1"]);
    server.serve_device_taint_rules(&["v1beta2"]);
    add_node(&server, "gpu-1", "gpu", 1, gpu_conditions("True", "Ok", 0));
    server.put(
        "resourceslices",
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": "gpu-1-gpu.nvidia.com"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": "gpu-1",
                "pool": {"name": "gpu-1", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-aaaa"}}}]}}),
    );
    let annotate = |v: Option<&str>| {
        server.merge_node(
            "gpu-1",
            json!({"metadata": {"annotations": {"gpu.nodeproof.dev/unhealthy-devices": v}}}),
        );
    };
    annotate(Some("GPU-aaaa=GPULost"));
    let c = Controller::start(&server, dir.path(), "a", &config(60, 3));
    assert!(
        wait_until(Duration::from_secs(20), || server
            .device_taint_rules()
            .len()
            == 1),
        "{}",
        c.log_text()
    );
    annotate(None);
    assert!(
        wait_until(Duration::from_secs(10), || server
            .device_taint_rules()
            .is_empty()),
        "{}",
        c.log_text()
    );
    server.log()
}

#[test]
fn the_aggregated_event_is_updated_not_repeated() {
    event_scenario();
}

#[test]
fn two_replicas_leader_killed_the_other_takes_over_within_the_lease_and_releases_each_gate_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = server();
    add_node(&server, "a-1", "a", 8, gpu_conditions("True", "Ok", 0));
    add_node(
        &server,
        "b-1",
        "b",
        8,
        gpu_conditions("False", "NVMLInitFailed", 0),
    );
    let mut a = Controller::start(&server, dir.path(), "a", &config(60, 3));
    assert!(
        wait_until(Duration::from_secs(20), || lease_holder(&server).as_deref()
            == Some("a")),
        "{}",
        a.log_text()
    );
    let b = Controller::start(&server, dir.path(), "b", &config(60, 3));
    // Pool a's pods are released by a; pool b's wait.
    for i in 0..3 {
        put_pod(&server, &format!("a-{i}"), "a");
        put_pod(&server, &format!("b-{i}"), "b");
    }
    assert!(
        wait_until(Duration::from_secs(10), || (0..3).all(|i| gates(
            &server,
            &format!("ml/a-{i}")
        ) == [
            FOREIGN_GATE
        ])),
        "{}",
        a.log_text()
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(lease_holder(&server).as_deref(), Some("a"), "b waits");
    a.kill();
    let killed = Instant::now();
    assert!(
        wait_until(Duration::from_secs(LEASE_S + 5), || lease_holder(&server)
            .as_deref()
            == Some("b")),
        "{}",
        b.log_text()
    );
    let takeover = killed.elapsed();
    eprintln!("takeover after the leader was killed: {takeover:?} (lease {LEASE_S} s)");
    // The lease expires at most LEASE_S after the kill; kube-lease-manager
    // then force-releases it and waits 0.1..1 s before taking it.
    assert!(takeover <= Duration::from_secs(LEASE_S + 2), "{takeover:?}");
    set_conditions(&server, "b-1", gpu_conditions("True", "Ok", 0));
    assert!(
        wait_until(Duration::from_secs(10), || (0..3).all(|i| gates(
            &server,
            &format!("ml/b-{i}")
        ) == [
            FOREIGN_GATE
        ])),
        "{}",
        b.log_text()
    );
    std::thread::sleep(Duration::from_millis(1500));
    let log = server.log();
    for i in 0..3 {
        for pool in ["a", "b"] {
            let name = format!("{pool}-{i}");
            assert_eq!(removals(&log, &name), 1, "{name} released exactly once");
            assert_eq!(gates(&server, &format!("ml/{name}")), [FOREIGN_GATE]);
        }
    }
}

/// The manifest's ServiceAccount, and the rules bound to it: (namespace of
/// a Role, or None for a ClusterRole; rule).
fn bound_rules(docs: &[Value]) -> (ServiceAccount, Vec<(Option<String>, PolicyRule)>) {
    let of_kind = |kind: &'static str| docs.iter().filter(move |d| d["kind"] == kind).cloned();
    let sa: ServiceAccount =
        serde_json::from_value(of_kind("ServiceAccount").next().expect("a ServiceAccount"))
            .unwrap();
    let binds_sa = |subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        subjects.iter().flatten().any(|s| {
            s.kind == "ServiceAccount"
                && Some(&s.name) == sa.metadata.name.as_ref()
                && s.namespace == sa.metadata.namespace
        })
    };
    let mut rules = Vec::new();
    let cluster_roles: Vec<ClusterRole> = of_kind("ClusterRole")
        .map(|d| serde_json::from_value(d).unwrap())
        .collect();
    for b in of_kind("ClusterRoleBinding")
        .map(|d| serde_json::from_value::<ClusterRoleBinding>(d).unwrap())
    {
        assert!(
            binds_sa(&b.subjects),
            "{:?} binds another subject",
            b.metadata.name
        );
        let role = cluster_roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(&b.role_ref.name))
            .expect("bound ClusterRole");
        rules.extend(role.rules.iter().flatten().map(|r| (None, r.clone())));
    }
    let roles: Vec<Role> = of_kind("Role")
        .map(|d| serde_json::from_value(d).unwrap())
        .collect();
    for b in of_kind("RoleBinding").map(|d| serde_json::from_value::<RoleBinding>(d).unwrap()) {
        assert!(
            binds_sa(&b.subjects),
            "{:?} binds another subject",
            b.metadata.name
        );
        assert_eq!(b.role_ref.kind, "Role");
        let role = roles
            .iter()
            .find(|r| {
                r.metadata.name.as_deref() == Some(&b.role_ref.name)
                    && r.metadata.namespace == b.metadata.namespace
            })
            .expect("bound Role in the binding's namespace");
        rules.extend(
            role.rules
                .iter()
                .flatten()
                .map(|r| (role.metadata.namespace.clone(), r.clone())),
        );
    }
    (sa, rules)
}

#[test]
fn the_manifest_parses_its_config_is_valid_and_its_rbac_is_exactly_what_the_controller_uses() {
    let text = std::fs::read_to_string(MANIFEST).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("YAML");
    let (sa, rules) = bound_rules(&docs);
    assert_eq!(
        sa.metadata.name.as_deref(),
        Some("nodeproof-gate-controller")
    );
    assert_eq!(sa.metadata.namespace.as_deref(), Some(NS));
    let deployment: Deployment = serde_json::from_value(
        docs.iter()
            .find(|d| d["kind"] == "Deployment")
            .unwrap()
            .clone(),
    )
    .unwrap();
    let spec = deployment.spec.unwrap();
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.service_account_name, sa.metadata.name);
    let args = pod.containers[0].args.clone().unwrap();
    assert_eq!(args[0], "gate-controller");
    let cm: ConfigMap = serde_json::from_value(
        docs.iter()
            .find(|d| d["kind"] == "ConfigMap")
            .unwrap()
            .clone(),
    )
    .unwrap();
    let config =
        nodeproof::config::Config::parse(&cm.data.unwrap()["config.toml"], Path::new("configmap"))
            .expect("the ConfigMap's config is valid");
    assert_eq!(config.gate.policy().gates.len(), 2);

    // Every request of the controller's scenarios, as its ServiceAccount.
    let mut log = event_scenario();
    log.extend(device_taint_scenario());
    let requests: BTreeSet<RequestInfo> = log
        .iter()
        .filter(|l| l.status != 401)
        .map(|l| request_info(&l.method, &l.path, &l.query))
        .collect();
    let summary: Vec<String> = requests
        .iter()
        .map(|r| {
            format!(
                "{} {}/{} {} {}",
                r.verb, r.api_group, r.resource, r.namespace, r.name
            )
        })
        .collect();
    eprintln!("requests as RequestInfo: {summary:#?}");
    // A Role's rule applies in its namespace only.
    let allows = |ns: &Option<String>, rule: &PolicyRule, verb: &str, r: &RequestInfo| {
        ns.as_ref().is_none_or(|n| *n == r.namespace) && rule_allows(rule, verb, r)
    };
    let uncovered: Vec<&RequestInfo> = requests
        .iter()
        .filter(|r| {
            !rules
                .iter()
                .any(|(ns, rule)| rule.verbs.iter().any(|v| allows(ns, rule, v, r)))
        })
        .collect();
    assert!(
        uncovered.is_empty(),
        "not allowed by {MANIFEST}: {uncovered:#?}"
    );
    let plain: Vec<(String, PolicyRule)> = rules
        .iter()
        .map(|(ns, r)| (format!("{ns:?}"), r.clone()))
        .collect();
    let (_, unused) = coverage(&plain, &requests);
    assert!(
        unused.is_empty(),
        "more than the controller needs: {unused:#?}"
    );
    for (i, (ns, rule)) in rules.iter().enumerate() {
        for v in 0..rule.verbs.len() {
            let mut fewer = rules.clone();
            fewer[i].1.verbs.remove(v);
            let refused = requests.iter().any(|r| {
                !fewer
                    .iter()
                    .any(|(n, rl)| rl.verbs.iter().any(|vb| allows(n, rl, vb, r)))
            });
            assert!(
                refused,
                "removing {} from rule {i} ({ns:?}) refuses nothing",
                rule.verbs[v]
            );
        }
    }
}

/// The test API server's Lease and pod-patch semantics the controller relies
/// on, as kube-apiserver has them, through kube-rs.
#[test]
fn the_test_server_serves_leases_and_gate_removal_as_kube_apiserver() {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, Patch, PatchParams, PostParams};

    let dir = tempfile::tempdir().unwrap();
    let server = server();
    put_pod(&server, "p", "gpu");
    let kubeconfig = server.kubeconfig(dir.path(), "sa-gate");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let k = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(k, &Default::default())
            .await
            .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let code = |e: kube::Error| match e {
            kube::Error::Api(s) => s.code,
            other => panic!("{other}"),
        };
        let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
        let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "l"}})).unwrap();
        let created = leases.create(&PostParams::default(), &lease).await.unwrap();
        assert_eq!(
            code(
                leases
                    .create(&PostParams::default(), &lease)
                    .await
                    .unwrap_err()
            ),
            409
        );
        // update: a stale resourceVersion is a conflict.
        let mut stale = created.clone();
        stale.metadata.resource_version = Some("1".into());
        assert_eq!(
            code(
                leases
                    .replace("l", &PostParams::default(), &stale)
                    .await
                    .unwrap_err()
            ),
            409
        );
        leases
            .replace("l", &PostParams::default(), &created)
            .await
            .unwrap();
        // Server-side apply: another manager's holderIdentity is a conflict unless forced.
        let take = |who: &str| {
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "spec": {"holderIdentity": who, "leaseDurationSeconds": 3}})
        };
        let pp = |m: &str| PatchParams::apply(m);
        leases
            .patch("l", &pp("a"), &Patch::Apply(take("a")))
            .await
            .unwrap();
        leases
            .patch("l", &pp("a"), &Patch::Apply(take("a")))
            .await
            .unwrap();
        assert_eq!(
            code(
                leases
                    .patch("l", &pp("b"), &Patch::Apply(take("b")))
                    .await
                    .unwrap_err()
            ),
            409
        );
        // Released (fields set to null by strategic merge): free to take.
        let release = json!({"spec": {"holderIdentity": null, "leaseDurationSeconds": null}});
        leases
            .patch(
                "l",
                &PatchParams {
                    field_manager: Some("b".into()),
                    ..Default::default()
                },
                &Patch::Strategic(release),
            )
            .await
            .unwrap();
        leases
            .patch("l", &pp("b"), &Patch::Apply(take("b")))
            .await
            .unwrap();
        assert_eq!(lease_holder_of(&server, "l").as_deref(), Some("b"));
        assert_eq!(
            code(
                leases
                    .patch("l", &pp("a"), &Patch::Apply(take("a")))
                    .await
                    .unwrap_err()
            ),
            409
        );
        leases
            .patch(
                "l",
                &PatchParams::apply("a").force(),
                &Patch::Apply(take("a")),
            )
            .await
            .unwrap();
        assert_eq!(lease_holder_of(&server, "l").as_deref(), Some("a"));

        // Pods: a gate may be removed, never added; nothing else may change.
        let pods: Api<Pod> = Api::namespaced(client, "ml");
        let json_patch = |ops: Value| Patch::Json::<()>(serde_json::from_value(ops).unwrap());
        let add = json_patch(
            json!([{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "x/y"}}]),
        );
        assert_eq!(
            code(
                pods.patch("p", &PatchParams::default(), &add)
                    .await
                    .unwrap_err()
            ),
            422
        );
        let other =
            json_patch(json!([{"op": "replace", "path": "/spec/nodeSelector/pool", "value": "b"}]));
        assert_eq!(
            code(
                pods.patch("p", &PatchParams::default(), &other)
                    .await
                    .unwrap_err()
            ),
            422
        );
        let wrong = json_patch(
            json!([{"op": "test", "path": "/spec/schedulingGates/0/name", "value": GPU_GATE},
                                      {"op": "remove", "path": "/spec/schedulingGates/0"}]),
        );
        assert_eq!(
            code(
                pods.patch("p", &PatchParams::default(), &wrong)
                    .await
                    .unwrap_err()
            ),
            422
        );
        assert_eq!(gates(&server, "ml/p"), [FOREIGN_GATE, GPU_GATE]);
        let remove = json_patch(json!([{"op": "remove", "path": "/spec/schedulingGates/1"}]));
        pods.patch("p", &PatchParams::default(), &remove)
            .await
            .unwrap();
        assert_eq!(server.schedulable_at("ml/p"), None);
        pods.patch(
            "p",
            &PatchParams::default(),
            &json_patch(json!([{"op": "remove", "path": "/spec/schedulingGates/0"}])),
        )
        .await
        .unwrap();
        assert!(
            server.schedulable_at("ml/p").is_some(),
            "schedulable once the last gate is gone"
        );
    });
}

fn lease_holder_of(server: &TestApiServer, name: &str) -> Option<String> {
    server.lease(NS, name)?["spec"]["holderIdentity"]
        .as_str()
        .map(String::from)
}

#[test]
fn a_leader_stopped_by_sigterm_releases_the_lease_and_the_other_takes_it_within_one_duration() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;

    let dir = tempfile::tempdir().unwrap();
    let server = server();
    let mut a = Controller::start(&server, dir.path(), "a", &config(60, 3));
    assert!(
        wait_until(Duration::from_secs(20), || lease_holder(&server).as_deref()
            == Some("a")),
        "{}",
        a.log_text()
    );
    let b = Controller::start(&server, dir.path(), "b", &config(60, 3));
    std::thread::sleep(Duration::from_millis(500));
    let stopped = Instant::now();
    kill(Pid::from_raw(a.child.id() as i32), Signal::SIGTERM).unwrap();
    let status = a.child.wait().unwrap();
    assert!(status.success(), "{status:?}\n{}", a.log_text());
    // Released on the way out, before the process ended.
    assert_eq!(lease_holder(&server), None, "{}", a.log_text());
    assert!(
        wait_until(Duration::from_secs(LEASE_S + 5), || lease_holder(&server)
            .as_deref()
            == Some("b")),
        "{}",
        b.log_text()
    );
    let handover = stopped.elapsed();
    eprintln!("handover after SIGTERM: {handover:?} (lease {LEASE_S} s)");
    assert!(
        handover <= Duration::from_secs(LEASE_S) + Duration::from_millis(500),
        "{handover:?}"
    );
}

#[test]
fn the_seccomp_gate_waits_for_the_runtime_class_contract_label() {
    const SECCOMP_GATE: &str = "nodeproof.dev/seccomp-ready";
    let dir = tempfile::tempdir().unwrap();
    let server = server();
    server.add_node(
        "n1",
        json!([{"type": "SeccompProfilesReady", "status": "True", "reason": "ProfilesOk",
                "lastHeartbeatTime": ago(0)}]),
    );
    server.merge_node(
        "n1",
        json!({"metadata": {"labels": {"runtimeclass.nodeproof.dev/vllm": "not-ready"}}}),
    );
    server.put(
        "runtimeclasses",
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "handler": "runc",
            "metadata": {"name": "vllm", "annotations": {
                "nodeproof.dev/localhost-profiles": "profiles/vllm-strict.json"}}}),
    );
    server.put(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "ml", "name": "vllm-0", "uid": "uid-vllm-0"},
            "spec": {"runtimeClassName": "vllm", "schedulingGates": [{"name": SECCOMP_GATE}],
                     "containers": [{"name": "vllm", "image": "vllm"}]}}),
    );
    // The default gates: gpu-driver-ready and seccomp-ready with the contract.
    let c = Controller::start(&server, dir.path(), "a", "[gate]\nheartbeat-s = 60\n");
    let want = format!(
        "waiting for {SECCOMP_GATE}: 0 of 1 nodes ready for the pod: 1 runtimeclass.nodeproof.dev/vllm=not-ready"
    );
    await_event(&server, &c, "vllm-0", &want, Duration::from_secs(20));
    assert_eq!(gates(&server, "ml/vllm-0"), [SECCOMP_GATE]);
    // The node agent finds the class's profiles fine and labels the node ready.
    server.merge_node(
        "n1",
        json!({"metadata": {"labels": {"runtimeclass.nodeproof.dev/vllm": "ready"}}}),
    );
    assert!(
        wait_until(Duration::from_secs(5), || server
            .schedulable_at("ml/vllm-0")
            .is_some()),
        "{}",
        c.log_text()
    );
}

// ---------------------------------------------------------------------------
// Placement: released onto the right node, under the test server's
// adversarial scheduler (nodeproof-testapi's `scheduler` module), which binds a schedulable
// pod to the *least* ready node that fits it. Only a pod narrowed to the
// nodes ready for its gate lands on one.
// ---------------------------------------------------------------------------

const GPU_LABEL: &str = "gate.nodeproof.dev/gpu-driver-ready";
const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

/// A gated pod asking for `gpus` GPUs, with nothing else steering it.
fn gated_gpu_pod(name: &str, gpus: u32, extra_spec: Value) -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "ml", "name": name, "uid": format!("uid-{name}"),
                     "creationTimestamp": ago(0)},
        "spec": {"schedulingGates": [{"name": GPU_GATE}],
                 "containers": [{"name": "vllm", "image": "vllm",
                                 "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]}});
    for (k, v) in extra_spec.as_object().unwrap() {
        pod["spec"][k] = v.clone();
    }
    pod
}

/// The node as kube-apiserver creates it: the TaintNodesByCondition
/// admission plugin's `node.kubernetes.io/not-ready:NoSchedule` until the
/// node lifecycle controller lifts it (shared/notes/kube-apiserver-1.36.md).
fn add_new_node(server: &TestApiServer, name: &str, gpus: u32, conditions: Value) {
    add_node(server, name, "gpu", gpus, conditions);
    server.merge_node(
        name,
        json!({"spec": {"taints": [{"key": NOT_READY_TAINT, "effect": "NoSchedule"}]}}),
    );
}

fn lift_not_ready(server: &TestApiServer, name: &str) {
    server.merge_node(name, json!({"spec": {"taints": []}}));
}

fn label_of(server: &TestApiServer, node: &str) -> Option<String> {
    server.node(node)["metadata"]["labels"][GPU_LABEL]
        .as_str()
        .map(String::from)
}

#[test]
fn the_released_pod_is_bound_to_the_ready_node_not_the_broken_or_the_stale_one() {
    let dir = tempfile::tempdir().unwrap();
    let server = server();
    server.start_scheduler(Duration::from_secs(180));
    add_new_node(
        &server,
        "gpu-a",
        2,
        gpu_conditions("False", "NVMLInitFailed", 0),
    );
    add_new_node(
        &server,
        "gpu-b",
        2,
        gpu_conditions("False", "DriverNotLoaded", 0),
    );
    // Every condition True, but its agent last wrote two hours ago.
    add_new_node(&server, "gpu-old", 2, gpu_conditions("True", "Ok", 7200));
    server.create_pod(gated_gpu_pod("vllm-0", 2, json!({})));
    let c = Controller::start(&server, dir.path(), "a", &config(60, 3));
    // New nodes carry the not-ready taint: the Event names it, per node group.
    let tainted = format!(
        "waiting for {GPU_GATE}: 0 of 3 nodes ready for the pod: \
         3 have a taint the pod does not tolerate ({NOT_READY_TAINT}:NoSchedule)"
    );
    await_event(&server, &c, "vllm-0", &tainted, Duration::from_secs(20));
    for n in ["gpu-a", "gpu-b", "gpu-old"] {
        lift_not_ready(&server, n);
    }
    let grouped = format!(
        "waiting for {GPU_GATE}: 0 of 3 nodes ready for the pod: \
         1 with a GPUDriverReady heartbeat older than 3m (its agent stopped reporting), \
         1 GPUDriverReady=False (DriverNotLoaded), 1 GPUDriverReady=False (NVMLInitFailed)"
    );
    await_event(&server, &c, "vllm-0", &grouped, Duration::from_secs(10));
    assert_eq!(gates(&server, "ml/vllm-0"), [GPU_GATE]);
    assert_eq!(server.bound("ml/vllm-0"), None);
    // gpu-b turns ready: labelled, the pod narrowed and released in one write, bound there.
    let ready = Instant::now();
    set_conditions(&server, "gpu-b", gpu_conditions("True", "Ok", 0));
    assert!(
        wait_until(Duration::from_secs(10), || server
            .bound("ml/vllm-0")
            .is_some()),
        "{}",
        c.log_text()
    );
    let (node, at) = server.bound("ml/vllm-0").unwrap();
    let latency = at.duration_since(ready);
    eprintln!("node ready → pod bound on it: {latency:?}");
    assert_eq!(node, "gpu-b", "{}", c.log_text());
    assert!(latency <= Duration::from_secs(2), "{latency:?}");
    assert_eq!(label_of(&server, "gpu-b").as_deref(), Some("ready"));
    for broken in ["gpu-a", "gpu-old"] {
        assert_eq!(label_of(&server, broken), None, "{broken}");
    }
    let pod = server.pod("ml/vllm-0").unwrap();
    assert_eq!(pod["spec"]["nodeSelector"][GPU_LABEL], "ready");
    // One write released and narrowed it: no separate narrowing, no retry.
    assert_eq!(removals(&server.log(), "vllm-0"), 1);
    // It says why it was released, next to PodScheduled.
    assert!(
        wait_until(Duration::from_secs(5), || server.pod("ml/vllm-0").unwrap()
            ["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == GPU_LABEL))),
        "{}",
        c.log_text()
    );
    let pod = server.pod("ml/vllm-0").unwrap();
    let cond = pod["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == GPU_LABEL)
        .unwrap()
        .clone();
    assert_eq!(cond["status"], "True");
    assert_eq!(cond["reason"], "NodesReady");
    assert_eq!(
        cond["message"],
        format!(
            "{GPU_GATE} removed: GPUDriverReady and GPUHealthy True on 1 of 3 nodes that fit the pod; \
             placement narrowed to nodes labelled {GPU_LABEL}=ready (e.g. gpu-b)"
        )
    );
    assert!(pod["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "PodScheduled" && c["status"] == "True"));
    // A controller re-creates the pod from the same template (a ReplicaSet):
    // the new pod is gated and steered again. gpu-b is full (2 of 2 GPUs), so
    // it waits on the scheduler, never going to a broken node.
    server.create_pod(gated_gpu_pod("vllm-1", 2, json!({})));
    assert!(
        wait_until(Duration::from_secs(10), || gates(&server, "ml/vllm-1")
            .is_empty()),
        "{}",
        c.log_text()
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(server.bound("ml/vllm-1"), None, "no room on the ready node");
    server.delete("pods", "ml/vllm-0");
    assert!(
        wait_until(Duration::from_secs(5), || server
            .bound("ml/vllm-1")
            .is_some()),
        "{}",
        c.log_text()
    );
    assert_eq!(server.bound("ml/vllm-1").unwrap().0, "gpu-b");
}

#[test]
fn a_node_breaking_between_the_release_and_the_binding_gets_no_pod() {
    let dir = tempfile::tempdir().unwrap();
    let server = server();
    server.start_scheduler(Duration::from_secs(180));
    server.pause_scheduler(true);
    add_node(&server, "gpu-b", "gpu", 2, gpu_conditions("True", "Ok", 0));
    add_node(
        &server,
        "gpu-c",
        "gpu",
        2,
        gpu_conditions("False", "NVMLInitFailed", 0),
    );
    server.create_pod(gated_gpu_pod("vllm-0", 1, json!({})));
    let c = Controller::start(&server, dir.path(), "a", &config(60, 3));
    assert!(
        wait_until(Duration::from_secs(20), || gates(&server, "ml/vllm-0")
            .is_empty()),
        "{}",
        c.log_text()
    );
    // Released and narrowed, not yet bound: gpu-b breaks now.
    set_conditions(&server, "gpu-b", gpu_conditions("False", "GPULost", 0));
    assert!(
        wait_until(Duration::from_secs(5), || label_of(&server, "gpu-b")
            .is_none()),
        "{}",
        c.log_text()
    );
    server.pause_scheduler(false);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(server.bound("ml/vllm-0"), None, "no ready node: it waits");
    // The label follows the nodes both ways: gpu-c recovers, the pod goes there.
    set_conditions(&server, "gpu-c", gpu_conditions("True", "Ok", 0));
    assert!(
        wait_until(Duration::from_secs(5), || server
            .bound("ml/vllm-0")
            .is_some()),
        "{}",
        c.log_text()
    );
    assert_eq!(server.bound("ml/vllm-0").unwrap().0, "gpu-c");
}

#[test]
fn a_pod_whose_own_affinity_excludes_every_ready_node_stays_gated_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let server = server();
    server.start_scheduler(Duration::from_secs(180));
    add_node(
        &server,
        "gpu-a",
        "gpu",
        2,
        gpu_conditions("False", "NVMLInitFailed", 0),
    );
    add_node(&server, "gpu-b", "gpu", 2, gpu_conditions("True", "Ok", 0));
    let not_b = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "NotIn", "values": ["gpu-b"]}]}]}}}});
    server.create_pod(gated_gpu_pod("vllm-0", 1, not_b));
    let c = Controller::start(&server, dir.path(), "a", &config(60, 3));
    let want = format!(
        "waiting for {GPU_GATE}: 0 of 2 nodes ready for the pod: \
         1 GPUDriverReady=False (NVMLInitFailed), 1 ready but excluded by the pod's own nodeSelector or affinity"
    );
    await_event(&server, &c, "vllm-0", &want, Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(gates(&server, "ml/vllm-0"), [GPU_GATE]);
    assert_eq!(server.bound("ml/vllm-0"), None);
}

const SECCOMP_GATE: &str = "nodeproof.dev/seccomp-ready";
const SECCOMP_LABEL: &str = "gate.nodeproof.dev/seccomp-ready";

/// A node's GPU and seccomp conditions, all fresh.
fn gpu_and_seccomp(gpu: &str, seccomp: &str) -> Value {
    let mut c = gpu_conditions(
        gpu,
        if gpu == "True" {
            "Ok"
        } else {
            "NVMLInitFailed"
        },
        0,
    );
    c.as_array_mut().unwrap().push(json!(
        {"type": "SeccompProfilesReady", "status": seccomp,
         "reason": if seccomp == "True" { "AllProfilesValid" } else { "ProfileStartFails" },
         "lastHeartbeatTime": ago(0), "lastTransitionTime": ago(600)}));
    c
}

/// A pod waiting behind two nodeproof gates, each ready on a different node
/// at first: the first gate is released and narrows the pod to its nodes;
/// the second then judges only those (the other node, ready for it alone, is
/// "excluded by the pod's own nodeSelector"), and is released, adding its own
/// label, only when a node is ready for both. The adversarial scheduler binds
/// to the least ready node that passes the filters, so the pod lands on the
/// node ready for both gates only if both narrowings are in place.
#[test]
fn a_pod_with_two_gates_is_narrowed_by_each_in_turn_and_lands_where_both_are_ready() {
    let dir = tempfile::tempdir().unwrap();
    let server = server();
    server.start_scheduler(Duration::from_secs(180));
    add_node(&server, "gpu-a", "gpu", 2, gpu_and_seccomp("True", "False"));
    add_node(&server, "gpu-b", "gpu", 2, gpu_and_seccomp("False", "True"));
    let mut pod = gated_gpu_pod("vllm-0", 1, json!({}));
    pod["spec"]["schedulingGates"] = json!([{"name": GPU_GATE}, {"name": SECCOMP_GATE}]);
    server.create_pod(pod);
    let two_gates = format!(
        "{}[gate.gates.\"{SECCOMP_GATE}\"]\nconditions = [\"SeccompProfilesReady\"]\n",
        config(60, 3)
    );
    let c = Controller::start(&server, dir.path(), "a", &two_gates);
    // The GPU gate goes (gpu-a is ready for it), narrowing the pod to gpu-a.
    assert!(
        wait_until(Duration::from_secs(20), || gates(&server, "ml/vllm-0")
            == [SECCOMP_GATE]),
        "{:?}\n{}",
        gates(&server, "ml/vllm-0"),
        c.log_text()
    );
    let waiting = format!(
        "waiting for {SECCOMP_GATE}: 0 of 2 nodes ready for the pod: \
         1 SeccompProfilesReady=False (ProfileStartFails), \
         1 ready but excluded by the pod's own nodeSelector or affinity"
    );
    await_event(&server, &c, "vllm-0", &waiting, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        gates(&server, "ml/vllm-0"),
        [SECCOMP_GATE],
        "{}",
        c.log_text()
    );
    assert_eq!(server.bound("ml/vllm-0"), None);
    let pod = server.pod("ml/vllm-0").unwrap();
    assert_eq!(
        pod["spec"]["nodeSelector"],
        json!({GPU_LABEL: "ready"}),
        "the first gate's narrowing only"
    );
    // gpu-a's profiles are fixed: the second gate goes, adding its label,
    // and the pod is bound there, never on gpu-b (ready for seccomp only).
    set_conditions(&server, "gpu-a", gpu_and_seccomp("True", "True"));
    assert!(
        wait_until(Duration::from_secs(10), || server
            .bound("ml/vllm-0")
            .is_some()),
        "{}",
        c.log_text()
    );
    assert_eq!(server.bound("ml/vllm-0").unwrap().0, "gpu-a");
    let pod = server.pod("ml/vllm-0").unwrap();
    assert_eq!(
        pod["spec"]["nodeSelector"],
        json!({GPU_LABEL: "ready", SECCOMP_LABEL: "ready"})
    );
    assert_eq!(removals(&server.log(), "vllm-0"), 2, "one write per gate");
    assert!(
        wait_until(Duration::from_secs(5), || {
            let pod = server.pod("ml/vllm-0").unwrap();
            let types: BTreeSet<String> = pod["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["type"].as_str().map(String::from))
                .collect();
            types.contains(GPU_LABEL) && types.contains(SECCOMP_LABEL)
        }),
        "each gate's release condition: {}",
        server.pod("ml/vllm-0").unwrap()["status"]
    );
}

#[test]
fn a_thousand_pods_released_at_once_onto_ten_ready_nodes_of_a_hundred() {
    let dir = tempfile::tempdir().unwrap();
    let server = server();
    server.start_scheduler(Duration::from_secs(180));
    for i in 0..100 {
        add_node(
            &server,
            &format!("gpu-{i:03}"),
            "gpu",
            200,
            gpu_conditions("False", "NVMLInitFailed", 0),
        );
    }
    for i in 0..1000 {
        server.create_pod(gated_gpu_pod(&format!("vllm-{i:04}"), 1, json!({})));
    }
    let c = Controller::start(&server, dir.path(), "a", &config(60, 3));
    assert!(
        wait_until(Duration::from_secs(60), || server
            .events()
            .iter()
            .filter(|e| e["reason"] == "SchedulingGated")
            .count()
            == 1000),
        "{}",
        c.log_text()
    );
    let ready: BTreeSet<String> = (0..100)
        .step_by(10)
        .map(|i| format!("gpu-{i:03}"))
        .collect();
    let start = Instant::now();
    for n in &ready {
        set_conditions(&server, n, gpu_conditions("True", "Ok", 0));
    }
    assert!(
        wait_until(Duration::from_secs(120), || server.bindings().len() == 1000),
        "{} of 1000 bound\n{}",
        server.bindings().len(),
        c.log_text()
    );
    let all = start.elapsed();
    eprintln!("10 of 100 nodes ready → 1,000 pods bound: {all:?}");
    let bindings = server.bindings();
    let wrong: Vec<_> = bindings
        .iter()
        .filter(|(_, n)| !ready.contains(*n))
        .collect();
    assert!(wrong.is_empty(), "bound to nodes not ready: {wrong:?}");
    // Writes per released pod: one guarded patch, one pods/status patch;
    // one label patch per node turning ready.
    assert!(wait_until(Duration::from_secs(10), || ready
        .iter()
        .all(|n| label_of(&server, n).is_some())));
    let log = server.log();
    let pod_patches = log
        .iter()
        .filter(|l| {
            l.method == "PATCH" && l.path.contains("/pods/") && !l.path.ends_with("/status")
        })
        .count();
    let status_patches = log
        .iter()
        .filter(|l| l.method == "PATCH" && l.path.ends_with("/status") && l.path.contains("/pods/"))
        .count();
    let label_patches = log
        .iter()
        .filter(|l| l.method == "PATCH" && l.path.starts_with("/api/v1/nodes/"))
        .count();
    eprintln!("writes: {pod_patches} pod patches, {status_patches} pods/status patches, {label_patches} node label patches for 1,000 pods");
    assert_eq!(pod_patches, 1000);
    assert_eq!(status_patches, 1000);
    assert_eq!(label_patches, 10);
}

#[test]
fn the_seccomp_gate_and_runtime_class_contracts_land_on_the_contracted_node() {
    const SECCOMP_GATE: &str = "nodeproof.dev/seccomp-ready";
    let dir = tempfile::tempdir().unwrap();
    let server = server();
    server.start_scheduler(Duration::from_secs(180));
    for (name, contract, status) in [("n-bad", "not-ready", "False"), ("n-good", "ready", "True")] {
        server.add_node(
            name,
            json!([{"type": "SeccompProfilesReady", "status": status, "reason": "R",
                    "lastHeartbeatTime": ago(0)}]),
        );
        server.merge_node(
            name,
            json!({"metadata": {"labels": {"runtimeclass.nodeproof.dev/vllm": contract}}}),
        );
    }
    server.put(
        "runtimeclasses",
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "handler": "runc",
            "metadata": {"name": "vllm", "annotations": {
                "nodeproof.dev/localhost-profiles": "profiles/vllm-strict.json"}},
            "scheduling": {"nodeSelector": {"runtimeclass.nodeproof.dev/vllm": "ready"}}}),
    );
    server.create_pod(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "ml", "name": "vllm-0", "uid": "uid-vllm-0"},
        "spec": {"runtimeClassName": "vllm", "schedulingGates": [{"name": SECCOMP_GATE}],
                 "containers": [{"name": "vllm", "image": "vllm"}]}}));
    let c = Controller::start(&server, dir.path(), "a", "[gate]\nheartbeat-s = 60\n");
    assert!(
        wait_until(Duration::from_secs(20), || server
            .bound("ml/vllm-0")
            .is_some()),
        "{}",
        c.log_text()
    );
    assert_eq!(server.bound("ml/vllm-0").unwrap().0, "n-good");
}

#[test]
fn the_agents_gpu_taint_keeps_ungated_pods_off_a_broken_node() {
    // Device-plugin clusters without the gate: the agent's opt-in taint
    // (crates/report/src/marks.rs, written through the taint credential) is
    // what the scheduler sees. The adversarial scheduler would pick the
    // broken node first; the taint keeps it off.
    use nodeproof_findings::{ConditionStatus, ConditionType};
    use nodeproof_report::conditions::NodeCondition;
    use nodeproof_report::marks::{taints, MarkPolicy};
    let server = server();
    server.start_scheduler(Duration::from_secs(180));
    add_node(
        &server,
        "gpu-a",
        "gpu",
        2,
        gpu_conditions("False", "NVMLInitFailed", 0),
    );
    add_node(&server, "gpu-b", "gpu", 2, gpu_conditions("True", "Ok", 0));
    let policy = MarkPolicy {
        taint_kinds: MarkPolicy::default_taint_kinds(),
        ..MarkPolicy::default()
    };
    let broken = NodeCondition {
        kind: ConditionType::GPUDriverReady,
        status: ConditionStatus::False,
        reason: "NVMLInitFailed".into(),
        message: String::new(),
        last_transition: std::time::SystemTime::now(),
        last_heartbeat: std::time::SystemTime::now(),
    };
    let ours: Vec<Value> = taints(&policy, [&broken])
        .iter()
        .map(|t| t.to_json())
        .collect();
    assert_eq!(ours.len(), 1);
    server.merge_node("gpu-a", json!({"spec": {"taints": ours}}));
    let mut pod = gated_gpu_pod("plain", 1, json!({}));
    pod["spec"]["schedulingGates"] = json!([]);
    server.create_pod(pod);
    assert!(wait_until(Duration::from_secs(5), || server
        .bound("ml/plain")
        .is_some()));
    assert_eq!(server.bound("ml/plain").unwrap().0, "gpu-b");
    // Lifted on recovery: the next pod may go there (the least ready node
    // first: with both ready, the first by name).
    server.merge_node("gpu-a", json!({"spec": {"taints": []}}));
    set_conditions(&server, "gpu-a", gpu_conditions("True", "Ok", 0));
    let mut pod = gated_gpu_pod("plain-2", 1, json!({}));
    pod["spec"]["schedulingGates"] = json!([]);
    server.create_pod(pod);
    assert!(wait_until(Duration::from_secs(5), || server
        .bound("ml/plain-2")
        .is_some()));
    assert_eq!(server.bound("ml/plain-2").unwrap().0, "gpu-a");
}

/// The test server refuses what kube-apiserver 1.36 refuses of a gated
/// pod's placement (KEP-3838; shared/notes/kube-apiserver-1.36.md), and
/// accepts what it accepts, through kube-rs.
#[test]
fn the_test_server_lets_a_gated_pod_be_narrowed_never_widened_and_nothing_once_ungated() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, Patch, PatchParams};

    let dir = tempfile::tempdir().unwrap();
    let server = server();
    let term = |key: &str| json!({"matchExpressions": [{"key": key, "operator": "Exists"}]});
    let with_affinity = json!({"nodeSelector": {"pool": "gpu"},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [term("zone")]}}}});
    server.create_pod(gated_gpu_pod("p", 1, with_affinity));
    server.create_pod(gated_gpu_pod("bare", 1, json!({})));
    let kubeconfig = server.kubeconfig(dir.path(), "sa-gate");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let k = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(k, &Default::default())
            .await
            .unwrap();
        let pods: Api<Pod> = Api::namespaced(kube::Client::try_from(config).unwrap(), "ml");
        let json_patch = |ops: Value| -> Patch<()> {
            Patch::Json(serde_json::from_value(ops).unwrap())
        };
        let pp = PatchParams::default();
        let refused = |r: Result<Pod, kube::Error>| match r {
            Err(kube::Error::Api(s)) => (s.code, s.message),
            other => panic!("accepted: {other:?}"),
        };
        // Adding a nodeSelector key: accepted. Changing one: refused.
        pods.patch("p", &pp, &json_patch(json!([{"op": "add", "path": "/spec/nodeSelector/extra", "value": "1"}])))
            .await
            .unwrap();
        let (code, message) = refused(
            pods.patch("p", &pp, &json_patch(json!([{"op": "replace", "path": "/spec/nodeSelector/pool", "value": "cpu"}])))
                .await,
        );
        assert_eq!(code, 422);
        assert!(message.contains("only additions to spec.nodeSelector are allowed"), "{message}");
        // A second term widens: refused. A requirement added to the term narrows: accepted.
        let terms = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms";
        let (code, message) = refused(
            pods.patch("p", &pp, &json_patch(json!([{"op": "add", "path": format!("{terms}/-"), "value": term("rack")}])))
                .await,
        );
        assert_eq!(code, 422);
        assert!(message.contains("no additions/deletions to non-empty NodeSelectorTerms list are allowed"), "{message}");
        pods.patch(
            "p",
            &pp,
            &json_patch(json!([{"op": "add", "path": format!("{terms}/0/matchExpressions/-"),
                "value": {"key": "rack", "operator": "Exists"}}])),
        )
        .await
        .unwrap();
        // Any other spec change: refused.
        let (code, _) = refused(
            pods.patch("p", &pp, &json_patch(json!([{"op": "replace", "path": "/spec/containers/0/name", "value": "x"}])))
                .await,
        );
        assert_eq!(code, 422);
        // Affinity where there was none: accepted.
        pods.patch(
            "bare",
            &pp,
            &json_patch(json!([{"op": "add", "path": "/spec/affinity",
                "value": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                    {"nodeSelectorTerms": [term("zone")]}}}}])),
        )
        .await
        .unwrap();
        // One patch: test the gate, add a key, remove the gate: one write.
        let released = pods
            .patch(
                "p",
                &pp,
                &json_patch(json!([
                    {"op": "test", "path": "/spec/schedulingGates/0/name", "value": GPU_GATE},
                    {"op": "add", "path": format!("/spec/nodeSelector/{}", GPU_LABEL.replace('/', "~1")), "value": "ready"},
                    {"op": "remove", "path": "/spec/schedulingGates/0"}])),
            )
            .await
            .unwrap();
        assert_eq!(released.spec.as_ref().unwrap().node_selector.as_ref().unwrap()[GPU_LABEL], "ready");
        // Once ungated, nothing of the placement changes any more.
        let (code, message) = refused(
            pods.patch("p", &pp, &json_patch(json!([{"op": "add", "path": "/spec/nodeSelector/late", "value": "1"}])))
                .await,
        );
        assert_eq!(code, 422);
        assert!(message.contains("pod updates may not change fields"), "{message}");
        // pods/status merges conditions by type.
        pods.patch_status(
            "p",
            &pp,
            &Patch::Strategic(json!({"status": {"conditions": [{"type": GPU_LABEL, "status": "True"}]}})),
        )
        .await
        .unwrap();
        let p = pods.get("p").await;
        drop(p);
    });
    let pod = server.pod("ml/p").unwrap();
    let types: Vec<&str> = pod["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert_eq!(types, ["PodScheduled", GPU_LABEL]);
}

/// An API server that does not answer when the controller starts (a
/// control plane restarting, a pod network not ready yet) is waited out:
/// the process stays up, `/readyz` says why it is not ready, `/healthz`
/// stays 200, and once the server answers the controller joins the
/// election and becomes ready. It used to exit with status 2 ("cannot take
/// part in leader election"), which the kubelet turns into CrashLoopBackOff.
#[test]
fn an_api_server_away_at_start_is_waited_out_not_an_exit() {
    let server = server();
    server.set_fault(Fault::Down);
    let dir = tempfile::tempdir().unwrap();
    let mut c = Controller::start(&server, dir.path(), "gc-a", &config(300, 3));
    let deadline = Instant::now() + Duration::from_secs(10);
    let body = loop {
        let (code, body) = get(c.port, "/readyz");
        if code == 503 && body.contains("not in the leader election") {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "readyz {code} {body:?}: {}",
            c.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(body.contains("retrying in"), "{body}");
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        c.child.try_wait().unwrap().is_none(),
        "the controller exited while the API server was away: {}",
        c.log_text()
    );
    assert_eq!(
        get(c.port, "/healthz").0,
        200,
        "liveness is about the process"
    );
    server.clear_fault();
    let back = Instant::now();
    let deadline = back + Duration::from_secs(30);
    while get(c.port, "/readyz").0 != 200 {
        assert!(
            Instant::now() < deadline,
            "not ready after the server came back: {}",
            c.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "FIGURE API server back → gate controller ready: {:?}",
        back.elapsed()
    );
    let log = c.log_text();
    assert!(
        log.contains("cannot join leader election yet; retrying"),
        "{log}"
    );
    assert!(log.contains("joined leader election"), "{log}");
    // Said once, in nodeproof's words.
    assert!(!log.contains("kube_client"), "{log}");
    c.kill();
}
