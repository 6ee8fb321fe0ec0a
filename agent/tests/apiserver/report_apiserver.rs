//! The reporter against the test API server (TLS, bearer tokens, Node
//! authorizer rules, strategic merge, faults), on a simulated clock: the
//! loop is told the time, the test jumps it to the loop's next wake-up or
//! the next check, so an hour (or a five-minute outage) takes well under a
//! second of real time.

use crate::support;

use support::conditions::seccomp;

use std::time::{Duration, SystemTime};

use serde_json::json;
use tempfile::TempDir;

use nodeproof_apiclient::client::KubeReporter;
use nodeproof_findings::{Condition, ConditionStatus, ConditionType};
use nodeproof_report::conditions::{rfc3339, Hysteresis, Policy};
use nodeproof_report::credentials;
use nodeproof_report::driver::{self, LoopConfig, ReportLoop};
use nodeproof_report::events::{EventType, ObjectRef};
use nodeproof_report::marks::MarkPolicy;
use nodeproof_report::once::run_once;
use nodeproof_report::reporter::ReportError;
use support::apiserver::{Fault, Identity, TestApiServer};

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

fn min(m: u64) -> Duration {
    Duration::from_secs(60 * m)
}

fn healthy() -> Vec<Condition> {
    vec![seccomp(true, "3 profiles load")]
}

struct Cluster {
    server: TestApiServer,
    dir: TempDir,
}

fn cluster() -> Cluster {
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_token("sa-taints", Identity::TaintServiceAccount);
    server.add_node(
        "n1",
        json!([{"type":"Ready","status":"True","reason":"KubeletReady","message":"kubelet is posting ready status"}]),
    );
    server.add_node("n2", json!([]));
    Cluster {
        server,
        dir: tempfile::tempdir().unwrap(),
    }
}

impl Cluster {
    /// A reporter as the node identity of n1, through the real credential path.
    async fn reporter(&self, node: &str) -> KubeReporter {
        let kubeconfig = self.server.kubeconfig(self.dir.path(), "node-n1");
        let source = credentials::choose(Some(&kubeconfig), |_| false, |_| None);
        let client = nodeproof_apiclient::client::connect(&source)
            .await
            .unwrap()
            .unwrap();
        KubeReporter::new(client, node).with_timeout(Duration::from_millis(500))
    }

    async fn client(&self, token: &str) -> kube::Client {
        let kubeconfig = self.server.kubeconfig(self.dir.path(), token);
        let source = credentials::choose(Some(&kubeconfig), |_| false, |_| None);
        nodeproof_apiclient::client::connect(&source)
            .await
            .unwrap()
            .unwrap()
    }

    async fn report_loop(&self, policy: Policy) -> ReportLoop<KubeReporter> {
        let config = LoopConfig {
            policy,
            ..LoopConfig::default()
        };
        ReportLoop::new(self.reporter("n1").await, config, 7)
    }
}

/// Drive `lp` from `start` for `length` of simulated time: a check round
/// every `every` (results from `input(offset)`), `world(offset)` before each
/// step (faults), the loop's own wake-ups in between. Returns the offsets of
/// successful status writes.
async fn simulate(
    lp: &mut ReportLoop<KubeReporter>,
    start: SystemTime,
    length: Duration,
    every: Duration,
    mut input: impl FnMut(Duration) -> Vec<Condition>,
    mut world: impl FnMut(Duration),
) -> Vec<Duration> {
    let end = start + length;
    let mut now = start;
    let mut next_check = start;
    let mut writes = Vec::new();
    while now < end {
        let offset = now.duration_since(start).unwrap();
        world(offset);
        if now >= next_check {
            lp.observe(now, &input(offset));
            next_check += every;
        }
        let before = lp.stats().status_writes;
        let _ = lp.flush(now).await;
        if lp.stats().status_writes > before {
            writes.push(offset);
        }
        let wake = lp.next_wake(now).map_or(next_check, |w| w.min(next_check));
        now = wake.max(now + Duration::from_millis(1));
    }
    writes
}

