//! A before/after baseline of the cluster around an upgrade (an upgrade
//! checklist's first and last steps: record nodes, components and key
//! workloads before and after, and compare).
//!
//! [`Baseline::record`] takes what `cluster check` read and judged;
//! [`compare`] classifies every difference as regressed, improved or
//! changed. Both pure; [`load`] and [`save`] are the file, versioned JSON
//! ([`FORMAT`]): a file written by a newer nodeproof, or one that is not a
//! baseline, is refused with what to do.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Event, Node, Pod};
use serde::{Deserialize, Serialize};

use nodeproof_findings::{ConditionStatus, ConditionType};

use super::hpa::{self, HpaProblem};
use super::metrics_api::{Latency, MetricsSummary};
use super::{age, name_of, node_ready, time, Report, Snapshot};
use crate::gate::resources::parse_quantity;

/// The file format this build writes and the newest it reads.
pub const FORMAT: u32 = 1;

/// One node as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub ready: bool,
    /// Not cordoned (`spec.unschedulable` unset).
    pub schedulable: bool,
    /// `status.allocatable`, as the API spells each quantity.
    pub allocatable: BTreeMap<String, String>,
    pub versions: BTreeMap<Component, String>,
    /// nodeproof's conditions and their statuses.
    pub nodeproof: BTreeMap<ConditionType, ConditionStatus>,
}

/// A node component whose version is recorded (`status.nodeInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Component {
    Kubelet,
    ContainerRuntime,
    Kernel,
    OsImage,
}

impl std::fmt::Display for Component {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Component::Kubelet => "kubelet",
            Component::ContainerRuntime => "container runtime",
            Component::Kernel => "kernel",
            Component::OsImage => "OS image",
        })
    }
}

/// A pod's container restarts, by the pod's uid (a pod recreated under the
/// same name starts again from zero).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restarts {
    pub uid: String,
    pub restarts: u64,
}

/// An HPA's state: able to scale, or the condition that says it is not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum HpaState {
    Scaling,
    NotScaling(HpaProblem),
}

/// What a baseline file holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// [`FORMAT`] of the build that wrote it.
    pub format: u32,
    /// When it was taken (RFC 3339).
    pub taken_at: String,
    pub nodes: BTreeMap<String, NodeRecord>,
    /// Pods neither Running nor Succeeded, by namespace and reason.
    pub pods_not_running: BTreeMap<String, BTreeMap<String, usize>>,
    /// Pods with container restarts, by `namespace/name`.
    pub restarts: BTreeMap<String, Restarts>,
    /// Warning Events by reason over the window before `taken_at`.
    pub warning_events: BTreeMap<String, u64>,
    pub events_window_seconds: u64,
    /// Nodes where each RuntimeClass contract is ready.
    pub contracts_ready: BTreeMap<String, usize>,
    pub gated_pods: usize,
    /// HPAs by `namespace/name`.
    pub hpas: BTreeMap<String, HpaState>,
    pub metrics: MetricsSummary,
}

#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    #[error("cannot read baseline {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a nodeproof baseline; save one with `nodeproof cluster check --save-baseline FILE`", path.display())]
    NotABaseline {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("baseline {} has format {found}, newer than this nodeproof reads ({FORMAT}); compare with the nodeproof that wrote it, or save a new baseline", path.display())]
    Newer { path: PathBuf, found: u32 },
    #[error("cannot write baseline {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Reads a baseline: the format first, so a newer file says so instead of
/// failing on a field this build does not know.
pub fn load(path: &Path) -> Result<Baseline, BaselineError> {
    let text = std::fs::read(path).map_err(|source| BaselineError::Read {
        path: path.into(),
        source,
    })?;
    let not_a_baseline = |source| BaselineError::NotABaseline {
        path: path.into(),
        source,
    };
    #[derive(Deserialize)]
    struct Header {
        format: u32,
    }
    let header: Header = serde_json::from_slice(&text).map_err(not_a_baseline)?;
    if header.format > FORMAT {
        return Err(BaselineError::Newer {
            path: path.into(),
            found: header.format,
        });
    }
    serde_json::from_slice(&text).map_err(not_a_baseline)
}

/// Writes a baseline whole or not at all (a temporary file renamed over).
pub fn save(path: &Path, baseline: &Baseline) -> Result<(), BaselineError> {
    let write = |source| BaselineError::Write {
        path: path.into(),
        source,
    };
    let text = serde_json::to_vec_pretty(baseline).expect("a baseline serializes");
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, text).map_err(write)?;
    std::fs::rename(&tmp, path).map_err(write)
}

