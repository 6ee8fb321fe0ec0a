//! GPUs as the kubelet and the pods see them, on the real stacks that run
//! without a GPU: the NVML probe through dlopen against the fake
//! libnvidia-ml, the kubelet's pod-resources API over gRPC on a unix socket
//! against the fake kubelet, the agent's comparison, attribution and Event
//! aggregation against pods as the watch delivers them.

use crate::fake_nvml_support;
use crate::support;

use std::time::{Duration, SystemTime};

use fake_nvml_support::Scenario;
use nodeproof::judge::gpu as gpu_check;
use nodeproof::pods::denials::PodIndex;
use nodeproof::pods::gpu_faults::GpuFaultAggregator;
use nodeproof_findings::{Check, ConditionStatus, Status};
use nodeproof_gpu::faults::{attribute, FaultTracker};
use nodeproof_gpu::{self as gpu, GpuConfig, GpuReport, PolicyState};
use nodeproof_podresources::fake::{FakeKubelet, KubeletState};
use nodeproof_podresources::{ContainerAllocation, DeviceSet, PodAllocation};
use serde_json::{json, Value};
use support::agent::{seccomp_root, Agent};
use support::apiserver::{Identity, TestApiServer};

fn uuid(i: u32) -> String {
    format!("GPU-fa4e0000-0000-4000-8000-{i:012}")
}

fn mig(gpu: u32, k: u32) -> String {
    format!("MIG-fa4e0000-0000-4000-80{gpu:02}-0000000000{k:02}")
}

fn set(resource: &str, ids: Vec<String>) -> DeviceSet {
    DeviceSet {
        resource: resource.into(),
        ids,
    }
}

fn pod(name: &str, container: &str, resource: &str, ids: Vec<String>) -> PodAllocation {
    PodAllocation {
        namespace: "ml".into(),
        name: name.into(),
        containers: vec![ContainerAllocation {
            name: container.into(),
            devices: vec![set(resource, ids)],
            claims: Vec::new(),
        }],
    }
}

/// A node: fake NVML, fake kubelet, the agent's GPU state between cycles.
struct Node {
    scenario: Scenario,
    kubelet: Option<FakeKubelet>,
    config: GpuConfig,
    probe: gpu::nvml::NvmlProbe,
    state: PolicyState,
    tracker: FaultTracker,
    /// The DRA view the pods watcher would publish.
    dra: nodeproof_gpu::views::NodeDra,
}

impl Node {
    fn new(nvml: &str, gpus: u32, kubelet: Option<KubeletState>) -> Node {
        let scenario = Scenario::new(nvml, gpus);
        let socket = scenario.dir.path().join("kubelet.sock");
        let config = GpuConfig {
            nvml_library: scenario.library().to_string_lossy().into_owned(),
            sysfs_root: scenario.sysfs(),
            pod_resources_socket: socket.clone(),
            pod_resources_timeout_ms: 2000,
            ..GpuConfig::default()
        };
        let kubelet = kubelet.map(|k| FakeKubelet::start(&socket, k).unwrap());
        Node {
            probe: nodeproof::observe::gpu::probe(&config),
            scenario,
            kubelet,
            config,
            state: PolicyState::default(),
            tracker: FaultTracker::default(),
            dra: nodeproof_gpu::views::NodeDra::Unread,
        }
    }

    /// One cycle as the daemon runs it: probe, faults, pod-resources,
    /// comparison; the faults attributed to containers.
    fn cycle(&mut self, now: u64) -> (GpuReport, Vec<nodeproof_gpu::faults::PodFault>) {
        let mut report = gpu::cycle_at(&self.config, &mut self.probe, &mut self.state, now);
        let faults = self.tracker.observe(report.snapshot.as_ref().unwrap());
        let read = nodeproof::observe::gpu::pod_resources(&self.config)
            .and_then(|mut c| nodeproof::observe::gpu::read_kubelet(&mut c));
        gpu_check::compare(&mut report, &read, None, &self.dra);
        let view = self.dra.view();
        let allocations = gpu_check::allocations(read.as_ref().ok(), view);
        let on_pods = attribute(&faults, &allocations, |_, _| true);
        (report, on_pods)
    }
}

fn watched(pods: &[(&str, &str, &str)]) -> PodIndex {
    let mut idx = PodIndex::default();
    for (name, uid, phase) in pods {
        idx.upsert(
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "ml", "uid": uid},
                "spec": {"containers": [{"name": "main"}]},
                "status": {"phase": phase}
            }))
            .unwrap(),
        );
    }
    idx
}

