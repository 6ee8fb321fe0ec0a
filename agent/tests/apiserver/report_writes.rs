//! How the reporter's writes fail on a real cluster, against the test API
//! server (its "Write failures" section): an Event refused for good (its
//! namespace terminating or gone) is dropped and blocks nothing, the Node's
//! writes never wait behind failing Events, and the throttling filters'
//! plain-text 429 has its Retry-After honoured (simulated clock); and a
//! client certificate rotated in place (as the kubelet does) is picked up
//! before the original expires, by the loop and by `nodeproof run`.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde_json::json;
use tempfile::TempDir;

use nodeproof_apiclient::client::KubeReporter;
use nodeproof_findings::{Condition, ConditionType};
use nodeproof_report::conditions::{Hysteresis, Policy};
use nodeproof_report::credentials;
use nodeproof_report::driver::{Dropped, LoopConfig, NodeDrift, ReportLoop, WriteKind};
use nodeproof_report::events::{EventType, ObjectRef};
use nodeproof_report::reporter::Refusal;
use support::agent::{reporting_config, seccomp_root, Agent};
use support::apiserver::{Fault, Identity, NamespacePhase, TestApiServer};

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// The condition these tests flip: its message follows its status.
fn seccomp(ok: bool) -> Condition {
    support::conditions::seccomp(
        ok,
        if ok {
            "3 profiles load"
        } else {
            "a.json fails"
        },
    )
}

fn pod(ns: &str) -> ObjectRef {
    ObjectRef {
        kind: "Pod",
        namespace: ns.into(),
        name: "trainer-0".into(),
        uid: Some("pod-uid".into()),
    }
}

struct Cluster {
    server: TestApiServer,
    dir: TempDir,
}

fn cluster() -> Cluster {
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node("n1", json!([]));
    Cluster {
        server,
        dir: tempfile::tempdir().unwrap(),
    }
}

impl Cluster {
    async fn report_loop(&self, backoff_base: Duration) -> ReportLoop<KubeReporter> {
        let kubeconfig = self.server.kubeconfig(self.dir.path(), "node-n1");
        let source = credentials::choose(Some(&kubeconfig), |_| false, |_| None);
        let client = nodeproof_apiclient::client::connect(&source)
            .await
            .unwrap()
            .unwrap();
        let reporter = KubeReporter::new(client, "n1").with_timeout(Duration::from_millis(500));
        let config = LoopConfig {
            policy: Policy {
                hysteresis: Hysteresis::IMMEDIATE,
                ..Policy::default()
            },
            backoff_base,
            backoff_cap: backoff_base * 20,
            ..LoopConfig::default()
        };
        ReportLoop::new(reporter, config, 7)
    }

    fn posts_to(&self, ns: &str) -> usize {
        let path = format!("/api/v1/namespaces/{ns}/events");
        self.server
            .log()
            .iter()
            .filter(|l| l.method == "POST" && l.path == path)
            .count()
    }
}

/// A pod's Event into a namespace NamespaceLifecycle refuses, then a Node
/// transition: the Node's Event lands, the pod's is dropped once and never
/// sent again.
async fn refused_pod_event_is_dropped(phase: NamespacePhase, reason: Refusal) {
    let c = cluster();
    c.server.set_namespace("ml", phase);
    let mut lp = c.report_loop(secs(1)).await;
    lp.observe(t0(), &[seccomp(true)]);
    lp.flush(t0()).await.unwrap();
    lp.pod_event(
        t0(),
        pod("ml"),
        EventType::Warning,
        "SeccompProfileStartFails",
        "profile denies getdents64",
    );
    let now = t0() + secs(1);
    lp.observe(now, &[seccomp(false)]);
    lp.flush(now).await.unwrap();
    let events = c.server.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["involvedObject"]["kind"], "Node");
    assert_eq!(events[0]["reason"], "ProfileStartFails");
    assert_eq!(
        lp.take_dropped(),
        [Dropped {
            kind: WriteKind::Event,
            reason
        }]
    );
    assert_eq!(lp.stats().events_dropped, 1);
    assert_eq!(c.posts_to("ml"), 1);
    // Forgotten, not retried: later flushes send nothing more to ml.
    for s in [5, 60, 600] {
        lp.flush(now + secs(s)).await.unwrap();
    }
    assert_eq!(c.posts_to("ml"), 1);
    assert!(lp.take_dropped().is_empty());
    assert!(lp.settled(now + secs(600)));
}