fn node_record(node: &Node) -> NodeRecord {
    let status = node.status.as_ref();
    let info = status.and_then(|s| s.node_info.as_ref());
    let mut versions = BTreeMap::new();
    if let Some(i) = info {
        for (c, v) in [
            (Component::Kubelet, &i.kubelet_version),
            (Component::ContainerRuntime, &i.container_runtime_version),
            (Component::Kernel, &i.kernel_version),
            (Component::OsImage, &i.os_image),
        ] {
            versions.insert(c, v.clone());
        }
    }
    NodeRecord {
        ready: node_ready(node),
        schedulable: !node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false),
        allocatable: status
            .and_then(|s| s.allocatable.as_ref())
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect(),
        versions,
        nodeproof: status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|c| {
                Some((
                    ConditionType::parse(&c.type_)?,
                    ConditionStatus::parse(&c.status),
                ))
            })
            .collect(),
    }
}

/// Why a pod is neither Running nor Succeeded: its first container's
/// waiting reason (`CreateContainerError`, `ImagePullBackOff`, …), else
/// the pod's reason (`Evicted`), else its phase.
fn not_running_reason(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    if matches!(phase, "Running" | "Succeeded") {
        return None;
    }
    let waiting = status
        .into_iter()
        .flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        })
        .find_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone());
    Some(
        waiting
            .or_else(|| status.and_then(|s| s.reason.clone()))
            .unwrap_or_else(|| phase.to_string()),
    )
}

fn restarts_of(pod: &Pod) -> u64 {
    pod.status
        .iter()
        .flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        })
        .map(|c| c.restart_count.max(0) as u64)
        .sum()
}

/// When an Event last happened: its series' last observation, its
/// `lastTimestamp`, its `eventTime`, else its creation.
fn event_time(e: &Event) -> Option<SystemTime> {
    e.series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref())
        .map(|t| SystemTime::from(t.0))
        .or_else(|| time(&e.last_timestamp))
        .or_else(|| e.event_time.as_ref().map(|t| SystemTime::from(t.0)))
        .or_else(|| time(&e.metadata.creation_timestamp))
}

fn event_count(e: &Event) -> u64 {
    e.series
        .as_ref()
        .and_then(|s| s.count)
        .or(e.count)
        .unwrap_or(1)
        .max(1) as u64
}

fn key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or(""),
        name_of(meta)
    )
}

impl Baseline {
    /// The baseline of what `cluster check` read (`snap`) and judged
    /// (`report`) at `now`; Warning Events counted over `events_window`.
    pub fn record(
        snap: &Snapshot,
        report: &Report,
        now: SystemTime,
        events_window: Duration,
    ) -> Baseline {
        let mut pods_not_running: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
        let mut restarts = BTreeMap::new();
        let mut gated_pods = 0;
        for pod in &snap.pods {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            if pod
                .spec
                .as_ref()
                .and_then(|s| s.scheduling_gates.as_ref())
                .is_some_and(|g| !g.is_empty())
            {
                gated_pods += 1;
            }
            if let Some(reason) = not_running_reason(pod) {
                *pods_not_running
                    .entry(ns.clone())
                    .or_default()
                    .entry(reason)
                    .or_default() += 1;
            }
            let n = restarts_of(pod);
            if n > 0 {
                restarts.insert(
                    key(&pod.metadata),
                    Restarts {
                        uid: pod.metadata.uid.clone().unwrap_or_default(),
                        restarts: n,
                    },
                );
            }
        }
        let mut warning_events: BTreeMap<String, u64> = BTreeMap::new();
        for e in &snap.warning_events {
            if e.type_.as_deref() != Some("Warning") {
                continue;
            }
            if event_time(e).is_some_and(|t| age(now, t) <= events_window) {
                *warning_events
                    .entry(e.reason.clone().unwrap_or_default())
                    .or_default() += event_count(e);
            }
        }
        Baseline {
            format: FORMAT,
            taken_at: nodeproof_report::conditions::rfc3339(now),
            nodes: snap
                .nodes
                .iter()
                .map(|n| (name_of(&n.metadata), node_record(n)))
                .collect(),
            pods_not_running,
            restarts,
            warning_events,
            events_window_seconds: events_window.as_secs(),
            contracts_ready: report
                .contracts
                .iter()
                .map(|c| (c.class.clone(), c.ready))
                .collect(),
            gated_pods,
            hpas: snap
                .hpas
                .iter()
                .map(|h| {
                    let state = match hpa::problem(h) {
                        None => HpaState::Scaling,
                        Some(p) => HpaState::NotScaling(p),
                    };
                    (key(&h.metadata), state)
                })
                .collect(),
            metrics: report.metrics.clone(),
        }
    }
}