fn advertised(r: &GpuReport) -> (Status, String, String) {
    let f = gpu_check::findings(r)
        .into_iter()
        .find(|f| f.check == Check::GPU_ADVERTISED)
        .expect("a gpu-advertised finding");
    (f.status, f.reason.to_string(), f.message)
}

#[test]
fn the_kubelet_offers_more_than_nvml_calls_healthy() {
    let mut node = Node::new(
        "lost 3\n",
        8,
        Some(KubeletState {
            allocatable: vec![set("nvidia.com/gpu", (0..8).map(uuid).collect())],
            ..KubeletState::default()
        }),
    );
    // The lost GPU's UUID is known from a cycle while it answered.
    node.scenario.set("");
    let (r, _) = node.cycle(0);
    assert!(r.healthy(), "{}", r.text());
    node.scenario.set("lost 3\n");
    let (r, _) = node.cycle(60);
    let v = &r.evaluation.gpu_healthy;
    assert_eq!(
        (v.status, v.reason.as_str()),
        (ConditionStatus::False, "AdvertisedUnhealthy")
    );
    assert!(
        v.message.starts_with(
            "kubelet offers 8 nvidia.com/gpu, 7 are healthy: GPU 3 (GPU-fa4e0000…) fallen off the bus"
        ),
        "{}",
        v.message
    );
    assert_eq!(advertised(&r).0, Status::Failed);
    let m = r.metrics(&node.state);
    let unhealthy: Vec<&str> = m
        .devices
        .iter()
        .filter(|d| !d.healthy)
        .map(|d| d.device.as_str())
        .collect();
    assert_eq!(unhealthy, [uuid(3)]);
    assert_eq!(m.devices.len(), 8);
    assert!(
        r.text()
            .contains("kubelet: nvidia.com/gpu offered 8, healthy 7"),
        "{}",
        r.text()
    );
}

#[test]
fn healthy_gpus_the_kubelet_does_not_offer_are_a_warning() {
    let mut node = Node::new(
        "",
        8,
        Some(KubeletState {
            allocatable: vec![set("nvidia.com/gpu", (0..7).map(uuid).collect())],
            ..KubeletState::default()
        }),
    );
    let (r, _) = node.cycle(0);
    assert!(r.healthy(), "{}", r.text());
    assert_eq!(
        advertised(&r),
        (
            Status::Warning,
            "HealthyNotAdvertised".into(),
            "1 healthy nvidia.com/gpu not offered by the kubelet: GPU 7 (GPU-fa4e0000…)".into()
        )
    );
}

#[test]
fn an_xid_on_an_allocated_gpu_is_one_event_on_its_running_pod_only() {
    let mut node = Node::new(
        "",
        4,
        Some(KubeletState {
            allocatable: vec![set("nvidia.com/gpu", (0..4).map(uuid).collect())],
            pods: vec![
                pod("vllm-0", "vllm", "nvidia.com/gpu", vec![uuid(2)]),
                pod("other-0", "main", "nvidia.com/gpu", vec![uuid(1)]),
                // Ran on GPU 2 before and finished: the kubelet still lists it.
                pod("done-0", "main", "nvidia.com/gpu", vec![uuid(2)]),
            ],
            ..KubeletState::default()
        }),
    );
    let pods = watched(&[
        ("vllm-0", "u-vllm", "Running"),
        ("other-0", "u-other", "Running"),
        ("done-0", "u-done", "Succeeded"),
    ]);
    let mut agg = GpuFaultAggregator::new(Duration::from_secs(60));
    let (_, on_pods) = node.cycle(0);
    assert!(on_pods.is_empty());
    node.scenario.set("xid 1 2 79\n");
    let (_, on_pods) = node.cycle(60);
    agg.observe(&on_pods, &pods);
    let events = agg.due(SystemTime::UNIX_EPOCH + Duration::from_secs(60));
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (events[0].pod.name.as_str(), events[0].pod.uid.as_deref()),
        ("vllm-0", Some("u-vllm"))
    );
    assert_eq!(
        events[0].message,
        format!(
            "GPU {} (index 2) raised XID 79 while allocated to this pod's container vllm",
            uuid(2)
        )
    );
    let totals = agg.totals();
    assert_eq!(totals.len(), 1);
    assert_eq!(
        (
            totals[0].pod.as_str(),
            totals[0].xid.as_str(),
            totals[0].count
        ),
        ("vllm-0", "79", 1)
    );
    // The same event is not delivered again: nothing new next cycle.
    let (_, on_pods) = node.cycle(120);
    assert!(on_pods.is_empty(), "{on_pods:?}");
}

