//! The kube-rs edge of reporting: `KubeReporter` (the core's `Reporter`
//! on a kube client, kube-rs errors mapped to `ReportError`), the clients
//! every part of nodeproof talks through (credential files followed,
//! successes heard), and kube-rs errors as sentences. The trait, and the
//! log implementation used without credentials, are
//! `nodeproof_report::reporter` and `nodeproof_report::log`.
//!
//! Request shapes are chosen for a node identity under the Node authorizer:
//! it may GET its Node, PATCH (not GET) `nodes/<name>/status`, and create and
//! patch core/v1 Events (events.k8s.io/v1 is refused to nodes).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Event, Node};
use kube::api::{Api, Patch, PatchParams, PostParams};

use nodeproof_findings::{ConditionStatus, ConditionType};
use nodeproof_report::conditions::{NodeCondition, StatusUpdate};
use nodeproof_report::credentials::Source;
use nodeproof_report::events::EventWrite;
use nodeproof_report::marks::{self, Taint};
use nodeproof_report::reach::{Outcome, Reach, RequestKind};
use nodeproof_report::reporter::{NodeState, Refusal, ReportError, Reporter, FIELD_MANAGER};

/// The kube-rs reporter.
pub struct KubeReporter {
    client: kube::Client,
    /// A separate credential for taints (None: taints unavailable).
    taint_client: Option<kube::Client>,
    node: String,
    timeout: Duration,
}

impl KubeReporter {
    pub fn new(client: kube::Client, node: &str) -> Self {
        KubeReporter {
            client,
            taint_client: None,
            node: node.to_string(),
            timeout: Duration::from_secs(10),
        }
    }

    /// Taint with this client (a ServiceAccount allowed to patch nodes).
    pub fn with_taint_client(mut self, client: kube::Client) -> Self {
        self.taint_client = Some(client);
        self
    }

    /// Bound each request, so a slow API server delays reporting, not the agent.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    async fn bounded<T>(
        &self,
        op: &'static str,
        fut: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, ReportError> {
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(r) => r.map_err(|e| report_error(op, &self.node, e)),
            Err(_) => Err(ReportError::Timeout {
                op,
                node: self.node.clone(),
                after: self.timeout,
            }),
        }
    }

    fn params() -> PatchParams {
        PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        }
    }
}

impl Reporter for KubeReporter {
    fn node(&self) -> &str {
        &self.node
    }

