//! A test API server with the semantics nodeproof's reporting depends on:
//! TLS (self-signed, rcgen), bearer tokens, a Node-authorizer-like rule set
//! (own node only, no GET of nodes/status, core events only, no taint
//! changes by a node identity), strategic merge of `status.conditions` by
//! type (with `$patch: delete`), resourceVersions and 409s, and fault
//! injection (down, 500, 429 with Retry-After, slow, connections cut).
//!
//! Lists and watches of pods, RuntimeClasses and Nodes behave as
//! kube-apiserver's: `limit`/`continue` pages of one snapshot, field
//! selectors, watches streamed from a resourceVersion with BOOKMARK events
//! when asked, and 410 Gone once history is compacted.
//!
//! Not a Kubernetes: only the handful of paths the agent uses.
//!
//! A crate of its own (dev-only, never shipped) so the test binaries,
//! benches and examples that use it compile it once instead of each
//! including the file (`mod support;` in 16 test binaries did).
//! `device_taint_rules` and `placement` are its DRA-taint and placement
//! sections.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};
use tokio_rustls::rustls;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// `system:node:<name>`, as the kubelet's credentials authenticate.
    Node(String),
    /// A ServiceAccount with the taint ClusterRole (deploy/rbac-taints.yaml).
    TaintServiceAccount,
    /// The in-cluster agent's ServiceAccount (deploy/base/rbac-agent.yaml). Not
    /// under the Node authorizer; what RBAC allows it is checked against the
    /// request log by `tests/rbac_agent.rs`.
    AgentServiceAccount,
    /// `nodeproof cluster check`'s reader (deploy/base/rbac-cluster-check.yaml);
    /// see the "Cluster check" section.
    ClusterReader,
    /// The gate controller's ServiceAccount (deploy/base/gate-controller.yaml);
    /// its RBAC is checked against the request log by `tests/gate_controller.rs`.
    GateControllerServiceAccount,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    None,
    /// New connections are reset; requests on open ones get 503.
    Down,
    Error500,
    TooManyRequests {
        retry_after_secs: u32,
    },
    Slow(Duration),
    /// The next Node patch gets a 409.
    ConflictOnce,
    /// See the "Write failures" section below.
    TooManyRequestsPlain {
        retry_after_secs: u32,
    },
    /// See the "Write failures" section below.
    EventsError500,
}

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

#[derive(Default)]
struct State {
    nodes: BTreeMap<String, Value>,
    events: BTreeMap<(String, String), Value>,
    rv: u64,
    tokens: BTreeMap<String, Identity>,
    fault: Option<Fault>,
    log: Vec<Logged>,
    /// Pods and RuntimeClasses by name (pods: `ns/name`), for list and watch.
    objects: BTreeMap<(&'static str, String), Value>,
    /// Every change: (resourceVersion, resource, before, after).
    changes: Vec<(u64, &'static str, Option<Value>, Option<Value>)>,
    /// The next watch of this resource ends with a 410 Gone ERROR event.
    expire_watch: Option<&'static str>,
    /// History up to here is compacted away (etcd's compaction): a watch from
    /// an older resourceVersion, or a continue token of an older list, gets
    /// 410 Gone.
    compacted: u64,
    /// How many 410 Gone answers were given (watch ERROR events and list pages).
    gone: usize,
    /// When each TCP connection was accepted, those refused while down included.
    accepted: Vec<Instant>,
    /// Namespaces NamespaceLifecycle refuses Events in (see "Write failures").
    namespaces: BTreeMap<String, NamespacePhase>,
    /// The CA client certificates are verified against (see "Write failures").
    client_ca_der: Vec<u8>,
    /// APIServices, NodeMetrics and Events (see "Cluster check").
    cluster: ClusterState,
    /// See "Scheduling gates and leases" below.
    gate: GateState,
    /// See "Placement" (placement.rs).
    scheduler: SchedulerState,
    /// The `resource.k8s.io` versions served (see "Dynamic Resource Allocation").
    dra_versions: Vec<&'static str>,
    /// The versions DeviceTaintRules are served in (see "DeviceTaintRules").
    device_taint_versions: Vec<&'static str>,
    /// See "A standalone process" below: where the objects and the request
    /// log are kept across a restart of the process, as etcd keeps them.
    storage: Option<PathBuf>,
    /// The resourceVersion last written to `storage`.
    stored_rv: u64,
}

impl State {
    /// Logs an answered request; with storage, appends it to the request
    /// log on disk and writes the objects whenever they changed, before the
    /// answer leaves (etcd has the write before the client hears of it).
    fn record(&mut self, logged: Logged) {
        if let Some(dir) = self.storage.clone() {
            persist_request(&dir, &logged);
            // Event PATCHes (a repeat's count) change no resourceVersion here.
            if self.rv != self.stored_rv || logged.method != "GET" {
                persist_objects(&dir, self);
                self.stored_rv = self.rv;
            }
        }
        self.log.push(logged);
    }

    fn next_rv(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    /// Stores a Node under a new resourceVersion, for GETs, lists and watches.
    fn set_node(&mut self, name: &str, mut node: Value) -> Value {
        let rv = self.next_rv();
        node["metadata"]["resourceVersion"] = json!(rv);
        let before = self.nodes.insert(name.into(), node.clone());
        let rv = self.rv;
        self.changes.push((rv, "nodes", before, Some(node.clone())));
        node
    }

    /// The objects of `resource` as they were at resourceVersion `rv`, by
    /// key (`ns/name` or name, the order etcd keeps them in): what every
    /// page of one paginated list is cut from.
    fn snapshot(&self, resource: &str, rv: u64) -> BTreeMap<String, Value> {
        let mut objects = BTreeMap::new();
        for (_, _, before, after) in self
            .changes
            .iter()
            .filter(|(v, r, _, _)| *v <= rv && *r == resource)
        {
            match (before, after) {
                (_, Some(a)) => {
                    objects.insert(object_key(a), a.clone());
                }
                (Some(b), None) => {
                    objects.remove(&object_key(b));
                }
                (None, None) => {}
            }
        }
        objects
    }
}

pub struct TestApiServer {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    ca_pem: String,
    /// Signs client certificates (see "Write failures").
    client_ca: rcgen::Issuer<'static, rcgen::KeyPair>,
    /// Bumped to close every open connection.
    cut: tokio::sync::watch::Sender<u64>,
    _runtime: std::thread::JoinHandle<()>,
}

impl TestApiServer {
    /// Start on 127.0.0.1 with a fresh self-signed certificate.
    pub fn start() -> Self {
        let cert = ServingCert::generate();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        Self::serve(listener, &cert, State::default())
    }

    fn serve(std_listener: std::net::TcpListener, cert: &ServingCert, state: State) -> Self {
        use rustls::pki_types::pem::PemObject;
        let ca_pem = cert.cert_pem.clone();
        let cert_der = rustls::pki_types::CertificateDer::from_pem_slice(cert.cert_pem.as_bytes())
            .expect("certificate PEM");
        let key_der = rustls::pki_types::PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes())
            .expect("key PEM");
        let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_client_cert_verifier(Arc::new(RequestClientCert))
        .with_single_cert(vec![cert_der], key_der)
        .expect("server certificate");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let (client_ca, client_ca_der) = client_ca();
        let state = Arc::new(Mutex::new(State {
            client_ca_der,
            ..state
        }));
        std_listener.set_nonblocking(true).expect("nonblocking");
        let addr = std_listener.local_addr().expect("addr");
        let st = state.clone();
        let (cut, cut_rx) = tokio::sync::watch::channel(0u64);
        let runtime = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("server runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(std_listener).expect("listener");
                let app = Router::new().fallback(handle).with_state(st.clone());
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        continue;
                    };
                    let mut cut = cut_rx.clone();
                    {
                        let mut s = st.lock().unwrap();
                        s.accepted.push(Instant::now());
                        if s.fault == Some(Fault::Down) {
                            drop(tcp); // connection reset: the API server is not there
                            continue;
                        }
                        // Only a cut after this connection was accepted closes
                        // it. Marked under the lock `set_fault` takes: a test
                        // that sets Down and then cuts either finds this
                        // connection refused or cuts it; marked after the
                        // lock, a cut sent in between was taken as seen and
                        // the connection (a watch) outlived it.
                        cut.mark_unchanged();
                    }
                    let acceptor = acceptor.clone();
                    let app = app.clone();
                    tokio::spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let app = app.layer(axum::Extension(PeerCert::of(tls.get_ref().1)));
                        let svc = hyper_util::service::TowerToHyperService::new(app);
                        let builder = hyper_util::server::conn::auto::Builder::new(
                            hyper_util::rt::TokioExecutor::new(),
                        );
                        let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(tls), svc);
                        // Dropped on a cut: the socket closes, open watches with it.
                        tokio::select! {
                            _ = conn => {}
                            _ = cut.changed() => {}
                        }
                    });
                }
            });
        });
        TestApiServer {
            addr,
            state,
            ca_pem,
            client_ca,
            cut,
            _runtime: runtime,
        }
    }

    /// Closes every open connection at once (in-flight watches included), as a
    /// restarting API server or a dropped network path does. New connections
    /// are served as before unless [`Fault::Down`] is set.
    pub fn cut_connections(&self) {
        self.cut.send_modify(|n| *n += 1);
    }

    /// Forgets the history up to now, as etcd's compaction does: watches from
    /// an older resourceVersion and continue tokens of older lists get 410 Gone.
    pub fn compact(&self) {
        let mut st = self.state.lock().unwrap();
        st.compacted = st.rv;
    }

    /// The latest resourceVersion handed out.
    pub fn resource_version(&self) -> u64 {
        self.state.lock().unwrap().rv
    }

    /// How many 410 Gone answers were given.
    pub fn gone_answers(&self) -> usize {
        self.state.lock().unwrap().gone
    }

    /// TCP connections accepted (refused ones included) since `from`.
    pub fn connections_since(&self, from: Instant) -> Vec<Duration> {
        self.state
            .lock()
            .unwrap()
            .accepted
            .iter()
            .filter(|t| **t >= from)
            .map(|t| t.duration_since(from))
            .collect()
    }

    /// Create or replace a Pod (`metadata.namespace`/`name`) or RuntimeClass;
    /// watchers see ADDED/MODIFIED, or ADDED/DELETED when it starts/stops
    /// matching their field selector (as the real API server does).
    pub fn put(&self, resource: &'static str, mut obj: Value) {
        let mut st = self.state.lock().unwrap();
        let rv = st.next_rv();
        obj["metadata"]["resourceVersion"] = json!(rv);
        let key = (resource, object_key(&obj));
        let before = st.objects.insert(key, obj.clone());
        let rv = st.rv;
        st.changes.push((rv, resource, before, Some(obj)));
    }

    pub fn delete(&self, resource: &'static str, key: &str) {
        let mut st = self.state.lock().unwrap();
        let version = st.next_rv();
        if let Some(mut before) = st.objects.remove(&(resource, key.to_string())) {
            before["metadata"]["resourceVersion"] = json!(version);
            let rv = st.rv;
            st.changes.push((rv, resource, Some(before), None));
        }
    }

    pub fn add_token(&self, token: &str, who: Identity) {
        self.state.lock().unwrap().tokens.insert(token.into(), who);
    }

    /// Register a Node, with the kubelet's own conditions on it.
    pub fn add_node(&self, name: &str, conditions: Value) {
        self.state.lock().unwrap().set_node(
            name,
            json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": {}},
                "spec": {},
                "status": {"conditions": conditions},
            }),
        );
    }

    /// Someone else's taint (or label, or status) on a Node; its new resourceVersion.
    pub fn merge_node(&self, name: &str, patch: Value) -> u64 {
        let mut st = self.state.lock().unwrap();
        let mut node = st.nodes[name].clone();
        merge_json(&mut node, &patch);
        st.set_node(name, node);
        st.rv
    }

    /// The next watch of `resource` gets a 410 Gone ERROR event (its
    /// resourceVersion is too old), as an API server that compacted its history.
    pub fn expire_next_watch(&self, resource: &'static str) {
        self.state.lock().unwrap().expire_watch = Some(resource);
    }

    pub fn node(&self, name: &str) -> Value {
        self.state.lock().unwrap().nodes[name].clone()
    }

    /// The Node's condition of `kind`, if any.
    pub fn condition(&self, node: &str, kind: &str) -> Option<Value> {
        self.node(node)["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == kind)
            .cloned()
    }

    pub fn events(&self) -> Vec<Value> {
        self.state
            .lock()
            .unwrap()
            .events
            .values()
            .cloned()
            .collect()
    }

    pub fn set_fault(&self, fault: Fault) {
        self.state.lock().unwrap().fault = Some(fault);
    }

    pub fn clear_fault(&self) {
        self.state.lock().unwrap().fault = None;
    }

    pub fn log(&self) -> Vec<Logged> {
        self.state.lock().unwrap().log.clone()
    }

    pub fn clear_log(&self) {
        self.state.lock().unwrap().log.clear();
    }

    /// Successful requests matching `method` and a path suffix.
    pub fn count_ok(&self, method: &str, path_suffix: &str) -> usize {
        self.log()
            .iter()
            .filter(|l| l.method == method && l.path.ends_with(path_suffix) && l.status < 300)
            .count()
    }

    /// A kubeconfig for `token` (the CA as a file, as kubeadm's are).
    /// [`TestApiServer::kubeconfig`] with a second context, `gone`, made the
    /// current one, on a port nothing listens on: only `--context test`
    /// reaches this server (`kubectl --context` semantics).
    pub fn kubeconfig_two_contexts(&self, dir: &Path, token: &str) -> PathBuf {
        let good = std::fs::read_to_string(self.kubeconfig(dir, token)).unwrap();
        let two = good
            .replace("current-context: test", "current-context: gone")
            .replace(
                "contexts:\n",
                "contexts:\n- name: gone\n  context:\n    cluster: gone\n    user: u\n",
            )
            .replace(
                "clusters:\n",
                "clusters:\n- name: gone\n  cluster:\n    server: https://127.0.0.1:9\n",
            );
        let path = dir.join(format!("{token}-two.kubeconfig"));
        std::fs::write(&path, two).unwrap();
        path
    }

    pub fn kubeconfig(&self, dir: &Path, token: &str) -> PathBuf {
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, &self.ca_pem).unwrap();
        let path = dir.join(format!("{token}.kubeconfig"));
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: https://{addr}\n    certificate-authority: {ca}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: u\ncurrent-context: test\nusers:\n- name: u\n  user:\n    token: {token}\n",
                addr = self.addr,
                ca = ca.display()
            ),
        )
        .unwrap();
        path
    }
}