#[tokio::test]
async fn an_event_into_a_terminating_namespace_is_dropped_and_blocks_nothing() {
    refused_pod_event_is_dropped(NamespacePhase::Terminating, Refusal::NamespaceTerminating).await;
}

#[tokio::test]
async fn an_event_into_a_deleted_namespace_is_dropped_and_blocks_nothing() {
    refused_pod_event_is_dropped(NamespacePhase::Gone, Refusal::NamespaceGone).await;
}

#[tokio::test]
async fn status_writes_do_not_wait_behind_failing_events() {
    let c = cluster();
    // A long backoff, so a status write held behind the Events' would show.
    let mut lp = c.report_loop(secs(60)).await;
    lp.observe(t0(), &[seccomp(true)]);
    lp.flush(t0()).await.unwrap();
    c.server.set_fault(Fault::EventsError500);
    let bad = t0() + secs(1);
    lp.observe(bad, &[seccomp(false)]);
    assert!(lp.flush(bad).await.is_err(), "the Event write failed");
    assert_eq!(
        c.server.condition("n1", "SeccompProfilesReady").unwrap()["status"],
        "False"
    );
    // Recovered 5 s later, well inside the Events' 60 s backoff.
    let good = bad + secs(5);
    lp.observe(good, &[seccomp(true)]);
    assert_eq!(lp.next_wake(good), Some(good));
    let _ = lp.flush(good).await;
    assert_eq!(
        c.server.condition("n1", "SeccompProfilesReady").unwrap()["status"],
        "True",
        "the status write went out while the Events backed off"
    );
    // The Events go out (with every occurrence) once their backoff is over.
    c.server.clear_fault();
    let later = lp.next_wake(good).unwrap();
    assert!(later >= bad + secs(60), "{later:?}");
    lp.flush(later).await.unwrap();
    let mut reasons: Vec<_> = c
        .server
        .events()
        .iter()
        .map(|e| e["reason"].as_str().unwrap().to_string())
        .collect();
    reasons.sort();
    assert_eq!(reasons, ["ProfileStartFails", "ProfilesLoad"]);
}

#[tokio::test]
async fn plain_text_429_from_the_throttling_filters_honours_retry_after() {
    let c = cluster();
    let mut lp = c.report_loop(secs(1)).await;
    lp.observe(t0(), &[seccomp(true)]);
    c.server.set_fault(Fault::TooManyRequestsPlain {
        retry_after_secs: 7,
    });
    let e = lp.flush(t0()).await.unwrap_err();
    assert_eq!(e.retry_after(), Some(secs(7)), "{e:?}");
    assert_eq!(lp.next_wake(t0()), Some(t0() + secs(7)));
    c.server.clear_fault();
    c.server.clear_log();
    lp.flush(t0() + secs(6)).await.unwrap();
    assert!(c.server.log().is_empty(), "nothing sent before Retry-After");
    lp.flush(t0() + secs(7)).await.unwrap();
    assert!(lp.settled(t0() + secs(7)));
}