/// One difference between the baseline and now.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum Change {
    NodeGone {
        node: String,
    },
    NodeAdded {
        node: String,
    },
    NodeReady {
        node: String,
        ready: bool,
    },
    NodeSchedulable {
        node: String,
        schedulable: bool,
    },
    Allocatable {
        node: String,
        resource: String,
        before: Option<String>,
        after: Option<String>,
    },
    Version {
        node: String,
        component: Component,
        before: Option<String>,
        after: Option<String>,
    },
    NodeproofCondition {
        node: String,
        condition: ConditionType,
        before: Option<ConditionStatus>,
        after: Option<ConditionStatus>,
    },
    PodsNotRunning {
        namespace: String,
        reason: String,
        before: usize,
        after: usize,
    },
    Restarts {
        namespace: String,
        /// Restarts since the baseline, over all its pods.
        restarts: u64,
        /// The pods that restarted most, up to five.
        pods: Vec<String>,
    },
    WarningEvents {
        reason: String,
        before: u64,
        after: u64,
    },
    ContractReady {
        class: String,
        before: Option<usize>,
        after: Option<usize>,
    },
    GatedPods {
        before: usize,
        after: usize,
    },
    Hpa {
        hpa: String,
        before: Option<HpaState>,
        after: Option<HpaState>,
    },
    MetricsVersion {
        before: Option<String>,
        after: Option<String>,
    },
    MetricsLatency {
        before: Option<Latency>,
        after: Option<Latency>,
    },
    /// The share of Ready nodes (`nodes`) or Running pods (`pods`) without
    /// fresh metrics, in percent.
    MetricsMissing {
        resource: super::metrics_api::MetricsResource,
        before_percent: f64,
        after_percent: f64,
    },
}

/// The differences, classified.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Comparison {
    /// When the baseline was taken.
    pub baseline_taken_at: String,
    pub regressed: Vec<Change>,
    pub improved: Vec<Change>,
    pub changed: Vec<Change>,
}

impl Comparison {
    pub fn regressed(&self) -> bool {
        !self.regressed.is_empty()
    }
}

/// A latency regresses when its p99 at least doubles by at least this much
/// (below it, the noise of one slow request).
const LATENCY_NOISE: u64 = 100;
/// A completeness share moves by more than this, in percent.
const SHARE_NOISE: f64 = 1.0;
/// Pods a restart change names.
const RESTART_EXAMPLES: usize = 5;

enum Way {
    Regressed,
    Improved,
    Changed,
}

/// A count of bad things (failing pods, Warning Events, gated pods): up is
/// a regression, down an improvement, the same nothing.
fn more_is_worse<T: Ord>(before: T, after: T) -> Option<Way> {
    match after.cmp(&before) {
        std::cmp::Ordering::Greater => Some(Way::Regressed),
        std::cmp::Ordering::Less => Some(Way::Improved),
        std::cmp::Ordering::Equal => None,
    }
}

/// What changed from `before` to `after`.
pub fn compare(before: &Baseline, after: &Baseline) -> Comparison {
    let mut c = Comparison {
        baseline_taken_at: before.taken_at.clone(),
        ..Default::default()
    };
    let mut push = |way: Way, change: Change| match way {
        Way::Regressed => c.regressed.push(change),
        Way::Improved => c.improved.push(change),
        Way::Changed => c.changed.push(change),
    };
    nodes(before, after, &mut push);
    for (ns, reason, b, a) in joined_counts(&before.pods_not_running, &after.pods_not_running) {
        let change = Change::PodsNotRunning {
            namespace: ns,
            reason,
            before: b,
            after: a,
        };
        if let Some(way) = more_is_worse(b, a) {
            push(way, change);
        }
    }
    restarts(before, after, &mut push);
    for reason in union(&before.warning_events, &after.warning_events) {
        let b = before.warning_events.get(&reason).copied().unwrap_or(0);
        let a = after.warning_events.get(&reason).copied().unwrap_or(0);
        let change = Change::WarningEvents {
            reason,
            before: b,
            after: a,
        };
        if let Some(way) = more_is_worse(b, a) {
            push(way, change);
        }
    }
    for class in union(&before.contracts_ready, &after.contracts_ready) {
        let (b, a) = (
            before.contracts_ready.get(&class).copied(),
            after.contracts_ready.get(&class).copied(),
        );
        let way = match (b, a) {
            (Some(b), Some(a)) if a < b => Way::Regressed,
            (Some(b), Some(a)) if a > b => Way::Improved,
            (Some(_), Some(_)) => continue,
            _ => Way::Changed,
        };
        push(
            way,
            Change::ContractReady {
                class,
                before: b,
                after: a,
            },
        );
    }
    if let Some(way) = more_is_worse(before.gated_pods, after.gated_pods) {
        push(
            way,
            Change::GatedPods {
                before: before.gated_pods,
                after: after.gated_pods,
            },
        );
    }
    for hpa in union(&before.hpas, &after.hpas) {
        let (b, a) = (
            before.hpas.get(&hpa).cloned(),
            after.hpas.get(&hpa).cloned(),
        );
        let way = match (&b, &a) {
            (_, Some(HpaState::NotScaling(_))) if b != a => Way::Regressed,
            (Some(HpaState::NotScaling(_)), Some(HpaState::Scaling)) => Way::Improved,
            _ if b == a => continue,
            _ => Way::Changed,
        };
        push(
            way,
            Change::Hpa {
                hpa,
                before: b,
                after: a,
            },
        );
    }
    metrics(&before.metrics, &after.metrics, &mut push);
    c
}

