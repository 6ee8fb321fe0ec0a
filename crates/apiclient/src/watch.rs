//! The agent's watches of the API server: one kind followed with
//! kube-runtime's `watcher` (paged lists, bookmarks, resuming from the last
//! resourceVersion, a relist after 410 Gone), its events handed on as the
//! caller's own changes, and the delay between retries chosen here (see
//! [`forward`]). What a change means (judging, state) is the caller's:
//! `agent/src/pods/watch.rs`.

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::Api;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, watcher, DefaultBackoff, Event};
use kube::Client;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::client::Answered;

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// 410 Gone: the API server no longer has the version a watch (or a
    /// list's continue token) started from; the watcher lists again.
    #[error("the {resource} watch fell too far behind; listing {resource} again")]
    Expired {
        resource: &'static str,
        #[source]
        source: watcher::Error,
    },
    #[error("cannot list or watch {resource}")]
    Interrupted {
        resource: &'static str,
        #[source]
        source: watcher::Error,
    },
}

impl WatchError {
    pub(crate) fn new(resource: &'static str, source: watcher::Error) -> Self {
        let gone = match &source {
            // A watch from a compacted version: an ERROR event with a 410 Status.
            watcher::Error::WatchError(status) => status.code == 410,
            // A continue token older than the compaction: the page request itself is 410.
            watcher::Error::InitialListFailed(kube::Error::Api(status)) => status.code == 410,
            _ => false,
        };
        if gone {
            WatchError::Expired { resource, source }
        } else {
            WatchError::Interrupted { resource, source }
        }
    }

    /// The list or the watch was answered 404: the kind is not served (its
    /// API group or version is off).
    pub fn not_served(&self) -> bool {
        match self {
            WatchError::Interrupted {
                source: watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e),
                ..
            } => crate::read::answered(e, 404),
            _ => false,
        }
    }
}

/// One kind to follow, with the selector the Node authorizer allows a node
/// identity for it.
pub struct Watch<K> {
    api: Api<K>,
    resource: &'static str,
    field_selector: Option<String>,
}

impl Watch<Pod> {
    /// The pods bound to `node` (`spec.nodeName`).
    pub fn pods_on(client: &Client, node: &str) -> Self {
        Watch {
            api: Api::all(client.clone()),
            resource: "pods",
            field_selector: Some(format!("spec.nodeName={node}")),
        }
    }
}

impl Watch<RuntimeClass> {
    /// Every RuntimeClass.
    pub fn runtime_classes(client: &Client) -> Self {
        Watch {
            api: Api::all(client.clone()),
            resource: "runtimeclasses",
            field_selector: None,
        }
    }
}

impl Watch<Node> {
    /// The Node `node` itself: the Node authorizer lets a node list and
    /// watch its own Node this way only (`metadata.name`).
    pub fn node(client: &Client, node: &str) -> Self {
        Watch {
            api: Api::all(client.clone()),
            resource: "nodes",
            field_selector: Some(format!("metadata.name={node}")),
        }
    }
}