#[tokio::test]
async fn first_report_patches_own_conditions_only_as_the_node() {
    let c = cluster();
    let mut lp = c.report_loop(Policy::default()).await;
    lp.observe(t0(), &[seccomp(false, "1 of 3 profiles fail: a.json")]);
    lp.flush(t0()).await.unwrap();
    assert!(lp.settled(t0()));

    let ours = c.server.condition("n1", "SeccompProfilesReady").unwrap();
    assert_eq!(ours["status"], "False");
    assert_eq!(ours["reason"], "ProfileStartFails");
    assert_eq!(ours["lastTransitionTime"], rfc3339(t0()));
    let ready = c.server.condition("n1", "Ready").unwrap();
    assert_eq!(
        ready["reason"], "KubeletReady",
        "others' conditions untouched"
    );

    let log = c.server.log();
    let shapes: Vec<_> = log
        .iter()
        .map(|l| (l.method.as_str(), l.path.as_str(), l.status))
        .collect();
    assert_eq!(
        shapes,
        vec![
            ("GET", "/api/v1/nodes/n1", 200),
            ("PATCH", "/api/v1/nodes/n1/status", 200),
            ("POST", "/api/v1/namespaces/default/events", 201),
        ]
    );
    assert_eq!(
        log[1].content_type,
        "application/strategic-merge-patch+json"
    );
    assert!(log[1].query.contains("fieldManager=nodeproof"));
    let events = c.server.events();
    assert_eq!(events[0]["involvedObject"]["uid"], "uid-n1");
    assert_eq!(events[0]["type"], "Warning");
}

#[tokio::test]
async fn steady_healthy_node_writes_12_times_an_hour() {
    let c = cluster();
    let mut lp = c.report_loop(Policy::default()).await;
    let writes = simulate(
        &mut lp,
        t0(),
        min(60),
        Duration::from_secs(30),
        |_| healthy(),
        |_| {},
    )
    .await;
    let patches = c.server.count_ok("PATCH", "/nodes/n1/status");
    eprintln!("FIGURE steady healthy node: {patches} status writes per simulated hour (checks every 30 s, heartbeat 5 min), {} total API requests", c.server.log().len());
    assert_eq!(patches, 12);
    assert_eq!(writes, (0..12).map(|i| min(5 * i)).collect::<Vec<_>>());
    assert!(
        c.server.events().is_empty(),
        "healthy from the start: no events"
    );
}

#[tokio::test]
async fn flapping_input_is_absorbed_by_hysteresis() {
    let c = cluster();
    let mut lp = c.report_loop(Policy::default()).await; // 2 bad to go False
    let input = |off: Duration| {
        let round = off.as_secs() / 30;
        vec![seccomp(round.is_multiple_of(2), "flappy")]
    };
    simulate(
        &mut lp,
        t0(),
        min(30),
        Duration::from_secs(30),
        input,
        |_| {},
    )
    .await;
    assert_eq!(
        c.server.count_ok("PATCH", "/nodes/n1/status"),
        6,
        "heartbeats only"
    );
    assert_eq!(
        c.server.condition("n1", "SeccompProfilesReady").unwrap()["status"],
        "True"
    );
    assert!(c.server.events().is_empty());
}