    async fn read_node(&self) -> Result<NodeState, ReportError> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let node = match self.bounded("GET node", nodes.get(&self.node)).await {
            Ok(node) => node,
            Err(ReportError::Api { code: 404, .. }) => {
                return Err(ReportError::NodeNotFound {
                    node: self.node.clone(),
                })
            }
            // Identity (identity.rs): a 403 says whose credential this is.
            Err(e @ ReportError::Forbidden { .. }) => {
                return Err(unreadable_node(&self.client, &self.node, e).await)
            }
            Err(e) => return Err(e),
        };
        Ok(node_state(&node))
    }

    async fn patch_status(&self, update: &StatusUpdate) -> Result<(), ReportError> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let body = update.patch_body();
        self.bounded(
            "PATCH node status",
            nodes.patch_status(&self.node, &Self::params(), &Patch::Strategic(body)),
        )
        .await?;
        Ok(())
    }

    async fn write_event(&self, write: &EventWrite) -> Result<(), ReportError> {
        let events: Api<Event> =
            Api::namespaced(self.client.clone(), write.key().object.event_namespace());
        let body = write.body(&self.node);
        match write {
            EventWrite::Create { .. } => {
                let event: Event =
                    serde_json::from_value(body).map_err(|source| ReportError::Encode {
                        op: "POST event",
                        node: self.node.clone(),
                        what: "event",
                        source,
                    })?;
                let pp = PostParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PostParams::default()
                };
                self.bounded("POST event", events.create(&pp, &event))
                    .await
                    .map_err(|e| match e {
                        // Not the namespace (read from the Status above): an
                        // authorizer's or admission plugin's no, or a path that
                        // is not there. Either way, this Event will not land.
                        ReportError::Forbidden { op, node, message } => ReportError::Refused {
                            op,
                            node,
                            refusal: Refusal::Forbidden,
                            message,
                        },
                        ReportError::Api {
                            code: 404,
                            op,
                            node,
                            message,
                        } => ReportError::Refused {
                            op,
                            node,
                            refusal: Refusal::ObjectGone,
                            message,
                        },
                        e => e,
                    })?;
            }
            EventWrite::Update { name, .. } => {
                self.bounded(
                    "PATCH event",
                    events.patch(name, &Self::params(), &Patch::Strategic(body)),
                )
                .await
                .map_err(|e| match e {
                    ReportError::Api { code: 404, op, .. } => ReportError::EventGone {
                        op,
                        node: self.node.clone(),
                        name: name.clone(),
                    },
                    ReportError::Forbidden { op, node, message } => ReportError::Refused {
                        op,
                        node,
                        refusal: Refusal::Forbidden,
                        message,
                    },
                    e => e,
                })?;
            }
        }
        Ok(())
    }

    async fn patch_labels(&self, body: &serde_json::Value) -> Result<(), ReportError> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        self.bounded(
            "PATCH node labels",
            nodes.patch(&self.node, &Self::params(), &Patch::Strategic(body)),
        )
        .await?;
        Ok(())
    }

    async fn set_taints(&self, ours: &[Taint]) -> Result<(), ReportError> {
        let Some(client) = &self.taint_client else {
            return Err(ReportError::NoTaintCredential {
                node: self.node.clone(),
            });
        };
        let nodes: Api<Node> = Api::all(client.clone());
        // `spec.taints` is replaced whole, so compute it from a fresh read and
        // guard the write with that read's resourceVersion; on 409 read again.
        let mut attempts = 0;
        loop {
            let node = self
                .bounded("GET node for taints", nodes.get(&self.node))
                .await?;
            let on_node: Vec<serde_json::Value> = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|t| serde_json::to_value(t).ok())
                .collect();
            let rv = node.metadata.resource_version.clone().unwrap_or_default();
            let body = marks::taint_patch(&rv, &on_node, ours);
            match self
                .bounded(
                    "PATCH node taints",
                    nodes.patch(&self.node, &Self::params(), &Patch::Strategic(body)),
                )
                .await
            {
                Err(ReportError::Conflict { .. }) if attempts < 3 => attempts += 1,
                r => return r.map(|_| ()),
            }
        }
    }
}

/// A kube-rs error of the request `op` for `node` as the reporter's error:
/// what the Status says (refused for good, forbidden, conflict, throttled
/// with its Retry-After, another code), or a transport failure with the
/// kube-rs error as its source.
fn report_error(op: &'static str, node: &str, e: kube::Error) -> ReportError {
    let node = node.to_string();
    match e {
        kube::Error::Api(s) => {
            if let Some(refusal) = refusal_of(&s) {
                return ReportError::Refused {
                    op,
                    node,
                    refusal,
                    message: s.message,
                };
            }
            match s.code {
                403 => ReportError::Forbidden {
                    op,
                    node,
                    message: s.message,
                },
                409 => ReportError::Conflict { op, node },
                429 => ReportError::Throttled {
                    op,
                    node,
                    // The API server's own 429s carry it in the Status
                    // details; its throttling filters' plain-text ones only
                    // in the header, which `RetryAfterLayer` copies there.
                    retry_after: s
                        .details
                        .as_ref()
                        .map(|d| d.retry_after_seconds)
                        .filter(|s| *s > 0)
                        .map(|s| Duration::from_secs(s.into())),
                },
                code => ReportError::Api {
                    op,
                    node,
                    code,
                    message: s.message,
                },
            }
        }
        source => ReportError::Transport {
            op,
            node,
            source: Box::new(source),
        },
    }
}

