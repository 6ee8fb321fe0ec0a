//! Where kube-runtime's pieces fit nodeproof, measured: the figures quoted
//! in docs/architecture.md ("kube-runtime: what is used and what is not")
//! and next to the code (crates/report/src/events.rs,
//! crates/cluster/src/gate/controller.rs,
//! crates/cluster/src/device_taints/controller.rs) come from here:
//!
//! `cargo test -p nodeproof-cluster --test runtime_fit -- --nocapture`
//!
//! - Events: one hour of a node's Event stream written through nodeproof's
//!   recorder and through kube-runtime 5's `events::Recorder`, both against
//!   the test API server, whose request log counts the requests.
//! - Stores: the heap held by a kube-runtime `reflector` store of 5,000
//!   Nodes and 20,000 gated Pods, against what the gate controller keeps of
//!   them (`Gatekeeper`) and what the device taints keep of the Nodes,
//!   counted by this binary's allocator for the measuring thread only.
//! - Connections: the requests of a bare `watcher` and of a `reflector` over
//!   it, on one server.
//!
//! Each test asserts the relation the decision rests on, so a kube-runtime
//! upgrade that changes it fails here.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, ObjectReference, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event as RuntimeEvent, EventType as RuntimeType, Recorder, Reporter};
use kube::runtime::reflector::store::Writer;
use kube::runtime::{reflector, watcher, WatchStreamExt};
use serde_json::{json, Value};

use nodeproof_cluster::gate::config::GateConfig;
use nodeproof_cluster::gate::state::Gatekeeper;
use nodeproof_report::device_health::{UnhealthyDevices, UNHEALTHY_DEVICES};
use nodeproof_report::events::{
    EventType, EventWrite, ObjectRef, Recorder as OurRecorder, RecorderConfig,
};
use nodeproof_testapi::{Identity, TestApiServer};

// ---- heap held, counted per thread ----------------------------------------

/// The system allocator, counting the bytes live per thread: the tests of
/// this binary run as threads at once, and each measures its own.
struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