/// The keys of both maps, in order, once each.
fn union<K: Ord + Clone, V>(a: &BTreeMap<K, V>, b: &BTreeMap<K, V>) -> Vec<K> {
    let keys: std::collections::BTreeSet<&K> = a.keys().chain(b.keys()).collect();
    keys.into_iter().cloned().collect()
}

/// (namespace, reason, before, after) over both.
fn joined_counts(
    before: &BTreeMap<String, BTreeMap<String, usize>>,
    after: &BTreeMap<String, BTreeMap<String, usize>>,
) -> Vec<(String, String, usize, usize)> {
    let empty = BTreeMap::new();
    let mut out = Vec::new();
    for ns in union(before, after) {
        let (b, a) = (
            before.get(&ns).unwrap_or(&empty),
            after.get(&ns).unwrap_or(&empty),
        );
        for reason in union(b, a) {
            out.push((
                ns.clone(),
                reason.clone(),
                b.get(&reason).copied().unwrap_or(0),
                a.get(&reason).copied().unwrap_or(0),
            ));
        }
    }
    out
}

fn nodes(before: &Baseline, after: &Baseline, push: &mut impl FnMut(Way, Change)) {
    for node in union(&before.nodes, &after.nodes) {
        let (b, a) = match (before.nodes.get(&node), after.nodes.get(&node)) {
            (Some(b), Some(a)) => (b, a),
            (Some(_), None) => {
                push(Way::Regressed, Change::NodeGone { node });
                continue;
            }
            _ => {
                push(Way::Changed, Change::NodeAdded { node });
                continue;
            }
        };
        if a.ready != b.ready {
            let way = if a.ready {
                Way::Improved
            } else {
                Way::Regressed
            };
            push(
                way,
                Change::NodeReady {
                    node: node.clone(),
                    ready: a.ready,
                },
            );
        }
        if a.schedulable != b.schedulable {
            let way = if a.schedulable {
                Way::Improved
            } else {
                Way::Regressed
            };
            push(
                way,
                Change::NodeSchedulable {
                    node: node.clone(),
                    schedulable: a.schedulable,
                },
            );
        }
        for resource in union(&b.allocatable, &a.allocatable) {
            let (bq, aq) = (b.allocatable.get(&resource), a.allocatable.get(&resource));
            let amount = |q: Option<&String>| q.and_then(|q| parse_quantity(q));
            let way = match (amount(bq), amount(aq)) {
                (Some(x), Some(y)) if x == y => continue,
                (Some(x), Some(y)) if y < x => Way::Regressed,
                (Some(_), Some(_)) => Way::Improved,
                (Some(_), None) if aq.is_none() => Way::Regressed,
                (None, Some(_)) if bq.is_none() => Way::Improved,
                _ if bq == aq => continue,
                _ => Way::Changed,
            };
            push(
                way,
                Change::Allocatable {
                    node: node.clone(),
                    resource,
                    before: bq.cloned(),
                    after: aq.cloned(),
                },
            );
        }
        for component in union(&b.versions, &a.versions) {
            let (bv, av) = (b.versions.get(&component), a.versions.get(&component));
            if bv != av {
                push(
                    Way::Changed,
                    Change::Version {
                        node: node.clone(),
                        component,
                        before: bv.cloned(),
                        after: av.cloned(),
                    },
                );
            }
        }
        for condition in union(&b.nodeproof, &a.nodeproof) {
            let (bs, as_) = (
                b.nodeproof.get(&condition).copied(),
                a.nodeproof.get(&condition).copied(),
            );
            if bs == as_ {
                continue;
            }
            let way = match (bs, as_) {
                (Some(ConditionStatus::True), _) => Way::Regressed,
                (_, Some(ConditionStatus::True)) => Way::Improved,
                _ => Way::Changed,
            };
            push(
                way,
                Change::NodeproofCondition {
                    node: node.clone(),
                    condition,
                    before: bs,
                    after: as_,
                },
            );
        }
    }
}