/// The refusals read from the Status itself (reason, cause, details);
/// other 403s and 404s depend on what was written and are classified
/// by the write (`KubeReporter::write_event`).
fn refusal_of(s: &kube::core::Status) -> Option<Refusal> {
    // metav1.StatusReasonInvalid, and v1.NamespaceTerminatingCause as
    // NamespaceLifecycle adds it (plugin/namespace/lifecycle).
    const INVALID: &str = "Invalid";
    const NAMESPACE_TERMINATING: &str = "NamespaceTerminating";
    let details = s.details.as_ref();
    match s.code {
        422 if s.reason == INVALID => Some(Refusal::Invalid),
        403 if details
            .is_some_and(|d| d.causes.iter().any(|c| c.reason == NAMESPACE_TERMINATING)) =>
        {
            Some(Refusal::NamespaceTerminating)
        }
        // NamespaceLifecycle answers errors.NewNotFound(namespaces, ns).
        404 if details.is_some_and(|d| d.kind == "namespaces") => Some(Refusal::NamespaceGone),
        _ => None,
    }
}

/// The Node's UID and nodeproof's own conditions on it.
pub fn node_state(node: &Node) -> NodeState {
    let conditions = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| Some((ConditionType::parse(&c.type_)?, c)))
        .map(|(kind, c)| {
            let time = |t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
                t.as_ref()
                    .map_or(SystemTime::UNIX_EPOCH, |t| SystemTime::from(t.0))
            };
            NodeCondition {
                kind,
                status: ConditionStatus::parse(&c.status),
                reason: c.reason.clone().unwrap_or_default(),
                message: c.message.clone().unwrap_or_default(),
                last_transition: time(&c.last_transition_time),
                last_heartbeat: time(&c.last_heartbeat_time),
            }
        })
        .collect();
    let labels = node
        .metadata
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| marks::owns_label(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| t.key.starts_with(marks::PREFIX))
        .map(|t| Taint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.clone(),
        })
        .collect();
    NodeState {
        uid: node.metadata.uid.clone(),
        conditions,
        labels,
        taints,
        unhealthy_devices: node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(nodeproof_report::device_health::UNHEALTHY_DEVICES))
            .cloned(),
    }
}

/// What every kube client of nodeproof runs on: a service that sends each
/// request through the client built from the current credential files.
/// The kubelet rotates its
/// client certificate in place (kubelet.conf points at
/// `kubelet-client-current.pem`, a symlink moved to each new certificate)
/// and projected ServiceAccount tokens are replaced on disk; kube-rs reads
/// certificates once, when the client is built, so a client kept past the
/// original certificate's expiry gets 401 forever. Before each request the
/// files' identity (device, inode, size, mtime: a rename over the old file
/// changes the inode) is compared with what the client was built from; on a
/// change, or after a 401, the client is rebuilt and swapped in. Every user
/// of the client (the reporter, the pods watcher) keeps its own state; only
/// the connection underneath changes.
struct ReloadingClient {
    client: Mutex<kube::Client>,
    reload: Option<Mutex<Reload>>,
    /// The API server the current client talks to, told of every success.
    answered: Mutex<Answered>,
}

/// Successes from one API server (by its URL), heard by every client of
/// this process that talks to it through [`connect`].
///
/// Why: the pods watches back off as client-go's reflector does (0.8 s
/// doubling to 30 s, jittered), so after a control-plane restart a watch
/// could sleep half a minute while the reporter's PATCH to the same server
/// already succeeded. A watch waiting out an unanswered retry waits for the
/// next success here instead (`nodeproof::pods::watch`).
#[derive(Clone)]
pub struct Answered {
    server: String,
    tx: std::sync::Arc<tokio::sync::watch::Sender<u64>>,
    rx: tokio::sync::watch::Receiver<u64>,
    /// Every request's outcome with this server (`/readyz`).
    reach: Reach,
}

