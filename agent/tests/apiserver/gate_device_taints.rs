//! `nodeproof gate-controller` keeps unhealthy GPUs from new DRA claims: the
//! real binary against the test API server (crates/testapi
//! and its "DeviceTaintRules" section), a node publishing two GPUs in a v1
//! ResourceSlice, its agent's `gpu.nodeproof.dev/unhealthy-devices`
//! annotation naming one of them.

use crate::support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use support::agent::{free_port, get};
use support::apiserver::{Identity, TestApiServer};

const NS: &str = "nodeproof";
const GPU_GATE: &str = "nodeproof.dev/gpu-driver-ready";
const ANNOTATION: &str = "gpu.nodeproof.dev/unhealthy-devices";
const NOT_SERVED: &str = "DeviceTaintRule (resource.k8s.io/v1beta2) is not served";

/// A running controller; SIGKILLed on drop.
struct Controller {
    child: Child,
    log: std::path::PathBuf,
    port: u16,
}

impl Controller {
    fn start(server: &TestApiServer, dir: &Path) -> Controller {
        let kubeconfig = server.kubeconfig(dir, "sa-gate");
        let config = dir.join("config.toml");
        std::fs::write(
            &config,
            format!(
                "[gate]\nheartbeat-s = 60\nstale-heartbeats = 3\n\
                 [gate.gates.\"{GPU_GATE}\"]\nconditions = [\"GPUDriverReady\", \"GPUHealthy\"]\n"
            ),
        )
        .unwrap();
        let log = dir.join("controller.log");
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_nodeproof"))
            .arg("gate-controller")
            .arg("--config")
            .arg(&config)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--namespace", NS, "--identity", "a"])
            .args(["--lease-duration=3s", "--lease-grace=1s"])
            .arg(format!("--listen=127.0.0.1:{port}"))
            .env("NODEPROOF_LOG", "info")
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
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

fn ago(age: u64) -> String {
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    k8s_openapi::jiff::Timestamp::from_second(now - age as i64)
        .unwrap()
        .to_string()
}

fn gpu_conditions(status: &str) -> Value {
    json!([
        {"type": "Ready", "status": "True", "reason": "KubeletReady"},
        {"type": "GPUDriverReady", "status": status, "reason": "DriverReady",
         "lastHeartbeatTime": ago(0), "lastTransitionTime": ago(600)},
        {"type": "GPUHealthy", "status": "True", "reason": "GPUsHealthy",
         "lastHeartbeatTime": ago(0), "lastTransitionTime": ago(600)},
    ])
}

/// Node `gpu-1` with two GPUs, published by NVIDIA's DRA driver in a v1 slice.
fn gpu_node(server: &TestApiServer) {
    server.add_node("gpu-1", gpu_conditions("True"));
    server.merge_node(
        "gpu-1",
        json!({"metadata": {"labels": {"pool": "gpu"}},
               "status": {"allocatable": {"cpu": "16", "nvidia.com/gpu": "2"}}}),
    );
    server.put(
        "resourceslices",
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": "gpu-1-gpu.nvidia.com-x7k2", "uid": "uid-slice"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": "gpu-1",
                "pool": {"name": "gpu-1", "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": "GPU-aaaa0000-0000-4000-8000-000000000000"}}},
                    {"name": "gpu-1", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": "GPU-bbbb0000-0000-4000-8000-000000000001"}}}
                ]}}),
    );
}

fn annotate(server: &TestApiServer, value: Option<&str>) {
    server.merge_node(
        "gpu-1",
        json!({"metadata": {"annotations": {ANNOTATION: value}}}),
    );
}

