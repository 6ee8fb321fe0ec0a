//! The client against a fake kubelet serving the real gRPC API on a unix socket.

use std::time::{Duration, Instant};

use nodeproof_podresources::fake::{FakeKubelet, GetMode, KubeletState};
use nodeproof_podresources::{
    ClaimDevice, ContainerAllocation, DeviceSet, KubeletPodResources, PodAllocation,
    PodResourcesError, PodResourcesSource,
};

const TIMEOUT: Duration = Duration::from_secs(2);

fn set(resource: &str, ids: &[&str]) -> DeviceSet {
    DeviceSet {
        resource: resource.into(),
        ids: ids.iter().map(|s| s.to_string()).collect(),
    }
}

fn pod(ns: &str, name: &str, container: &str, devices: Vec<DeviceSet>) -> PodAllocation {
    PodAllocation {
        namespace: ns.into(),
        name: name.into(),
        containers: vec![ContainerAllocation {
            name: container.into(),
            devices,
            claims: Vec::new(),
        }],
    }
}

fn state() -> KubeletState {
    let mut dra = pod("ml", "dra-0", "train", Vec::new());
    dra.containers[0].claims.push(ClaimDevice {
        claim_namespace: "ml".into(),
        claim_name: "gpu-claim".into(),
        driver: "gpu.nvidia.com".into(),
        pool: "node-a".into(),
        device: "gpu-1".into(),
    });
    KubeletState {
        allocatable: vec![
            set("nvidia.com/gpu", &["GPU-aaaa", "GPU-bbbb"]),
            set("nvidia.com/mig-1g.10gb", &["MIG-cccc", "MIG-dddd"]),
        ],
        pods: vec![
            pod(
                "ml",
                "vllm-0",
                "vllm",
                vec![set("nvidia.com/gpu", &["GPU-aaaa"])],
            ),
            pod(
                "ml",
                "small-0",
                "infer",
                vec![set("nvidia.com/mig-1g.10gb", &["MIG-cccc"])],
            ),
            dra,
        ],
        ..KubeletState::default()
    }
}

#[test]
fn allocatable_list_and_get_round_trip_over_the_socket() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("kubelet.sock");
    let fake = FakeKubelet::start(&sock, state()).unwrap();
    let mut c = KubeletPodResources::new(&sock, TIMEOUT).unwrap();
    assert_eq!(c.allocatable().unwrap(), state().allocatable);
    assert_eq!(c.list().unwrap(), state().pods);
    assert_eq!(c.get("ml", "dra-0").unwrap(), Some(state().pods[2].clone()));
    assert_eq!(c.get("ml", "gone").unwrap(), None);
    assert_eq!(c.get_served(), Some(true));
    assert_eq!(
        fake.calls(),
        ["GetAllocatableResources", "List", "Get", "Get"]
    );
}

#[test]
fn get_falls_back_to_list_on_kubelets_without_it() {
    for mode in [GetMode::Unimplemented, GetMode::GateOff] {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("kubelet.sock");
        let fake = FakeKubelet::start(
            &sock,
            KubeletState {
                get: mode,
                ..state()
            },
        )
        .unwrap();
        let mut c = KubeletPodResources::new(&sock, TIMEOUT).unwrap();
        assert_eq!(
            c.get("ml", "vllm-0").unwrap(),
            Some(state().pods[0].clone()),
            "{mode:?}"
        );
        assert_eq!(c.get("ml", "gone").unwrap(), None, "{mode:?}");
        assert_eq!(c.get_served(), Some(false), "{mode:?}");
        // Asked once; after that only List.
        assert_eq!(fake.calls(), ["Get", "List", "List"], "{mode:?}");
    }
}

#[test]
fn an_absent_socket_is_its_own_state_and_a_kubelet_coming_up_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("kubelet.sock");
    let mut c = KubeletPodResources::new(&sock, TIMEOUT).unwrap();
    match c.list() {
        Err(PodResourcesError::SocketMissing { path }) => assert_eq!(path, sock),
        other => panic!("expected SocketMissing, got {other:?}"),
    }
    let fake = FakeKubelet::start(&sock, state()).unwrap();
    assert_eq!(c.list().unwrap().len(), 3);
    // The kubelet goes away (socket removed): missing again, not a connect error.
    drop(fake);
    assert!(matches!(
        c.allocatable(),
        Err(PodResourcesError::SocketMissing { .. })
    ));
}

#[test]
fn a_kubelet_that_does_not_answer_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("kubelet.sock");
    let _fake = FakeKubelet::start(
        &sock,
        KubeletState {
            delay: Some(Duration::from_secs(30)),
            ..state()
        },
    )
    .unwrap();
    let mut c = KubeletPodResources::new(&sock, Duration::from_millis(300)).unwrap();
    let started = Instant::now();
    let r = c.list();
    let took = started.elapsed();
    assert!(
        matches!(
            r,
            Err(PodResourcesError::Timeout {
                timeout_ms: 300,
                ..
            })
        ),
        "{r:?}"
    );
    assert!(took < Duration::from_secs(3), "took {took:?}");
}