fn add(n: isize) {
    // `try_with`: the allocator is also called while a thread's locals are
    // torn down.
    let _ = LIVE.try_with(|l| l.set(l.get() + n));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        add(layout.size() as isize);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        add(-(layout.size() as isize));
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        add(layout.size() as isize);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        add(new_size as isize - layout.size() as isize);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> isize {
    LIVE.with(Cell::get)
}

/// The bytes `build` leaves allocated in what it returns (kept alive until
/// counted).
fn held<T>(build: impl FnOnce() -> T) -> (T, usize) {
    let before = live();
    let kept = build();
    let after = live();
    (kept, (after - before).max(0) as usize)
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

// ---- objects as a cluster has them ----------------------------------------

const NODES: usize = 5_000;
const PODS: usize = 20_000;
const GATE: &str = "nodeproof.dev/gpu-driver-ready";

/// A GPU node as kubelet and nodeproof's agent report it: kubelet's and
/// the cloud's labels, the usual annotations, capacity, kubelet's five
/// conditions and nodeproof's three, addresses, nodeInfo and 30 images
/// (kubelet reports up to 50, `nodeStatusMaxImages`). No managedFields:
/// a real API server sends them too, so the reflector's figure is a floor.
fn node(i: usize) -> Node {
    let at = "2026-12-06T04:00:00Z";
    let cond = |t: &str, s: &str, r: &str| {
        json!({"type": t, "status": s, "reason": r, "message": format!("{t} is {s}: {r}"),
               "lastHeartbeatTime": at, "lastTransitionTime": at})
    };
    let images: Vec<Value> = (0..30)
        .map(|k| {
            json!({"names": [format!("registry.example/team-{k}/image-{k}@sha256:{:064x}", k * 7919 + i),
                             format!("registry.example/team-{k}/image-{k}:v1.{k}.0")],
                   "sizeBytes": 100_000_000 + k * 1_000_000})
        })
        .collect();
    let mut annotations = json!({
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        "csi.volume.kubernetes.io/nodeid": format!("{{\"ebs.csi.aws.com\":\"i-{i:017x}\"}}"),
        "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd/containerd.sock",
    });
    // One node in a hundred has an unhealthy GPU, as the agent publishes it.
    if i.is_multiple_of(100) {
        annotations[UNHEALTHY_DEVICES] = json!(format!(
            "GPU-{i:08x}-0000-0000-0000-000000000000=XidCritical"
        ));
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": format!("node-{i}"), "uid": format!("{i:08x}-1111-2222-3333-444444444444"),
            "resourceVersion": format!("{}", 1000 + i), "creationTimestamp": at,
            "labels": {
                "kubernetes.io/hostname": format!("node-{i}"), "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "p5.48xlarge",
                "topology.kubernetes.io/region": "eu-west-1", "topology.kubernetes.io/zone": "eu-west-1a",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8",
                "nvidia.com/cuda.driver.major": "550", "pool": format!("pool-{}", i % 20),
                "gate.nodeproof.dev/gpu-driver-ready": "ready",
            },
            "annotations": annotations,
        },
        "spec": {"podCIDR": format!("10.{}.{}.0/24", i / 256, i % 256),
                 "providerID": format!("aws:///eu-west-1a/i-{i:017x}"),
                 "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "192", "memory": "2097152Mi", "pods": "110", "ephemeral-storage": "7000Gi",
                         "hugepages-1Gi": "0", "hugepages-2Mi": "0", "nvidia.com/gpu": "8"},
            "allocatable": {"cpu": "191500m", "memory": "2090000Mi", "pods": "110", "ephemeral-storage": "6500Gi",
                            "hugepages-1Gi": "0", "hugepages-2Mi": "0", "nvidia.com/gpu": "8"},
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID"),
                cond("Ready", "True", "KubeletReady"),
                cond("NetworkUnavailable", "False", "RouteCreated"),
                cond("GPUDriverReady", "True", "DriverLoaded"),
                cond("GPUHealthy", "True", "Healthy"),
                cond("SeccompProfilesReady", "True", "ProfilesValid"),
            ],
            "addresses": [{"type": "InternalIP", "address": format!("10.0.{}.{}", i / 256, i % 256)},
                          {"type": "Hostname", "address": format!("node-{i}")},
                          {"type": "InternalDNS", "address": format!("node-{i}.eu-west-1.compute.internal")}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": format!("{i:032x}"), "systemUUID": format!("ec2{i:029x}"),
                         "bootID": format!("{i:08x}-aaaa-bbbb-cccc-dddddddddddd"), "kernelVersion": "6.8.0-1021-aws",
                         "osImage": "Ubuntu 24.04.1 LTS", "containerRuntimeVersion": "containerd://1.7.24",
                         "kubeletVersion": "v1.36.0", "kubeProxyVersion": "v1.36.0",
                         "operatingSystem": "linux", "architecture": "amd64"},
            "images": images,
        },
    }))
    .expect("a Node")
}