/// Restarts since the baseline, per namespace: a pod's count minus the
/// baseline's for the same uid (a new pod's whole count).
fn restarts(before: &Baseline, after: &Baseline, push: &mut impl FnMut(Way, Change)) {
    let mut by_ns: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    for (pod, now) in &after.restarts {
        let was = before
            .restarts
            .get(pod)
            .filter(|b| b.uid == now.uid)
            .map_or(0, |b| b.restarts);
        let delta = now.restarts.saturating_sub(was);
        if delta > 0 {
            let (ns, name) = pod.split_once('/').unwrap_or(("", pod));
            by_ns
                .entry(ns.to_string())
                .or_default()
                .push((delta, name.to_string()));
        }
    }
    for (namespace, mut pods) in by_ns {
        pods.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        push(
            Way::Regressed,
            Change::Restarts {
                namespace,
                restarts: pods.iter().map(|(d, _)| d).sum(),
                pods: pods
                    .into_iter()
                    .take(RESTART_EXAMPLES)
                    .map(|(_, n)| n)
                    .collect(),
            },
        );
    }
}

fn metrics(before: &MetricsSummary, after: &MetricsSummary, push: &mut impl FnMut(Way, Change)) {
    if before.version != after.version {
        let way = match (before.version, after.version) {
            (Some(_), None) => Way::Regressed,
            (None, Some(_)) => Way::Improved,
            _ => Way::Changed,
        };
        push(
            way,
            Change::MetricsVersion {
                before: before.version.map(|v| v.to_string()),
                after: after.version.map(|v| v.to_string()),
            },
        );
    }
    if let (Some(b), Some(a)) = (before.latency, after.latency) {
        let way = if a.p99_ms >= 2 * b.p99_ms && a.p99_ms - b.p99_ms >= LATENCY_NOISE {
            Some(Way::Regressed)
        } else if b.p99_ms >= 2 * a.p99_ms && b.p99_ms - a.p99_ms >= LATENCY_NOISE {
            Some(Way::Improved)
        } else {
            None
        };
        if let Some(way) = way {
            push(
                way,
                Change::MetricsLatency {
                    before: Some(b),
                    after: Some(a),
                },
            );
        }
    }
    use super::metrics_api::MetricsResource;
    for (resource, b, a) in [
        (
            MetricsResource::Nodes,
            before.nodes_missing_share(),
            after.nodes_missing_share(),
        ),
        (
            MetricsResource::Pods,
            before.pods_missing_share(),
            after.pods_missing_share(),
        ),
    ] {
        let (b, a) = (b * 100.0, a * 100.0);
        let way = if a > b + SHARE_NOISE {
            Way::Regressed
        } else if a + SHARE_NOISE < b {
            Way::Improved
        } else {
            continue;
        };
        push(
            way,
            Change::MetricsMissing {
                resource,
                before_percent: (b * 10.0).round() / 10.0,
                after_percent: (a * 10.0).round() / 10.0,
            },
        );
    }
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "none".into(), |v| v.to_string())
}