fn object_key(obj: &Value) -> String {
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    match obj["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

/// `spec.nodeName=<n>` (pods) and `metadata.name=<n>` are the field selectors served.
fn selects(selector: Option<&str>, obj: &Value) -> bool {
    let Some(s) = selector else {
        return true;
    };
    if let Some(node) = s.strip_prefix("spec.nodeName=") {
        // An absent field is the empty string to a field selector:
        // `spec.nodeName=` selects the unbound pods.
        return obj["spec"]["nodeName"].as_str().unwrap_or("") == node;
    }
    if let Some(name) = s.strip_prefix("metadata.name=") {
        return obj["metadata"]["name"].as_str() == Some(name);
    }
    true
}

fn query_param(uri: &Uri, key: &str) -> Option<String> {
    uri.query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| percent_decode(v))
    })
}

/// `application/x-www-form-urlencoded` values: `%XX` escapes and `+` for space.
fn percent_decode(v: &str) -> String {
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The resources the generic list and watch serve from `objects`:
/// (resource, collection path, apiVersion, kind). `cluster check` lists
/// the workloads, HPAs and admission objects across all namespaces.
const LISTED: &[(&str, &str, &str, &str)] = &[
    ("pods", "api/v1/pods", "v1", "Pod"),
    ("nodes", "api/v1/nodes", "v1", "Node"),
    (
        "runtimeclasses",
        "apis/node.k8s.io/v1/runtimeclasses",
        "node.k8s.io/v1",
        "RuntimeClass",
    ),
    (
        "deployments",
        "apis/apps/v1/deployments",
        "apps/v1",
        "Deployment",
    ),
    (
        "daemonsets",
        "apis/apps/v1/daemonsets",
        "apps/v1",
        "DaemonSet",
    ),
    (
        "statefulsets",
        "apis/apps/v1/statefulsets",
        "apps/v1",
        "StatefulSet",
    ),
    ("jobs", "apis/batch/v1/jobs", "batch/v1", "Job"),
    ("cronjobs", "apis/batch/v1/cronjobs", "batch/v1", "CronJob"),
    (
        "horizontalpodautoscalers",
        "apis/autoscaling/v2/horizontalpodautoscalers",
        "autoscaling/v2",
        "HorizontalPodAutoscaler",
    ),
    (
        "validatingwebhookconfigurations",
        "apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
    ),
    (
        "mutatingwebhookconfigurations",
        "apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        "admissionregistration.k8s.io/v1",
        "MutatingWebhookConfiguration",
    ),
    (
        "validatingadmissionpolicybindings",
        "apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicyBinding",
    ),
    // Served as v1 from Kubernetes 1.36 (shared/notes/kube-apiserver-1.36.md).
    (
        "mutatingadmissionpolicybindings",
        "apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings",
        "admissionregistration.k8s.io/v1",
        "MutatingAdmissionPolicyBinding",
    ),
];

/// The resource of a list/watch path.
fn listed_resource(path: &str) -> Option<&'static str> {
    match path.trim_matches('/') {
        p if p.starts_with("apis/resource.k8s.io/") && p.ends_with("/resourceslices") => {
            Some("resourceslices")
        }
        p if p.starts_with("apis/resource.k8s.io/") && p.ends_with("/devicetaintrules") => {
            Some("devicetaintrules")
        }
        p => LISTED
            .iter()
            .find(|(_, path, ..)| *path == p)
            .map(|(r, ..)| *r),
    }
}

/// The Node authorizer's rules: a node lists and watches only the pods
/// bound to it, and only its own Node (with selectors, as Kubernetes 1.32's
/// AuthorizeNodeWithSelectors requires).
fn list_allowed(who: &Identity, resource: &str, selector: Option<&str>) -> bool {
    match (who, resource) {
        (Identity::Node(me), "pods") => selector == Some(&format!("spec.nodeName={me}")),
        (Identity::Node(me), "nodes") => selector == Some(&format!("metadata.name={me}")),
        (Identity::Node(me), "resourceslices") => selector == Some(&format!("spec.nodeName={me}")),
        _ => true,
    }
}

fn forbidden_list(resource: &str) -> (u16, Value) {
    let message = match resource {
        "nodes" => "a node may only list and watch its own Node",
        "resourceslices" => "a node may only list and watch the ResourceSlices of its own node (fieldSelector spec.nodeName)",
        _ => "a node may only list and watch pods bound to it",
    };
    status(403, "Forbidden", message)
}