/// Follows one kind with kube-runtime's `watcher` and hands its events on
/// as the caller's changes (`changes`), until the receiver is gone.
///
/// Why these settings: pages of 500 (`watcher::Config`'s default, the page
/// size of client-go's pager) bound what one response holds; a list without
/// `resourceVersion` (the `MostRecent` semantic) is a consistent read, so a
/// relist after a 410 cannot come from a lagging API server's cache and bring
/// back a pod deleted meanwhile (since Kubernetes 1.31 such reads are served
/// from the watch cache too: ConsistentListFromCache); bookmarks let a watch
/// resume from a recent version even when nothing it selects changed, so a
/// quiet watch is not the one that falls behind a compaction. Streaming lists
/// (`sendInitialEvents`) are not used: before the WatchList gate (beta in
/// 1.32) an API server refuses them, and this agent must work on 1.28.
///
/// Why kube-runtime's `watcher` and not its `reflector`: a reflector is
/// this same watcher stream with each event also written into a `Store`
/// (kube-runtime 5, `reflector/mod.rs`), so it asks the API server exactly
/// what the watcher asks. Measured against the test API server
/// (`cargo test -p nodeproof --test apiserver the_watches_cost -- --nocapture`,
/// 110 pods): one list per kind at the start, then one watch per kind each
/// time the server ends one (`timeoutSeconds=290`), on 4-5 TCP connections;
/// that is 37.2 requests per node per hour, 186,000 an hour (52 a second)
/// and 15,000 open watch connections at 5,000 nodes, with either. What a
/// reflector adds is memory: a whole copy of every pod, RuntimeClass and
/// the Node in its store, while the agent's state keeps only what it judges
/// (`agent/src/pods/denials.rs`'s `PodIndex`: seccomp references,
/// container ids, claims), looked up by UID and container id, which a store
/// keyed by namespace and name does not serve. (Not measured: the store's
/// size is the objects' own, several KiB a real pod.)
pub async fn follow<K, C>(
    watch: Watch<K>,
    tx: mpsc::Sender<C>,
    changes: Changes<K, C>,
    resume: Option<Resume>,
) where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let Watch {
        api,
        resource,
        field_selector,
    } = watch;
    let mut config = watcher::Config::default();
    if let Some(s) = &field_selector {
        config = config.fields(s);
    }
    let span = tracing::info_span!(
        "watch",
        resource,
        field_selector = field_selector.as_deref().unwrap_or("")
    );
    forward(
        watcher(api, config),
        resource,
        &tx,
        &changes,
        DefaultBackoff::default(),
        resume,
    )
    .instrument(span)
    .await;
}

/// The delays between retries of the watches (kube-runtime's
/// `DefaultBackoff`, below), for a caller that retries a read of its own.
pub fn retry_delays() -> impl Iterator<Item = Duration> {
    DefaultBackoff::default()
}

/// The delays of [`forward`]'s retries are kube-runtime's `DefaultBackoff`,
/// the parameters of client-go's reflector: 0.8 s doubling to 30 s, each
/// stretched by up to as much again at random (so a fleet's nodes do not
/// retry in step), starting over once two minutes pass without an error
/// (and here also once a list completes). It never runs out; were it to,
/// this is the delay.
const RETRY_MAX: Duration = Duration::from_secs(60);

/// A list is buffered until it is complete (`InitDone`) and handed on whole:
/// a pod the relist no longer has (deleted while the watch was away) is
/// dropped with it, and nothing is judged from half a list.
///
/// Every error is waited out before the watcher is polled again, 410 Gone
/// included (client-go's reflector, too, backs off before it lists again).
/// kube-runtime's own `WatchStreamExt::default_backoff()` is not used: its
/// `StreamBackoff` starts the delay over on every item that is not an error,
/// and the watcher yields `Event::Init` before each list attempt, so against
/// an API server that is down the delay never grows past the first 0.8–1.6 s
/// (measured against the test API server: 28 attempts by the three watches
/// in 10 s, against 12 here). Here the delay starts over only when a list
/// completes and after two quiet minutes (`DefaultBackoff`'s reset timer):
/// a watch that keeps failing after a good list keeps growing.
///
/// With `resume`, a retry the API server did not answer (see [`unanswered`])
/// is waited out only until the server answers anyone again: after a
/// control-plane restart the delay may have grown to half a minute, and the
/// watch would be blind that long while every other request succeeds.
async fn forward<K, C, S, B>(
    stream: S,
    resource: &'static str,
    tx: &mpsc::Sender<C>,
    changes: &Changes<K, C>,
    mut backoff: B,
    mut resume: Option<Resume>,
) where
    S: Stream<Item = Result<Event<K>, watcher::Error>>,
    B: Backoff,
{
    let mut stream = std::pin::pin!(stream);
    let mut listed: Vec<K> = Vec::new();
    while let Some(event) = stream.next().await {
        let change = match event {
            Ok(Event::Init) => {
                listed.clear();
                continue;
            }
            Ok(Event::InitApply(o)) => {
                listed.push(o);
                continue;
            }
            Ok(Event::InitDone) => {
                backoff.reset();
                (changes.reset)(std::mem::take(&mut listed))
            }
            Ok(Event::Apply(o)) => (changes.upsert)(o),
            Ok(Event::Delete(o)) => (changes.gone)(o),
            Err(source) => {
                let delay = backoff.next().unwrap_or(RETRY_MAX);
                let server_away = unanswered(&source);
                let e = WatchError::new(resource, source);
                let retry_ms = delay.as_millis() as u64;
                if matches!(e, WatchError::Expired { .. }) {
                    // Routine: compaction outran the watch; the relist follows.
                    tracing::debug!(
                        error = &e as &dyn std::error::Error,
                        retry_ms,
                        "watch expired"
                    );
                } else {
                    tracing::warn!(
                        error = &e as &dyn std::error::Error,
                        retry_ms,
                        "watch interrupted; retrying"
                    );
                }
                match resume.as_mut().filter(|_| server_away) {
                    Some(r) => {
                        if r.wait(delay).await {
                            // The server is back: a failure now is a new
                            // one, retried after 0.8 s, not after the delay
                            // the outage grew (a restarted API server can
                            // refuse the first lists while it starts).
                            backoff.reset();
                        }
                    }
                    None => tokio::time::sleep(delay).await,
                }
                continue;
            }
        };
        if tx.send(change).await.is_err() {
            return;
        }
    }
}