#[test]
fn an_xid_on_a_mig_parent_reaches_the_pods_on_its_instances() {
    let mut node = Node::new(
        "gpus 2\nmig 1 2 1g.10gb\n",
        2,
        Some(KubeletState {
            allocatable: vec![
                set("nvidia.com/gpu", vec![uuid(0)]),
                set("nvidia.com/mig-1g.10gb", vec![mig(1, 0), mig(1, 1)]),
            ],
            pods: vec![
                pod("whole-0", "main", "nvidia.com/gpu", vec![uuid(0)]),
                pod("slice-0", "main", "nvidia.com/mig-1g.10gb", vec![mig(1, 0)]),
                pod("slice-1", "main", "nvidia.com/mig-1g.10gb", vec![mig(1, 1)]),
            ],
            ..KubeletState::default()
        }),
    );
    let pods = watched(&[
        ("whole-0", "u0", "Running"),
        ("slice-0", "u1", "Running"),
        ("slice-1", "u2", "Running"),
    ]);
    let (r, _) = node.cycle(0);
    assert!(r.healthy(), "{}", r.text());
    assert_eq!(advertised(&r).0, Status::Ok, "{:?}", advertised(&r));
    node.scenario.set("gpus 2\nmig 1 2 1g.10gb\nxid 1 1 48\n");
    let (r, on_pods) = node.cycle(60);
    let mut agg = GpuFaultAggregator::new(Duration::from_secs(60));
    agg.observe(&on_pods, &pods);
    let mut hit: Vec<(String, String)> = agg
        .due(SystemTime::UNIX_EPOCH)
        .into_iter()
        .map(|e| (e.pod.name, e.message))
        .collect();
    hit.sort();
    assert_eq!(hit.len(), 2, "{hit:?}");
    assert_eq!(hit[0].0, "slice-0");
    assert_eq!(
        hit[0].1,
        format!(
            "GPU {} (index 1) (its MIG instance {}) raised XID 48 while allocated to this pod's container main",
            uuid(1),
            mig(1, 0)
        )
    );
    assert_eq!(hit[1].0, "slice-1");
    // XID 48 is fatal: both instances are offered but unhealthy now.
    let v = &r.evaluation.gpu_healthy;
    assert_eq!(v.reason, "AdvertisedUnhealthy", "{}", v.message);
    assert!(
        v.message.starts_with(
            "kubelet offers 2 nvidia.com/mig-1g.10gb, 0 are healthy: GPU 1 (MIG-fa4e0000…)"
        ),
        "{}",
        v.message
    );
}

#[test]
fn without_the_pod_resources_socket_nvml_alone_decides_and_says_why() {
    let mut node = Node::new("lost 3\n", 8, None);
    assert!(node.kubelet.is_none());
    let (r, on_pods) = node.cycle(0);
    assert!(on_pods.is_empty());
    assert_eq!(r.evaluation.gpu_healthy.reason, "GPULost");
    let (status, reason, message) = advertised(&r);
    assert_eq!((status, reason.as_str()), (Status::Ok, "NotCompared"));
    assert!(
        message.contains("pod-resources: the kubelet's pod-resources socket")
            && message.ends_with("kubelet.sock does not exist"),
        "{message}"
    );
}

/// The agent on node n1 with the fake NVML of `s`, a GPU cycle a second,
/// reporting with `kubeconfig` and reading pod-resources at `socket`.
fn agent_config(
    root: &std::path::Path,
    kubeconfig: &std::path::Path,
    s: &Scenario,
    socket: &std::path::Path,
) -> String {
    format!(
        "[seccomp]\nroot = \"{}\"\n[report]\nkubeconfig = \"{}\"\nnode-name = \"n1\"\nstart-spread-s = 0\n\
         [gpu]\nnvml-library = \"{}\"\nsysfs-root = \"{}\"\npod-resources-socket = \"{}\"\n\
         [daemon]\ngpu-interval-s = 1\n",
        root.display(),
        kubeconfig.display(),
        s.library().display(),
        s.sysfs().display(),
        socket.display()
    )
}

fn bound_pod(name: &str, uid: &str, phase: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": uid},
        "spec": {"nodeName": "n1", "containers": [{"name": "main"}]},
        "status": {"phase": phase}})
}

