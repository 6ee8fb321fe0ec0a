//! The exact requests the kube-rs reporter makes (paths, verbs, patch
//! bodies, content types, field manager), against a tower-test mock.

use std::time::{Duration, SystemTime};

use http::{Method, Request, Response};
use kube::client::Body;
use serde_json::{json, Value};

use nodeproof_apiclient::client::KubeReporter;
use nodeproof_findings::{Condition, ConditionStatus, ConditionType};
use nodeproof_report::conditions::{Policy, Tracker};
use nodeproof_report::events::{EventType, ObjectRef, Recorder, RecorderConfig};
use nodeproof_report::reporter::{ReportError, Reporter};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

fn reporter() -> (KubeReporter, Handle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    (KubeReporter::new(client, "n1"), handle)
}

fn t(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
}

/// Answer one request with `code` and `body`; return what was asked.
async fn answer(handle: &mut Handle, code: u16, body: Value) -> (Method, String, String, Value) {
    let (req, send) = handle.next_request().await.expect("a request");
    let method = req.method().clone();
    let uri = req.uri().to_string();
    let ct = req
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let bytes = req.into_body().collect_bytes().await.unwrap();
    let sent = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    send.send_response(
        Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap(),
    );
    (method, uri, ct, sent)
}

fn node_json() -> Value {
    json!({"apiVersion":"v1","kind":"Node","metadata":{"name":"n1","uid":"u1"},
           "status":{"conditions":[
             {"type":"Ready","status":"True"},
             {"type":"GPUHealthy","status":"False","reason":"XidError","message":"xid 79",
              "lastTransitionTime":"2023-11-14T22:13:20Z","lastHeartbeatTime":"2023-11-14T22:18:20Z"}]}})
}

#[tokio::test]
async fn reads_the_node_not_the_status_subresource() {
    let (rep, mut handle) = reporter();
    let server = tokio::spawn(async move { answer(&mut handle, 200, node_json()).await });
    let state = rep.read_node().await.unwrap();
    let (method, uri, _, _) = server.await.unwrap();
    assert_eq!((method, uri.as_str()), (Method::GET, "/api/v1/nodes/n1"));
    assert_eq!(state.uid.as_deref(), Some("u1"));
    assert_eq!(state.conditions.len(), 1, "only own condition types");
    assert_eq!(state.conditions[0].last_transition, t(0));
    assert_eq!(state.conditions[0].last_heartbeat, t(300));
}

#[tokio::test]
async fn status_is_a_strategic_merge_patch_with_field_manager() {
    let (rep, mut handle) = reporter();
    let mut tracker = Tracker::new(Policy::default());
    tracker.resume(Vec::new());
    tracker.observe(
        t(0),
        &[Condition {
            kind: ConditionType::SeccompProfilesReady,
            status: ConditionStatus::True,
            reason: "ProfilesLoad".into(),
            message: "3 profiles load".into(),
        }],
    );
    let update = tracker.due(t(0)).unwrap();
    let server = tokio::spawn(async move { answer(&mut handle, 200, node_json()).await });
    rep.patch_status(&update).await.unwrap();
    let (method, uri, ct, body) = server.await.unwrap();
    assert_eq!(method, Method::PATCH);
    assert_eq!(uri, "/api/v1/nodes/n1/status?&fieldManager=nodeproof");
    assert_eq!(ct, "application/strategic-merge-patch+json");
    assert_eq!(
        body,
        json!({"status":{"conditions":[{"type":"SeccompProfilesReady","status":"True",
            "reason":"ProfilesLoad","message":"3 profiles load",
            "lastTransitionTime":"2023-11-14T22:13:20Z","lastHeartbeatTime":"2023-11-14T22:13:20Z"}]}})
    );
}

#[tokio::test]
async fn events_are_core_v1_create_then_patch() {
    let (rep, mut handle) = reporter();
    let mut rec = Recorder::new(RecorderConfig::default());
    let node = ObjectRef::node("n1", Some("u1".into()));
    rec.record(t(0), node.clone(), EventType::Warning, "XidError", "xid 79");
    let create = rec.due(t(0)).remove(0);
    let echo = create.body("n1");
    let server = tokio::spawn(async move {
        let first = answer(&mut handle, 201, echo.clone()).await;
        let second = answer(&mut handle, 200, echo).await;
        (first, second)
    });
    rep.write_event(&create).await.unwrap();
    rec.written(&create);
    rec.record(t(9), node, EventType::Warning, "XidError", "xid 79");
    let update = rec.due(t(9)).remove(0);
    rep.write_event(&update).await.unwrap();
    let ((m1, u1, _, b1), (m2, u2, ct2, b2)) = server.await.unwrap();
    assert_eq!(
        (m1, u1.as_str()),
        (
            Method::POST,
            "/api/v1/namespaces/default/events?&fieldManager=nodeproof"
        )
    );
    assert_eq!(b1["source"]["component"], "nodeproof");
    assert_eq!(b1["reportingComponent"], "nodeproof");
    assert_eq!(b1["involvedObject"]["kind"], "Node");
    assert_eq!(m2, Method::PATCH);
    assert_eq!(
        u2,
        format!(
            "/api/v1/namespaces/default/events/{}?&fieldManager=nodeproof",
            create.name()
        )
    );
    assert_eq!(ct2, "application/strategic-merge-patch+json");
    assert_eq!(
        b2,
        json!({"count": 2, "lastTimestamp": "2023-11-14T22:13:29Z"})
    );
}

#[tokio::test]
async fn errors_are_classified() {
    let (rep, mut handle) = reporter();
    let server = tokio::spawn(async move {
        answer(&mut handle, 404, json!({"kind":"Status","apiVersion":"v1","status":"Failure","code":404,"reason":"NotFound","message":"nodes \"n1\" not found"})).await;
        answer(&mut handle, 429, json!({"kind":"Status","apiVersion":"v1","status":"Failure","code":429,"reason":"TooManyRequests","message":"slow down","details":{"retryAfterSeconds":7}})).await;
    });
    let e = rep.read_node().await.unwrap_err();
    assert!(matches!(e, ReportError::NodeNotFound { .. }), "{e}");
    assert!(e.to_string().contains("--node-name"));
    let e = rep.read_node().await.unwrap_err();
    assert_eq!(e.retry_after(), Some(Duration::from_secs(7)));
    server.await.unwrap();
}