fn ours(server: &TestApiServer) -> Vec<Value> {
    server
        .device_taint_rules()
        .into_iter()
        .filter(|r| r["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "nodeproof")
        .collect()
}

#[test]
fn an_unhealthy_gpu_gets_one_no_schedule_rule_removed_on_recovery_and_a_foreign_rule_is_never_touched(
) {
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start();
    server.add_token("sa-gate", Identity::GateControllerServiceAccount);
    server.serve_dra(&["v1"]);
    server.serve_device_taint_rules(&["v1beta2"]);
    gpu_node(&server);
    let foreign = json!({"apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceTaintRule",
        "metadata": {"name": "admin-maintenance", "uid": "uid-admin"},
        "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": "gpu-1"},
                 "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"}}});
    server.put("devicetaintrules", foreign.clone());
    let c = Controller::start(&server, dir.path());
    // Healthy: nothing is written.
    assert!(
        wait_until(Duration::from_secs(20), || c
            .log_text()
            .contains("tainting unhealthy DRA devices")),
        "{}",
        c.log_text()
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert!(ours(&server).is_empty(), "{:#?}", ours(&server));

    let marked = Instant::now();
    annotate(
        &server,
        Some("GPU-bbbb0000-0000-4000-8000-000000000001=GPULost"),
    );
    assert!(
        wait_until(Duration::from_secs(15), || ours(&server).len() == 1),
        "{}",
        c.log_text()
    );
    eprintln!("rule written {:?} after the annotation", marked.elapsed());
    let rule = &ours(&server)[0];
    assert_eq!(
        rule["spec"]["deviceSelector"],
        json!({"driver": "gpu.nvidia.com", "pool": "gpu-1", "device": "gpu-1"})
    );
    assert_eq!(rule["spec"]["taint"]["key"], "nodeproof.dev/gpu-unhealthy");
    assert_eq!(rule["spec"]["taint"]["value"], "GPULost");
    assert_eq!(rule["spec"]["taint"]["effect"], "NoSchedule");
    assert_eq!(
        rule["metadata"]["annotations"]["nodeproof.dev/node"],
        "gpu-1"
    );
    let name = rule["metadata"]["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("nodeproof-gpu-1-gpu-1-"), "{name}");
    // Exactly one, and it stays one (a heartbeat-only Node write changes nothing).
    server.merge_node(
        "gpu-1",
        json!({"status": {"conditions": gpu_conditions("True")}}),
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(ours(&server).len(), 1);
    let creates = |s: &TestApiServer| {
        s.log()
            .iter()
            .filter(|l| l.method == "POST" && l.path.ends_with("/devicetaintrules"))
            .count()
    };
    assert_eq!(creates(&server), 1);
    let (code, metrics) = get(c.port, "/metrics");
    assert_eq!(code, 200);
    for line in [
        "nodeproof_gate_device_taint_rules_served 1",
        "nodeproof_gate_device_taint_rules 1",
        "nodeproof_gate_device_taint_errors_total{request=\"Create\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }

    // Recovery: the agent removes its annotation.
    annotate(&server, None);
    assert!(
        wait_until(Duration::from_secs(15), || ours(&server).is_empty()),
        "{}",
        c.log_text()
    );
    let deletes: Vec<String> = server
        .log()
        .iter()
        .filter(|l| l.method == "DELETE")
        .map(|l| l.path.clone())
        .collect();
    assert_eq!(
        deletes,
        [format!(
            "/apis/resource.k8s.io/v1beta2/devicetaintrules/{name}"
        )]
    );
    // The deletion was guarded by the rule's UID.
    let delete = server
        .log()
        .into_iter()
        .find(|l| l.method == "DELETE")
        .unwrap();
    assert!(
        delete.body["preconditions"]["uid"].is_string(),
        "{:?}",
        delete.body
    );
    // The administrator's rule: still there, never written to.
    let rules = server.device_taint_rules();
    assert!(rules
        .iter()
        .any(|r| r["metadata"]["name"] == "admin-maintenance"));
    assert!(!server
        .log()
        .iter()
        .any(|l| l.path.ends_with("/admin-maintenance")));
    assert_eq!(creates(&server), 1);
}

#[test]
fn without_device_taint_rules_served_it_says_so_once_and_the_gates_still_work() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start();
    server.add_token("sa-gate", Identity::GateControllerServiceAccount);
    server.serve_dra(&["v1"]);
    gpu_node(&server);
    server.merge_node(
        "gpu-1",
        json!({"status": {"conditions": gpu_conditions("False")}}),
    );
    annotate(
        &server,
        Some("GPU-bbbb0000-0000-4000-8000-000000000001=GPULost"),
    );
    server.put(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "ml", "name": "vllm-0", "uid": "uid-vllm-0", "creationTimestamp": ago(0)},
            "spec": {"nodeSelector": {"pool": "gpu"}, "schedulingGates": [{"name": GPU_GATE}],
                     "containers": [{"name": "vllm", "image": "vllm",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}),
    );
    let c = Controller::start(&server, dir.path());
    assert!(
        wait_until(Duration::from_secs(20), || c
            .log_text()
            .contains(NOT_SERVED)),
        "{}",
        c.log_text()
    );
    // The gates are judged as ever: the pod's Event is written while the
    // node is not ready, and the gate is removed once it is.
    assert!(
        wait_until(Duration::from_secs(15), || server
            .events()
            .iter()
            .any(|e| e["involvedObject"]["name"] == "vllm-0")),
        "{}",
        c.log_text()
    );
    server.merge_node(
        "gpu-1",
        json!({"status": {"conditions": gpu_conditions("True")}}),
    );
    assert!(
        wait_until(Duration::from_secs(15), || server.log().iter().any(|l| l
            .method
            == "PATCH"
            && l.path == "/api/v1/namespaces/ml/pods/vllm-0"
            && l.status == 200)),
        "{}",
        c.log_text()
    );
    // Node changes do not make it ask again or say it again.
    for _ in 0..5 {
        server.merge_node(
            "gpu-1",
            json!({"status": {"conditions": gpu_conditions("True")}}),
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(
        c.log_text().matches(NOT_SERVED).count(),
        1,
        "{}",
        c.log_text()
    );
    let asked = server
        .log()
        .iter()
        .filter(|l| l.path.ends_with("/devicetaintrules"))
        .count();
    assert_eq!(asked, 1, "one list, answered 404");
    assert!(server.device_taint_rules().is_empty());
    let (_, metrics) = get(c.port, "/metrics");
    assert!(
        metrics.contains("nodeproof_gate_device_taint_rules_served 0"),
        "{metrics}"
    );
}

/// What the test server refuses, as kube-apiserver does: a rule without an
/// effect, an invalid name, a name taken; and every path 404 in a version
/// it does not serve.
#[test]
fn the_test_server_serves_device_taint_rules_in_the_versions_picked_and_refuses_as_kube_apiserver()
{
    let server = TestApiServer::start();
    server.add_token("sa-gate", Identity::GateControllerServiceAccount);
    server.serve_device_taint_rules(&["v1beta2"]);
    let dir = tempfile::tempdir().unwrap();
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
        let api = |version: &str| {
            let gvk = kube::core::GroupVersionKind::gvk("resource.k8s.io", version, "DeviceTaintRule");
            let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "devicetaintrules");
            kube::Api::<kube::api::DynamicObject>::all_with(client.clone(), &ar)
        };
        let rule = |name: &str, effect: Option<&str>| -> kube::api::DynamicObject {
            let mut taint = json!({"key": "nodeproof.dev/gpu-unhealthy", "value": "GPULost"});
            if let Some(e) = effect {
                taint["effect"] = json!(e);
            }
            serde_json::from_value(json!({"apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceTaintRule",
                "metadata": {"name": name},
                "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}, "taint": taint}}))
            .unwrap()
        };
        let code = |r: Result<kube::api::DynamicObject, kube::Error>| match r {
            Ok(_) => 200,
            Err(kube::Error::Api(s)) => s.code,
            Err(e) => panic!("{e}"),
        };
        let pp = kube::api::PostParams::default();
        let v = api("v1beta2");
        let created = v.create(&pp, &rule("r1", Some("NoSchedule"))).await.unwrap();
        assert!(created.metadata.uid.is_some());
        assert!(created.data["spec"]["taint"]["timeAdded"].is_string());
        assert_eq!(code(v.create(&pp, &rule("r1", Some("NoSchedule"))).await), 409);
        assert_eq!(code(v.create(&pp, &rule("r2", None)).await), 422);
        assert_eq!(code(v.create(&pp, &rule("r3", Some("PreferNoSchedule"))).await), 422);
        assert_eq!(code(v.create(&pp, &rule("Not_A_Name", Some("NoSchedule"))).await), 422);
        let listed = v.list(&Default::default()).await.unwrap();
        assert_eq!(listed.items.len(), 1);
        // Not served in v1 (nor in any version but the ones picked).
        let err = api("v1").list(&Default::default()).await.unwrap_err();
        assert!(matches!(err, kube::Error::Api(s) if s.code == 404));
        assert_eq!(code(api("v1alpha3").create(&pp, &rule("r4", Some("NoSchedule"))).await), 404);
        // A delete guarded by another UID is a conflict; by its own, it goes.
        let guarded = |uid: &str| kube::api::DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: Some(uid.into()),
                resource_version: None,
            }),
            ..Default::default()
        };
        let err = v.delete("r1", &guarded("other")).await.unwrap_err();
        assert!(matches!(err, kube::Error::Api(s) if s.code == 409));
        v.delete("r1", &guarded(created.metadata.uid.as_deref().unwrap()))
            .await
            .unwrap();
        let err = v.delete("r1", &Default::default()).await.unwrap_err();
        assert!(matches!(err, kube::Error::Api(s) if s.code == 404));
    });
}