/// The whole chain in the agent (`nodeproof run`, the real binary): the
/// fake NVML raises XID 79 on GPU 2, the fake kubelet lists who holds it,
/// the test API server has the pods; exactly one GPUFault Event, on the
/// running pod of GPU 2, and GPUHealthy False AdvertisedUnhealthy.
#[test]
fn the_agent_puts_one_event_on_the_running_pod_of_the_faulted_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node("n1", json!([]));
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let root = seccomp_root(dir.path(), true);
    let s = Scenario::new("gpus 4\n", 4);
    let socket = s.dir.path().join("kubelet.sock");
    let _kubelet = FakeKubelet::start(
        &socket,
        KubeletState {
            allocatable: vec![set("nvidia.com/gpu", (0..4).map(uuid).collect())],
            pods: vec![
                pod("vllm-0", "main", "nvidia.com/gpu", vec![uuid(2)]),
                pod("other-0", "main", "nvidia.com/gpu", vec![uuid(1)]),
                pod("done-0", "main", "nvidia.com/gpu", vec![uuid(2)]),
            ],
            ..KubeletState::default()
        },
    )
    .unwrap();
    server.put("pods", bound_pod("vllm-0", "u-vllm", "Running"));
    server.put("pods", bound_pod("other-0", "u-other", "Running"));
    server.put("pods", bound_pod("done-0", "u-done", "Succeeded"));
    let config = agent_config(&root, &kubeconfig, &s, &socket);
    let mut agent = Agent::start(dir.path(), &config);
    agent.wait_ready(Duration::from_secs(30));
    let until = |what: &str, f: &dyn Fn() -> bool| {
        let start = std::time::Instant::now();
        while !f() {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "not within 15 s: {what}\n--- agent log ---\n{}",
                agent.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    until("pods watched", &|| {
        agent.get("/healthz/pods").1.contains("pods 3 watched")
    });
    let gpu_events = || -> Vec<Value> {
        server
            .events()
            .into_iter()
            .filter(|e| e["reason"] == "GPUFault")
            .collect()
    };
    assert!(gpu_events().is_empty());
    s.set("gpus 4\nxid 1 2 79\n");
    until("one GPUFault Event", &|| !gpu_events().is_empty());
    until("GPUHealthy AdvertisedUnhealthy", &|| {
        server
            .condition("n1", "GPUHealthy")
            .is_some_and(|c| c["status"] == "False" && c["reason"] == "AdvertisedUnhealthy")
    });
    let events = gpu_events();
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(e["type"], "Warning");
    assert_eq!(e["involvedObject"]["kind"], "Pod");
    assert_eq!(e["involvedObject"]["name"], "vllm-0");
    assert_eq!(e["involvedObject"]["uid"], "u-vllm");
    assert_eq!(
        e["message"],
        format!(
            "GPU {} (index 2) raised XID 79 while allocated to this pod's container main",
            uuid(2)
        )
    );
    let (_, metrics) = agent.get("/metrics");
    assert!(
        metrics.contains(
            "nodeproof_gpu_faults_total{namespace=\"ml\",pod=\"vllm-0\",container=\"main\",xid=\"79\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "nodeproof_gpu_device_health{{plugin=\"nvidia.com/gpu\",node=\"n1\",device=\"{}\"}} 0",
            uuid(2)
        )),
        "{metrics}"
    );
    // Later cycles raise nothing new: still one Event.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(gpu_events().len(), 1, "{:?}", gpu_events());
    assert!(agent.stop(), "{}", agent.log_text());
}

/// Without a pod-resources socket the agent compares by count with the
/// Node's allocatable as its pods watcher sees it: a device plugin that
/// still offers 4 GPUs while NVML finds GPU 3 lost.
#[test]
fn the_agent_compares_with_the_nodes_allocatable_without_pod_resources() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node("n1", json!([]));
    server.merge_node(
        "n1",
        json!({"status": {"allocatable": {"cpu": "64", "nvidia.com/gpu": "4"}}}),
    );
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let root = seccomp_root(dir.path(), true);
    let s = Scenario::new("gpus 4\n", 4);
    let config = agent_config(&root, &kubeconfig, &s, &s.dir.path().join("absent.sock"));
    let mut agent = Agent::start(dir.path(), &config);
    agent.wait_ready(Duration::from_secs(30));
    let until = |what: &str, f: &dyn Fn() -> bool| {
        let start = std::time::Instant::now();
        while !f() {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "not within 15 s: {what}\n--- agent log ---\n{}",
                agent.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let healthy = || server.condition("n1", "GPUHealthy");
    until("GPUHealthy True", &|| {
        healthy().is_some_and(|c| c["status"] == "True")
    });
    s.set("gpus 4\nlost 3\n");
    until("GPUHealthy AdvertisedUnhealthy", &|| {
        healthy().is_some_and(|c| c["reason"] == "AdvertisedUnhealthy")
    });
    let c = healthy().unwrap();
    assert_eq!(c["status"], "False");
    let msg = c["message"].as_str().unwrap();
    assert!(
        msg.starts_with("kubelet offers 4 nvidia.com/gpu, 3 are healthy: GPU 3 (GPU-fa4e0000…) fallen off the bus"),
        "{msg}"
    );
    // The absent socket is said once, not every cycle.
    let said = agent
        .log_text()
        .matches("pod-resources cannot be read")
        .count();
    assert_eq!(said, 1, "{}", agent.log_text());
    assert!(agent.stop(), "{}", agent.log_text());
}

/// This node's ResourceSlice of NVIDIA's DRA driver (`gpu-<minor>`, the
/// `uuid` attribute), in the version's shape: v1beta1 wraps attributes in `basic`.
fn gpu_slice(node: &str, gpus: u32, version: &str) -> Value {
    let devices: Vec<Value> = (0..gpus)
        .map(|i| {
            let attributes = json!({"type": {"string": "gpu"}, "uuid": {"string": uuid(i)}, "index": {"int": i}});
            if version == "v1beta1" {
                json!({"name": format!("gpu-{i}"), "basic": {"attributes": attributes}})
            } else {
                json!({"name": format!("gpu-{i}"), "attributes": attributes})
            }
        })
        .collect();
    json!({"apiVersion": format!("resource.k8s.io/{version}"), "kind": "ResourceSlice",
        "metadata": {"name": format!("{node}-gpu.nvidia.com-x")},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices}})
}

/// A pod whose container `main` uses a claim made from a template (named in
/// the pod's status, as the claim controller records it).
fn claiming_pod(name: &str, uid: &str, phase: &str, claim: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": uid},
        "spec": {"nodeName": "n1",
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            "containers": [{"name": "main", "resources": {"claims": [{"name": "gpu"}]}}, {"name": "sidecar"}]},
        "status": {"phase": phase, "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": claim}]}})
}