#[tokio::test]
async fn a_throttled_event_waits_for_retry_after_and_the_status_does_not() {
    let c = cluster();
    let mut lp = c.report_loop(secs(1)).await;
    lp.observe(t0(), &[seccomp(true)]);
    lp.flush(t0()).await.unwrap();
    lp.pod_event(t0(), pod("ml"), EventType::Warning, "R", "m");
    c.server.set_fault(Fault::TooManyRequestsPlain {
        retry_after_secs: 30,
    });
    let e = lp.flush(t0()).await.unwrap_err();
    assert_eq!(e.retry_after(), Some(secs(30)));
    c.server.clear_fault();
    c.server.clear_log();
    // A transition 2 s later is written at once; the pod's Event only at 30 s.
    let now = t0() + secs(2);
    lp.observe(now, &[seccomp(false)]);
    let _ = lp.flush(now).await;
    assert_eq!(c.server.count_ok("PATCH", "/nodes/n1/status"), 1);
    assert_eq!(c.posts_to("ml"), 0);
    lp.flush(t0() + secs(30)).await.unwrap();
    assert_eq!(c.posts_to("ml"), 1);
}

/// The kubelet's rotation: a new certificate and key written beside the old
/// ones and renamed over them (`kubelet-client-current.pem` moves at once).
fn rotate(server: &TestApiServer, cert: &Path, key: &Path, valid_for: Duration) {
    let (c, k) = server.node_client_cert("n1", valid_for);
    for (path, pem) in [(key, k), (cert, c)] {
        let tmp = path.with_extension("new");
        std::fs::write(&tmp, pem).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }
}

/// A kubelet.conf with a client certificate valid for `valid_for`.
fn cert_credentials(
    server: &TestApiServer,
    dir: &Path,
    valid_for: Duration,
) -> (PathBuf, PathBuf, PathBuf) {
    let pki = dir.join("pki");
    std::fs::create_dir_all(&pki).unwrap();
    let cert = pki.join("kubelet-client-current.pem");
    let key = pki.join("kubelet-client-current.key");
    rotate(server, &cert, &key, valid_for);
    let kubeconfig = server.cert_kubeconfig(dir, &cert, &key);
    (kubeconfig, cert, key)
}

#[tokio::test]
async fn an_expired_client_certificate_is_refused_401() {
    let c = cluster();
    let (kubeconfig, _, _) = cert_credentials(&c.server, c.dir.path(), Duration::ZERO);
    let source = credentials::choose(Some(&kubeconfig), |_| false, |_| None);
    let client = nodeproof_apiclient::client::connect(&source)
        .await
        .unwrap()
        .unwrap();
    let mut lp = ReportLoop::new(KubeReporter::new(client, "n1"), LoopConfig::default(), 7);
    lp.observe(t0(), &[seccomp(true)]);
    let e = lp.flush(t0()).await.unwrap_err();
    assert!(
        matches!(
            e,
            nodeproof_report::reporter::ReportError::Api { code: 401, .. }
        ),
        "{e:?}"
    );
}

/// The loop's state (the tracker's transition time) survives the swap: the
/// write after the rotation is the next transition, not a first report.
#[tokio::test]
async fn a_rotated_client_certificate_is_picked_up_before_the_old_one_expires() {
    let c = cluster();
    let valid = Duration::from_secs(2);
    let (kubeconfig, cert, key) = cert_credentials(&c.server, c.dir.path(), valid);
    let issued = Instant::now();
    let source = credentials::choose(Some(&kubeconfig), |_| false, |_| None);
    let client = nodeproof_apiclient::client::connect(&source)
        .await
        .unwrap()
        .unwrap();
    let reporter = KubeReporter::new(client, "n1").with_timeout(Duration::from_secs(2));
    let config = LoopConfig {
        policy: Policy {
            hysteresis: Hysteresis::IMMEDIATE,
            ..Policy::default()
        },
        ..LoopConfig::default()
    };
    let mut lp = ReportLoop::new(reporter, config, 7);
    lp.observe(t0(), &[seccomp(true)]);
    lp.flush(t0()).await.unwrap();
    rotate(&c.server, &cert, &key, Duration::from_secs(3600));
    tokio::time::sleep((valid + Duration::from_millis(1200)).saturating_sub(issued.elapsed()))
        .await;
    let now = t0() + secs(60);
    lp.observe(now, &[seccomp(false)]);
    lp.flush(now).await.unwrap();
    let cond = c.server.condition("n1", "SeccompProfilesReady").unwrap();
    assert_eq!(cond["status"], "False");
    assert_eq!(
        lp.stats().node_reads,
        1,
        "the Node was read once: state kept"
    );
}

