//! Storage across restarts of a standalone server process
//! (agent/examples/apiserver.rs, the fault and soak harness of
//! agent/tests/soak.rs): Nodes and Events kept in a directory as etcd keeps
//! them, and the request log appended there.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use serde_json::{json, Value};

use crate::kinds::{decode_own, encode, Object};
use crate::state::{State, TestApiServer};
use crate::store::{Change, Store};

/// One answered request.
#[derive(Debug, Clone)]
pub struct Logged {
    pub method: String,
    pub path: String,
    pub query: String,
    pub content_type: String,
    pub body: Value,
    pub status: u16,
    /// When it was answered (wall clock, to line up with the agent's journal).
    pub at: std::time::SystemTime,
}

/// The request log's part of the state, and where a standalone server
/// keeps its objects and requests across a restart of the process, as etcd
/// keeps them.
#[derive(Default)]
pub struct Recording {
    pub log: Vec<Logged>,
    pub storage: Option<PathBuf>,
    /// The resourceVersion last written to `storage`.
    pub stored_rv: u64,
}

/// Logs an answered request; with storage, appends it to the request log
/// on disk and writes the objects whenever they changed, before the answer
/// leaves (etcd has the write before the client hears of it).
pub fn record(s: &mut State, logged: Logged) {
    let (store, rec) = s.store_and::<Recording>();
    if let Some(dir) = rec.storage.clone() {
        persist_request(&dir, &logged);
        // Event PATCHes (a repeat's count) change no resourceVersion here.
        if store.rv != rec.stored_rv || logged.method != "GET" {
            persist_objects(&dir, store);
            rec.stored_rv = store.rv;
        }
    }
    rec.log.push(logged);
}

/// The objects kept across restarts: `etcd.json`.
const OBJECTS_FILE: &str = "etcd.json";
/// Every answered request, one JSON object a line: `requests.jsonl`.
pub const REQUESTS_FILE: &str = "requests.jsonl";

pub fn persist_request(dir: &Path, l: &Logged) {
    use std::io::Write;
    let at =
        l.at.duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_micros() as u64;
    let line = json!({
        "at_us": at, "method": l.method, "path": l.path, "query": l.query,
        "content_type": l.content_type, "body": l.body, "status": l.status,
    });
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(REQUESTS_FILE))
        .expect("open the request log");
    writeln!(f, "{line}").expect("append to the request log");
}

/// Writes the Nodes and Events (JSON, as the API serves them).
pub fn persist_objects(dir: &Path, s: &Store) {
    let events: Vec<Value> = s.events.values().map(encode).collect();
    let nodes: serde_json::Map<String, Value> = s
        .nodes()
        .map(|(name, n)| (name.clone(), encode(n)))
        .collect();
    let doc = json!({"rv": s.rv, "nodes": nodes, "events": events});
    let tmp = dir.join(format!("{OBJECTS_FILE}.tmp"));
    std::fs::write(&tmp, doc.to_string()).expect("write the objects");
    std::fs::rename(&tmp, dir.join(OBJECTS_FILE)).expect("replace the objects");
}

/// The store a standalone server kept in `dir`, if any. A restarted
/// kube-apiserver fills its watch cache from etcd at the current
/// resourceVersion, so a watch from an older one gets 410 Gone and the
/// client lists again (k8s.io/apiserver's watch cache, "too old resource
/// version"): the history is compacted up to it.
pub fn load(dir: &Path) -> Option<Store> {
    let text = std::fs::read_to_string(dir.join(OBJECTS_FILE)).ok()?;
    let doc: Value = serde_json::from_str(&text).expect("stored objects");
    let mut store = Store {
        rv: doc["rv"].as_u64().unwrap_or(0),
        ..Store::default()
    };
    for (name, node) in doc["nodes"].as_object().into_iter().flatten() {
        let node = Object::Node(Box::new(decode_own("a stored Node", node.clone())));
        let rv = node
            .resource_version()
            .and_then(|v| v.parse().ok())
            .unwrap_or(store.rv);
        store.objects.insert(("nodes", name.clone()), node.clone());
        store.changes.push(Change {
            rv,
            resource: "nodes",
            before: None,
            after: Some(node),
        });
    }
    for ev in doc["events"].as_array().into_iter().flatten() {
        let ev: Event = decode_own("a stored Event", ev.clone());
        let key = (
            ev.metadata.namespace.clone().unwrap_or_default(),
            ev.metadata.name.clone().unwrap_or_default(),
        );
        store.events.insert(key, ev);
    }
    store.changes.sort_by_key(|c| c.rv);
    store.compacted = store.rv;
    Some(store)
}

/// The request log a standalone server kept in `dir`, across its restarts.
pub fn stored_requests(dir: &Path) -> Vec<Logged> {
    std::fs::read_to_string(dir.join(REQUESTS_FILE))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| Logged {
            method: v["method"].as_str().unwrap_or("").into(),
            path: v["path"].as_str().unwrap_or("").into(),
            query: v["query"].as_str().unwrap_or("").into(),
            content_type: v["content_type"].as_str().unwrap_or("").into(),
            body: v["body"].clone(),
            status: v["status"].as_u64().unwrap_or(0) as u16,
            at: std::time::UNIX_EPOCH + Duration::from_micros(v["at_us"].as_u64().unwrap_or(0)),
        })
        .collect()
}

/// The Node `name` as a standalone server in `dir` last stored it.
pub fn stored_node(dir: &Path, name: &str) -> Option<Value> {
    let text = std::fs::read_to_string(dir.join(OBJECTS_FILE)).ok()?;
    let doc: Value = serde_json::from_str(&text).ok()?;
    doc["nodes"].get(name).cloned()
}

impl TestApiServer {
    pub fn log(&self) -> Vec<Logged> {
        self.with(|s| s.part::<Recording>().log.clone())
    }

    pub fn clear_log(&self) {
        self.with(|s| s.part::<Recording>().log.clear());
    }

    /// Successful requests matching `method` and a path suffix.
    pub fn count_ok(&self, method: &str, path_suffix: &str) -> usize {
        self.with(|s| {
            s.part::<Recording>()
                .log
                .iter()
                .filter(|l| l.method == method && l.path.ends_with(path_suffix) && l.status < 300)
                .count()
        })
    }

    /// Writes the objects to storage now (those changed outside a request).
    pub fn flush(&self) {
        self.with(|s| {
            let (store, rec) = s.store_and::<Recording>();
            if let Some(dir) = rec.storage.clone() {
                persist_objects(&dir, store);
                rec.stored_rv = store.rv;
            }
        });
    }
}