/// How long the test server keeps a watch open (kube-apiserver ends one at
/// its `timeoutSeconds`, and clients watch again from the last version seen).
const WATCH_WINDOW: Duration = Duration::from_millis(500);
const WATCH_TICK: Duration = Duration::from_millis(20);

/// `kind`, `apiVersion` of one object of `resource`.
fn kind_of(resource: &str) -> (&'static str, &'static str) {
    match resource {
        "resourceslices" => ("ResourceSlice", "resource.k8s.io/v1"),
        "devicetaintrules" => ("DeviceTaintRule", "resource.k8s.io/v1beta2"),
        r => LISTED
            .iter()
            .find(|(listed, ..)| *listed == r)
            .map(|(_, _, api_version, kind)| (*kind, *api_version))
            .unwrap_or_else(|| panic!("{r} is not a listed resource")),
    }
}

/// The watch events of `resource` after version `since`, up to the current
/// one, as this watch's field selector sees them: an object that starts
/// matching is ADDED, one that stops matching DELETED (as kube-apiserver's
/// watch cache does).
fn events_since(s: &State, resource: &str, selector: Option<&str>, since: u64) -> Vec<String> {
    // `changes` is in resourceVersion order: start at the first one after
    // `since` instead of scanning every change of the run.
    let first = s.changes.partition_point(|(rv, ..)| *rv <= since);
    s.changes[first..]
        .iter()
        .filter(|(_, r, _, _)| *r == resource)
        .filter_map(|(_, _, before, after)| {
            let was = before.as_ref().is_some_and(|b| selects(selector, b));
            let is = after.as_ref().is_some_and(|a| selects(selector, a));
            let (kind, obj) = match (was, is) {
                (false, true) => ("ADDED", after.clone()?),
                (true, true) => ("MODIFIED", after.clone()?),
                (true, false) => {
                    let mut gone = before.clone()?;
                    if let Some(a) = after {
                        gone = a.clone();
                    }
                    ("DELETED", gone)
                }
                (false, false) => return None,
            };
            Some(json!({"type": kind, "object": obj}).to_string())
        })
        .collect()
}

/// A watch: events streamed as they happen for [`WATCH_WINDOW`] (or the
/// request's `timeoutSeconds`, if shorter), then, when the client allowed
/// bookmarks, a BOOKMARK with the current resourceVersion (kube-apiserver
/// sends one shortly before it ends a watch at its timeout, so a watch that
/// saw nothing of its own still resumes from a recent version), then the end.
/// A watch from a compacted version gets one ERROR event, a 410 Status.
fn watch(st: &Arc<Mutex<State>>, uri: &Uri, who: &Identity, resource: &'static str) -> Response {
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
        let mut s = st.lock().unwrap();
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
                    let s = st.lock().unwrap();
                    (events_since(&s, resource, selector.as_deref(), since), s.rv)
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

/// The Status a fault answers every request with, and its Retry-After.
fn fault_status(fault: Option<Fault>) -> Option<((u16, Value), Option<u32>)> {
    match fault? {
        Fault::Down => Some((status(503, "ServiceUnavailable", "apiserver is down"), None)),
        Fault::Error500 => Some((status(500, "InternalError", "injected failure"), None)),
        Fault::TooManyRequests { retry_after_secs } => {
            let (c, mut v) = status(429, "TooManyRequests", "too many requests");
            v["details"] = json!({"retryAfterSeconds": retry_after_secs});
            Some(((c, v), Some(retry_after_secs)))
        }
        Fault::None
        | Fault::Slow(_)
        | Fault::ConflictOnce
        | Fault::TooManyRequestsPlain { .. }
        | Fault::EventsError500 => None,
    }
}

fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
               "reason": reason, "message": message, "code": code}),
    )
}

async fn handle(
    axum::extract::State(st): axum::extract::State<Arc<Mutex<State>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    axum::Extension(peer): axum::Extension<PeerCert>,
    body: Bytes,
) -> Response {
    let fault = st.lock().unwrap().fault;
    if let Some(Fault::Slow(d)) = fault {
        tokio::time::sleep(d).await;
    }
    let metrics_delay = st.lock().unwrap().cluster.metrics_delay;
    if let (Some(d), true) = (
        metrics_delay,
        uri.path().starts_with("/apis/metrics.k8s.io/"),
    ) {
        tokio::time::sleep(d).await;
    }
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body_json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let faulted = fault_status(fault);
    if let (Some(resource), Some("true" | "1"), None) = (
        listed_resource(uri.path()),
        query_param(&uri, "watch").as_deref(),
        &faulted,
    ) {
        let who = authenticate(&st.lock().unwrap(), &headers, &peer);
        let Some(who) = who else {
            return (StatusCode::UNAUTHORIZED, "Unauthorized").into_response();
        };
        let not_served = device_taints_not_served(&st.lock().unwrap(), uri.path());
        let resp = match not_served {
            Some((code, v)) => (StatusCode::from_u16(code).unwrap(), v.to_string()).into_response(),
            None => watch(&st, &uri, &who, resource),
        };
        // Logged when the stream starts: a watch from version V means every event up to V arrived.
        st.lock().unwrap().record(Logged {
            method: method.to_string(),
            path: uri.path().to_string(),
            query: uri.query().unwrap_or("").to_string(),
            content_type,
            body: Value::Null,
            status: resp.status().as_u16(),
            at: std::time::SystemTime::now(),
        });
        return resp;
    }
    if let Some(resp) = write_fault(fault, &method, &uri) {
        st.lock().unwrap().record(Logged {
            method: method.to_string(),
            path: uri.path().to_string(),
            query: uri.query().unwrap_or("").to_string(),
            content_type,
            body: body_json,
            status: resp.status().as_u16(),
            at: std::time::SystemTime::now(),
        });
        return resp;
    }
    let mut retry_after = None;
    let (code, out) = match faulted {
        Some((answer, after)) => {
            retry_after = after;
            answer
        }
        None => route(
            &mut st.lock().unwrap(),
            &method,
            &uri,
            &headers,
            &peer,
            &content_type,
            &body_json,
        ),
    };
    {
        let mut s = st.lock().unwrap();
        s.record(Logged {
            method: method.to_string(),
            path: uri.path().to_string(),
            query: uri.query().unwrap_or("").to_string(),
            content_type,
            body: body_json,
            status: code,
            at: std::time::SystemTime::now(),
        });
    }
    let mut resp = (
        StatusCode::from_u16(code).unwrap(),
        [("content-type", "application/json")],
        out.to_string(),
    )
        .into_response();
    if let Some(secs) = retry_after {
        resp.headers_mut()
            .insert("retry-after", secs.to_string().parse().unwrap());
    }
    resp
}