/// A bearer token file replaced on disk (a projected ServiceAccount token),
/// the old token revoked: the next write reads the new one at once (kube-rs
/// alone would keep the old one for up to a minute, and get 401 meanwhile).
#[tokio::test]
async fn a_rotated_token_file_is_read_again() {
    let c = cluster();
    let token = c.dir.path().join("token");
    std::fs::write(&token, "tok-1").unwrap();
    c.server.add_token("tok-1", Identity::Node("n1".into()));
    let kubeconfig = c.server.token_file_kubeconfig(c.dir.path(), &token);
    let source = credentials::choose(Some(&kubeconfig), |_| false, |_| None);
    let client = nodeproof_apiclient::client::connect(&source)
        .await
        .unwrap()
        .unwrap();
    let reporter = KubeReporter::new(client, "n1");
    let config = LoopConfig {
        policy: Policy {
            hysteresis: Hysteresis::IMMEDIATE,
            ..Policy::default()
        },
        ..LoopConfig::default()
    };
    let mut lp = ReportLoop::new(reporter, config, 7);
    lp.observe(t0(), &[seccomp(true)]);
    lp.flush(t0()).await.unwrap();
    c.server.add_token("tok-2", Identity::Node("n1".into()));
    c.server.revoke_token("tok-1");
    let tmp = token.with_extension("new");
    std::fs::write(&tmp, "tok-2").unwrap();
    std::fs::rename(&tmp, &token).unwrap();
    let now = t0() + secs(30);
    lp.observe(now, &[seccomp(false)]);
    lp.flush(now).await.unwrap();
    assert_eq!(
        c.server.condition("n1", "SeccompProfilesReady").unwrap()["status"],
        "False"
    );
}

