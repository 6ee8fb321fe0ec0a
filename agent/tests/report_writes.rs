//! How the reporter's writes fail on a real cluster, against the test API
//! server (its "Write failures" section): an Event refused for good (its
//! namespace terminating or gone) is dropped and blocks nothing, the Node's
//! writes never wait behind failing Events, and the throttling filters'
//! plain-text 429 has its Retry-After honoured. Simulated clock throughout.

mod support;

use std::time::{Duration, SystemTime};

use serde_json::json;
use tempfile::TempDir;

use nodeproof_findings::{Condition, ConditionStatus, ConditionType};
use nodeproof_kube::client::{KubeReporter, Refusal};
use nodeproof_kube::conditions::{Hysteresis, Policy};
use nodeproof_kube::credentials;
use nodeproof_kube::driver::{Dropped, LoopConfig, ReportLoop, WriteKind};
use nodeproof_kube::events::{EventType, ObjectRef};
use support::apiserver::{Fault, Identity, NamespacePhase, TestApiServer};

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn seccomp(ok: bool) -> Condition {
    Condition {
        kind: ConditionType::SeccompProfilesReady,
        status: if ok {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        },
        reason: if ok {
            "ProfilesLoad"
        } else {
            "ProfileStartFails"
        }
        .into(),
        message: if ok {
            "3 profiles load"
        } else {
            "a.json fails"
        }
        .into(),
    }
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
        let client = nodeproof_kube::client::connect(&source)
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