fn route(
    s: &mut State,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    peer: &PeerCert,
    content_type: &str,
    body: &Value,
) -> (u16, Value) {
    let Some(who) = authenticate(s, headers, peer) else {
        return status(401, "Unauthorized", "Unauthorized");
    };
    let parts: Vec<&str> = uri.path().trim_matches('/').split('/').collect();
    if let Some(answer) = identity_route(&who, method, &parts) {
        return answer;
    }
    if let Some(answer) = cluster_check_route(s, method, uri, &parts) {
        return answer;
    }
    if let Some(answer) = gate_route(s, &who, method, uri, &parts, content_type, body) {
        return answer;
    }
    if let Some(answer) = device_taint_route(s, &who, method, &parts, body) {
        return answer;
    }
    if let Some(answer) = dra_route(s, &who, method, &parts) {
        return answer;
    }
    // Readable by every authenticated user (system:public-info-viewer); the
    // agent's watches ask it while they wait for the API server to come back.
    if let (&Method::GET, ["readyz"]) = (method, parts.as_slice()) {
        return (200, json!("ok"));
    }
    let strategic = content_type == "application/strategic-merge-patch+json";
    if let (true, Some(resource)) = (method == Method::GET, listed_resource(uri.path())) {
        let selector = query_param(uri, "fieldSelector");
        if !list_allowed(&who, resource, selector.as_deref()) {
            return forbidden_list(resource);
        }
        // A page is cut from the snapshot its list started at (the continue
        // token carries that version and the last key sent), as etcd serves
        // it; a token from before a compaction is 410 Gone.
        let limit: Option<usize> = query_param(uri, "limit")
            .and_then(|l| l.parse().ok())
            .filter(|l| *l > 0);
        let (version, after) = match query_param(uri, "continue").filter(|c| !c.is_empty()) {
            None => (s.rv, None),
            Some(token) => match token
                .split_once(':')
                .and_then(|(v, k)| Some((v.parse::<u64>().ok()?, k.to_string())))
            {
                Some(cut) => (cut.0, Some(cut.1)),
                None => return status(400, "BadRequest", "invalid continue token"),
            },
        };
        if version < s.compacted {
            s.gone += 1;
            return status(
                410,
                "Expired",
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
            );
        }
        let mut matching = s
            .snapshot(resource, version)
            .into_iter()
            .filter(|(key, _)| after.as_ref().is_none_or(|a| key > a))
            .filter(|(_, o)| selects(selector.as_deref(), o));
        let mut items = Vec::new();
        let mut last = None;
        while limit.is_none_or(|l| items.len() < l) {
            let Some((key, o)) = matching.next() else {
                break;
            };
            items.push(o);
            last = Some(key);
        }
        let rest = matching.count();
        let (kind, api_version) = kind_of(resource);
        let kind = format!("{kind}List");
        let mut metadata = json!({"resourceVersion": version.to_string()});
        if let (true, Some(last)) = (rest > 0, last) {
            metadata["continue"] = json!(format!("{version}:{last}"));
            // Counted only without a selector (the API server cannot know it cheaply with one).
            if selector.is_none() {
                metadata["remainingItemCount"] = json!(rest);
            }
        }
        return (
            200,
            json!({"apiVersion": api_version, "kind": kind, "metadata": metadata, "items": items}),
        );
    }
    match (method.as_str(), parts.as_slice()) {
        ("GET", ["api", "v1", "namespaces", ns, "pods", name]) => {
            match s.objects.get(&("pods", format!("{ns}/{name}"))) {
                // The Node authorizer: a node reads only the pods bound to it.
                Some(p) if matches!(&who, Identity::Node(me) if p["spec"]["nodeName"].as_str() != Some(me.as_str())) => {
                    status(
                        403,
                        "Forbidden",
                        &format!("pods \"{name}\" is forbidden: no relationship found between the node and this object"),
                    )
                }
                Some(p) => (200, p.clone()),
                None => status(404, "NotFound", &format!("pods \"{name}\" not found")),
            }
        }
        ("GET", ["api", "v1", "nodes", name]) => match s.nodes.get(*name) {
            Some(n) => (200, n.clone()),
            None => status(404, "NotFound", &format!("nodes \"{name}\" not found")),
        },
        ("GET", ["api", "v1", "nodes", _, "status"]) if matches!(who, Identity::Node(_)) => {
            // What the Node authorizer says: nodes may patch, not get, their status.
            status(
                403,
                "Forbidden",
                "nodes/status \"get\" is forbidden for the node identity",
            )
        }
        ("PATCH", ["api", "v1", "nodes", name, rest @ ..]) => {
            if let Identity::Node(me) = &who {
                if me != name {
                    return status(
                        403,
                        "Forbidden",
                        &format!("node \"{me}\" is not allowed to modify node \"{name}\""),
                    );
                }
            }
            if !strategic {
                return status(415, "UnsupportedMediaType", "strategic merge only here");
            }
            let Some(node) = s.nodes.get(*name).cloned() else {
                return status(404, "NotFound", &format!("nodes \"{name}\" not found"));
            };
            if let Some(rv) = body["metadata"]["resourceVersion"].as_str() {
                if node["metadata"]["resourceVersion"] != rv {
                    return status(409, "Conflict", "the object has been modified");
                }
            }
            if s.fault == Some(Fault::ConflictOnce) {
                s.fault = None;
                return status(409, "Conflict", "the object has been modified");
            }
            match rest {
                ["status"] => {
                    let mut node = node;
                    merge_status(&mut node, body);
                    (200, s.set_node(name, node))
                }
                [] => {
                    let is_node = matches!(who, Identity::Node(_));
                    if is_node && body["spec"].get("taints").is_some() {
                        return status(403, "Forbidden", "node is not allowed to modify taints");
                    }
                    let before = node["metadata"]["labels"].clone();
                    let mut node = node;
                    merge_json(&mut node, body);
                    let forbidden = modified_labels(&before, &node["metadata"]["labels"])
                        .into_iter()
                        .filter(|k| forbidden_node_label(k))
                        .collect::<Vec<_>>();
                    if is_node && !forbidden.is_empty() {
                        return status(
                            403,
                            "Forbidden",
                            &format!("is not allowed to modify labels: {}", forbidden.join(", ")),
                        );
                    }
                    (200, s.set_node(name, node))
                }
                _ => status(404, "NotFound", "no such subresource"),
            }
        }
        ("POST", ["api", "v1", "namespaces", ns, "events"]) => {
            let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
            if let Some(refused) = namespace_lifecycle(s, ns, &name) {
                return refused;
            }
            let key = (ns.to_string(), name.clone());
            if s.events.contains_key(&key) {
                return status(
                    409,
                    "AlreadyExists",
                    &format!("events \"{name}\" already exists"),
                );
            }
            if let Identity::Node(me) = &who {
                if body["involvedObject"]["kind"] == "Node"
                    && body["involvedObject"]["name"] != me.as_str()
                {
                    return status(403, "Forbidden", "events about other nodes");
                }
            }
            let mut ev = body.clone();
            ev["metadata"]["resourceVersion"] = json!(s.next_rv());
            s.events.insert(key, ev.clone());
            (201, ev)
        }
        ("PATCH", ["api", "v1", "namespaces", ns, "events", name]) => {
            if !strategic {
                return status(415, "UnsupportedMediaType", "strategic merge only here");
            }
            let rv = s.next_rv();
            match s.events.get_mut(&(ns.to_string(), name.to_string())) {
                Some(ev) => {
                    merge_json(ev, body);
                    ev["metadata"]["resourceVersion"] = json!(rv);
                    (200, ev.clone())
                }
                None => status(404, "NotFound", &format!("events \"{name}\" not found")),
            }
        }
        (_, ["apis", "events.k8s.io", ..]) if matches!(who, Identity::Node(_)) => {
            status(403, "Forbidden", "events.k8s.io is forbidden for nodes")
        }
        _ => status(404, "NotFound", "not served by the test API server"),
    }
}