/// `nodeproof run` with kubeadm's kubelet.conf shape, its certificate valid
/// for a few seconds and rotated under it: a profile broken after the
/// original expired is still reported.
#[test]
fn the_agent_keeps_reporting_past_its_original_certificates_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start();
    server.add_node("n1", json!([]));
    let valid = Duration::from_secs(8);
    let (kubeconfig, cert, key) = cert_credentials(&server, dir.path(), valid);
    let issued = Instant::now();
    let root = seccomp_root(dir.path(), true);
    let config = reporting_config(&root, &kubeconfig) + "[daemon]\nprofile-resync-s = 1\n";
    let mut agent = Agent::start(dir.path(), &config);
    agent.wait_ready(Duration::from_secs(30));
    let status = || {
        server
            .condition("n1", "SeccompProfilesReady")
            .map(|c| c["status"].as_str().unwrap_or("").to_string())
    };
    while status().as_deref() != Some("True") {
        assert!(
            issued.elapsed() < valid,
            "not reported before the certificate expired: {}",
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    rotate(&server, &cert, &key, Duration::from_secs(3600));
    std::thread::sleep((valid + Duration::from_secs(1)).saturating_sub(issued.elapsed()));
    // The pods watcher's client follows the files too: its watch of the
    // Node (ended by the server every 0.5 s) starts again, authenticated.
    server.clear_log();
    let start = Instant::now();
    while server.count_ok("GET", "/api/v1/nodes") == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the Node watch is not authenticated after the expiry: {:?}\n--- agent log ---\n{}",
            server
                .log()
                .iter()
                .map(|l| (&l.path, l.status))
                .collect::<Vec<_>>(),
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::write(
        root.join("broken.json"),
        "{\"defaultAction\": \"SCMP_ACT_NOPE\"}",
    )
    .unwrap();
    let start = Instant::now();
    while status().as_deref() != Some("False") {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "not reported after the original certificate expired\n--- agent log ---\n{}",
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = agent.log_text();
    assert!(log.contains("credentials reloaded"), "{log}");
    assert!(agent.stop(), "{}", agent.log_text());
}

/// The Node deleted and registered again (new UID, no nodeproof conditions),
/// then one of nodeproof's conditions removed by another client: the
/// running agent writes them back within seconds, not at the next heartbeat
/// (5 minutes).
#[test]
fn a_node_registered_again_or_stripped_gets_its_conditions_back() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node("n1", json!([]));
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let root = seccomp_root(dir.path(), true);
    let config = reporting_config(&root, &kubeconfig);
    let mut agent = Agent::start(dir.path(), &config);
    agent.wait_ready(Duration::from_secs(30));
    let back = |what: &str| {
        let start = Instant::now();
        while server
            .condition("n1", "SeccompProfilesReady")
            .is_none_or(|c| c["status"] != "True")
        {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{what}: not back\n--- agent log ---\n{}",
                agent.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        start.elapsed()
    };
    back("first report");
    server.delete_node("n1");
    std::thread::sleep(Duration::from_millis(300));
    server.register_node_again("n1", "uid-n1-again");
    let t = back("after the Node was registered again");
    eprintln!("FIGURE Node registered again -> conditions back in {t:?}");
    server.remove_condition("n1", "SeccompProfilesReady");
    let t = back("after another client removed it");
    eprintln!("FIGURE condition removed by another client -> back in {t:?}");
    assert!(agent
        .log_text()
        .contains("writing nodeproof's conditions again"));
    assert!(agent.stop(), "{}", agent.log_text());
}

/// `nodeproof run`: a pod in a namespace being deleted references a missing
/// profile. Its Event is refused (NamespaceLifecycle) and dropped, counted in
/// /metrics; the Node's condition and its own Event still land.
#[test]
fn the_agent_counts_a_dropped_event_in_its_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node("n1", json!([]));
    server.set_namespace("ml", NamespacePhase::Terminating);
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let root = seccomp_root(dir.path(), false);
    let config = reporting_config(&root, &kubeconfig);
    let mut agent = Agent::start(dir.path(), &config);
    agent.wait_ready(Duration::from_secs(30));
    server.put(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "vllm-0", "namespace": "ml", "uid": "uid-vllm-0"},
            "spec": {"nodeName": "n1", "containers": [{"name": "vllm", "securityContext": {"seccompProfile":
                {"type": "Localhost", "localhostProfile": "profiles/vllm-strict.json"}}}]},
            "status": {"containerStatuses": [{"name": "vllm", "containerID": format!("containerd://{}", "ab".repeat(32)),
                "image": "vllm", "imageID": "", "ready": false, "restartCount": 0}]}}),
    );
    let sample =
        "nodeproof_reporter_dropped_total{kind=\"event\",reason=\"namespace_terminating\"} 1";
    let start = Instant::now();
    loop {
        let (_, metrics) = agent.get("/metrics");
        let node_event = server
            .events()
            .iter()
            .any(|e| e["involvedObject"]["kind"] == "Node" && e["type"] == "Warning");
        let cond = server.condition("n1", "SeccompProfilesReady");
        if metrics.contains(sample) && node_event && cond.is_some_and(|c| c["status"] == "False") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{metrics}\n--- agent log ---\n{}",
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(c_posts(&server, "ml"), 1, "tried once, not retried");
    let log = agent.log_text();
    assert_eq!(
        log.matches("refused by the API server for good").count(),
        1,
        "{log}"
    );
    assert!(agent.stop(), "{}", agent.log_text());
}

fn c_posts(server: &TestApiServer, ns: &str) -> usize {
    let path = format!("/api/v1/namespaces/{ns}/events");
    server
        .log()
        .iter()
        .filter(|l| l.method == "POST" && l.path == path)
        .count()
}