impl std::fmt::Display for HpaState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HpaState::Scaling => f.write_str("scaling"),
            HpaState::NotScaling(p) => write!(f, "{}=False ({})", p.condition, p.reason),
        }
    }
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::NodeGone { node } => write!(f, "node {node} is gone"),
            Change::NodeAdded { node } => write!(f, "node {node} is new"),
            Change::NodeReady { node, ready: true } => write!(f, "node {node} is Ready again"),
            Change::NodeReady { node, ready: false } => write!(f, "node {node} is not Ready"),
            Change::NodeSchedulable {
                node,
                schedulable: true,
            } => write!(f, "node {node} is schedulable again"),
            Change::NodeSchedulable {
                node,
                schedulable: false,
            } => write!(f, "node {node} is cordoned"),
            Change::Allocatable {
                node,
                resource,
                before,
                after,
            } => write!(
                f,
                "node {node}: allocatable {resource} {} -> {}",
                opt(before),
                opt(after)
            ),
            Change::Version {
                node,
                component,
                before,
                after,
            } => write!(
                f,
                "node {node}: {component} {} -> {}",
                opt(before),
                opt(after)
            ),
            Change::NodeproofCondition {
                node,
                condition,
                before,
                after,
            } => write!(
                f,
                "node {node}: {condition} {} -> {}",
                opt(before),
                opt(after)
            ),
            Change::PodsNotRunning {
                namespace,
                reason,
                before,
                after,
            } => write!(
                f,
                "namespace {namespace}: pods not running ({reason}) {before} -> {after}"
            ),
            Change::Restarts {
                namespace,
                restarts,
                pods,
            } => write!(
                f,
                "namespace {namespace}: {restarts} container restarts since the baseline ({})",
                pods.join(", ")
            ),
            Change::WarningEvents {
                reason,
                before,
                after,
            } => write!(f, "Warning events {reason}: {before} -> {after}"),
            Change::ContractReady {
                class,
                before,
                after,
            } => write!(
                f,
                "RuntimeClass {class}: contract ready on {} -> {} nodes",
                opt(before),
                opt(after)
            ),
            Change::GatedPods { before, after } => write!(f, "gated pods {before} -> {after}"),
            Change::Hpa { hpa, before, after } => {
                write!(f, "HPA {hpa}: {} -> {}", opt(before), opt(after))
            }
            Change::MetricsVersion { before, after } => {
                write!(f, "metrics API version {} -> {}", opt(before), opt(after))
            }
            Change::MetricsLatency { before, after } => {
                let p = |l: &Option<Latency>| {
                    l.map_or_else(|| "none".into(), |l| format!("p99 {} ms", l.p99_ms))
                };
                write!(f, "metrics API latency {} -> {}", p(before), p(after))
            }
            Change::MetricsMissing {
                resource,
                before_percent,
                after_percent,
            } => write!(
                f,
                "metrics API: {} without fresh metrics {before_percent}% -> {after_percent}%",
                match resource {
                    super::metrics_api::MetricsResource::Nodes => "Ready nodes",
                    super::metrics_api::MetricsResource::Pods => "Running pods",
                }
            ),
        }
    }
}

