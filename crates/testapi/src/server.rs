//! `TestApiServer`: the server's thread and listener, and the methods tests
//! call (JSON in, JSON out; typed inside).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use serde_json::Value;

use crate::admission::NamespacePhase;
use crate::auth::{Identity, PeerCert};
use crate::faults::Fault;
use crate::kinds::{encode, Object};
use crate::persist::{self, Logged};
use crate::state::State;
use crate::tls::{self, ServingCert};
use crate::{events, nodes, pods, router, scheduler};

pub struct TestApiServer {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    ca_pem: String,
    /// Signs client certificates.
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

    /// Serves on `listener` with `cert`, its objects kept in `storage`:
    /// those stored by an earlier process are served again (see
    /// [`persist::load`]).
    pub fn start_stored(
        listener: std::net::TcpListener,
        cert: &ServingCert,
        storage: &Path,
    ) -> Self {
        let mut state = State {
            storage: Some(storage.to_path_buf()),
            ..State::default()
        };
        if let Some(store) = persist::load(storage) {
            state.stored_rv = store.rv;
            state.store = store;
        }
        Self::serve(listener, cert, state)
    }

    fn serve(std_listener: std::net::TcpListener, cert: &ServingCert, mut state: State) -> Self {
        let ca_pem = cert.cert_pem.clone();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cert.server_config()));
        let (client_ca, client_ca_der) = tls::client_ca();
        state.authn.client_ca_der = client_ca_der;
        let state = Arc::new(Mutex::new(state));
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
                let app = Router::new()
                    .fallback(router::handle)
                    .with_state(st.clone());
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

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap())
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
        self.with(|s| s.store.compacted = s.store.rv);
    }

    /// The latest resourceVersion handed out.
    pub fn resource_version(&self) -> u64 {
        self.with(|s| s.store.rv)
    }

    /// How many 410 Gone answers were given.
    pub fn gone_answers(&self) -> usize {
        self.with(|s| s.store.gone)
    }

    /// TCP connections accepted (refused ones included) since `from`.
    pub fn connections_since(&self, from: Instant) -> Vec<Duration> {
        self.with(|s| {
            s.accepted
                .iter()
                .filter(|t| **t >= from)
                .map(|t| t.duration_since(from))
                .collect()
        })
    }

    /// Create or replace an object of `resource` (a Pod by
    /// `metadata.namespace`/`name`, a RuntimeClass, a workload, a
    /// ResourceSlice...); watchers see ADDED/MODIFIED, or ADDED/DELETED when
    /// it starts/stops matching their field selector (as the real API server
    /// does). Panics when it does not decode as that kind (a test's mistake).
    pub fn put(&self, resource: &'static str, obj: Value) {
        let obj = Object::decode(resource, obj)
            .unwrap_or_else(|e| panic!("a {resource} object that does not decode: {e}"));
        self.with(|s| s.store.write(resource, obj));
    }

    pub fn delete(&self, resource: &'static str, key: &str) {
        // A version is spent even when there was nothing to delete.
        self.with(|s| s.store.remove(resource, key));
    }

    pub fn add_token(&self, token: &str, who: Identity) {
        self.with(|s| s.authn.tokens.insert(token.into(), who));
    }

    /// A token no longer authenticates anyone (a rotated-out ServiceAccount token).
    pub fn revoke_token(&self, token: &str) {
        self.with(|s| s.authn.tokens.remove(token));
    }

    /// Register a Node, with the kubelet's own conditions on it.
    pub fn add_node(&self, name: &str, conditions: Value) {
        let node = nodes::registered(name, &format!("uid-{name}"), conditions);
        self.with(|s| nodes::put(&mut s.store, node));
    }

    /// Someone else's taint (or label, or status) on a Node; its new resourceVersion.
    pub fn merge_node(&self, name: &str, patch: Value) -> u64 {
        self.with(|s| {
            nodes::merge(&mut s.store, name, &patch);
            s.store.rv
        })
    }

    /// The next watch of `resource` gets a 410 Gone ERROR event (its
    /// resourceVersion is too old), as an API server that compacted its history.
    pub fn expire_next_watch(&self, resource: &'static str) {
        self.with(|s| s.store.expire_watch = Some(resource));
    }

    pub fn node(&self, name: &str) -> Value {
        self.with(|s| nodes::get_json(&s.store, name))
            .unwrap_or_else(|| panic!("no Node {name}"))
    }

    /// The Node's condition of `kind`, if any.
    pub fn condition(&self, node: &str, kind: &str) -> Option<Value> {
        self.with(|s| {
            let n = s.store.node(node)?;
            let c = n
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == kind)?;
            Some(encode(c))
        })
    }

    /// Whether a Node of that name is stored.
    pub fn has_node(&self, name: &str) -> bool {
        self.with(|s| s.store.node(name).is_some())
    }

    pub fn delete_node(&self, name: &str) {
        self.with(|s| s.store.remove("nodes", name));
    }

    /// Registers `name` again under `uid`, with the kubelet's Ready only
    /// (the kubelet re-registers a deleted Node with a new UID).
    pub fn register_node_again(&self, name: &str, uid: &str) {
        let conditions =
            serde_json::json!([{"type": "Ready", "status": "True", "reason": "KubeletReady"}]);
        let node = nodes::registered(name, uid, conditions);
        self.with(|s| nodes::put(&mut s.store, node));
    }

    /// Another client (kubectl edit, a controller) removes a condition.
    pub fn remove_condition(&self, name: &str, kind: &str) {
        self.with(|s| nodes::remove_condition(&mut s.store, name, kind));
    }

    pub fn events(&self) -> Vec<Value> {
        self.with(|s| s.store.events.values().map(encode).collect())
    }

    /// An Event as another component (the gate controller, the scheduler)
    /// recorded it, listed by `GET /api/v1/events`.
    pub fn add_event(&self, event: Value) {
        self.with(|s| events::add(&mut s.store, event));
    }

    pub fn set_fault(&self, fault: Fault) {
        self.with(|s| s.fault = Some(fault));
    }

    pub fn clear_fault(&self) {
        self.with(|s| s.fault = None);
    }

    pub fn log(&self) -> Vec<Logged> {
        self.with(|s| s.log.clone())
    }

    pub fn clear_log(&self) {
        self.with(|s| s.log.clear());
    }

    /// Successful requests matching `method` and a path suffix.
    pub fn count_ok(&self, method: &str, path_suffix: &str) -> usize {
        self.with(|s| {
            s.log
                .iter()
                .filter(|l| l.method == method && l.path.ends_with(path_suffix) && l.status < 300)
                .count()
        })
    }

    /// Sets a namespace's phase (NamespaceLifecycle); `Gone` also removes its Events.
    pub fn set_namespace(&self, ns: &str, phase: NamespacePhase) {
        self.with(|s| {
            s.namespaces.insert(ns.into(), phase);
            if phase == NamespacePhase::Gone {
                s.store.events.retain(|(n, _), _| n != ns);
            }
        });
    }

    // -- cluster check --------------------------------------------------

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
        self.with(|s| {
            s.cluster
                .set_metrics_api_version(version, available, reason, message)
        });
    }

    /// Unregisters the Metrics API, every version (metrics-server uninstalled).
    pub fn remove_metrics_api_service(&self) {
        self.with(|s| {
            s.cluster
                .api_services
                .retain(|name, _| !name.ends_with(".metrics.k8s.io"))
        });
    }

    /// Unregisters one version's APIService.
    pub fn remove_metrics_api_version(&self, version: &str) {
        self.with(|s| {
            s.cluster
                .api_services
                .remove(&format!("{version}.metrics.k8s.io"))
        });
    }

    /// Every Metrics API request answers after `delay` (an overloaded
    /// metrics-server).
    pub fn set_metrics_delay(&self, delay: Duration) {
        self.with(|s| s.cluster.metrics_delay = Some(delay));
    }

    /// metrics-server's NodeMetrics of `node`, scraped at `timestamp` (RFC 3339).
    pub fn set_node_metrics(&self, node: &str, timestamp: &str) {
        self.with(|s| s.cluster.set_node_metrics(node, timestamp));
    }

    pub fn remove_node_metrics(&self, node: &str) {
        self.with(|s| s.cluster.node_metrics.remove(node));
    }

    /// metrics-server's PodMetrics of `namespace/pod`, scraped at `timestamp`.
    pub fn set_pod_metrics(&self, namespace: &str, pod: &str, timestamp: &str) {
        self.with(|s| s.cluster.set_pod_metrics(namespace, pod, timestamp));
    }

    pub fn remove_pod_metrics(&self, namespace: &str, pod: &str) {
        self.with(|s| s.cluster.pod_metrics.remove(&format!("{namespace}/{pod}")));
    }

    // -- pods, gates and leases -----------------------------------------

    /// The pod `ns/name` as stored.
    pub fn pod(&self, key: &str) -> Option<Value> {
        self.with(|s| s.store.pod(key).map(encode))
    }

    /// When the pod's last scheduling gate was removed: from then on the
    /// scheduler considers it (`None`: still gated, or never was).
    pub fn schedulable_at(&self, key: &str) -> Option<Instant> {
        self.with(|s| s.pods.schedulable_at.get(key).copied())
    }

    pub fn lease(&self, ns: &str, name: &str) -> Option<Value> {
        self.with(|s| s.leases.leases.get(&format!("{ns}/{name}")).map(encode))
    }

    /// Creates a pod as kube-apiserver's admission leaves it (see [`pods::create`]).
    pub fn create_pod(&self, pod: Value) {
        self.with(|s| pods::create(&mut s.store, pod));
    }

    // -- the scheduler ----------------------------------------------------

    /// Starts the adversarial scheduler (see [`scheduler`]): every 5 ms it
    /// binds the schedulable pods; heartbeats older than `stale_after` rank
    /// a node as stale. It stops with the server.
    pub fn start_scheduler(&self, stale_after: Duration) {
        self.with(|s| s.scheduler.stale_after = stale_after);
        let weak = Arc::downgrade(&self.state);
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(5));
            let Some(st) = weak.upgrade() else {
                return;
            };
            let mut s = st.lock().unwrap();
            let s = &mut *s;
            scheduler::schedule_pending(&mut s.store, &mut s.scheduler);
        });
    }

    /// Holds (or lets go) every binding.
    pub fn pause_scheduler(&self, paused: bool) {
        self.with(|s| s.scheduler.paused = paused);
    }

    /// The node the scheduler bound `ns/name` to, and when.
    pub fn bound(&self, key: &str) -> Option<(String, Instant)> {
        self.with(|s| s.scheduler.bound.get(key).cloned())
    }

    /// Every binding so far: pod → node.
    pub fn bindings(&self) -> BTreeMap<String, String> {
        self.with(|s| {
            s.scheduler
                .bound
                .iter()
                .map(|(k, (n, _))| (k.clone(), n.clone()))
                .collect()
        })
    }

    // -- DRA ----------------------------------------------------------------

    /// Serve these `resource.k8s.io` versions (objects are stored as put).
    pub fn serve_dra(&self, versions: &[&'static str]) {
        self.with(|s| s.dra.versions = versions.to_vec());
    }

    /// Serve DeviceTaintRules in these `resource.k8s.io` versions (e.g. `&["v1beta2"]`).
    pub fn serve_device_taint_rules(&self, versions: &[&'static str]) {
        self.with(|s| s.dra.device_taint_versions = versions.to_vec());
    }

    /// The DeviceTaintRules stored, by name.
    pub fn device_taint_rules(&self) -> Vec<Value> {
        self.with(|s| {
            s.store
                .all("devicetaintrules")
                .map(|(_, o)| o.to_json())
                .collect()
        })
    }

    // -- storage ----------------------------------------------------------

    /// Writes the objects to storage now (those changed outside a request).
    pub fn flush(&self) {
        self.with(|s| {
            if let Some(dir) = s.storage.clone() {
                persist::persist_objects(&dir, &s.store);
                s.stored_rv = s.store.rv;
            }
        });
    }

    // -- credentials and kubeconfigs -------------------------------------

    /// The CA a client needs to trust this server (its self-signed certificate).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A client certificate and key (PEM) for `system:node:<node>` in group
    /// `system:nodes`, as the kubelet's, valid from a minute ago for `valid_for`.
    pub fn node_client_cert(&self, node: &str, valid_for: Duration) -> (String, String) {
        tls::node_client_cert(&self.client_ca, node, valid_for)
    }

    fn write_kubeconfig(&self, dir: &Path, file: &str, user: &str) -> PathBuf {
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, &self.ca_pem).unwrap();
        let path = dir.join(file);
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: https://{addr}\n    certificate-authority: {ca}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: u\ncurrent-context: test\nusers:\n- name: u\n  user:\n{user}",
                addr = self.addr,
                ca = ca.display()
            ),
        )
        .unwrap();
        path
    }

    /// A kubeconfig for `token` (the CA as a file, as kubeadm's are).
    pub fn kubeconfig(&self, dir: &Path, token: &str) -> PathBuf {
        self.write_kubeconfig(
            dir,
            &format!("{token}.kubeconfig"),
            &format!("    token: {token}\n"),
        )
    }

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

    /// A kubeconfig whose user reads its bearer token from `token_file`.
    pub fn token_file_kubeconfig(&self, dir: &Path, token_file: &Path) -> PathBuf {
        self.write_kubeconfig(
            dir,
            "token-file.kubeconfig",
            &format!("    tokenFile: {}\n", token_file.display()),
        )
    }

    /// A kubeconfig authenticating with a client certificate and key file,
    /// as kubeadm's kubelet.conf does.
    pub fn cert_kubeconfig(&self, dir: &Path, cert: &Path, key: &Path) -> PathBuf {
        self.write_kubeconfig(
            dir,
            "kubelet.conf",
            &format!(
                "    client-certificate: {}\n    client-key: {}\n",
                cert.display(),
                key.display()
            ),
        )
    }

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
        let (cert, key) = tls::self_signed_client_cert(common_name);
        use base64::Engine as _;
        let b64 = |s: String| base64::engine::general_purpose::STANDARD.encode(s);
        let plain = self.kubeconfig(dir, token);
        let text = std::fs::read_to_string(&plain).unwrap().replace(
            &format!("    token: {token}\n"),
            &format!(
                "    token: {token}\n    client-certificate-data: {}\n    client-key-data: {}\n",
                b64(cert),
                b64(key)
            ),
        );
        let path = dir.join(format!("{token}-cert.kubeconfig"));
        std::fs::write(&path, text).unwrap();
        path
    }
}