/// The RuntimeClass contract labels through the real reporter and the test
/// server, on a simulated clock: the conditions' hysteresis (2 to go
/// not-ready, 3 to recover), a restart that reads the labels back and does
/// not flap, and a class gone from the verdicts losing its label.
#[tokio::test]
async fn contract_labels_follow_hysteresis_and_survive_a_restart() {
    use nodeproof_report::contract::ContractState;
    use nodeproof_report::contract_labels::ContractVerdict;
    let verdict = |class: &str, ready: bool| ContractVerdict {
        class: class.into(),
        state: if ready {
            ContractState::Ready
        } else {
            ContractState::NotReady
        },
        cause: if ready {
            String::new()
        } else {
            "profiles/vllm-strict.json: not found under /var/lib/kubelet/seccomp".into()
        },
    };
    let label = |c: &Cluster, class: &str| {
        c.server.node("n1")["metadata"]["labels"][format!("runtimeclass.nodeproof.dev/{class}")]
            .as_str()
            .map(str::to_string)
    };
    let not_ready_events = |c: &Cluster| {
        c.server
            .events()
            .into_iter()
            .filter(|e| e["reason"] == "RuntimeClassNotReady")
            .count()
    };
    let c = cluster();
    let mut first = c.report_loop(Policy::default()).await;
    first.observe(t0(), &healthy());
    first.observe_contracts(t0(), &[verdict("vllm", true), verdict("kata", false)]);
    first.flush(t0()).await.unwrap();
    assert_eq!(label(&c, "vllm").as_deref(), Some("ready"));
    assert_eq!(label(&c, "kata").as_deref(), Some("not-ready"));
    assert_eq!(not_ready_events(&c), 1);
    // One bad round does not evict the class; the second does.
    first.observe_contracts(
        t0() + min(1),
        &[verdict("vllm", false), verdict("kata", false)],
    );
    first.flush(t0() + min(1)).await.unwrap();
    assert_eq!(label(&c, "vllm").as_deref(), Some("ready"));
    first.observe_contracts(
        t0() + min(2),
        &[verdict("vllm", false), verdict("kata", false)],
    );
    first.flush(t0() + min(2)).await.unwrap();
    assert_eq!(label(&c, "vllm").as_deref(), Some("not-ready"));
    assert_eq!(not_ready_events(&c), 2);
    drop(first);

    // A restart: the labels are read back; one good round does not flip
    // vllm back (3 needed), kata still not ready is not news.
    let later = t0() + min(10);
    let mut second = c.report_loop(Policy::default()).await;
    second.observe(later, &healthy());
    second.observe_contracts(later, &[verdict("vllm", true), verdict("kata", false)]);
    second.flush(later).await.unwrap();
    assert_eq!(label(&c, "vllm").as_deref(), Some("not-ready"));
    assert_eq!(label(&c, "kata").as_deref(), Some("not-ready"));
    assert_eq!(second.stats().label_writes, 0, "nothing changed");
    assert_eq!(not_ready_events(&c), 2);
    for s in [30, 60] {
        let now = later + Duration::from_secs(s);
        second.observe_contracts(now, &[verdict("vllm", true), verdict("kata", false)]);
        second.flush(now).await.unwrap();
    }
    assert_eq!(label(&c, "vllm").as_deref(), Some("ready"));
    // kata deleted (or un-annotated): its label goes at once.
    let now = later + min(2);
    second.observe_contracts(now, &[verdict("vllm", true)]);
    second.flush(now).await.unwrap();
    assert_eq!(label(&c, "kata"), None);
    assert_eq!(second.stats().label_writes, 2);
}

#[tokio::test]
async fn restart_keeps_transition_time_and_does_not_flap() {
    let c = cluster();
    {
        let mut first = c.report_loop(Policy::default()).await;
        first.observe(t0(), &[seccomp(false, "broken")]);
        first.flush(t0()).await.unwrap();
    }
    // A restart 10 minutes later; the first check after it is good once.
    let later = t0() + min(10);
    let mut second = c.report_loop(Policy::default()).await;
    second.observe(later, &healthy());
    second.flush(later).await.unwrap();
    let ours = c.server.condition("n1", "SeccompProfilesReady").unwrap();
    assert_eq!(
        ours["status"], "False",
        "one good result does not flip (3 needed)"
    );
    assert_eq!(
        ours["lastTransitionTime"],
        rfc3339(t0()),
        "kept across the restart"
    );
    assert_eq!(
        ours["lastHeartbeatTime"],
        rfc3339(later),
        "the overdue heartbeat"
    );
    for s in [30, 60] {
        let now = later + Duration::from_secs(s);
        second.observe(now, &healthy());
        second.flush(now).await.unwrap();
    }
    let ours = c.server.condition("n1", "SeccompProfilesReady").unwrap();
    assert_eq!(ours["status"], "True");
    assert_eq!(
        ours["lastTransitionTime"],
        rfc3339(later + Duration::from_secs(60))
    );
}

#[tokio::test]
async fn disabled_condition_types_are_removed() {
    let c = cluster();
    {
        let mut lp = c.report_loop(Policy::default()).await;
        let gpu = Condition {
            kind: ConditionType::GPUHealthy,
            status: ConditionStatus::True,
            reason: "Healthy".into(),
            message: "2 GPUs".into(),
        };
        lp.observe(t0(), &[seccomp(true, "ok"), gpu]);
        lp.flush(t0()).await.unwrap();
    }
    assert!(c.server.condition("n1", "GPUHealthy").is_some());
    let mut policy = Policy::default();
    policy.enabled.remove(&ConditionType::GPUHealthy);
    let mut lp = c.report_loop(policy).await;
    lp.observe(t0() + min(1), &[seccomp(true, "ok")]);
    lp.flush(t0() + min(1)).await.unwrap();
    assert!(
        c.server.condition("n1", "GPUHealthy").is_none(),
        "stale type removed"
    );
    assert!(c.server.condition("n1", "SeccompProfilesReady").is_some());
    assert!(c.server.condition("n1", "Ready").is_some());
}