/// Whether the API server did not answer (refused, reset, timed out) or
/// answered that it is unwell (5xx): then a success heard from it later
/// means it is back. Any other answer is about this request (401 and 403:
/// the credential; 410: the relist that follows) and is waited out in
/// full, as is a 429, which asks for less traffic, not more.
fn unanswered(e: &watcher::Error) -> bool {
    let unwell = |code: u16| code >= 500;
    match e {
        watcher::Error::WatchError(status) => unwell(status.code),
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => match e {
            kube::Error::Api(status) => unwell(status.code),
            kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
                true
            }
            _ => false,
        },
        watcher::Error::NoResourceVersion => false,
    }
}

/// How long after the API server is heard again a waiting watch retries:
/// up to this at random, so a fleet's nodes (and this node's three watches)
/// do not list at the same instant. With the probe's period (2–3 s) the
/// fleet's relists spread over about 7 s, and a pod created when the server
/// returns is still judged within 10 s. The simulated fleet of 5,000 agents
/// (`fleet_resume` in the tests below) peaks at 5,342 requests in a second
/// against 20,000 at once in step (7,204 with 1 s of jitter).
const RESUME_JITTER: Duration = Duration::from_secs(4);
/// While a watch waits for the API server, `/readyz` is asked this often
/// (plus up to [`PROBE_JITTER`]): with nothing else to send (the reporter
/// writes on a change or a heartbeat), a probe is what hears it back.
const PROBE_EVERY: Duration = Duration::from_secs(2);
const PROBE_JITTER: Duration = Duration::from_secs(1);
/// A probe the server does not answer within this is a failed one.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What cuts short a watch's wait for an API server that did not answer.
#[derive(Clone)]
pub struct Resume {
    answered: Answered,
    /// How many watches wait for the API server: the probe runs while any does.
    waiting: Arc<tokio::sync::watch::Sender<usize>>,
}

impl Resume {
    pub fn new(answered: Answered) -> Self {
        Resume {
            answered,
            waiting: Arc::new(tokio::sync::watch::channel(0).0),
        }
    }

    /// Waits `delay`, or until the server is heard again and then up to
    /// [`RESUME_JITTER`] more (never past `delay`): true when it was heard.
    async fn wait(&mut self, delay: Duration) -> bool {
        struct Waiting<'a>(&'a tokio::sync::watch::Sender<usize>);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.send_modify(|n| *n = n.saturating_sub(1));
            }
        }
        self.waiting.send_modify(|n| *n += 1);
        let waiting = Waiting(&self.waiting);
        let deadline = tokio::time::Instant::now() + delay;
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return false,
            _ = self.answered.next() => {}
        }
        drop(waiting);
        let jittered = tokio::time::Instant::now() + jitter(RESUME_JITTER);
        tokio::time::sleep_until(jittered.min(deadline)).await;
        tracing::debug!("the API server answered again; the watch resumes");
        true
    }
}