fn seen(server: &TestApiServer) -> nodeproof_report::reporter::NodeState {
    nodeproof_apiclient::client::node_state(&serde_json::from_value(server.node("n1")).unwrap())
}

/// On the simulated clock: what the Node watch shows decides whether the
/// status is due now; a Node that still has everything costs no write.
#[tokio::test]
async fn the_loop_rewrites_a_node_registered_again_or_stripped_and_nothing_else() {
    let c = cluster();
    let mut lp = c.report_loop(secs(1)).await;
    lp.observe(t0(), &[seccomp(true)]);
    lp.flush(t0()).await.unwrap();
    let now = t0() + secs(10);
    assert_eq!(lp.node_seen(&seen(&c.server)), None);
    assert!(
        lp.settled(now),
        "a Node that has our conditions costs nothing"
    );

    c.server.delete_node("n1");
    c.server.register_node_again("n1", "uid-n1-again");
    assert_eq!(lp.node_seen(&seen(&c.server)), Some(NodeDrift::Recreated));
    assert_eq!(lp.next_wake(now), Some(now));
    lp.flush(now).await.unwrap();
    let cond = c.server.condition("n1", "SeccompProfilesReady").unwrap();
    assert_eq!(cond["status"], "True");
    // The finding's transition time is kept: it describes the node, not the object.
    assert_eq!(
        cond["lastTransitionTime"],
        nodeproof_report::conditions::rfc3339(t0())
    );

    let later = now + secs(10);
    c.server.remove_condition("n1", "SeccompProfilesReady");
    assert_eq!(
        lp.node_seen(&seen(&c.server)),
        Some(NodeDrift::ConditionMissing(
            ConditionType::SeccompProfilesReady
        ))
    );
    lp.flush(later).await.unwrap();
    assert!(c.server.condition("n1", "SeccompProfilesReady").is_some());
    assert_eq!(lp.stats().status_writes, 3);
}

/// A credential changed in a way the files' identity does not show (same
/// inode, size and mtime): the 401 itself rebuilds the client, once, and the
/// retry goes through with what the files now say.
#[tokio::test]
async fn a_401_rebuilds_the_client_from_the_files() {
    let c = cluster();
    c.server.add_token("tok-a", Identity::Node("n1".into()));
    c.server.add_token("tok-b", Identity::Node("n1".into()));
    let kubeconfig = c.server.kubeconfig(c.dir.path(), "tok-a");
    let source = credentials::choose(Some(&kubeconfig), |_| false, |_| None);
    let client = nodeproof_apiclient::client::connect(&source)
        .await
        .unwrap()
        .unwrap();
    let config = LoopConfig {
        policy: Policy {
            hysteresis: Hysteresis::IMMEDIATE,
            ..Policy::default()
        },
        ..LoopConfig::default()
    };
    let mut lp = ReportLoop::new(KubeReporter::new(client, "n1"), config, 7);
    lp.observe(t0(), &[seccomp(true)]);
    lp.flush(t0()).await.unwrap();
    // Rewritten in place, same length, the old mtime put back.
    let mtime = std::fs::metadata(&kubeconfig).unwrap().modified().unwrap();
    let text = std::fs::read_to_string(&kubeconfig)
        .unwrap()
        .replace("tok-a", "tok-b");
    std::fs::write(&kubeconfig, text).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&kubeconfig)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    c.server.revoke_token("tok-a");
    let now = t0() + secs(30);
    lp.observe(now, &[seccomp(false)]);
    let e = lp.flush(now).await.unwrap_err();
    assert!(
        matches!(
            e,
            nodeproof_report::reporter::ReportError::Api { code: 401, .. }
        ),
        "{e:?}"
    );
    let retry = lp.next_wake(now).unwrap();
    lp.flush(retry).await.unwrap();
    assert_eq!(
        c.server.condition("n1", "SeccompProfilesReady").unwrap()["status"],
        "False"
    );
}