/// Strategic merge of a status patch: `conditions` merge by `type`,
/// `$patch: delete` removes one; other fields merge as maps.
/// Label keys whose value differs between two `metadata.labels` (added,
/// changed or removed): NodeRestriction's `getModifiedLabels`.
fn modified_labels(before: &Value, after: &Value) -> Vec<String> {
    let empty = serde_json::Map::new();
    let a = before.as_object().unwrap_or(&empty);
    let b = after.as_object().unwrap_or(&empty);
    let mut keys: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// What kube-apiserver's NodeRestriction admission forbids a node to change
/// on its own Node (plugin/pkg/admission/noderestriction/admission.go,
/// `getForbiddenLabels`): anything under `node-restriction.kubernetes.io`,
/// and labels under `kubernetes.io` / `k8s.io` (or their subdomains) that
/// are not the kubelet's own (pkg/kubelet/apis `IsKubeletLabel`: the
/// well-known labels and the `kubelet.kubernetes.io` and
/// `node.kubernetes.io` namespaces). Any other prefix, `nodeproof.dev/` and
/// `runtimeclass.nodeproof.dev/` included, is the node's to set.
fn forbidden_node_label(key: &str) -> bool {
    const KUBELET_LABELS: [&str; 11] = [
        "kubernetes.io/hostname",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
    ];
    let namespace = key.split_once('/').map_or("", |(ns, _)| ns);
    let under = |domain: &str| namespace == domain || namespace.ends_with(&format!(".{domain}"));
    if under("node-restriction.kubernetes.io") {
        return true;
    }
    let kubelet_label = KUBELET_LABELS.contains(&key)
        || under("kubelet.kubernetes.io")
        || under("node.kubernetes.io");
    (under("kubernetes.io") || under("k8s.io")) && !kubelet_label
}

fn merge_status(node: &mut Value, patch: &Value) {
    let Some(status_patch) = patch.get("status").and_then(Value::as_object) else {
        return;
    };
    for (key, value) in status_patch {
        if key == "conditions" {
            let list = node["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            node["status"]["conditions"] = json!(merge_by_type(list, value));
        } else {
            merge_json(&mut node["status"][key], value);
        }
    }
}

fn merge_by_type(mut list: Vec<Value>, patch: &Value) -> Vec<Value> {
    for item in patch.as_array().into_iter().flatten() {
        let kind = &item["type"];
        let pos = list.iter().position(|c| &c["type"] == kind);
        if item.get("$patch").and_then(Value::as_str) == Some("delete") {
            if let Some(i) = pos {
                list.remove(i);
            }
            continue;
        }
        match pos {
            Some(i) => merge_json(&mut list[i], item),
            None => list.push(item.clone()),
        }
    }
    list
}

/// JSON merge of maps (RFC 7386 style; null deletes).
fn merge_json(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_json(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

// ---------------------------------------------------------------------------
// Write failures (branch `writes`): NamespaceLifecycle, throttling filters'
// plain-text 429, failures of Event writes only.
// ---------------------------------------------------------------------------

/// A namespace's phase as NamespaceLifecycle sees it. Namespaces never set
/// are Active (the server serves any namespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamespacePhase {
    Active,
    /// Being deleted: no new objects (403 with cause NamespaceTerminating).
    Terminating,
    /// Deleted: 404 for the namespace.
    Gone,
}

impl TestApiServer {
    /// Sets a namespace's phase; `Gone` also removes its Events.
    pub fn set_namespace(&self, ns: &str, phase: NamespacePhase) {
        let mut st = self.state.lock().unwrap();
        st.namespaces.insert(ns.into(), phase);
        if phase == NamespacePhase::Gone {
            st.events.retain(|(n, _), _| n != ns);
        }
    }
}

/// The NamespaceLifecycle admission plugin on a create: refused in a
/// terminating namespace (403, its message and the `NamespaceTerminating`
/// cause, as plugin/namespace/lifecycle/admission.go answers) or a missing
/// one (404 naming the namespace).
fn namespace_lifecycle(s: &State, ns: &str, name: &str) -> Option<(u16, Value)> {
    match s.namespaces.get(ns).copied()? {
        NamespacePhase::Active => None,
        NamespacePhase::Terminating => {
            let (code, mut v) = status(
                403,
                "Forbidden",
                &format!("events \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated"),
            );
            v["details"] = json!({"name": name, "kind": "events", "causes": [{
                "reason": "NamespaceTerminating",
                "message": format!("namespace {ns} is being terminated"),
                "field": "metadata.namespace",
            }]});
            Some((code, v))
        }
        NamespacePhase::Gone => {
            let (code, mut v) = status(404, "NotFound", &format!("namespaces \"{ns}\" not found"));
            v["details"] = json!({"name": ns, "kind": "namespaces"});
            Some((code, v))
        }
    }
}

/// Faults answered before routing: the max-in-flight / APF filters' 429
/// (plain text, `Retry-After`, no Status body, exactly as
/// staging/src/k8s.io/apiserver/pkg/server/filters answer it), and a 500 for
/// Event writes only.
fn write_fault(fault: Option<Fault>, method: &Method, uri: &Uri) -> Option<Response> {
    match fault? {
        Fault::TooManyRequestsPlain { retry_after_secs } => {
            let mut resp = (
                StatusCode::TOO_MANY_REQUESTS,
                [("content-type", "text/plain; charset=utf-8")],
                "Too many requests, please try again later.\n",
            )
                .into_response();
            resp.headers_mut()
                .insert("retry-after", retry_after_secs.to_string().parse().unwrap());
            Some(resp)
        }
        Fault::EventsError500 if method != Method::GET && uri.path().contains("/events") => {
            let (c, v) = status(500, "InternalError", "injected failure of an event write");
            Some(
                (
                    StatusCode::from_u16(c).unwrap(),
                    [("content-type", "application/json")],
                    v.to_string(),
                )
                    .into_response(),
            )
        }
        _ => None,
    }
}

// Client certificates, as kube-apiserver's x509 authenticator: the TLS
// handshake only asks for one (Go's tls.RequestClientCert); each request is
// then authenticated from it: signed by the client CA, within its validity
// (an expired certificate is 401 Unauthorized, not a failed handshake), CN
// `system:node:<name>` the node identity.

/// The client certificate a connection presented (DER), if any.
#[derive(Debug, Clone)]
pub struct PeerCert(Option<Vec<u8>>);

impl PeerCert {
    fn of(conn: &rustls::ServerConnection) -> Self {
        PeerCert(
            conn.peer_certificates()
                .and_then(|c| c.first())
                .map(|c| c.as_ref().to_vec()),
        )
    }
}

/// Bearer token first, then the client certificate.
fn authenticate(s: &State, headers: &HeaderMap, peer: &PeerCert) -> Option<Identity> {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if let Some(t) = token {
        return s.tokens.get(t).cloned();
    }
    cert_identity(&s.client_ca_der, peer.0.as_deref()?)
}

fn cert_identity(ca_der: &[u8], der: &[u8]) -> Option<Identity> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, ca) = X509Certificate::from_der(ca_der).ok()?;
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    cert.verify_signature(Some(ca.public_key())).ok()?;
    if !cert.validity().is_valid() {
        return None;
    }
    let cn = cert.subject().iter_common_name().next()?.as_str().ok()?;
    Some(Identity::Node(cn.strip_prefix("system:node:")?.to_string()))
}

/// Asks every client for a certificate and accepts whatever it presents:
/// whether it authenticates anyone is decided per request (above).
#[derive(Debug)]
struct RequestClientCert;

impl rustls::server::danger::ClientCertVerifier for RequestClientCert {
    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &rustls::crypto::ring::default_provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &rustls::crypto::ring::default_provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The client CA: its issuer (to sign with) and its certificate (DER).
fn client_ca() -> (rcgen::Issuer<'static, rcgen::KeyPair>, Vec<u8>) {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "nodeproof test client CA");
    let key = rcgen::KeyPair::generate().expect("CA key");
    let der = params
        .self_signed(&key)
        .expect("CA certificate")
        .der()
        .to_vec();
    (rcgen::Issuer::new(params, key), der)
}

impl TestApiServer {
    /// A client certificate and key (PEM) for `system:node:<node>` in group
    /// `system:nodes`, as the kubelet's, valid from a minute ago for `valid_for`.
    pub fn node_client_cert(&self, node: &str, valid_for: Duration) -> (String, String) {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("system:node:{node}"));
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - Duration::from_secs(60);
        params.not_after = now + valid_for;
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params
            .signed_by(&key, &self.client_ca)
            .expect("certificate");
        (cert.pem(), key.serialize_pem())
    }

    /// A token no longer authenticates anyone (a rotated-out ServiceAccount token).
    pub fn revoke_token(&self, token: &str) {
        self.state.lock().unwrap().tokens.remove(token);
    }

    /// A kubeconfig whose user reads its bearer token from `token_file`.
    pub fn token_file_kubeconfig(&self, dir: &Path, token_file: &Path) -> PathBuf {
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, &self.ca_pem).unwrap();
        let path = dir.join("token-file.kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: https://{addr}\n    certificate-authority: {ca}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: u\ncurrent-context: test\nusers:\n- name: u\n  user:\n    tokenFile: {token}\n",
                addr = self.addr,
                ca = ca.display(),
                token = token_file.display(),
            ),
        )
        .unwrap();
        path
    }

    /// A kubeconfig authenticating with a client certificate and key file,
    /// as kubeadm's kubelet.conf does.
    pub fn cert_kubeconfig(&self, dir: &Path, cert: &Path, key: &Path) -> PathBuf {
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, &self.ca_pem).unwrap();
        let path = dir.join("kubelet.conf");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: https://{addr}\n    certificate-authority: {ca}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: u\ncurrent-context: test\nusers:\n- name: u\n  user:\n    client-certificate: {cert}\n    client-key: {key}\n",
                addr = self.addr,
                ca = ca.display(),
                cert = cert.display(),
                key = key.display(),
            ),
        )
        .unwrap();
        path
    }
}

// Node deletion and registration again (the kubelet re-registers a deleted
// Node with a new UID and only its own status), and another client
// removing conditions; watchers see DELETED, ADDED and MODIFIED.
impl TestApiServer {
    pub fn delete_node(&self, name: &str) {
        let mut st = self.state.lock().unwrap();
        st.next_rv();
        if let Some(before) = st.nodes.remove(name) {
            let rv = st.rv;
            st.changes.push((rv, "nodes", Some(before), None));
        }
    }

    /// Registers `name` again under `uid`, with the kubelet's Ready only.
    pub fn register_node_again(&self, name: &str, uid: &str) {
        self.state.lock().unwrap().set_node(
            name,
            json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "uid": uid, "labels": {}},
                "spec": {},
                "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
            }),
        );
    }

    /// Another client (kubectl edit, a controller) removes a condition.
    pub fn remove_condition(&self, name: &str, kind: &str) {
        let mut st = self.state.lock().unwrap();
        let mut node = st.nodes[name].clone();
        if let Some(list) = node["status"]["conditions"].as_array_mut() {
            list.retain(|c| c["type"] != kind);
        }
        st.set_node(name, node);
    }
}

// ---------------------------------------------------------------------------
// Identity (credentials and identity work): who a credential is, and the
// Node authorizer of Kubernetes 1.32+ on reading other Nodes.
// ---------------------------------------------------------------------------

/// The user name the API server authenticates `who` as.
pub fn user_name(who: &Identity) -> String {
    match who {
        Identity::Node(name) => format!("system:node:{name}"),
        Identity::TaintServiceAccount => {
            "system:serviceaccount:kube-system:nodeproof-taints".into()
        }
        Identity::AgentServiceAccount => "system:serviceaccount:kube-system:nodeproof".into(),
        Identity::ClusterReader => {
            "system:serviceaccount:kube-system:nodeproof-cluster-check".into()
        }
        Identity::GateControllerServiceAccount => {
            "system:serviceaccount:nodeproof:nodeproof-gate-controller".into()
        }
    }
}

/// Answers the requests of this section, before the general routes:
/// - `POST /apis/authentication.k8s.io/v1/selfsubjectreviews` (allowed to
///   every authenticated user by the default `system:basic-user` role);
/// - `GET /api/v1/nodes/<other>` by a node identity: since 1.32 the Node
///   authorizer refuses it with 403 (before, any node could read any Node),
///   with kube-apiserver's RBAC-style message and the authorizer's reason.
fn identity_route(who: &Identity, method: &Method, parts: &[&str]) -> Option<(u16, Value)> {
    match (method.as_str(), parts) {
        ("POST", ["apis", "authentication.k8s.io", "v1", "selfsubjectreviews"]) => {
            let user = user_name(who);
            let groups = match who {
                Identity::Node(_) => json!(["system:nodes", "system:authenticated"]),
                Identity::GateControllerServiceAccount => json!(["system:serviceaccounts", "system:serviceaccounts:nodeproof", "system:authenticated"]),
                _ => json!(["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]),
            };
            Some((
                201,
                json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
                       "metadata": {"creationTimestamp": null},
                       "status": {"userInfo": {"username": user, "groups": groups}}}),
            ))
        }
        ("GET", ["api", "v1", "nodes", name]) => match who {
            Identity::Node(me) if me != name => Some(status(
                403,
                "Forbidden",
                &format!(
                    "nodes \"{name}\" is forbidden: User \"system:node:{me}\" cannot get resource \"nodes\" in API group \"\" at the cluster scope: node '{me}' cannot read '{name}', only its own Node object"
                ),
            )),
            _ => None,
        },
        _ => None,
    }
}