/// A gated vLLM pod as a Deployment makes it.
fn pod(i: usize) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("vllm-7d9f8c6b5-{i:05}"), "namespace": "ml",
            "uid": format!("{i:08x}-5555-6666-7777-888888888888"), "resourceVersion": format!("{}", 9000 + i),
            "creationTimestamp": "2026-12-06T04:00:00Z", "generateName": "vllm-7d9f8c6b5-",
            "labels": {"app": "vllm", "pod-template-hash": "7d9f8c6b5"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "vllm-7d9f8c6b5",
                                 "uid": "rs-uid-0000", "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {
            "schedulingGates": [{"name": GATE}],
            "nodeSelector": {"pool": format!("pool-{}", i % 20)},
            "runtimeClassName": "nvidia",
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{
                "name": "vllm", "image": "registry.example/vllm/vllm-openai:v0.8.0",
                "args": ["--model", "/models/llama", "--tensor-parallel-size", "8", "--port", "8000"],
                "env": [{"name": "HF_HOME", "value": "/models"}, {"name": "VLLM_LOGGING_LEVEL", "value": "INFO"},
                        {"name": "NCCL_DEBUG", "value": "WARN"}],
                "ports": [{"containerPort": 8000, "name": "http", "protocol": "TCP"}],
                "resources": {"limits": {"nvidia.com/gpu": "8", "memory": "512Gi"},
                              "requests": {"nvidia.com/gpu": "8", "cpu": "32", "memory": "512Gi"}},
                "volumeMounts": [{"name": "models", "mountPath": "/models"}, {"name": "shm", "mountPath": "/dev/shm"}],
                "securityContext": {"seccompProfile": {"type": "Localhost",
                                                       "localhostProfile": "profiles/vllm-strict.json"}},
            }],
            "volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "models"}},
                        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}],
        },
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                   "reason": "SchedulingGated", "message": "Scheduling is blocked due to non-empty scheduling gates"}],
                   "qosClass": "Burstable"},
    }))
    .expect("a Pod")
}

/// A reflector's store after the initial list of `objects`, as
/// `reflector(writer, watcher(..))` fills it.
fn reflected<K>(objects: impl Iterator<Item = K>) -> Writer<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let mut w = Writer::<K>::default();
    w.apply_watcher_event(&watcher::Event::Init);
    for o in objects {
        w.apply_watcher_event(&watcher::Event::InitApply(o));
    }
    w.apply_watcher_event(&watcher::Event::InitDone);
    w
}

/// The heap of a reflector store of 5,000 Nodes and of 20,000 gated Pods,
/// against what the gate controller keeps of the same objects (its
/// `Gatekeeper`: `NodeFacts`, `PodNeeds` and their indexes) and what the
/// device taints keep of the Nodes (the parsed annotation of the nodes that
/// carry one).
#[test]
fn a_reflector_store_holds_far_more_than_what_the_controllers_keep() {
    // Each store is counted, then dropped, and the Pods are made as they
    // are taken in: the test's peak stays near the largest store alone.
    let nodes: Vec<Node> = (0..NODES).map(node).collect();
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_529_600);

    let (store, reflector_nodes) = held(|| reflected(nodes.iter().cloned()));
    assert_eq!(store.as_reader().len(), NODES);
    drop(store);
    let (store, reflector_pods) = held(|| reflected((0..PODS).map(pod)));
    assert_eq!(store.as_reader().len(), PODS);
    drop(store);

    let policy = GateConfig::default().policy();
    let (gk, gate_nodes) = held(|| {
        let mut gk = Gatekeeper::new(policy.clone());
        for n in &nodes {
            gk.upsert_node(n, now);
        }
        gk
    });
    assert_eq!(gk.node_count(), NODES);
    let (gk, gate_both) = held(|| {
        let mut gk = gk;
        for i in 0..PODS {
            gk.upsert_pod(&pod(i));
        }
        gk
    });
    assert_eq!(gk.pod_keys().len(), PODS);
    // What device_taints::controller's `Follower::upsert_node` keeps: the
    // nodes whose annotation names a device, parsed.
    let (unhealthy, taint_nodes) = held(|| {
        let mut kept: BTreeMap<String, UnhealthyDevices> = BTreeMap::new();
        for n in &nodes {
            let value = n
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(UNHEALTHY_DEVICES));
            let (devices, _) = UnhealthyDevices::parse(value.map_or("", String::as_str));
            if !devices.is_empty() {
                kept.insert(n.metadata.name.clone().unwrap_or_default(), devices);
            }
        }
        kept
    });
    assert_eq!(unhealthy.len(), NODES / 100);

    println!(
        "heap held: reflector store of {NODES} Nodes {:.1} MiB, of {PODS} gated Pods {:.1} MiB; \
         the gate's Gatekeeper with the same Nodes {:.1} MiB, and the Pods too {:.1} MiB; \
         the device taints' Nodes {:.3} MiB",
        mib(reflector_nodes),
        mib(reflector_pods),
        mib(gate_nodes),
        mib(gate_both),
        mib(taint_nodes)
    );
    // The decision rests on these: a reflector would hold the whole objects
    // beside (not instead of) the digests the incremental judgement needs.
    assert!(
        reflector_nodes > 2 * gate_nodes,
        "reflector {reflector_nodes} B vs Gatekeeper {gate_nodes} B"
    );
    assert!(
        reflector_nodes + reflector_pods > 4 * gate_both,
        "reflector {} B vs Gatekeeper {gate_both} B",
        reflector_nodes + reflector_pods
    );
    assert!(reflector_nodes > 100 * taint_nodes);
}