/// One sender per server URL for the process's lifetime (a handful at most:
/// the report and taint credentials' servers), so a receiver never sees
/// its sender dropped.
#[allow(clippy::type_complexity)]
static SERVERS: std::sync::LazyLock<
    Mutex<BTreeMap<String, (std::sync::Arc<tokio::sync::watch::Sender<u64>>, Reach)>>,
> = std::sync::LazyLock::new(Default::default);

impl Answered {
    /// The successes of the API server at `server` (its base URL).
    pub fn of(server: &str) -> Answered {
        let mut servers = match SERVERS.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        let (tx, reach) = servers
            .entry(server.to_string())
            .or_insert_with(|| {
                (
                    std::sync::Arc::new(tokio::sync::watch::channel(0).0),
                    Reach::default(),
                )
            })
            .clone();
        let rx = tx.subscribe();
        Answered {
            server: server.to_string(),
            tx,
            rx,
            reach,
        }
    }

    /// Every request's outcome with this server, from every client of this
    /// process that talks to it through [`connect`].
    pub fn reach(&self) -> Reach {
        self.reach.clone()
    }

    /// The server's URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Tells every receiver that the server answered a request with success.
    pub fn heard(&self) {
        self.tx.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver bumped on every success heard from now on.
    pub fn receiver(&self) -> tokio::sync::watch::Receiver<u64> {
        let mut rx = self.tx.subscribe();
        rx.mark_unchanged();
        rx
    }

    /// How many successes were heard so far (a count to compare, not a total).
    pub fn count(&self) -> u64 {
        *self.rx.borrow()
    }

    /// Waits for a success heard after this call.
    pub async fn next(&mut self) {
        self.rx.mark_unchanged();
        if self.rx.changed().await.is_err() {
            // Unreachable: the sender lives in `SERVERS`. Never a busy loop.
            std::future::pending::<()>().await;
        }
    }
}

/// A kube-rs error as a sentence a person reads: what went wrong with which
/// object and what to do. kube-rs' own Display of an API error appends the
/// whole `Status` as Debug (`ApiError: … (Status { status: Some(Failure), …
/// })`), and its config errors repeat their sources in their own text.
pub fn kube_error_text(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => api_status_text(s.code, &s.reason, &s.message),
        kube::Error::InferConfig(_) | kube::Error::InferKubeconfig(_) => {
            // kube-rs says each place it looked, then again in each source;
            // the kubeconfig's own failure (a path and why) is the one to read.
            let mut cause: &dyn std::error::Error = e;
            let mut said = innermost(e);
            while let Some(next) = cause.source() {
                if next.to_string().starts_with("failed to read kubeconfig") {
                    said = next.to_string().replace("'\"", "'").replace("\"'", "'");
                    break;
                }
                cause = next;
            }
            format!("{said}: pass --kubeconfig, set KUBECONFIG, or run in a pod with a ServiceAccount")
        }
        kube::Error::Service(_) | kube::Error::HyperError(_) => format!(
            "cannot reach the API server ({}): check the kubeconfig's server address and the network",
            innermost(e)
        ),
        kube::Error::Auth(_) => format!(
            "cannot authenticate to the API server ({}): check the kubeconfig's user",
            innermost(e)
        ),
        _ => innermost(e),
    }
}

/// An API server's error answer as a sentence with its remedy.
pub fn api_status_text(code: u16, reason: &str, message: &str) -> String {
    let said = if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    };
    match code {
        401 => "the API server refused the credentials (401 Unauthorized): check the kubeconfig's user, or renew its token or certificate".into(),
        403 => format!("the API server forbade the request (403 Forbidden{said}): grant the identity the RBAC it needs"),
        404 => format!("not found on the API server (404{said})"),
        429 => "the API server asked for less traffic (429 Too Many Requests): try again later".into(),
        c if c >= 500 => format!("the API server failed ({c} {reason}{said}): try again, or check the API server's health"),
        c => format!("the API server refused the request ({c} {reason}{said})"),
    }
}