/// The comparison as text.
pub fn render_text(c: &Comparison) -> String {
    let mut out = format!(
        "baseline of {}: {} regressed, {} improved, {} changed\n",
        c.baseline_taken_at,
        c.regressed.len(),
        c.improved.len(),
        c.changed.len()
    );
    for (label, list) in [
        ("regressed", &c.regressed),
        ("improved", &c.improved),
        ("changed", &c.changed),
    ] {
        for change in list {
            out.push_str(&format!("  {label}: {change}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::metrics_api::{MetricsResource, MetricsVersion};

    fn node() -> NodeRecord {
        NodeRecord {
            ready: true,
            schedulable: true,
            allocatable: [("cpu", "8"), ("memory", "32Gi"), ("nvidia.com/gpu", "8")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into(),
            versions: [
                (Component::Kubelet, "v1.35.2"),
                (Component::ContainerRuntime, "containerd://1.7.27"),
                (Component::Kernel, "6.1.0-37-amd64"),
                (Component::OsImage, "Debian GNU/Linux 12 (bookworm)"),
            ]
            .map(|(k, v)| (k, v.to_string()))
            .into(),
            nodeproof: [
                (ConditionType::SeccompProfilesReady, ConditionStatus::True),
                (ConditionType::GPUDriverReady, ConditionStatus::True),
            ]
            .into(),
        }
    }

    fn healthy() -> Baseline {
        Baseline {
            format: FORMAT,
            taken_at: "2026-12-01T10:00:00Z".into(),
            nodes: [("n1".to_string(), node()), ("n2".to_string(), node())].into(),
            pods_not_running: [(
                "ml".to_string(),
                [("ImagePullBackOff".to_string(), 1)].into(),
            )]
            .into(),
            restarts: [(
                "ml/vllm-0".to_string(),
                Restarts {
                    uid: "u0".into(),
                    restarts: 2,
                },
            )]
            .into(),
            warning_events: [("BackOff".to_string(), 3)].into(),
            events_window_seconds: 3600,
            contracts_ready: [("vllm".to_string(), 2)].into(),
            gated_pods: 1,
            hpas: [("ml/vllm".to_string(), HpaState::Scaling)].into(),
            metrics: MetricsSummary {
                version: Some(MetricsVersion::V1beta1),
                registered: vec![MetricsVersion::V1beta1],
                latency: Some(Latency {
                    samples: 10,
                    p50_ms: 20,
                    p99_ms: 40,
                }),
                ready_nodes: 2,
                nodes_fresh: 2,
                running_pods: 10,
                pods_fresh: 10,
            },
        }
    }

    #[test]
    fn the_same_cluster_has_no_differences() {
        let c = compare(&healthy(), &healthy());
        assert_eq!(
            (c.regressed, c.improved, c.changed),
            (vec![], vec![], vec![])
        );
    }

    #[test]
    fn each_regression_kind_is_one_regressed_change() {
        type Break = fn(&mut Baseline);
        let cases: Vec<(&str, Break, Change)> = vec![
            (
                "node gone",
                |b| {
                    b.nodes.remove("n2");
                },
                Change::NodeGone { node: "n2".into() },
            ),
            (
                "node not ready",
                |b| b.nodes.get_mut("n1").unwrap().ready = false,
                Change::NodeReady {
                    node: "n1".into(),
                    ready: false,
                },
            ),
            (
                "cordoned",
                |b| b.nodes.get_mut("n1").unwrap().schedulable = false,
                Change::NodeSchedulable {
                    node: "n1".into(),
                    schedulable: false,
                },
            ),
            (
                "fewer GPUs",
                |b| {
                    b.nodes
                        .get_mut("n1")
                        .unwrap()
                        .allocatable
                        .insert("nvidia.com/gpu".into(), "7".into());
                },
                Change::Allocatable {
                    node: "n1".into(),
                    resource: "nvidia.com/gpu".into(),
                    before: Some("8".into()),
                    after: Some("7".into()),
                },
            ),
            (
                "GPUs gone",
                |b| {
                    b.nodes
                        .get_mut("n1")
                        .unwrap()
                        .allocatable
                        .remove("nvidia.com/gpu");
                },
                Change::Allocatable {
                    node: "n1".into(),
                    resource: "nvidia.com/gpu".into(),
                    before: Some("8".into()),
                    after: None,
                },
            ),
            (
                "nodeproof condition false",
                |b| {
                    b.nodes
                        .get_mut("n2")
                        .unwrap()
                        .nodeproof
                        .insert(ConditionType::GPUDriverReady, ConditionStatus::False);
                },
                Change::NodeproofCondition {
                    node: "n2".into(),
                    condition: ConditionType::GPUDriverReady,
                    before: Some(ConditionStatus::True),
                    after: Some(ConditionStatus::False),
                },
            ),
            (
                "more pods failing",
                |b| {
                    b.pods_not_running
                        .entry("ml".into())
                        .or_default()
                        .insert("CreateContainerError".into(), 2);
                },
                Change::PodsNotRunning {
                    namespace: "ml".into(),
                    reason: "CreateContainerError".into(),
                    before: 0,
                    after: 2,
                },
            ),
            (
                "restarts",
                |b| {
                    b.restarts.get_mut("ml/vllm-0").unwrap().restarts = 5;
                    b.restarts.insert(
                        "ml/vllm-1".into(),
                        Restarts {
                            uid: "u1".into(),
                            restarts: 1,
                        },
                    );
                },
                Change::Restarts {
                    namespace: "ml".into(),
                    restarts: 4,
                    pods: vec!["vllm-0".into(), "vllm-1".into()],
                },
            ),
            (
                "warning events",
                |b| {
                    b.warning_events.insert("FailedMount".into(), 4);
                },
                Change::WarningEvents {
                    reason: "FailedMount".into(),
                    before: 0,
                    after: 4,
                },
            ),
            (
                "contract on fewer nodes",
                |b| {
                    b.contracts_ready.insert("vllm".into(), 1);
                },
                Change::ContractReady {
                    class: "vllm".into(),
                    before: Some(2),
                    after: Some(1),
                },
            ),
            (
                "more gated pods",
                |b| b.gated_pods = 3,
                Change::GatedPods {
                    before: 1,
                    after: 3,
                },
            ),
            (
                "HPA blind",
                |b| {
                    b.hpas.insert(
                        "ml/vllm".into(),
                        HpaState::NotScaling(HpaProblem {
                            condition: "ScalingActive".into(),
                            reason: "FailedGetResourceMetric".into(),
                            message: "no metrics".into(),
                        }),
                    );
                },
                Change::Hpa {
                    hpa: "ml/vllm".into(),
                    before: Some(HpaState::Scaling),
                    after: Some(HpaState::NotScaling(HpaProblem {
                        condition: "ScalingActive".into(),
                        reason: "FailedGetResourceMetric".into(),
                        message: "no metrics".into(),
                    })),
                },
            ),
            (
                "metrics API gone",
                |b| b.metrics.version = None,
                Change::MetricsVersion {
                    before: Some("metrics.k8s.io/v1beta1".into()),
                    after: None,
                },
            ),
            (
                "metrics API slower",
                |b| {
                    b.metrics.latency = Some(Latency {
                        samples: 10,
                        p50_ms: 90,
                        p99_ms: 400,
                    })
                },
                Change::MetricsLatency {
                    before: Some(Latency {
                        samples: 10,
                        p50_ms: 20,
                        p99_ms: 40,
                    }),
                    after: Some(Latency {
                        samples: 10,
                        p50_ms: 90,
                        p99_ms: 400,
                    }),
                },
            ),
            (
                "pods without metrics",
                |b| b.metrics.pods_fresh = 7,
                Change::MetricsMissing {
                    resource: MetricsResource::Pods,
                    before_percent: 0.0,
                    after_percent: 30.0,
                },
            ),
        ];
        for (name, breaks, want) in cases {
            let mut after = healthy();
            breaks(&mut after);
            let c = compare(&healthy(), &after);
            assert_eq!(c.regressed, vec![want], "{name}");
            assert!(c.regressed(), "{name}");
            assert_eq!(c.improved, vec![], "{name}");
        }
    }

    #[test]
    fn fixes_are_improvements_and_versions_are_changes() {
        let mut after = healthy();
        after.pods_not_running.clear();
        after.gated_pods = 0;
        for n in after.nodes.values_mut() {
            n.versions.insert(Component::Kubelet, "v1.36.0".into());
        }
        after.metrics.version = Some(MetricsVersion::V1);
        // A restart count that went down is a recreated pod, not a fix.
        after.restarts.get_mut("ml/vllm-0").unwrap().uid = "u0-new".into();
        after.restarts.get_mut("ml/vllm-0").unwrap().restarts = 0;
        let c = compare(&healthy(), &after);
        assert_eq!(c.regressed, vec![]);
        assert_eq!(
            c.improved,
            vec![
                Change::PodsNotRunning {
                    namespace: "ml".into(),
                    reason: "ImagePullBackOff".into(),
                    before: 1,
                    after: 0
                },
                Change::GatedPods {
                    before: 1,
                    after: 0
                },
            ]
        );
        let text: Vec<String> = c.changed.iter().map(|c| c.to_string()).collect();
        assert_eq!(
            text,
            [
                "node n1: kubelet v1.35.2 -> v1.36.0",
                "node n2: kubelet v1.35.2 -> v1.36.0",
                "metrics API version metrics.k8s.io/v1beta1 -> metrics.k8s.io/v1",
            ]
        );
        // A small latency change is noise.
        let mut after = healthy();
        after.metrics.latency = Some(Latency {
            samples: 10,
            p50_ms: 30,
            p99_ms: 120,
        });
        assert_eq!(compare(&healthy(), &after).regressed, vec![]);
    }

    #[test]
    fn a_file_that_is_not_a_baseline_or_is_newer_is_refused_with_the_remedy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("before.json");
        save(&path, &healthy()).unwrap();
        assert_eq!(load(&path).unwrap(), healthy());
        let text = |e: BaselineError| e.to_string();
        std::fs::write(&path, "{\"format\": 1, \"nodes\": ").unwrap();
        let e = text(load(&path).unwrap_err());
        assert!(
            e.contains("is not a nodeproof baseline") && e.contains("--save-baseline"),
            "{e}"
        );
        std::fs::write(&path, "[1, 2]").unwrap();
        assert!(text(load(&path).unwrap_err()).contains("is not a nodeproof baseline"));
        let mut newer = serde_json::to_value(healthy()).unwrap();
        newer["format"] = serde_json::json!(FORMAT + 1);
        newer["something_new"] = serde_json::json!(true);
        std::fs::write(&path, newer.to_string()).unwrap();
        let e = text(load(&path).unwrap_err());
        assert!(
            e.contains("format 2, newer than this nodeproof reads (1)"),
            "{e}"
        );
        let e = text(load(&dir.path().join("missing.json")).unwrap_err());
        assert!(e.starts_with("cannot read baseline"), "{e}");
    }
}