#[tokio::test]
async fn five_minute_outage_converges_with_one_write_of_the_final_state() {
    let c = cluster();
    let mut lp = c.report_loop(Policy::default()).await;
    // Healthy; broken from 11:00; a different failure from 13:00. The API
    // server is down from 10:00 to 15:00.
    let input = |off: Duration| {
        if off < min(11) {
            healthy()
        } else if off < min(13) {
            vec![seccomp(false, "1 of 3 profiles fail")]
        } else {
            vec![seccomp(false, "2 of 3 profiles fail")]
        }
    };
    let server = &c.server;
    let world = |off: Duration| {
        if off >= min(10) && off < min(15) {
            server.set_fault(Fault::Down);
        } else {
            server.clear_fault();
        }
    };
    let writes = simulate(
        &mut lp,
        t0(),
        min(19),
        Duration::from_secs(30),
        input,
        world,
    )
    .await;
    let after: Vec<_> = writes.iter().filter(|w| **w >= min(15)).collect();
    eprintln!(
        "FIGURE outage: status writes at {:?}; {} failed attempts during 5 min down",
        writes,
        lp.stats().failures
    );
    assert_eq!(
        after.len(),
        1,
        "exactly one write after recovery: {writes:?}"
    );
    assert!(
        *after[0] <= min(15) + Duration::from_secs(30),
        "converged {:?} after recovery",
        *after[0] - min(15)
    );
    let ours = c.server.condition("n1", "SeccompProfilesReady").unwrap();
    assert_eq!(ours["status"], "False");
    assert_eq!(ours["message"], "2 of 3 profiles fail");
    // Second bad result (to_bad = 2) at 11:30 is the transition time.
    assert_eq!(
        ours["lastTransitionTime"],
        rfc3339(t0() + min(11) + Duration::from_secs(30))
    );
    // The transition's event made it too, once.
    let events = c.server.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["count"], 1);
    assert!(lp.stats().failures > 5, "retried during the outage");
}

#[tokio::test]
async fn throttling_honours_retry_after_and_errors_back_off() {
    let c = cluster();
    let mut lp = c.report_loop(Policy::default()).await;
    lp.observe(t0(), &healthy());
    c.server.set_fault(Fault::TooManyRequests {
        retry_after_secs: 7,
    });
    let e = lp.flush(t0()).await.unwrap_err();
    assert_eq!(e.retry_after(), Some(Duration::from_secs(7)), "{e:?}");
    assert_eq!(lp.next_wake(t0()), Some(t0() + Duration::from_secs(7)));
    // Not before then, even if asked.
    c.server.clear_fault();
    c.server.clear_log();
    lp.flush(t0() + Duration::from_secs(6)).await.unwrap();
    assert!(c.server.log().is_empty());
    c.server.set_fault(Fault::Error500);
    let now = t0() + Duration::from_secs(7);
    let e = lp.flush(now).await.unwrap_err();
    assert!(matches!(e, ReportError::Api { code: 500, .. }), "{e}");
    let wait = lp.next_wake(now).unwrap().duration_since(now).unwrap();
    assert!(
        wait >= Duration::from_secs(1) && wait < Duration::from_secs(2),
        "{wait:?}"
    );
    c.server.clear_fault();
    lp.flush(now + wait).await.unwrap();
    assert!(lp.settled(now + wait));
}

#[tokio::test]
async fn conflict_rereads_the_node_and_retries() {
    let c = cluster();
    let mut lp = c.report_loop(Policy::default()).await;
    lp.observe(t0(), &healthy());
    c.server.set_fault(Fault::ConflictOnce);
    lp.flush(t0()).await.unwrap();
    let methods: Vec<_> = c
        .server
        .log()
        .iter()
        .map(|l| (l.method.clone(), l.status))
        .collect();
    assert_eq!(
        methods,
        vec![
            ("GET".to_string(), 200),
            ("PATCH".to_string(), 409),
            ("GET".to_string(), 200),
            ("PATCH".to_string(), 200)
        ]
    );
}