fn allocated_claim(version: &str, name: &str, device: &str, pod: &str, uid: &str) -> Value {
    json!({"apiVersion": format!("resource.k8s.io/{version}"), "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"devices": {"requests": [{"name": "gpu"}]}},
        "status": {
            "allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": device}]}},
            "reservedFor": [{"resource": "pods", "name": pod, "uid": uid}]}})
}

/// DRA end to end in the agent (`nodeproof run`), on a kubelet without
/// pod-resources: the slices of this node name the devices, the claims
/// reserved for the pods running here map them to containers. XID 79 on GPU
/// 2 is one GPUFault Event on the pod whose claim holds it, and GPUHealthy
/// says the slices publish a broken device. Once with `resource.k8s.io/v1`
/// and once with a server that serves only `v1beta1` (Kubernetes 1.32).
#[test]
fn dra_claims_map_a_gpu_fault_to_the_pod_holding_it() {
    for version in ["v1", "v1beta1"] {
        dra_end_to_end(version);
    }
}

fn dra_end_to_end(version: &'static str) {
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node("n1", json!([]));
    server.serve_dra(&[version]);
    server.put("resourceslices", gpu_slice("n1", 4, version));
    // Another node's slice: a node lists only its own.
    let mut other = gpu_slice("n2", 4, version);
    other["metadata"]["name"] = json!("n2-gpu.nvidia.com-x");
    server.put("resourceslices", other);
    server.put(
        "pods",
        claiming_pod("vllm-0", "u-vllm", "Running", "vllm-0-gpu-a1"),
    );
    server.put(
        "pods",
        claiming_pod("other-0", "u-other", "Running", "other-0-gpu-b2"),
    );
    server.put(
        "resourceclaims",
        allocated_claim(version, "vllm-0-gpu-a1", "gpu-2", "vllm-0", "u-vllm"),
    );
    server.put(
        "resourceclaims",
        allocated_claim(version, "other-0-gpu-b2", "gpu-1", "other-0", "u-other"),
    );
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let root = seccomp_root(dir.path(), true);
    let s = Scenario::new("gpus 4\n", 4);
    let config = agent_config(&root, &kubeconfig, &s, &s.dir.path().join("absent.sock"));
    let mut agent = Agent::start(dir.path(), &config);
    agent.wait_ready(Duration::from_secs(30));
    let until = |what: &str, f: &dyn Fn() -> bool| {
        let start = std::time::Instant::now();
        while !f() {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "{version}: not within 15 s: {what}\n--- agent log ---\n{}",
                agent.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let healthy = || server.condition("n1", "GPUHealthy");
    until("GPUHealthy True", &|| {
        healthy().is_some_and(|c| c["status"] == "True")
    });
    // Both pods' claims resolved (a fault before that would find no holder).
    until("the DRA view read", &|| {
        agent
            .log_text()
            .contains(&format!("version={version} devices=4 allocations=2"))
    });
    // Every GPU is published through DRA: no "not offered" warning although no device plugin offers any.
    let log = agent.log_text();
    assert!(!log.contains("HealthyNotAdvertised"), "{version}: {log}");
    let gpu_events = || -> Vec<Value> {
        server
            .events()
            .into_iter()
            .filter(|e| e["reason"] == "GPUFault")
            .collect()
    };
    s.set("gpus 4\nxid 1 2 79\n");
    until("one GPUFault Event", &|| !gpu_events().is_empty());
    until("GPUHealthy AdvertisedUnhealthy", &|| {
        healthy().is_some_and(|c| c["reason"] == "AdvertisedUnhealthy")
    });
    let events = gpu_events();
    assert_eq!(events.len(), 1, "{version}: {events:?}");
    assert_eq!(events[0]["involvedObject"]["name"], "vllm-0");
    assert_eq!(events[0]["involvedObject"]["uid"], "u-vllm");
    assert_eq!(
        events[0]["message"],
        format!(
            "GPU {} (index 2) raised XID 79 while allocated to this pod's container main",
            uuid(2)
        )
    );
    let msg = healthy().unwrap()["message"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with("DRA ResourceSlices of this node publish 4 gpu.nvidia.com devices, 3 are healthy: GPU 2 (GPU-fa4e0000…)"),
        "{version}: {msg}"
    );
    // The node read only what the Node authorizer lets it: its own slices
    // by field selector, and each claim by name.
    let log = server.log();
    assert!(
        log.iter().any(|l| l.path.ends_with("/resourceslices")
            && l.query.contains("spec.nodeName%3Dn1")
            && l.status == 200),
        "{version}: {log:?}"
    );
    assert!(
        log.iter()
            .all(|l| l.status != 403 || !l.path.contains("resource.k8s.io")),
        "{version}: {log:?}"
    );
    assert!(agent.stop(), "{}", agent.log_text());
}

/// A kubelet with KubeletPodResourcesDynamicResources lists each
/// container's claim devices by driver, pool and device name; the node's
/// slices turn them into UUIDs, so the fault reaches the container.
#[test]
fn pod_resources_dynamic_resources_are_named_by_the_slices() {
    use nodeproof_apiclient::dra::slice_devices;
    use nodeproof_gpu::views::DraView;
    use nodeproof_podresources::ClaimDevice;
    let claim = |device: &str| ClaimDevice {
        claim_namespace: "ml".into(),
        claim_name: "c".into(),
        driver: "gpu.nvidia.com".into(),
        pool: "n1".into(),
        device: device.into(),
    };
    let mut node = Node::new(
        "gpus 4\n",
        4,
        Some(KubeletState {
            pods: vec![PodAllocation {
                namespace: "ml".into(),
                name: "vllm-0".into(),
                containers: vec![ContainerAllocation {
                    name: "main".into(),
                    devices: Vec::new(),
                    claims: vec![claim("gpu-3")],
                }],
            }],
            ..KubeletState::default()
        }),
    );
    node.dra = nodeproof_gpu::views::NodeDra::Read(DraView {
        version: "v1".into(),
        devices: slice_devices(&gpu_slice("n1", 4, "v1")["spec"], "v1").unwrap(),
        ..DraView::default()
    });
    let (r, on_pods) = node.cycle(0);
    assert!(r.healthy(), "{}", r.text());
    assert!(on_pods.is_empty());
    node.scenario.set("gpus 4\nxid 1 3 79\n");
    let (_, on_pods) = node.cycle(60);
    let got: Vec<(&str, &str, &str)> = on_pods
        .iter()
        .map(|p| (p.pod.as_str(), p.container.as_str(), p.device.as_str()))
        .collect();
    assert_eq!(got, [("vllm-0", "main", uuid(3).as_str())]);
}

/// `nodeproof gpu` (one shot) on a DRA-only node reads the slices with the
/// node's credentials: the GPUs they publish are offered (no "not offered"
/// warning although no device plugin offers any), and the one with a fatal
/// XID is named as published but unhealthy.
#[test]
fn the_gpu_command_reads_this_nodes_dra_slices() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node("n1", json!([]));
    server.serve_dra(&["v1"]);
    server.put("resourceslices", gpu_slice("n1", 4, "v1"));
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let s = Scenario::new("gpus 4\nxid 1 2 79\n", 4);
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[report]\nkubeconfig = \"{}\"\nnode-name = \"n1\"\n\
             [gpu]\nnvml-library = \"{}\"\nsysfs-root = \"{}\"\npod-resources-socket = \"{}\"\n",
            kubeconfig.display(),
            s.library().display(),
            s.sysfs().display(),
            s.dir.path().join("absent.sock").display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .args(["gpu", "-o", "json", "--config"])
        .arg(&config)
        .env_remove("NODE_NAME")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    let advertised = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "gpu-advertised")
        .cloned()
        .unwrap();
    assert_eq!(advertised["reason"], "AdvertisedUnhealthy", "{advertised}");
    let msg = advertised["message"].as_str().unwrap();
    assert!(
        msg.starts_with("DRA ResourceSlices of this node publish 4 gpu.nvidia.com devices, 3 are healthy: GPU 2"),
        "{msg}"
    );
    assert!(!msg.contains("not offered"), "{msg}");
    assert_eq!(out.status.code(), Some(1), "unhealthy");
}