impl TestApiServer {
    /// A kubeconfig for `token` that also carries a client certificate
    /// (`client-certificate-data`, CN `common_name`, O `system:nodes`), as a
    /// kubelet's does; the server authenticates by the token, the agent
    /// reads the certificate to know which Node it is.
    pub fn kubeconfig_with_client_cert(
        &self,
        dir: &Path,
        token: &str,
        common_name: &str,
    ) -> PathBuf {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, common_name);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        use base64::Engine as _;
        let b64 = |s: String| base64::engine::general_purpose::STANDARD.encode(s);
        let plain = self.kubeconfig(dir, token);
        let text = std::fs::read_to_string(&plain).unwrap().replace(
            &format!("    token: {token}\n"),
            &format!(
                "    token: {token}\n    client-certificate-data: {}\n    client-key-data: {}\n",
                b64(cert.pem()),
                b64(key.serialize_pem())
            ),
        );
        let path = dir.join(format!("{token}-cert.kubeconfig"));
        std::fs::write(&path, text).unwrap();
        path
    }
}

// ---------------------------------------------------------------------------
// Cluster check (branch `policy`): the aggregation layer's APIServices
// (`apiregistration.k8s.io/v1`), the Metrics API's NodeMetrics and
// PodMetrics behind them (`metrics.k8s.io/v1beta1`, and `v1` where an
// APIService registers it), and a cluster-wide list of core Events.
// ---------------------------------------------------------------------------

#[derive(Default)]
struct ClusterState {
    /// APIServices by name.
    api_services: BTreeMap<String, Value>,
    /// NodeMetrics by node name, as metrics-server serves them.
    node_metrics: BTreeMap<String, Value>,
    /// PodMetrics by `namespace/name`.
    pod_metrics: BTreeMap<String, Value>,
    /// How long each Metrics API request takes to answer.
    metrics_delay: Option<Duration>,
}

impl TestApiServer {
    /// Registers (or replaces) the Metrics API's `v1beta1` APIService, as
    /// metrics-server does; see [`Self::set_metrics_api_version`].
    pub fn set_metrics_api_service(&self, available: bool, reason: &str, message: &str) {
        self.set_metrics_api_version("v1beta1", available, reason, message);
    }