/// The deepest cause's text: kube-rs' errors include their source's text
/// in their own, so the deepest is the one not said twice.
fn innermost(e: &dyn std::error::Error) -> String {
    let mut deepest: &dyn std::error::Error = e;
    while let Some(next) = deepest.source() {
        deepest = next;
    }
    deepest.to_string()
}

/// Asks the API server whether it serves (`GET /readyz`, which every
/// authenticated user may read through the `system:public-info-viewer`
/// ClusterRole): a success is heard by [`Answered`] like any other.
pub async fn ready(client: &kube::Client) -> Result<(), kube::Error> {
    let req = http::Request::get("/readyz")
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    client.request_text(req).await.map(drop)
}

impl std::fmt::Debug for Answered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answered")
            .field("server", &self.server)
            .field("count", &self.count())
            .finish()
    }
}

/// Credential files and the identity each had (None: unreadable).
type Stamps = Vec<(PathBuf, Option<FileStamp>)>;

struct Reload {
    source: Source,
    /// The credential files as the current client was built from them.
    built_from: Stamps,
    /// The last answer was 401.
    unauthorized: bool,
    /// The current client was already rebuilt for a 401 from these files:
    /// another 401 waits for them to change (no rebuild per retry).
    rebuilt_for_401: bool,
    /// Stamps a rebuild failed for, so a failure is logged once per change.
    failed_for: Option<Stamps>,
}

/// A file's identity: a rename over it, or a rewrite, changes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: Option<SystemTime>,
}

impl FileStamp {
    /// Follows symlinks: the kubelet's `-current.pem` link moving is a change.
    fn of(path: &Path) -> Option<FileStamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(FileStamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: m.modified().ok(),
        })
    }
}

/// Why a client was rebuilt, for the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadCause {
    /// A credential file was replaced or rewritten.
    FileChanged(PathBuf),
    /// The API server answered 401 (the credential expired or was revoked).
    Unauthorized,
}

impl std::fmt::Display for ReloadCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReloadCause::FileChanged(p) => write!(f, "{} changed", p.display()),
            ReloadCause::Unauthorized => f.write_str("the API server answered 401 Unauthorized"),
        }
    }
}

impl ReloadingClient {
    /// `client`, built from `source` when its files were as `built_from`
    /// says (stamped before the build: a change during it is a change).
    fn new(client: kube::Client, server: &str, source: Source, built_from: Stamps) -> Self {
        ReloadingClient {
            client: Mutex::new(client),
            answered: Mutex::new(Answered::of(server)),
            reload: Some(Mutex::new(Reload {
                source,
                built_from,
                unauthorized: false,
                rebuilt_for_401: false,
                failed_for: None,
            })),
        }
    }

    /// The client for the next request, rebuilt first if its credentials changed.
    async fn get(&self) -> kube::Client {
        if let Some((source, cause, now)) = self.due() {
            self.rebuild(source, cause, now).await;
        }
        self.current()
    }