// ---- the test API server ---------------------------------------------------

async fn client(server: &TestApiServer, dir: &std::path::Path, token: &str) -> kube::Client {
    let path = server.kubeconfig(dir, token);
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

/// Requests answered below 300 whose path starts with `prefix`.
fn requests(server: &TestApiServer, prefix: &str) -> Vec<(String, String)> {
    server
        .log()
        .into_iter()
        .filter(|l| l.path.starts_with(prefix) && l.status < 300)
        .map(|l| (l.method, l.query))
        .collect()
}

const HOUR: u64 = 3600;
/// One occurrence every 10 s: a node whose GPU flaps, a pod's container
/// denied the same syscall on every restart.
const EVERY: u64 = 10;
const REASON: &str = "GPUUnhealthy";

/// The same hour of one Node's Event stream through both recorders: ours
/// counts repeats and writes a burst, then one per key per interval
/// (kubelet's EventCorrelator: a repeat becomes a count on one Event, and
/// its spam filter a token bucket per source and object); kube-runtime 5's
/// `Recorder::publish` writes on every call (a create, then a JSON merge
/// patch of the series), whatever the spacing (its cache's 6-minute TTL
/// decides only create or patch).
#[tokio::test(flavor = "current_thread")]
async fn an_hour_of_repeats_costs_ours_a_twentieth_of_kube_runtimes_requests() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start();
    server.add_token("agent", Identity::AgentServiceAccount);
    let client = client(&server, dir.path(), "agent").await;
    let occurrences = HOUR / EVERY;
    let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_529_600);

    // Ours, at the simulated times, written as the report driver writes them.
    let mut ours = OurRecorder::new(RecorderConfig::default());
    let object = ObjectRef::node("n1", Some("uid-n1".into()));
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    let write = async |ours: &mut OurRecorder, now: SystemTime| {
        for w in ours.due(now) {
            match &w {
                EventWrite::Create { .. } => {
                    let body: CoreEvent = serde_json::from_value(w.body("n1")).unwrap();
                    core.create(&PostParams::default(), &body).await.unwrap();
                }
                EventWrite::Update { name, .. } => {
                    core.patch(
                        name,
                        &PatchParams::default(),
                        &Patch::Strategic(w.body("n1")),
                    )
                    .await
                    .unwrap();
                }
            }
            ours.written(&w);
        }
    };
    for i in 0..occurrences {
        let now = start + Duration::from_secs(i * EVERY);
        ours.record(
            now,
            object.clone(),
            EventType::Warning,
            REASON,
            "GPU-0 fell off the bus",
        );
        write(&mut ours, now).await;
    }
    // The last count, written when the rate limit allows it.
    let last = ours.next_due().expect("the last occurrences wait");
    write(&mut ours, last).await;
    let ours_requests = requests(&server, "/api/v1/namespaces/default/events").len();
    let stored = server.events();
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(stored[0]["count"], occurrences, "every occurrence counted");

    // kube-runtime's, publishing the same occurrences.
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "nodeproof".into(),
            instance: Some("n1".into()),
        },
    );
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some("n1".into()),
        uid: Some("uid-n1".into()),
        ..ObjectReference::default()
    };
    let event = |note: &str| RuntimeEvent {
        type_: RuntimeType::Warning,
        reason: REASON.into(),
        note: Some(note.into()),
        action: "Check".into(),
        secondary: None,
    };
    for _ in 0..occurrences {
        recorder
            .publish(&event("GPU-0 fell off the bus"), &reference)
            .await
            .unwrap();
    }
    let theirs = requests(&server, "/apis/events.k8s.io/v1/");
    let stored = server.events_v1();
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(stored[0]["series"]["count"], occurrences);

    println!(
        "one Node, one Event every {EVERY} s for an hour ({occurrences} occurrences): \
         nodeproof's recorder {ours_requests} requests, kube-runtime's Recorder {} requests",
        theirs.len()
    );
    // Ours: the burst of 5, then one per 300 s (and the last count after
    // the hour).
    assert!(
        ours_requests <= 5 + (HOUR / 300) as usize + 1,
        "{ours_requests}"
    );
    assert_eq!(theirs.len() as u64, occurrences);
    assert!(theirs.len() >= 20 * ours_requests);

    // kube-runtime's key leaves the note out: a second message with the same
    // reason about the same object patches the first's series, and what it
    // says is not written (ours keys by object, reason and message).
    recorder
        .publish(&event("GPU-1 fell off the bus"), &reference)
        .await
        .unwrap();
    let stored = server.events_v1();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0]["note"], "GPU-0 fell off the bus", "{}", stored[0]);
}