    /// Registers (or replaces) the APIService `<version>.metrics.k8s.io`
    /// with its `Available` condition, as kube-aggregator's availability
    /// controller sets it (`Passed`, or e.g. `FailedDiscoveryCheck` /
    /// `MissingEndpoints`).
    pub fn set_metrics_api_version(
        &self,
        version: &str,
        available: bool,
        reason: &str,
        message: &str,
    ) {
        let name = format!("{version}.metrics.k8s.io");
        let svc = json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": name},
            "spec": {"group": "metrics.k8s.io", "version": version,
                     "service": {"namespace": "kube-system", "name": "metrics-server", "port": 443},
                     "groupPriorityMinimum": 100, "versionPriority": 100},
            "status": {"conditions": [{"type": "Available",
                "status": if available { "True" } else { "False" },
                "reason": reason, "message": message,
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        });
        let mut st = self.state.lock().unwrap();
        st.cluster.api_services.insert(name, svc);
    }

    /// Unregisters the Metrics API, every version (metrics-server uninstalled).
    pub fn remove_metrics_api_service(&self) {
        self.state
            .lock()
            .unwrap()
            .cluster
            .api_services
            .retain(|name, _| !name.ends_with(".metrics.k8s.io"));
    }

    /// Unregisters one version's APIService.
    pub fn remove_metrics_api_version(&self, version: &str) {
        self.state
            .lock()
            .unwrap()
            .cluster
            .api_services
            .remove(&format!("{version}.metrics.k8s.io"));
    }

    /// Every Metrics API request answers after `delay` (an overloaded
    /// metrics-server).
    pub fn set_metrics_delay(&self, delay: Duration) {
        self.state.lock().unwrap().cluster.metrics_delay = Some(delay);
    }

    /// metrics-server's NodeMetrics of `node`, scraped at `timestamp` (RFC 3339).
    pub fn set_node_metrics(&self, node: &str, timestamp: &str) {
        let m = json!({
            "kind": "NodeMetrics",
            "metadata": {"name": node, "creationTimestamp": timestamp},
            "timestamp": timestamp, "window": "15s",
            "usage": {"cpu": "250m", "memory": "1024Mi"},
        });
        self.state
            .lock()
            .unwrap()
            .cluster
            .node_metrics
            .insert(node.into(), m);
    }

    pub fn remove_node_metrics(&self, node: &str) {
        self.state.lock().unwrap().cluster.node_metrics.remove(node);
    }

    /// metrics-server's PodMetrics of `namespace/pod`, scraped at `timestamp`.
    pub fn set_pod_metrics(&self, namespace: &str, pod: &str, timestamp: &str) {
        let m = json!({
            "kind": "PodMetrics",
            "metadata": {"name": pod, "namespace": namespace, "creationTimestamp": timestamp},
            "timestamp": timestamp, "window": "15s",
            "containers": [{"name": "main", "usage": {"cpu": "100m", "memory": "256Mi"}}],
        });
        self.state
            .lock()
            .unwrap()
            .cluster
            .pod_metrics
            .insert(format!("{namespace}/{pod}"), m);
    }

    pub fn remove_pod_metrics(&self, namespace: &str, pod: &str) {
        self.state
            .lock()
            .unwrap()
            .cluster
            .pod_metrics
            .remove(&format!("{namespace}/{pod}"));
    }

    /// An Event as another component (the gate controller, the scheduler)
    /// recorded it, listed by `GET /api/v1/events`.
    pub fn add_event(&self, event: Value) {
        let mut st = self.state.lock().unwrap();
        let ns = event["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        let name = event["metadata"]["name"].as_str().unwrap_or("").to_string();
        let mut ev = event;
        ev["metadata"]["resourceVersion"] = json!(st.next_rv());
        st.events.insert((ns, name), ev);
    }
}

/// The requests of this section:
/// - `GET /apis/apiregistration.k8s.io/v1/apiservices/<name>`: the object
///   or 404;
/// - `GET /apis/metrics.k8s.io/<version>/{nodes,pods}`: what kube-aggregator
///   answers for a group version it proxies: 404 when no APIService
///   `<version>.metrics.k8s.io` registers it (the path is then nobody's),
///   503 when the APIService is not Available (the proxy has no healthy
///   backend; shared/notes/kube-apiserver-1.36.md), else metrics-server's
///   list in that version (it has no pagination: `limit` is ignored and no
///   `continue` is sent);
/// - `GET /api/v1/events` (all namespaces), with the `involvedObject.kind`
///   and `type` field selectors (comma-separated, all must match, as
///   kube-apiserver's `fields.ParseSelector` reads them; core/v1 Event
///   field selectors are registered in pkg/registry/core/event/strategy.go),
///   paged with `limit`/`continue` in key order.
fn cluster_check_route(
    s: &mut State,
    method: &Method,
    uri: &Uri,
    parts: &[&str],
) -> Option<(u16, Value)> {
    if method != Method::GET {
        return None;
    }
    match parts {
        ["apis", "apiregistration.k8s.io", "v1", "apiservices", name] => {
            Some(match s.cluster.api_services.get(*name) {
                Some(svc) => (200, svc.clone()),
                None => status(
                    404,
                    "NotFound",
                    &format!("apiservices.apiregistration.k8s.io \"{name}\" not found"),
                ),
            })
        }
        ["apis", "metrics.k8s.io", version, resource @ ("nodes" | "pods")] => {
            let Some(svc) = s
                .cluster
                .api_services
                .get(&format!("{version}.metrics.k8s.io"))
            else {
                return Some(status(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                ));
            };
            let available = svc["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Available" && c["status"] == "True");
            if !available {
                return Some(status(503, "ServiceUnavailable", "service unavailable"));
            }
            let (source, kind) = match *resource {
                "nodes" => (&s.cluster.node_metrics, "NodeMetricsList"),
                _ => (&s.cluster.pod_metrics, "PodMetricsList"),
            };
            let api_version = format!("metrics.k8s.io/{version}");
            let items: Vec<Value> = source
                .values()
                .map(|m| {
                    let mut m = m.clone();
                    m["apiVersion"] = json!(api_version);
                    m
                })
                .collect();
            Some((
                200,
                json!({"apiVersion": api_version, "kind": kind, "metadata": {}, "items": items}),
            ))
        }
        ["api", "v1", "events"] => {
            let selector = query_param(uri, "fieldSelector").unwrap_or_default();
            let mut kind = None;
            let mut type_ = None;
            for term in selector.split(',').filter(|t| !t.is_empty()) {
                match term.split_once('=') {
                    Some(("involvedObject.kind", v)) => kind = Some(v.to_string()),
                    Some(("type", v)) => type_ = Some(v.to_string()),
                    _ => {
                        return Some(status(
                            400,
                            "BadRequest",
                            &format!("\"{term}\" is not a known field selector: only \"involvedObject.kind\", \"type\" are served here"),
                        ))
                    }
                }
            }
            let limit: usize = query_param(uri, "limit")
                .and_then(|l| l.parse().ok())
                .filter(|l| *l > 0)
                .unwrap_or(usize::MAX);
            let after = query_param(uri, "continue").filter(|c| !c.is_empty());
            let mut matching = s
                .events
                .iter()
                .map(|((ns, name), ev)| (format!("{ns}/{name}"), ev))
                .filter(|(key, _)| after.as_ref().is_none_or(|a| key > a))
                .filter(|(_, ev)| {
                    kind.as_deref()
                        .is_none_or(|k| ev["involvedObject"]["kind"] == k)
                })
                .filter(|(_, ev)| type_.as_deref().is_none_or(|t| ev["type"] == t));
            let items: Vec<(String, Value)> = matching
                .by_ref()
                .take(limit)
                .map(|(k, ev)| (k, ev.clone()))
                .collect();
            let mut metadata = json!({"resourceVersion": s.rv.to_string()});
            if let (true, Some((last, _))) = (matching.next().is_some(), items.last()) {
                metadata["continue"] = json!(last);
            }
            let items: Vec<Value> = items.into_iter().map(|(_, ev)| ev).collect();
            Some((
                200,
                json!({"apiVersion": "v1", "kind": "EventList", "metadata": metadata, "items": items}),
            ))
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Scheduling gates and leases (branch `gate`): pods' RFC 6902 JSON patch
// (with `test`) under the pod update rules that matter to gates, Leases
// (create, get, update with resourceVersion conflicts, server-side apply
// with field-ownership conflicts, strategic merge), and when each pod
// became schedulable.
// ---------------------------------------------------------------------------

#[derive(Default)]
struct GateState {
    /// Leases by `ns/name`.
    leases: BTreeMap<String, Value>,
    /// Server-side apply's ownership of Lease `spec` fields: (lease, field) → field manager.
    lease_owners: BTreeMap<(String, String), String>,
    /// When each pod (`ns/name`) lost its last scheduling gate.
    schedulable_at: BTreeMap<String, Instant>,
}

impl TestApiServer {
    /// The pod `ns/name` as stored.
    pub fn pod(&self, key: &str) -> Option<Value> {
        self.state
            .lock()
            .unwrap()
            .objects
            .get(&("pods", key.to_string()))
            .cloned()
    }

    /// When the pod's last scheduling gate was removed: from then on the
    /// scheduler considers it (`None`: still gated, or never was).
    pub fn schedulable_at(&self, key: &str) -> Option<Instant> {
        self.state
            .lock()
            .unwrap()
            .gate
            .schedulable_at
            .get(key)
            .copied()
    }

    pub fn lease(&self, ns: &str, name: &str) -> Option<Value> {
        self.state
            .lock()
            .unwrap()
            .gate
            .leases
            .get(&format!("{ns}/{name}"))
            .cloned()
    }
}

/// The pod's `spec.schedulingGates` names.
fn gate_names(pod: &Value) -> Vec<String> {
    pod["spec"]["schedulingGates"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g["name"].as_str().map(String::from))
        .collect()
}

fn invalid(kind: &str, name: &str, detail: &str) -> (u16, Value) {
    status(
        422,
        "Invalid",
        &format!("{kind} \"{name}\" is invalid: {detail}"),
    )
}

#[allow(clippy::too_many_arguments)]
fn gate_route(
    s: &mut State,
    who: &Identity,
    method: &Method,
    uri: &Uri,
    parts: &[&str],
    content_type: &str,
    body: &Value,
) -> Option<(u16, Value)> {
    match (method.as_str(), parts) {
        ("PATCH", ["api", "v1", "namespaces", ns, "pods", name]) => {
            Some(patch_pod(s, who, ns, name, content_type, body))
        }
        ("PATCH", ["api", "v1", "namespaces", ns, "pods", name, "status"]) => {
            Some(patch_pod_status(s, who, ns, name, content_type, body))
        }
        (_, ["apis", "coordination.k8s.io", "v1", "namespaces", ns, "leases", rest @ ..]) => {
            let manager = query_param(uri, "fieldManager");
            let force = query_param(uri, "force").as_deref() == Some("true");
            Some(lease_request(
                s,
                method.as_str(),
                ns,
                rest,
                content_type,
                body,
                manager,
                force,
            ))
        }
        _ => None,
    }
}

/// A JSON patch of a pod, as kube-apiserver applies one: the RFC 6902 ops
/// on the stored object (a failed `test`, or a path that is not there: 422,
/// as `applyJSPatch` answers), then pod update validation: the spec may not
/// change but for the scheduling gates and, while gated, additions to the
/// placement (`placement_mutation`), and gates may only be removed
/// (`validateSchedulingGates` on update: "only deletion is allowed").
fn patch_pod(
    s: &mut State,
    who: &Identity,
    ns: &str,
    name: &str,
    content_type: &str,
    body: &Value,
) -> (u16, Value) {
    if matches!(who, Identity::Node(_)) {
        return status(
            403,
            "Forbidden",
            "a node may patch only the status of its pods",
        );
    }
    if content_type != "application/json-patch+json" {
        return status(
            415,
            "UnsupportedMediaType",
            "only JSON patch is served for pods here",
        );
    }
    let key = format!("{ns}/{name}");
    let Some(before) = s.objects.get(&("pods", key.clone())).cloned() else {
        return status(404, "NotFound", &format!("pods \"{name}\" not found"));
    };
    let patch: json_patch::Patch = match serde_json::from_value(body.clone()) {
        Ok(p) => p,
        Err(e) => return status(400, "BadRequest", &format!("invalid JSON patch: {e}")),
    };
    let mut after = before.clone();
    if let Err(e) = json_patch::patch(&mut after, &patch) {
        return status(422, "", &e.to_string());
    }
    for field in ["name", "namespace", "uid"] {
        if after["metadata"][field] != before["metadata"][field] {
            return invalid(
                "Pod",
                name,
                &format!("metadata.{field}: Invalid value: field is immutable"),
            );
        }
    }
    // The spec may not change but for the gates and, while gated, a
    // narrowing of the placement (KEP-3838, "Placement" in placement.rs).
    if let Some(refused) = placement_mutation(&before, &after, name) {
        return refused;
    }
    let old_gates = gate_names(&before);
    let new_gates = gate_names(&after);
    if let Some(added) = new_gates.iter().find(|g| !old_gates.contains(g)) {
        return invalid(
            "Pod",
            name,
            &format!("spec.schedulingGates: Forbidden: only deletion is allowed, but found new scheduling gate '{added}'"),
        );
    }
    if after["metadata"]["resourceVersion"] != before["metadata"]["resourceVersion"] {
        return status(409, "Conflict", &format!("Operation cannot be fulfilled on pods \"{name}\": the object has been modified; please apply your changes to the latest version and try again"));
    }
    let rv = s.next_rv();
    after["metadata"]["resourceVersion"] = json!(rv);
    if !old_gates.is_empty() && new_gates.is_empty() {
        s.gate.schedulable_at.insert(key.clone(), Instant::now());
    }
    s.objects.insert(("pods", key), after.clone());
    let rv = s.rv;
    s.changes
        .push((rv, "pods", Some(before), Some(after.clone())));
    (200, after)
}

/// The `spec` fields of a Lease object.
fn spec_fields(lease: &Value) -> Vec<(String, Value)> {
    lease["spec"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn lease_request(
    s: &mut State,
    method: &str,
    ns: &str,
    rest: &[&str],
    content_type: &str,
    body: &Value,
    manager: Option<String>,
    force: bool,
) -> (u16, Value) {
    let manager = manager.unwrap_or_else(|| "unknown".into());
    match (method, rest) {
        ("POST", []) => {
            let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
            let key = format!("{ns}/{name}");
            if s.gate.leases.contains_key(&key) {
                return status(
                    409,
                    "AlreadyExists",
                    &format!("leases.coordination.k8s.io \"{name}\" already exists"),
                );
            }
            let mut lease = body.clone();
            lease["metadata"]["namespace"] = json!(ns);
            lease["metadata"]["resourceVersion"] = json!(s.next_rv());
            for (field, _) in spec_fields(&lease) {
                s.gate
                    .lease_owners
                    .insert((key.clone(), field), manager.clone());
            }
            s.gate.leases.insert(key, lease.clone());
            (201, lease)
        }
        ("GET", [name]) => match s.gate.leases.get(&format!("{ns}/{name}")) {
            Some(l) => (200, l.clone()),
            None => status(
                404,
                "NotFound",
                &format!("leases.coordination.k8s.io \"{name}\" not found"),
            ),
        },
        ("PUT", [name]) => {
            let key = format!("{ns}/{name}");
            let Some(current) = s.gate.leases.get(&key).cloned() else {
                return status(
                    404,
                    "NotFound",
                    &format!("leases.coordination.k8s.io \"{name}\" not found"),
                );
            };
            if body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"] {
                return status(409, "Conflict", &format!("Operation cannot be fulfilled on leases.coordination.k8s.io \"{name}\": the object has been modified; please apply your changes to the latest version and try again"));
            }
            let mut lease = body.clone();
            for (field, v) in spec_fields(&lease) {
                if current["spec"][&field] != v {
                    s.gate
                        .lease_owners
                        .insert((key.clone(), field), manager.clone());
                }
            }
            lease["metadata"]["resourceVersion"] = json!(s.next_rv());
            s.gate.leases.insert(key, lease.clone());
            (200, lease)
        }
        ("PATCH", [name]) => {
            let key = format!("{ns}/{name}");
            let apply = content_type == "application/apply-patch+yaml";
            let merge = matches!(
                content_type,
                "application/strategic-merge-patch+json" | "application/merge-patch+json"
            );
            if !apply && !merge {
                return status(
                    415,
                    "UnsupportedMediaType",
                    "apply, strategic or merge patch only here",
                );
            }
            let current = s.gate.leases.get(&key).cloned();
            if merge && current.is_none() {
                return status(
                    404,
                    "NotFound",
                    &format!("leases.coordination.k8s.io \"{name}\" not found"),
                );
            }
            let mut lease = current.clone().unwrap_or_else(|| {
                json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": name, "namespace": ns}, "spec": {}})
            });
            if apply {
                // Server-side apply: a field this manager sets to another
                // value than the live one, while another manager owns it,
                // is a conflict unless forced (fieldmanager's
                // ConflictError: 409, reason Conflict).
                let conflicts: Vec<String> = spec_fields(body)
                    .into_iter()
                    .filter(|(f, v)| {
                        let live = &lease["spec"][f];
                        !live.is_null()
                            && live != v
                            && s.gate
                                .lease_owners
                                .get(&(key.clone(), f.clone()))
                                .is_some_and(|o| *o != manager)
                    })
                    .map(|(f, _)| {
                        let owner = &s.gate.lease_owners[&(key.clone(), f.clone())];
                        format!("conflict with \"{owner}\": .spec.{f}")
                    })
                    .collect();
                if !conflicts.is_empty() && !force {
                    return status(
                        409,
                        "Conflict",
                        &format!(
                            "Apply failed with {} conflict(s): {}",
                            conflicts.len(),
                            conflicts.join(", ")
                        ),
                    );
                }
            }
            for (field, v) in spec_fields(body) {
                if v.is_null() {
                    lease["spec"].as_object_mut().map(|o| o.remove(&field));
                    s.gate.lease_owners.remove(&(key.clone(), field));
                } else {
                    lease["spec"][&field] = v;
                    s.gate
                        .lease_owners
                        .insert((key.clone(), field), manager.clone());
                }
            }
            lease["metadata"]["resourceVersion"] = json!(s.next_rv());
            s.gate.leases.insert(key, lease.clone());
            (if current.is_some() { 200 } else { 201 }, lease)
        }
        _ => status(405, "MethodNotAllowed", "not served for leases here"),
    }
}

// ---------------------------------------------------------------------------
// Dynamic Resource Allocation
//
// `resource.k8s.io`: only the versions set with `serve_dra` are served (none
// by default, as on a cluster without DRA); any other version's path is a
// 404, as kube-apiserver answers for a group version it does not serve.
// ResourceSlices (cluster-scoped) are listed through the generic list path
// (a node only with `fieldSelector=spec.nodeName=<itself>`); ResourceClaims
// are read one by one, and the Node authorizer's graph lets a node get a
// claim only when a pod bound to it references it (by `resourceClaimName`
// in its spec, or in its status for a template's claim).
// ---------------------------------------------------------------------------

impl TestApiServer {
    /// Serve these `resource.k8s.io` versions (objects are stored as put).
    pub fn serve_dra(&self, versions: &[&'static str]) {
        self.state.lock().unwrap().dra_versions = versions.to_vec();
    }
}

fn claim_referenced_by_pod_of(s: &State, node: &str, ns: &str, claim: &str) -> bool {
    s.objects
        .iter()
        .filter(|((r, _), p)| {
            *r == "pods"
                && p["metadata"]["namespace"].as_str() == Some(ns)
                && p["spec"]["nodeName"].as_str() == Some(node)
        })
        .any(|(_, p)| {
            let named = |v: &Value| v["resourceClaimName"].as_str() == Some(claim);
            p["spec"]["resourceClaims"]
                .as_array()
                .is_some_and(|a| a.iter().any(named))
                || p["status"]["resourceClaimStatuses"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(named))
        })
}

fn dra_route(s: &State, who: &Identity, method: &Method, parts: &[&str]) -> Option<(u16, Value)> {
    let ["apis", "resource.k8s.io", version, rest @ ..] = parts else {
        return None;
    };
    if rest.first() == Some(&"devicetaintrules") {
        // Served on their own terms: see "DeviceTaintRules".
        return None;
    }
    if !s.dra_versions.contains(version) {
        return Some(status(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ));
    }
    match (method.as_str(), rest) {
        ("GET", ["namespaces", ns, "resourceclaims", name]) => {
            if let Identity::Node(me) = who {
                if !claim_referenced_by_pod_of(s, me, ns, name) {
                    return Some(status(
                        403,
                        "Forbidden",
                        &format!(
                            "resourceclaims.resource.k8s.io \"{name}\" is forbidden: User \"system:node:{me}\" cannot get resource \"resourceclaims\" in API group \"resource.k8s.io\" in the namespace \"{ns}\": no relationship found between node '{me}' and this object"
                        ),
                    ));
                }
            }
            Some(
                match s.objects.get(&("resourceclaims", format!("{ns}/{name}"))) {
                    Some(c) => (200, c.clone()),
                    None => status(
                        404,
                        "NotFound",
                        &format!("resourceclaims.resource.k8s.io \"{name}\" not found"),
                    ),
                },
            )
        }
        // A node may not list claims: the authorizer has no selector for it.
        ("GET", ["resourceclaims"] | ["namespaces", _, "resourceclaims"])
            if matches!(who, Identity::Node(_)) =>
        {
            Some(status(
                403,
                "Forbidden",
                "resourceclaims.resource.k8s.io is forbidden: a node may not list resourceclaims",
            ))
        }
        ("GET", ["resourceslices"]) => None,
        _ => Some(status(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )),
    }
}

// ---------------------------------------------------------------------------
// A standalone process (agent/examples/apiserver.rs, the fault and soak
// harness of agent/tests/soak.rs): the same server on a fixed address, its
// serving certificate and its objects kept in a directory, so that the
// process can be killed and started again as kube-apiserver is, with its
// storage (etcd) intact.
// ---------------------------------------------------------------------------

/// A serving certificate and its key, PEM.
#[derive(Clone)]
pub struct ServingCert {
    pub cert_pem: String,
    pub key_pem: String,
}

impl ServingCert {
    /// A fresh self-signed certificate for 127.0.0.1.
    pub fn generate() -> ServingCert {
        let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()])
            .expect("self-signed certificate");
        ServingCert {
            cert_pem: certified.cert.pem(),
            key_pem: certified.signing_key.serialize_pem(),
        }
    }

    /// `dir/serving.pem` and `dir/serving.key`, made and kept on first use.
    pub fn kept_in(dir: &Path) -> ServingCert {
        let (c, k) = (dir.join("serving.pem"), dir.join("serving.key"));
        if let (Ok(cert_pem), Ok(key_pem)) =
            (std::fs::read_to_string(&c), std::fs::read_to_string(&k))
        {
            return ServingCert { cert_pem, key_pem };
        }
        let fresh = ServingCert::generate();
        std::fs::write(&c, &fresh.cert_pem).expect("write serving.pem");
        std::fs::write(&k, &fresh.key_pem).expect("write serving.key");
        fresh
    }
}

/// The objects kept across restarts: `etcd.json`.
const OBJECTS_FILE: &str = "etcd.json";
/// Every answered request, one JSON object a line: `requests.jsonl`.
pub const REQUESTS_FILE: &str = "requests.jsonl";

fn persist_request(dir: &Path, l: &Logged) {
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

fn persist_objects(dir: &Path, s: &State) {
    let events: Vec<Value> = s.events.values().cloned().collect();
    let doc = json!({"rv": s.rv, "nodes": s.nodes, "events": events});
    let tmp = dir.join(format!("{OBJECTS_FILE}.tmp"));
    std::fs::write(&tmp, doc.to_string()).expect("write the objects");
    std::fs::rename(&tmp, dir.join(OBJECTS_FILE)).expect("replace the objects");
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
    /// Serves on `listener` with `cert`, its objects kept in `storage`:
    /// those stored by an earlier process are served again. A restarted
    /// kube-apiserver fills its watch cache from etcd at the current
    /// resourceVersion, so a watch from an older one gets 410 Gone and the
    /// client lists again (k8s.io/apiserver's watch cache, "too old
    /// resource version"); `compacted` says the same here.
    pub fn start_stored(
        listener: std::net::TcpListener,
        cert: &ServingCert,
        storage: &Path,
    ) -> Self {
        let mut state = State {
            storage: Some(storage.to_path_buf()),
            ..State::default()
        };
        if let Ok(text) = std::fs::read_to_string(storage.join(OBJECTS_FILE)) {
            let doc: Value = serde_json::from_str(&text).expect("stored objects");
            state.rv = doc["rv"].as_u64().unwrap_or(0);
            for (name, node) in doc["nodes"].as_object().into_iter().flatten() {
                let rv = node["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(state.rv);
                state.nodes.insert(name.clone(), node.clone());
                state.changes.push((rv, "nodes", None, Some(node.clone())));
            }
            for ev in doc["events"].as_array().into_iter().flatten() {
                let key = (
                    ev["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                    ev["metadata"]["name"].as_str().unwrap_or("").to_string(),
                );
                state.events.insert(key, ev.clone());
            }
            state.changes.sort_by_key(|c| c.0);
            state.compacted = state.rv;
            state.stored_rv = state.rv;
        }
        Self::serve(listener, cert, state)
    }

    /// Writes the objects to storage now (those changed outside a request).
    pub fn flush(&self) {
        let mut s = self.state.lock().unwrap();
        if let Some(dir) = s.storage.clone() {
            persist_objects(&dir, &s);
            s.stored_rv = s.rv;
        }
    }

    /// Whether a Node of that name is stored.
    pub fn has_node(&self, name: &str) -> bool {
        self.state.lock().unwrap().nodes.contains_key(name)
    }

    /// The CA a client needs to trust this server (its self-signed certificate).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }
}

mod device_taint_rules;
mod placement;
use device_taint_rules::*;
use placement::*;