/// Asks `/readyz` every [`PROBE_EVERY`] (jittered) while a watch waits for
/// the API server; a success is heard by every waiting watch.
pub async fn probe(client: Client, resume: Resume) {
    let mut waiting = resume.waiting.subscribe();
    loop {
        if waiting.wait_for(|n| *n > 0).await.is_err() {
            return;
        }
        tokio::time::sleep(PROBE_EVERY + jitter(PROBE_JITTER)).await;
        if *waiting.borrow() == 0 {
            continue;
        }
        let asked = tokio::time::timeout(PROBE_TIMEOUT, crate::client::ready(&client));
        match asked.await {
            // The client heard it too when it is a reloading one; said here for any client.
            Ok(Ok(())) => resume.answered.heard(),
            Ok(Err(e)) => {
                tracing::debug!(
                    error = &e as &dyn std::error::Error,
                    "the API server is not back yet"
                )
            }
            Err(_) => tracing::debug!("the API server is not back yet: /readyz timed out"),
        }
    }
}

/// Up to `max`, uniformly at random (std's per-instance random hash keys:
/// no generator to seed or share).
fn jitter(max: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    max.mul_f64((bits >> 11) as f64 / (1u64 << 53) as f64)
}

/// What a list, an added/modified and a deleted object of one kind become.
pub struct Changes<K, C> {
    pub reset: fn(Vec<K>) -> C,
    pub upsert: fn(K) -> C,
    pub gone: fn(K) -> C,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;
    use std::time::Instant;

    #[test]
    fn retries_back_off_to_half_a_minute() {
        // Each delay is its step (0.8 s doubling, at most 30 s) plus up to as much again.
        let delays: Vec<Duration> = DefaultBackoff::default().take(9).collect();
        let steps = [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0];
        for (d, step) in delays.iter().zip(steps) {
            let d = d.as_secs_f64();
            assert!(d >= step - 1e-3 && d <= 2.0 * step + 1e-3, "{delays:?}");
        }
    }