#[tokio::test]
async fn slow_api_server_times_out_instead_of_blocking() {
    let c = cluster();
    let mut lp = c.report_loop(Policy::default()).await;
    lp.observe(t0(), &healthy());
    c.server.set_fault(Fault::Slow(Duration::from_secs(3)));
    let started = std::time::Instant::now();
    let e = lp.flush(t0()).await.unwrap_err();
    assert!(matches!(e, ReportError::Timeout { .. }), "{e}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn event_dedup_counts_every_occurrence() {
    let c = cluster();
    let policy = Policy {
        hysteresis: Hysteresis::IMMEDIATE,
        ..Policy::default()
    };
    let mut lp = c.report_loop(policy).await;
    // Flips every check for an hour: 60 falls, 59 recoveries.
    let input = |off: Duration| vec![seccomp((off.as_secs() / 30).is_multiple_of(2), "flappy")];
    simulate(
        &mut lp,
        t0(),
        min(60),
        Duration::from_secs(30),
        input,
        |_| {},
    )
    .await;
    // Let the rate limit release the last counts.
    let later = t0() + min(70);
    lp.flush(later).await.unwrap();
    let events = c.server.events();
    assert_eq!(events.len(), 2, "one Event per (object, reason, message)");
    let count = |ty: &str| {
        events.iter().find(|e| e["type"] == ty).unwrap()["count"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(count("Warning"), 60);
    assert_eq!(count("Normal"), 59);
    let event_writes = c
        .server
        .log()
        .iter()
        .filter(|l| l.path.contains("/events"))
        .count();
    eprintln!("FIGURE event dedup: 119 transitions -> 2 Events, {event_writes} event writes");
    assert!(event_writes <= 2 * (5 + 14), "rate limited: {event_writes}");
}

#[tokio::test]
async fn node_identity_is_refused_other_nodes_and_missing_nodes_are_named() {
    let c = cluster();
    let other = c.reporter("n2").await;
    let e = run_once(
        other,
        &healthy(),
        MarkPolicy::default(),
        Duration::from_secs(5),
    )
    .await
    .unwrap_err();
    // Kubernetes 1.32+: 403 on another Node's GET, named as such (identity.rs).
    assert!(
        matches!(&e, ReportError::NotOwnNode { identity, node } if identity == "n1" && node == "n2"),
        "{e}"
    );
    // The Node authorizer answers 403 before looking the Node up, so a node
    // identity never sees a 404 for a Node: a missing Node is named to
    // identities RBAC lets read Nodes.
    let e = run_once(
        c.reporter("nope").await,
        &healthy(),
        MarkPolicy::default(),
        Duration::from_secs(5),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&e, ReportError::NotOwnNode { node, .. } if node == "nope"),
        "{e}"
    );
    let missing = KubeReporter::new(c.client("sa-taints").await, "nope")
        .with_timeout(Duration::from_millis(500));
    let e = run_once(
        missing,
        &healthy(),
        MarkPolicy::default(),
        Duration::from_secs(5),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("\"nope\" does not exist"), "{e}");
}

#[tokio::test]
async fn run_once_writes_and_exits() {
    let c = cluster();
    let stats = run_once(
        c.reporter("n1").await,
        &[seccomp(false, "x")],
        MarkPolicy::default(),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    assert_eq!(
        (stats.node_reads, stats.status_writes, stats.event_writes),
        (1, 1, 1)
    );
    assert_eq!(
        c.server.condition("n1", "SeccompProfilesReady").unwrap()["status"],
        "False"
    );
}

fn gpu(ok: bool) -> Condition {
    Condition {
        kind: ConditionType::GPUHealthy,
        status: if ok {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        },
        reason: if ok { "Healthy" } else { "XidError" }.into(),
        message: if ok {
            "2 GPUs usable"
        } else {
            "xid 79 on GPU 1"
        }
        .into(),
    }
}

fn immediate() -> Policy {
    Policy {
        hysteresis: Hysteresis::IMMEDIATE,
        ..Policy::default()
    }
}

#[tokio::test]
async fn opt_in_labels_go_through_the_node_identity() {
    let c = cluster();
    c.server.merge_node(
        "n1",
        json!({"metadata":{"labels":{"kubernetes.io/hostname":"n1","nodeproof.dev/stale":"x"}}}),
    );
    let config = LoopConfig {
        policy: immediate(),
        marks: MarkPolicy {
            labels: true,
            ..MarkPolicy::default()
        },
        ..LoopConfig::default()
    };
    let mut lp = ReportLoop::new(c.reporter("n1").await, config, 7);
    lp.observe(t0(), &[gpu(false)]);
    lp.flush(t0()).await.unwrap();
    let labels = c.server.node("n1")["metadata"]["labels"].clone();
    assert_eq!(
        labels,
        json!({"kubernetes.io/hostname":"n1","nodeproof.dev/gpu-healthy":"false"})
    );
    lp.observe(t0() + min(1), &[gpu(false)]);
    lp.flush(t0() + min(1)).await.unwrap();
    lp.observe(t0() + min(2), &[gpu(true)]);
    lp.flush(t0() + min(2)).await.unwrap();
    assert_eq!(
        c.server.node("n1")["metadata"]["labels"]["nodeproof.dev/gpu-healthy"],
        "true"
    );
    assert_eq!(lp.stats().label_writes, 2, "written on change only");
}

#[tokio::test]
async fn taints_need_their_own_credential() {
    let c = cluster();
    let theirs = json!({"key":"dedicated","value":"ml","effect":"NoSchedule"});
    c.server
        .merge_node("n1", json!({"spec":{"taints":[theirs.clone()]}}));
    let marks = MarkPolicy {
        taint_kinds: MarkPolicy::default_taint_kinds(),
        ..MarkPolicy::default()
    };
    let config = LoopConfig {
        policy: immediate(),
        marks,
        ..LoopConfig::default()
    };
    // The node identity alone cannot taint: said clearly, not retried.
    let mut lp = ReportLoop::new(c.reporter("n1").await, config.clone(), 7);
    lp.observe(t0(), &[gpu(false)]);
    let e = lp.flush(t0()).await.unwrap_err();
    assert!(matches!(e, ReportError::NoTaintCredential { .. }), "{e}");
    assert!(e.is_fatal());
    // And the API server refuses it if tried (NodeRestriction).
    let as_node = c
        .reporter("n1")
        .await
        .with_taint_client(c.client("node-n1").await);
    let mut lp = ReportLoop::new(as_node, config.clone(), 7);
    lp.observe(t0(), &[gpu(false)]);
    let e = lp.flush(t0()).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("node is not allowed to modify taints"),
        "{e}"
    );
    // With the ServiceAccount: tainted, others' taint kept, through a 409.
    // (The status is already False from the tries above, so only taints are due.)
    let with_sa = c
        .reporter("n1")
        .await
        .with_taint_client(c.client("sa-taints").await);
    let mut lp = ReportLoop::new(with_sa, config, 7);
    lp.observe(t0(), &[gpu(false)]);
    c.server.clear_log();
    c.server.set_fault(Fault::ConflictOnce);
    lp.flush(t0()).await.unwrap();
    let shapes: Vec<_> = c
        .server
        .log()
        .iter()
        .map(|l| (l.method.clone(), l.path.clone(), l.status))
        .collect();
    let node = "/api/v1/nodes/n1".to_string();
    assert_eq!(
        shapes,
        vec![
            ("GET".into(), node.clone(), 200),
            ("GET".into(), node.clone(), 200),
            ("PATCH".into(), node.clone(), 409),
            ("GET".into(), node.clone(), 200),
            ("PATCH".into(), node.clone(), 200),
        ]
    );
    let ours = json!({"key":"nodeproof.dev/gpu-healthy","value":"False","effect":"NoSchedule"});
    assert_eq!(
        c.server.node("n1")["spec"]["taints"],
        json!([theirs.clone(), ours])
    );
    lp.observe(t0() + min(1), &[gpu(true)]);
    lp.flush(t0() + min(1)).await.unwrap();
    assert_eq!(c.server.node("n1")["spec"]["taints"], json!([theirs]));
    assert_eq!(lp.stats().taint_writes, 2);
}

#[tokio::test]
async fn pod_findings_become_events_in_the_pods_namespace() {
    let c = cluster();
    let mut lp = c.report_loop(Policy::default()).await;
    let pod = ObjectRef {
        kind: "Pod",
        namespace: "ml".into(),
        name: "trainer-0".into(),
        uid: Some("pod-uid".into()),
    };
    for _ in 0..3 {
        lp.pod_event(
            t0(),
            pod.clone(),
            EventType::Warning,
            "SeccompProfileStartFails",
            "profile vllm-strict.json denies getdents64",
        );
    }
    lp.flush(t0()).await.unwrap();
    let events = c.server.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["metadata"]["namespace"], "ml");
    assert_eq!(events[0]["involvedObject"]["kind"], "Pod");
    assert_eq!(events[0]["count"], 3);
}

#[tokio::test]
async fn daemon_runner_reports_rounds_on_the_real_clock() {
    let c = cluster();
    let lp = c.report_loop(immediate()).await;
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let errors = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = errors.clone();
    // The first writes fail: each failed flush is seen by the callback.
    c.server.set_fault(Fault::Error500);
    let runner = tokio::spawn(driver::run(
        lp,
        rx,
        None,
        None,
        None,
        move |_| {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        },
        |_| {},
    ));
    tx.send(vec![seccomp(false, "broken")].into())
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while errors.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(std::time::Instant::now() < deadline, "no failure counted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.server.clear_fault();
    while c.server.condition("n1", "SeccompProfilesReady").is_none() {
        assert!(std::time::Instant::now() < deadline, "never reported");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tx.send(healthy().into()).await.unwrap();
    while c.server.condition("n1", "SeccompProfilesReady").unwrap()["status"] != "True" {
        assert!(
            std::time::Instant::now() < deadline,
            "recovery never reported"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(tx);
    let lp = runner.await.unwrap();
    assert_eq!(lp.stats().status_writes, 2);
    let failures = errors.load(std::sync::atomic::Ordering::SeqCst);
    assert!(failures >= 1);
    assert_eq!(failures, lp.stats().failures);
}

/// The GPUs the probe calls unhealthy go on the Node as the node identity
/// (NodeRestriction lets a node annotate its own Node), are written only
/// when the set changes, and the annotation goes when none is unhealthy.
#[tokio::test]
async fn unhealthy_gpus_are_published_in_the_nodes_annotation_only_when_they_change() {
    use nodeproof_report::device_health::{UnhealthyDevices, UNHEALTHY_DEVICES};
    let c = cluster();
    let mut lp = c.report_loop(Policy::default()).await;
    lp.observe(t0(), &healthy());
    lp.flush(t0()).await.unwrap();
    assert!(c.server.node("n1")["metadata"]["annotations"][UNHEALTHY_DEVICES].is_null());
    let patches = |c: &Cluster| {
        c.server
            .log()
            .iter()
            .filter(|l| {
                l.method == "PATCH"
                    && l.path == "/api/v1/nodes/n1"
                    && l.body["metadata"]["annotations"].is_object()
            })
            .count()
    };
    // Healthy GPUs: nothing to write.
    lp.observe_devices(UnhealthyDevices::new());
    lp.flush(t0()).await.unwrap();
    assert_eq!(patches(&c), 0);
    let lost: UnhealthyDevices = [("GPU-bbbb".to_string(), "GPULost".to_string())]
        .into_iter()
        .collect();
    lp.observe_devices(lost.clone());
    lp.flush(t0()).await.unwrap();
    assert_eq!(
        c.server.node("n1")["metadata"]["annotations"][UNHEALTHY_DEVICES],
        "GPU-bbbb=GPULost"
    );
    assert!(lp.settled(t0()));
    // The same set again, and again: no new write.
    lp.observe_devices(lost.clone());
    lp.flush(t0() + min(1)).await.unwrap();
    lp.observe_devices(lost);
    lp.flush(t0() + min(2)).await.unwrap();
    assert_eq!(patches(&c), 1);
    // Recovered: the annotation is removed.
    lp.observe_devices(UnhealthyDevices::new());
    lp.flush(t0() + min(3)).await.unwrap();
    assert!(c.server.node("n1")["metadata"]["annotations"]
        .get(UNHEALTHY_DEVICES)
        .is_none());
    assert_eq!(patches(&c), 2);
}
