//! Watches, as kube-apiserver's watch cache serves them: events after a
//! resourceVersion as this watch's field selector sees them, BOOKMARKs
//! when asked, and 410 Gone for a compacted version
//! (staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go,
//! watch_cache.go: "too old resource version").

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::auth::{forbidden_list, list_allowed, Identity};
use crate::kinds::kind_of;
use crate::query::query_param;
use crate::state::TestApiServer;
use crate::status::status;
use crate::store::{selects, Store};

/// How long the test server keeps a watch open (kube-apiserver ends one at
/// its `timeoutSeconds`, and clients watch again from the last version seen).
pub const WATCH_WINDOW: Duration = Duration::from_millis(500);
const WATCH_TICK: Duration = Duration::from_millis(20);

impl TestApiServer {
    /// Forgets the history up to now, as etcd's compaction does: watches from
    /// an older resourceVersion and continue tokens of older lists get 410 Gone.
    pub fn compact(&self) {
        self.with(|s| s.store.compacted = s.store.rv);
    }

    /// How many 410 Gone answers were given.
    pub fn gone_answers(&self) -> usize {
        self.with(|s| s.store.gone)
    }

    /// The next watch of `resource` gets a 410 Gone ERROR event (its
    /// resourceVersion is too old), as an API server that compacted its history.
    pub fn expire_next_watch(&self, resource: &'static str) {
        self.with(|s| s.store.expire_watch = Some(resource));
    }
}

/// The watch events of `resource` after version `since`, up to the current
/// one, as this watch's field selector sees them: an object that starts
/// matching is ADDED, one that stops matching DELETED (as kube-apiserver's
/// watch cache does).
pub fn events_since(s: &Store, resource: &str, selector: Option<&str>, since: u64) -> Vec<String> {
    // `changes` is in resourceVersion order: start at the first one after
    // `since` instead of scanning every change of the run.
    let first = s.changes.partition_point(|c| c.rv <= since);
    s.changes[first..]
        .iter()
        .filter(|c| c.resource == resource)
        .filter_map(|c| {
            let was = c.before.as_ref().is_some_and(|b| selects(selector, b));
            let is = c.after.as_ref().is_some_and(|a| selects(selector, a));
            let (kind, obj) = match (was, is) {
                (false, true) => ("ADDED", c.after.as_ref()?),
                (true, true) => ("MODIFIED", c.after.as_ref()?),
                (true, false) => ("DELETED", c.after.as_ref().or(c.before.as_ref())?),
                (false, false) => return None,
            };
            Some(json!({"type": kind, "object": obj.to_json()}).to_string())
        })
        .collect()
}

/// A watch: events streamed as they happen for [`WATCH_WINDOW`] (or the
/// request's `timeoutSeconds`, if shorter), then, when the client allowed
/// bookmarks, a BOOKMARK with the current resourceVersion (kube-apiserver
/// sends one shortly before it ends a watch at its timeout, so a watch that
/// saw nothing of its own still resumes from a recent version), then the end.
/// A watch from a compacted version gets one ERROR event, a 410 Status.
/// `store` picks the store out of the server's state.
pub fn watch<S: Send + 'static>(
    st: &Arc<Mutex<S>>,
    store: fn(&mut S) -> &mut Store,
    uri: &Uri,
    who: &Identity,
    resource: &'static str,
) -> Response {
    let selector = query_param(uri, "fieldSelector");
    if !list_allowed(who, resource, selector.as_deref()) {
        let (c, v) = forbidden_list(resource);
        return (StatusCode::from_u16(c).unwrap(), v.to_string()).into_response();
    }
    let since: u64 = query_param(uri, "resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let bookmarks = query_param(uri, "allowWatchBookmarks").as_deref() == Some("true");
    let window = query_param(uri, "timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .map_or(WATCH_WINDOW, |t| Duration::from_secs(t).min(WATCH_WINDOW));
    {
        let mut guard = st.lock().unwrap();
        let s = store(&mut guard);
        let compacted = s.compacted;
        if s.expire_watch == Some(resource) || since < compacted {
            s.expire_watch = s.expire_watch.filter(|r| *r != resource);
            s.gone += 1;
            let (_, gone) = status(
                410,
                "Expired",
                &format!("too old resource version: {since} ({compacted})"),
            );
            return (
                StatusCode::OK,
                json!({"type": "ERROR", "object": gone}).to_string() + "\n",
            )
                .into_response();
        }
    }
    let (kind, api_version) = kind_of(resource);
    let deadline = tokio::time::Instant::now() + window;
    let st = st.clone();
    // (since, ended): every event up to `since` was sent.
    let body = futures::stream::unfold((since, false), move |(since, ended)| {
        let st = st.clone();
        let selector = selector.clone();
        async move {
            if ended {
                return None;
            }
            loop {
                let (lines, now) = {
                    let mut guard = st.lock().unwrap();
                    let s = store(&mut guard);
                    (events_since(s, resource, selector.as_deref(), since), s.rv)
                };
                if !lines.is_empty() {
                    let chunk = Bytes::from(lines.join("\n") + "\n");
                    return Some((Ok::<_, std::convert::Infallible>(chunk), (now, false)));
                }
                if tokio::time::Instant::now() >= deadline {
                    if !bookmarks {
                        return None;
                    }
                    let mark = json!({"type": "BOOKMARK", "object": {
                        "kind": kind, "apiVersion": api_version,
                        "metadata": {"resourceVersion": now.to_string()}}});
                    return Some((Ok(Bytes::from(mark.to_string() + "\n")), (now, true)));
                }
                tokio::time::sleep(WATCH_TICK).await;
            }
        }
    });
    (
        StatusCode::OK,
        [("content-type", "application/json")],
        axum::body::Body::from_stream(body),
    )
        .into_response()
}