    fn class(name: &str) -> RuntimeClass {
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "handler": "runc"}))
            .unwrap()
    }

    fn names(cs: Vec<RuntimeClass>) -> String {
        cs.iter()
            .map(|c| c.name_any())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Each change said in words, as the caller's own change type.
    fn said() -> Changes<RuntimeClass, String> {
        Changes {
            reset: |cs| format!("listed {}", names(cs)),
            upsert: |c| format!("applied {}", c.name_any()),
            gone: |c| format!("deleted {}", c.name_any()),
        }
    }

    /// A backoff that waits nothing and notes what it was asked.
    #[derive(Default)]
    struct Recorded(Arc<std::sync::Mutex<Vec<&'static str>>>);

    impl Iterator for Recorded {
        type Item = Duration;
        fn next(&mut self) -> Option<Duration> {
            self.0.lock().unwrap().push("wait");
            Some(Duration::ZERO)
        }
    }

    impl Backoff for Recorded {
        fn reset(&mut self) {
            self.0.lock().unwrap().push("reset");
        }
    }

    #[tokio::test]
    async fn a_list_is_handed_on_whole_and_each_error_waited_out() {
        let status = |code| {
            Box::new(kube::core::Status {
                code,
                message: "too old resource version: 3".into(),
                ..Default::default()
            })
        };
        let events = vec![
            Ok(Event::Init),
            Ok(Event::InitApply(class("a"))),
            Ok(Event::InitApply(class("b"))),
            Ok(Event::InitDone),
            Ok(Event::Apply(class("c"))),
            Ok(Event::Delete(class("a"))),
            // The watch fell behind: listed again; the first page arrives, the second fails.
            Err(watcher::Error::WatchError(status(410))),
            Ok(Event::Init),
            Ok(Event::InitApply(class("b"))),
            Err(watcher::Error::InitialListFailed(kube::Error::Api(status(
                500,
            )))),
            Ok(Event::Init),
            Ok(Event::InitApply(class("b"))),
            Ok(Event::InitDone),
        ];
        let (tx, mut rx) = mpsc::channel(16);
        let changes = said();
        let backoff = Recorded::default();
        let asked = backoff.0.clone();
        forward(
            futures::stream::iter(events),
            "runtimeclasses",
            &tx,
            &changes,
            backoff,
            None,
        )
        .await;
        drop(tx);
        let mut out = Vec::new();
        while let Some(c) = rx.recv().await {
            out.push(c);
        }
        // Half a list is never handed on; the relist drops what it no longer has (c, gone meanwhile).
        assert_eq!(
            out,
            ["listed a,b", "applied c", "deleted a", "listed b"],
            "{out:?}"
        );
        // Each error waited; the delay started over when a list completed, not on Init.
        assert_eq!(
            *asked.lock().unwrap(),
            ["reset", "wait", "wait", "reset"],
            "{asked:?}"
        );
    }

    /// A backoff whose every delay is the same.
    struct Fixed(Duration);

    impl Iterator for Fixed {
        type Item = Duration;
        fn next(&mut self) -> Option<Duration> {
            Some(self.0)
        }
    }

    impl Backoff for Fixed {
        fn reset(&mut self) {}
    }

    /// How long `forward` takes from `error` to handing on the list after
    /// it, with a retry delay of 30 s and a success heard after 200 ms.
    async fn resumed_after(error: watcher::Error, server: &str) -> Duration {
        let answered = Answered::of(server);
        let events = vec![
            Err(error),
            Ok(Event::Init),
            Ok(Event::InitApply(class("a"))),
            Ok(Event::InitDone),
        ];
        let (tx, mut rx) = mpsc::channel(4);
        let changes = said();
        let heard = answered.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            heard.heard();
        });
        let start = Instant::now();
        let watching = forward(
            futures::stream::iter(events),
            "runtimeclasses",
            &tx,
            &changes,
            Fixed(Duration::from_secs(30)),
            Some(Resume::new(answered)),
        );
        // Cut at 5 s: the whole delay would be 30.
        let _ = tokio::time::timeout(Duration::from_secs(5), watching).await;
        match rx.try_recv() {
            Ok(c) => {
                assert_eq!(c, "listed a");
                start.elapsed()
            }
            Err(_) => Duration::MAX,
        }
    }

    #[tokio::test]
    async fn a_retry_the_server_did_not_answer_resumes_once_it_answers_anyone() {
        // Connection refused: kube's client wraps the transport's error as a service error.
        let refused = kube::Error::Service(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        let t = resumed_after(
            watcher::Error::WatchStartFailed(refused),
            "https://resume-refused.invalid/",
        )
        .await;
        // The success at 200 ms, then at most the jitter.
        assert!(
            t >= Duration::from_millis(200)
                && t <= Duration::from_millis(200) + RESUME_JITTER + Duration::from_millis(500),
            "{t:?}"
        );
    }

    #[tokio::test]
    async fn an_answered_refusal_waits_its_whole_delay() {
        let status = |code| {
            Box::new(kube::core::Status {
                code,
                ..Default::default()
            })
        };
        // 403: the server answered; another client's success says nothing about this request.
        let t = resumed_after(
            watcher::Error::InitialListFailed(kube::Error::Api(status(403))),
            "https://resume-forbidden.invalid/",
        )
        .await;
        assert_eq!(t, Duration::MAX, "resumed after {t:?}");
    }

    #[test]
    fn what_the_server_did_not_answer_is_told_from_its_answers() {
        let api = |code| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            }))
        };
        let reset = || {
            kube::Error::Service(Box::new(std::io::Error::from(
                std::io::ErrorKind::ConnectionReset,
            )))
        };
        assert!(unanswered(&watcher::Error::InitialListFailed(reset())));
        assert!(unanswered(&watcher::Error::WatchFailed(
            kube::Error::ReadEvents(std::io::Error::from(std::io::ErrorKind::UnexpectedEof))
        )));
        assert!(unanswered(&watcher::Error::WatchStartFailed(api(503))));
        for code in [401, 403, 404, 410, 429] {
            assert!(
                !unanswered(&watcher::Error::WatchStartFailed(api(code))),
                "{code}"
            );
        }
        assert!(!unanswered(&watcher::Error::NoResourceVersion));
    }

    #[test]
    fn jitter_stays_within_its_bound_and_varies() {
        let draws: Vec<Duration> = (0..64).map(|_| jitter(RESUME_JITTER)).collect();
        assert!(draws.iter().all(|d| *d < RESUME_JITTER), "{draws:?}");
        assert!(draws.windows(2).any(|w| w[0] != w[1]), "{draws:?}");
    }

    #[test]
    fn a_410_is_told_from_other_errors() {
        let status = |code| {
            Box::new(kube::core::Status {
                code,
                ..Default::default()
            })
        };
        let expired = |e| matches!(WatchError::new("pods", e), WatchError::Expired { .. });
        assert!(expired(watcher::Error::WatchError(status(410))));
        assert!(expired(watcher::Error::InitialListFailed(
            kube::Error::Api(status(410))
        )));
        assert!(!expired(watcher::Error::WatchError(status(500))));
        // A watch refused outright leaves kube's watcher watching from the same
        // version (it lists again only after a 410 ERROR event or a list's 410).
        assert!(!expired(watcher::Error::WatchStartFailed(
            kube::Error::Api(status(410))
        )));
        assert!(!expired(watcher::Error::NoResourceVersion));
    }

    #[test]
    fn a_kind_not_served_is_a_404_to_the_list_or_the_watch_start() {
        let api = |code| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            }))
        };
        let not_served = |e| WatchError::new("devicetaintrules", e).not_served();
        assert!(not_served(watcher::Error::InitialListFailed(api(404))));
        assert!(not_served(watcher::Error::WatchStartFailed(api(404))));
        for code in [403, 410, 500] {
            assert!(
                !not_served(watcher::Error::InitialListFailed(api(code))),
                "{code}"
            );
            assert!(
                !not_served(watcher::Error::WatchStartFailed(api(code))),
                "{code}"
            );
        }
        // An ERROR event in a running watch says nothing of what is served.
        assert!(!not_served(watcher::Error::WatchError(Box::new(
            kube::core::Status {
                code: 404,
                ..Default::default()
            }
        ))));
        assert!(!not_served(watcher::Error::NoResourceVersion));
    }

    /// The fleet's return after an outage, simulated from the constants the
    /// watches and the reporter use: 5,000 agents probing `/readyz` every
    /// 2–3 s (each at its own phase) hear the API server back within one
    /// probe period; each of an agent's three watches then relists within
    /// the resume jitter, and its reporter retries a failed write within the
    /// daemon's 3 s (`RESUME_WITHIN`), each at its own draw. The most
    /// requests in one second, and when the last relist goes out.
    fn fleet_resume(resume_jitter: Duration) -> (usize, Duration) {
        const AGENTS: usize = 5_000;
        const REPORTER_WITHIN: Duration = Duration::from_secs(3);
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut uniform = || {
            // xorshift64*: a deterministic draw in [0, 1).
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
        };
        // Milliseconds after the API server answers again.
        let mut requests: Vec<u64> = Vec::new();
        let mut last_relist = Duration::ZERO;
        for _ in 0..AGENTS {
            let period = PROBE_EVERY + PROBE_JITTER.mul_f64(uniform());
            let heard = period.mul_f64(uniform());
            for _watch in 0..3 {
                let at = heard + resume_jitter.mul_f64(uniform());
                last_relist = last_relist.max(at);
                requests.push(at.as_millis() as u64);
            }
            requests.push((heard + REPORTER_WITHIN.mul_f64(uniform())).as_millis() as u64);
        }
        requests.sort_unstable();
        let mut peak = 0;
        let mut lo = 0;
        for hi in 0..requests.len() {
            while requests[hi] - requests[lo] >= 1000 {
                lo += 1;
            }
            peak = peak.max(hi - lo + 1);
        }
        (peak, last_relist)
    }

    #[test]
    fn fleet_resume_spreads_5000_agents_relists() {
        let in_step = 5_000 * 4;
        for j in [1, 2, 3, 4, 5] {
            let (peak, last) = fleet_resume(Duration::from_secs(j));
            eprintln!(
                "FIGURE fleet resume, 5000 agents, resume jitter {j} s: peak {peak} requests/s (in step: {in_step} at once), last relist {} ms after the server answered",
                last.as_millis()
            );
        }
        let (peak, last) = fleet_resume(RESUME_JITTER);
        // Under 30 % of the in-step burst in any second (1 s of jitter, the
        // setting before: 36 %).
        assert!(peak * 10 <= in_step * 3, "peak {peak}/s");
        // Every watch relisted within a probe period and the jitter, so that
        // with a list, a judgement and a write a new pod is named within 10 s.
        assert!(last <= PROBE_EVERY + PROBE_JITTER + RESUME_JITTER);
        assert!(PROBE_EVERY + PROBE_JITTER + RESUME_JITTER <= Duration::from_secs(7));
    }
}