/// A reflector is a stream adapter over the same watcher: one list and one
/// watch for the kind either way, no request or connection of its own.
#[tokio::test(flavor = "current_thread")]
async fn a_reflector_asks_the_api_server_exactly_what_its_watcher_asks() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start();
    server.add_token("gate", Identity::GateControllerServiceAccount);
    for i in 0..50 {
        server.put("nodes", serde_json::to_value(node(i)).unwrap());
    }
    let client = client(&server, dir.path(), "gate").await;

    // Polled through the list, then until the watch that follows it has
    // started (the server logs a watch when its stream starts).
    let watched = |server: &TestApiServer| {
        requests(server, "/api/v1/nodes")
            .iter()
            .any(|(_, q)| q.contains("watch=true"))
    };
    async fn until_watching(
        server: &TestApiServer,
        mut stream: futures::stream::BoxStream<'static, watcher::Result<watcher::Event<Node>>>,
        watched: impl Fn(&TestApiServer) -> bool,
    ) {
        while let Some(ev) = stream.next().await {
            if matches!(ev, Ok(watcher::Event::InitDone)) {
                break;
            }
        }
        for _ in 0..600 {
            if watched(server) {
                return;
            }
            let _ = tokio::time::timeout(Duration::from_millis(50), stream.next()).await;
        }
        panic!("no watch after the list in 30 s");
    }

    server.clear_log();
    let api: Api<Node> = Api::all(client.clone());
    until_watching(
        &server,
        watcher(api.clone(), watcher::Config::default())
            .default_backoff()
            .boxed(),
        watched,
    )
    .await;
    let bare = requests(&server, "/api/v1/nodes");

    server.clear_log();
    let (store, writer) = reflector::store::<Node>();
    until_watching(
        &server,
        reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff()
            .boxed(),
        watched,
    )
    .await;
    let reflected = requests(&server, "/api/v1/nodes");
    assert_eq!(store.len(), 50);

    println!(
        "Nodes: a watcher asked {} ({:?}), a reflector over it {}",
        bare.len(),
        bare,
        reflected.len()
    );
    assert_eq!(bare.len(), reflected.len(), "{bare:?} vs {reflected:?}");
    assert!(
        bare.iter().any(|(_, q)| q.contains("watch=true")),
        "{bare:?}"
    );
}