/// GPU usage on `/metrics` labelled with its holder, in the agent (the real
/// binary): the fake kubelet lists vllm-0 on GPU 0, small-0 on GPU 1's MIG
/// instance 1 and done-0 (Succeeded) on GPU 2; the pods watcher knows which
/// run. A device no running pod holds has empty pod labels; a cycle whose
/// driver does not answer leaves no usage sample (never the last values).
#[test]
fn the_agent_labels_gpu_usage_with_the_running_pod_holding_each_device() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node("n1", json!([]));
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let root = seccomp_root(dir.path(), true);
    let usage = "gpus 4\nutil 0 87 31\nmemory 0 30000 81920\npower 0 412500\necc-corrected 0 9 9\n\
                 mig 1 2\nmig-memory 1 1 2048 40960\n";
    let s = Scenario::new(usage, 4);
    let socket = s.dir.path().join("kubelet.sock");
    let _kubelet = FakeKubelet::start(
        &socket,
        KubeletState {
            allocatable: vec![
                set("nvidia.com/gpu", vec![uuid(0), uuid(2), uuid(3)]),
                set("nvidia.com/mig-1g.10gb", vec![mig(1, 0), mig(1, 1)]),
            ],
            pods: vec![
                pod("vllm-0", "main", "nvidia.com/gpu", vec![uuid(0)]),
                pod("small-0", "main", "nvidia.com/mig-1g.10gb", vec![mig(1, 1)]),
                pod("done-0", "main", "nvidia.com/gpu", vec![uuid(2)]),
            ],
            ..KubeletState::default()
        },
    )
    .unwrap();
    server.put("pods", bound_pod("vllm-0", "u-vllm", "Running"));
    server.put("pods", bound_pod("small-0", "u-small", "Running"));
    server.put("pods", bound_pod("done-0", "u-done", "Succeeded"));
    let config = agent_config(&root, &kubeconfig, &s, &socket)
        .replace("[gpu]\n", "[gpu]\nnvml-timeout-ms = 1000\n");
    let mut agent = Agent::start(dir.path(), &config);
    agent.wait_ready(Duration::from_secs(30));
    let until = |what: &str, f: &mut dyn FnMut() -> bool| {
        let start = std::time::Instant::now();
        while !f() {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "not within 15 s: {what}\n--- agent log ---\n{}",
                agent.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let labels = |gpu: u32, device: &str, pod: &str| {
        let (ns, container) = if pod.is_empty() {
            ("", "")
        } else {
            ("ml", "main")
        };
        format!(
            "{{gpu=\"{gpu}\",uuid=\"{}\",device=\"{device}\",namespace=\"{ns}\",pod=\"{pod}\",container=\"{container}\"}}",
            uuid(gpu)
        )
    };
    let vllm = labels(0, &uuid(0), "vllm-0");
    let mut metrics = String::new();
    // The terminated pod's GPU is nobody's once the watcher has judged the pods.
    until("GPU 2 held by no running pod", &mut || {
        metrics = agent.get("/metrics").1;
        metrics.contains(&format!(
            "nodeproof_gpu_temperature_celsius{} 37\n",
            labels(2, &uuid(2), "")
        ))
    });
    for want in [
        format!("nodeproof_gpu_utilization_ratio{vllm} 0.87\n"),
        format!("nodeproof_gpu_memory_used_bytes{vllm} {}\n", 30000u64 << 20),
        format!(
            "nodeproof_gpu_memory_total_bytes{vllm} {}\n",
            81920u64 << 20
        ),
        format!("nodeproof_gpu_power_watts{vllm} 412.5\n"),
        format!("nodeproof_gpu_temperature_celsius{vllm} 35\n"),
        format!(
            "nodeproof_gpu_ecc_errors_total{} 9\n",
            vllm.replace('}', ",error=\"corrected\"}")
        ),
        // A MIG instance: its own memory, its GPU's temperature.
        format!(
            "nodeproof_gpu_memory_used_bytes{} {}\n",
            labels(1, &mig(1, 1), "small-0"),
            2048u64 << 20
        ),
        format!(
            "nodeproof_gpu_temperature_celsius{} 36\n",
            labels(1, &mig(1, 1), "small-0")
        ),
        // Held by nobody: empty pod labels, by design.
        format!(
            "nodeproof_gpu_memory_total_bytes{} {}\n",
            labels(1, &mig(1, 0), ""),
            10240u64 << 20
        ),
        format!(
            "nodeproof_gpu_memory_total_bytes{} {}\n",
            labels(3, &uuid(3), ""),
            81920u64 << 20
        ),
    ] {
        assert!(metrics.contains(&want), "no {want} in\n{metrics}");
    }
    // Never labelled with the terminated pod; no utilization in MIG mode.
    assert!(!metrics.contains("pod=\"done-0\""), "{metrics}");
    assert!(
        !metrics
            .lines()
            .any(|l| l.starts_with("nodeproof_gpu_utilization_ratio{gpu=\"1\"")),
        "{metrics}"
    );
    // The driver stops answering: the usage samples go, not kept stale.
    s.set(&format!("{usage}hang count 3000\n"));
    until("no usage sample while NVML does not answer", &mut || {
        metrics = agent.get("/metrics").1;
        metrics.contains("nodeproof_gpu_driver_ready 0\n")
            && !metrics
                .lines()
                .any(|l| l.starts_with("nodeproof_gpu_memory_used_bytes{"))
    });
    assert!(
        metrics.contains("# TYPE nodeproof_gpu_memory_used_bytes gauge"),
        "the family stays described: {metrics}"
    );
    // And back with the driver.
    s.set(usage);
    until("usage back", &mut || {
        agent
            .get("/metrics")
            .1
            .contains(&format!("nodeproof_gpu_utilization_ratio{vllm} 0.87\n"))
    });
    assert!(agent.stop(), "{}", agent.log_text());
}

/// DRA: usage of devices allocated through ResourceClaims carries the
/// claiming pod, joined by the UUIDs of this node's slices (a GPU whole, a
/// MIG instance, and a claim no container names: the pod's, container
/// empty), through the real FFI and the same allocations the faults use.
#[test]
fn usage_of_dra_claimed_devices_carries_the_claiming_pod() {
    use nodeproof_gpu::views::{DraAllocation, DraView, SliceDevice};
    let s = Scenario::new("gpus 2\nmig 1 2\nutil 0 55 10\n", 2);
    let mut probe = gpu::nvml::NvmlProbe::new(s.library(), Duration::from_secs(5));
    let snapshot = gpu::GpuProbe::snapshot(&mut probe);
    let device = |name: &str, uuid: String| SliceDevice {
        driver: "gpu.nvidia.com".into(),
        pool: "n1".into(),
        name: name.into(),
        uuid: Some(uuid),
        parent_uuid: None,
    };
    let claim = |pod: &str, container: &str, name: &str, uuid: String| DraAllocation {
        namespace: "ml".into(),
        pod: pod.into(),
        container: container.into(),
        claim: format!("{pod}-gpu"),
        driver: "gpu.nvidia.com".into(),
        pool: "n1".into(),
        device: name.into(),
        uuid: Some(uuid),
    };
    let view = DraView {
        version: "v1".into(),
        devices: vec![device("gpu-0", uuid(0)), device("mig-1-1", mig(1, 1))],
        allocations: vec![
            claim("train-0", "main", "gpu-0", uuid(0)),
            claim("infer-0", "", "mig-1-1", mig(1, 1)),
            claim("gone-0", "main", "gpu-0", uuid(0)),
        ],
        notes: Vec::new(),
    };
    let allocations = gpu_check::allocations(None, Some(&view));
    let running = [("ml", "train-0"), ("ml", "infer-0")]
        .map(|(n, p)| (n.to_string(), p.to_string()))
        .into_iter()
        .collect();
    let rows = gpu_check::usage(Some(&snapshot), &allocations, Some(&running));
    let got: Vec<(String, &str, &str, Option<f64>)> = rows
        .iter()
        .map(|r| {
            (
                r.device.clone(),
                r.holder.pod.as_str(),
                r.holder.container.as_str(),
                r.utilization_ratio,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (uuid(0), "train-0", "main", Some(0.55)),
            (mig(1, 0), "", "", None),
            (mig(1, 1), "infer-0", "", None),
        ]
    );
}