    fn current(&self) -> kube::Client {
        // A poisoned lock still holds a usable client.
        match self.client.lock() {
            Ok(c) => c.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Whether to rebuild: the source, why, and the files' stamps now.
    fn due(&self) -> Option<(Source, ReloadCause, Stamps)> {
        let mut r = self.reload.as_ref()?.lock().ok()?;
        let paths: Vec<PathBuf> = r.built_from.iter().map(|(p, _)| p.clone()).collect();
        let now = stamps(&paths);
        let changed = r
            .built_from
            .iter()
            .zip(&now)
            .find(|((_, was), (_, is))| was != is)
            .map(|((p, _), _)| ReloadCause::FileChanged(p.clone()));
        let cause = match changed {
            Some(c) if r.failed_for.as_ref() != Some(&now) => c,
            Some(_) => return None,
            None if r.unauthorized && !r.rebuilt_for_401 => ReloadCause::Unauthorized,
            None => return None,
        };
        r.unauthorized = false;
        Some((r.source.clone(), cause, now))
    }

    async fn rebuild(&self, source: Source, cause: ReloadCause, now: Stamps) {
        let stamped = stamps(&credential_files(&source));
        let built = build_client(&source).await;
        let Some(reload) = &self.reload else { return };
        let Ok(mut r) = reload.lock() else { return };
        match built {
            Ok(Some((client, server))) => {
                if let Ok(mut c) = self.client.lock() {
                    *c = client;
                }
                // A kubeconfig rewritten for another server: its successes are another's.
                if let Ok(mut a) = self.answered.lock() {
                    if a.server() != server {
                        *a = Answered::of(&server);
                    }
                }
                // Handled here, so logged here: once per rebuild.
                tracing::info!(credentials = %source.describe(), cause = %cause, "credentials reloaded");
                r.rebuilt_for_401 = cause == ReloadCause::Unauthorized;
                // The kubeconfig may now name other files: follow those.
                r.built_from = stamped;
                r.failed_for = None;
            }
            Ok(None) => {}
            Err(e) => {
                // Half-written (a certificate without its new key yet): the
                // previous client is kept and the next request tries again.
                tracing::warn!(credentials = %source.describe(), cause = %cause, error = %e, "credentials changed but cannot be loaded; keeping the previous ones");
                r.failed_for = Some(now);
                if cause == ReloadCause::Unauthorized {
                    r.rebuilt_for_401 = true;
                }
            }
        }
    }

    /// A request the server did not answer (refused, reset, timed out, TLS).
    fn unanswered(&self, kind: RequestKind, error: &kube::Error) {
        if let Ok(a) = self.answered.lock() {
            a.reach.record(
                Instant::now(),
                kind,
                &Outcome::Failed(kube_error_text(error)),
            );
        }
    }

    /// What the API server answered with this client (connection failures
    /// answer nothing, and say nothing about the credential: [`Self::unanswered`]).
    fn answered(&self, kind: RequestKind, status: http::StatusCode) {
        if let Ok(a) = self.answered.lock() {
            if status.is_success() {
                a.heard();
            }
            a.reach.record(Instant::now(), kind, &outcome_of(status));
        }
        let Some(Ok(mut r)) = self.reload.as_ref().map(|r| r.lock()) else {
            return;
        };
        if status == http::StatusCode::UNAUTHORIZED {
            r.unauthorized = true;
        } else {
            r.unauthorized = false;
            r.rebuilt_for_401 = false;
        }
    }
}

/// What an answer with `status` says of reaching the server
/// ([`nodeproof_report::reach`]): 5xx and 429 (it cannot serve now), 401
/// and 403 (it will not serve this client) are failures.
fn outcome_of(status: http::StatusCode) -> Outcome {
    if status.is_success() {
        Outcome::Answered
    } else if status.is_server_error()
        || status == http::StatusCode::TOO_MANY_REQUESTS
        || status == http::StatusCode::UNAUTHORIZED
        || status == http::StatusCode::FORBIDDEN
    {
        Outcome::Failed(format!("the API server answered {status}"))
    } else {
        Outcome::Other
    }
}

/// The service under a reloading `kube::Client`: each request goes out
/// through the current client (its base URL, TLS identity and auth layers).
#[derive(Clone)]
struct ReloadService(std::sync::Arc<ReloadingClient>);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<http::Request<kube::client::Body>> for ReloadService {
    type Response = http::Response<kube::client::Body>;
    type Error = BoxError;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, BoxError>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        // The inner client is made ready per request (`Client::send`).
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<kube::client::Body>) -> Self::Future {
        let reloading = self.0.clone();
        Box::pin(async move {
            let client = reloading.get().await;
            let kind = if req.method() == http::Method::GET {
                RequestKind::Read
            } else {
                RequestKind::Write
            };
            match client.send(req).await {
                Ok(resp) => {
                    reloading.answered(kind, resp.status());
                    Ok(resp)
                }
                Err(e) => {
                    reloading.unanswered(kind, &e);
                    Err(BoxError::from(e))
                }
            }
        })
    }
}

fn stamps(paths: &[PathBuf]) -> Stamps {
    paths
        .iter()
        .map(|p| (p.clone(), FileStamp::of(p)))
        .collect()
}

/// The files a client built from `source` read: the kubeconfig, and the
/// certificates, keys, token files and CAs it names (kube-rs makes them
/// absolute); in-cluster, the ServiceAccount token and CA.
pub fn credential_files(source: &Source) -> Vec<PathBuf> {
    match source {
        Source::None => Vec::new(),
        Source::InCluster => {
            let token = PathBuf::from(nodeproof_report::credentials::SERVICE_ACCOUNT_TOKEN);
            let ca = token.with_file_name("ca.crt");
            vec![token, ca]
        }
        Source::Kubeconfig(path)
        | Source::KubeconfigContext { path, .. }
        | Source::Kubelet(path) => {
            let mut files = vec![path.clone()];
            if let Ok(k) = kube::config::Kubeconfig::read_from(path) {
                for a in k.auth_infos.iter().filter_map(|a| a.auth_info.as_ref()) {
                    files.extend(
                        [&a.client_certificate, &a.client_key, &a.token_file]
                            .into_iter()
                            .flatten()
                            .map(PathBuf::from),
                    );
                }
                for c in k.clusters.iter().filter_map(|c| c.cluster.as_ref()) {
                    files.extend(c.certificate_authority.iter().map(PathBuf::from));
                }
            }
            files.sort();
            files.dedup();
            files
        }
    }
}

/// A kube client from `source` (None for `Source::None`) that follows its
/// credential files (see [`ReloadingClient`]).
pub async fn connect(source: &Source) -> Result<Option<kube::Client>, ReportError> {
    Ok(connect_answered(source).await?.map(|(client, _)| client))
}

/// [`connect`], and the successes of the API server it talks to (heard from
/// every client of this process that talks to that server).
pub async fn connect_answered(
    source: &Source,
) -> Result<Option<(kube::Client, Answered)>, ReportError> {
    let stamped = stamps(&credential_files(source));
    let Some((client, server)) = build_client(source).await? else {
        return Ok(None);
    };
    let namespace = client.default_namespace().to_string();
    let reloading = ReloadingClient::new(client, &server, source.clone(), stamped);
    Ok(Some((
        kube::Client::new(ReloadService(std::sync::Arc::new(reloading)), namespace),
        Answered::of(&server),
    )))
}

/// A kube client from `source` as its files are now, and its server's URL.
async fn build_client(source: &Source) -> Result<Option<(kube::Client, String)>, ReportError> {
    let failed = |e: Box<dyn std::error::Error + Send + Sync>| ReportError::Credentials {
        source_desc: source.describe(),
        source: e,
    };
    let config = match source {
        Source::None => return Ok(None),
        Source::Kubeconfig(path) | Source::Kubelet(path) => {
            let kubeconfig =
                kube::config::Kubeconfig::read_from(path).map_err(|e| failed(e.into()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|e| failed(e.into()))?
        }
        Source::KubeconfigContext { path, context } => {
            let kubeconfig =
                kube::config::Kubeconfig::read_from(path).map_err(|e| failed(e.into()))?;
            if !kubeconfig.contexts.iter().any(|c| &c.name == context) {
                let known: Vec<&str> = kubeconfig
                    .contexts
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect();
                return Err(failed(
                    format!(
                        "no context {context:?} in it (it has {}): `kubectl config get-contexts` lists them",
                        if known.is_empty() { "none".to_string() } else { known.join(", ") }
                    )
                    .into(),
                ));
            }
            let options = kube::config::KubeConfigOptions {
                context: Some(context.clone()),
                ..Default::default()
            };
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| failed(e.into()))?
        }
        Source::InCluster => kube::Config::incluster().map_err(|e| failed(e.into()))?,
    };
    let mut config = config;
    // kube-rs retries 429/503/504 inside a request by default. The report
    // loop retries itself with only the latest state and honours
    // Retry-After without holding a request open, so no hidden retries.
    config.default_retry = false;
    let server = config.cluster_url.to_string();
    let builder = kube::client::ClientBuilder::try_from(config).map_err(|e| failed(e.into()))?;
    Ok(Some((
        builder
            .with_layer(&super::retry_after::RetryAfterLayer)
            .build(),
        server,
    )))
}

/// What a 403 on the Node's GET means. Since Kubernetes 1.32 the Node
/// authorizer answers 403 (`node 'X' cannot read 'Y', only its own Node
/// object`), no longer 404, when a node identity reads another Node: ask
/// the API server who this credential is, and if it is another node, say
/// so instead of a bare "forbidden". Otherwise (a ServiceAccount without
/// the RBAC, or the review itself refused) `forbidden` stands.
async fn unreadable_node(client: &kube::Client, node: &str, forbidden: ReportError) -> ReportError {
    match crate::identity::other_node(client, node).await {
        Some(me) => ReportError::NotOwnNode {
            identity: me,
            node: node.to_string(),
        },
        None => forbidden,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_read_from_the_status_as_kube_apiserver_sends_it() {
        let of = |v: serde_json::Value| refusal_of(&serde_json::from_value(v).unwrap());
        assert_eq!(
            of(serde_json::json!({"code": 422, "reason": "Invalid", "message": "x"})),
            Some(Refusal::Invalid)
        );
        assert_eq!(
            of(
                serde_json::json!({"code": 403, "reason": "Forbidden", "details": {"name": "e", "kind": "events",
                "causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace"}]}})
            ),
            Some(Refusal::NamespaceTerminating)
        );
        assert_eq!(
            of(
                serde_json::json!({"code": 404, "reason": "NotFound", "details": {"name": "ml", "kind": "namespaces"}})
            ),
            Some(Refusal::NamespaceGone)
        );
        // Decided by the write: an Event to patch that expired is created again.
        assert_eq!(
            of(
                serde_json::json!({"code": 404, "reason": "NotFound", "details": {"name": "e", "kind": "events"}})
            ),
            None
        );
        assert_eq!(
            of(serde_json::json!({"code": 403, "reason": "Forbidden"})),
            None
        );
        assert_eq!(
            of(serde_json::json!({"code": 500, "reason": "InternalError"})),
            None
        );
    }

    #[test]
    fn node_state_keeps_only_own_condition_types_and_reads_status_as_the_api_spells_it() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "uid": "u1"},
            "status": {"conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "GPUHealthy", "status": "False", "reason": "FatalXid", "message": "xid 79",
                 "lastTransitionTime": "2026-01-01T00:00:00Z", "lastHeartbeatTime": "2026-01-01T00:05:00Z"},
                {"type": "SeccompTracingReady", "status": "Maybe"}
            ]}
        }))
        .unwrap();
        let s = node_state(&node);
        assert_eq!(s.uid.as_deref(), Some("u1"));
        let got: Vec<_> = s.conditions.iter().map(|c| (c.kind, c.status)).collect();
        assert_eq!(
            got,
            [
                (ConditionType::GPUHealthy, ConditionStatus::False),
                (ConditionType::SeccompTracingReady, ConditionStatus::Unknown)
            ]
        );
        assert_eq!(s.conditions[0].reason, "FatalXid");
    }
}
