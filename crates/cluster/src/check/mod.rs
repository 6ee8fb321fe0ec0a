//! `nodeproof cluster check`: what an SRE verifies around an upgrade, as one
//! command. The cluster is read once into a [`Snapshot`] (paged lists,
//! [`read`]); [`evaluate`] judges it at a given time into a [`Report`] of
//! typed [`Problem`]s, purely.
//!
//! What is checked:
//! - the Metrics API, `metrics.k8s.io/v1` preferred over `v1beta1`:
//!   registered, Available, serving and fresh as four findings, and its
//!   latency ([`metrics_api`]);
//! - every node runs nodeproof (at least one of its conditions is on the
//!   Node) and its heartbeat is fresh; nodeproof's conditions that are not
//!   True, with their reasons;
//! - each RuntimeClass contract: on how many nodes it is ready (the
//!   `runtimeclass.nodeproof.dev/<class>` labels), a problem when on none;
//! - pods held by scheduling gates longer than a threshold, their gates and
//!   the latest Event about them (the gate controller's "waiting for ...");
//! - pods bound to a node where their class's contract is not ready;
//! - pods a nodeproof gate released, bound to a node that is no longer ready
//!   for that gate's conditions (judged as the gate controller judges,
//!   `gate::judge::ready_for`);
//! - HorizontalPodAutoscalers that cannot scale ([`hpa`]);
//! - what still depends on the old `node-role.kubernetes.io/master` name
//!   ([`roles`]).
//!
//! [`baseline`] records a report and compares two (`--save-baseline`,
//! `--baseline`).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Serialize;

use nodeproof_findings::{ConditionStatus, ConditionType};
use nodeproof_report::contract::{self, Contract, ContractState};

use crate::gate::config::{pod_condition_type, readiness_label, Gate, GateConfig, Policy};
use crate::gate::judge::ready_for;
use crate::gate::node::NodeFacts;

pub mod baseline;
pub mod hpa;
pub mod metrics_api;
pub mod profile_changes;
mod read;
pub mod roles;

pub use read::{read, ReadError, ReadOptions};

use metrics_api::{Latency, MetricsApiRead, MetricsSummary, MetricsVersion};
use roles::{ObjectRef, RoleObjects, RoleUse, CONTROL_PLANE_ROLE, MASTER_ROLE};

/// What the check reads from the cluster.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub metrics: MetricsApiRead,
    pub nodes: Vec<Node>,
    pub runtime_classes: Vec<RuntimeClass>,
    pub pods: Vec<Pod>,
    /// Events about pods (the gate controller's included); read only when
    /// some pod is gated.
    pub pod_events: Vec<Event>,
    /// Warning Events of every kind, for the baseline.
    pub warning_events: Vec<Event>,
    /// The agents' `SeccompDenied` Events, for the profile changes they name.
    pub denial_events: Vec<Event>,
    pub hpas: Vec<HorizontalPodAutoscaler>,
    /// The workloads and admission objects the role-label audit reads.
    pub role_objects: RoleObjects,
}

/// Thresholds, and the gates judged.
#[derive(Debug, Clone)]
pub struct Options {
    /// A pod gated longer than this is reported.
    pub gated_longer_than: Duration,
    /// A nodeproof condition whose `lastHeartbeatTime` is older is stale:
    /// three heartbeats of the agent's default 5 minutes, the gate
    /// controller's rule too (beyond it a condition counts as Unknown).
    pub heartbeat_max_age: Duration,
    /// NodeMetrics older than this are stale. metrics-server scrapes every
    /// `--metric-resolution` (15 s by default).
    pub metrics_max_age: Duration,
    /// The Metrics API's p99 latency above this is a finding.
    pub metrics_latency_max: Duration,
    /// The gates whose released pods are judged, and their staleness
    /// (`stale_after`): the `[gate]` section of the config, as the gate
    /// controller reads it.
    pub gates: Policy,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            gated_longer_than: Duration::from_secs(600),
            heartbeat_max_age: 3 * nodeproof_report::conditions::Policy::default().heartbeat,
            metrics_max_age: Duration::from_secs(120),
            metrics_latency_max: Duration::from_secs(1),
            gates: GateConfig::default().policy(),
        }
    }
}

/// A problem `cluster check` reports: `findings` in its JSON, each tagged
/// `finding` (not `nodeproof_findings::Finding`, the node checks' row).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "finding", rename_all = "snake_case")]
pub enum Problem {
    /// No APIService of `metrics.k8s.io` (`v1` or `v1beta1`): the Metrics
    /// API is not installed.
    MetricsApiNotRegistered,
    /// Registered, but the aggregator does not report it Available.
    MetricsApiNotAvailable {
        version: MetricsVersion,
        status: ConditionStatus,
        reason: String,
        message: String,
    },
    /// The NodeMetrics list failed.
    NodeMetricsNotServed {
        version: MetricsVersion,
        code: u16,
        message: String,
    },
    /// The PodMetrics list failed.
    PodMetricsNotServed {
        version: MetricsVersion,
        code: u16,
        message: String,
    },
    /// A Ready node without NodeMetrics.
    NodeMetricsMissing { node: String },
    /// A Ready node whose NodeMetrics are older than the window.
    NodeMetricsStale { node: String, age_seconds: u64 },
    /// Running pods (older than the window) without fresh PodMetrics.
    PodMetricsIncomplete {
        version: MetricsVersion,
        missing: usize,
        running: usize,
        /// The first few, `namespace/name`.
        examples: Vec<String>,
    },
    /// The NodeMetrics list's p99 latency is above the limit.
    MetricsApiSlow {
        version: MetricsVersion,
        latency: Latency,
        limit_ms: u64,
    },
    /// An HPA that cannot scale ([`hpa::problem`]).
    HpaNotScaling {
        namespace: String,
        hpa: String,
        condition: String,
        reason: String,
        message: String,
    },
    /// A node labelled with the old `node-role.kubernetes.io/master` but not
    /// `…/control-plane`.
    MasterRoleWithoutControlPlane { node: String },
    /// An object whose field names the old master role label or taint.
    MasterRoleReference {
        object: ObjectRef,
        /// The field path, e.g. `spec.template.spec.tolerations[0].key`.
        field: String,
        usage: RoleUse,
    },
    /// None of nodeproof's conditions on the Node.
    NodeproofMissing { node: String },
    /// nodeproof's conditions not refreshed within the heartbeat window:
    /// its agent is gone or cannot write.
    HeartbeatStale {
        node: String,
        conditions: Vec<ConditionType>,
        /// Age of the oldest stale heartbeat; `None` when one has none at all.
        age_seconds: Option<u64>,
    },
    /// A nodeproof condition that is not True.
    ConditionNotTrue {
        node: String,
        condition: ConditionType,
        status: ConditionStatus,
        reason: String,
        message: String,
    },
    /// An annotation that cannot be a contract.
    ContractUnusable { class: String, error: String },
    /// A contract ready on no node: its pods cannot be scheduled.
    ContractReadyNowhere { class: String, nodes: usize },
    /// A pod held by scheduling gates longer than the threshold.
    PodGated {
        namespace: String,
        pod: String,
        gates: Vec<String>,
        gated_seconds: u64,
        /// The latest Event about the pod: `Reason: message`.
        last_event: Option<String>,
    },
    /// A pod bound to a node where its class's contract is not ready.
    PodOnNotReadyNode {
        namespace: String,
        pod: String,
        node: String,
        class: String,
        /// The node's label value; `None` when the node has no label.
        label: Option<String>,
    },
    /// Pods denied calls the previous version of their seccomp profile
    /// allowed: the profile change broke them (from the agents'
    /// `SeccompDenied` Events, across nodes).
    ProfileChangeBroke {
        profile: String,
        previous: String,
        version: String,
        since: String,
        syscalls: Vec<String>,
        /// `namespace/name` of each pod denied one of them.
        pods: Vec<String>,
        nodes: usize,
    },
    /// A pod a nodeproof gate released (it carries the gate's pod condition
    /// or readiness nodeSelector), running on a node that is not ready for
    /// that gate's conditions: the node broke after binding, or the pod was
    /// placed without the gate.
    ReleasedPodOnNotReadyNode {
        namespace: String,
        pod: String,
        node: String,
        gate: String,
        /// The first of the gate's conditions that is not ready.
        cause: GateCause,
    },
}

/// Why a node is not ready for a gate: its first condition that is not
/// True and fresh, in the gate's order (what the gate controller's
/// `judge::NotReady` says of a condition).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GateCause {
    /// The condition is not on the Node.
    Missing { condition: ConditionType },
    /// Its heartbeat is older than the gate's `stale_after` (`None`: it
    /// has none): Unknown, whatever it says.
    Stale {
        condition: ConditionType,
        age_seconds: Option<u64>,
    },
    /// False or Unknown, with its reason.
    NotTrue {
        condition: ConditionType,
        status: ConditionStatus,
        reason: String,
    },
}

/// One gate's released pods that are bound and not finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GateSummary {
    pub gate: String,
    /// On nodes ready for the gate's conditions.
    pub on_ready: usize,
    /// On nodes that are not (each a [`Problem::ReleasedPodOnNotReadyNode`],
    /// unless another of the pod's gates was reported first).
    pub on_not_ready: usize,
}

/// One contract's state across the nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContractSummary {
    pub class: String,
    pub label: String,
    pub ready: usize,
    pub not_ready: usize,
    /// Nodes without the label (no agent, or an agent that has not judged it).
    pub unlabelled: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub metrics: MetricsSummary,
    pub nodes: usize,
    pub ready_nodes: usize,
    /// Nodes with nodeproof's conditions.
    pub nodeproof_nodes: usize,
    pub contracts: Vec<ContractSummary>,
    /// The gates that released a running pod, in the policy's order.
    pub gates: Vec<GateSummary>,
    /// Profile changes pods were denied after, by profile and change.
    pub profile_changes: Vec<profile_changes::ProfileChange>,
    pub findings: Vec<Problem>,
    /// The comparison with a baseline, when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<baseline::Comparison>,
}

impl Report {
    /// No finding, and nothing regressed since the baseline.
    pub fn ok(&self) -> bool {
        self.findings.is_empty() && !self.baseline.as_ref().is_some_and(|b| b.regressed())
    }
}

fn time(t: &Option<Time>) -> Option<SystemTime> {
    t.as_ref().map(|t| SystemTime::from(t.0))
}

fn age(now: SystemTime, then: SystemTime) -> Duration {
    now.duration_since(then).unwrap_or_default()
}

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

/// The kubelet's `Ready` condition is True.
fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Judge the snapshot at `now`.
pub fn evaluate(snap: &Snapshot, now: SystemTime, opts: &Options) -> Report {
    let mut findings = Vec::new();
    let metrics = metrics_api::evaluate(
        &snap.metrics,
        &snap.nodes,
        &snap.pods,
        now,
        opts,
        &mut findings,
    );
    let mut nodeproof_nodes = 0;
    for node in &snap.nodes {
        if node_conditions(node, now, opts, &mut findings) {
            nodeproof_nodes += 1;
        }
    }
    let (contracts, summaries) = contracts(snap, &mut findings);
    gated_pods(snap, now, opts, &mut findings);
    misplaced_pods(snap, &contracts, &mut findings);
    let gates = released_pods(snap, now, &opts.gates, &mut findings);
    hpas(snap, &mut findings);
    roles::audit(&snap.nodes, &snap.pods, &snap.role_objects, &mut findings);
    let changes = profile_changes::changes(&snap.denial_events);
    for c in changes.iter().filter(|c| c.broke()) {
        let syscalls = c.broken_syscalls();
        findings.push(Problem::ProfileChangeBroke {
            profile: c.profile.clone(),
            previous: c.previous.clone(),
            version: c.version.clone(),
            since: c.since.clone(),
            pods: c
                .pods
                .iter()
                .filter(|p| {
                    p.syscalls.iter().any(|(s, v)| {
                        *v == nodeproof_report::denial_change::PreviousVerdict::Allowed
                            && syscalls.contains(s)
                    })
                })
                .map(|p| format!("{}/{}", p.namespace, p.pod))
                .collect(),
            syscalls,
            nodes: c.nodes(),
        });
    }
    Report {
        metrics,
        nodes: snap.nodes.len(),
        ready_nodes: snap.nodes.iter().filter(|n| node_ready(n)).count(),
        nodeproof_nodes,
        contracts: summaries,
        gates,
        profile_changes: changes,
        findings,
        baseline: None,
    }
}

fn hpas(snap: &Snapshot, out: &mut Vec<Problem>) {
    for h in &snap.hpas {
        if let Some(p) = hpa::problem(h) {
            out.push(Problem::HpaNotScaling {
                namespace: h.metadata.namespace.clone().unwrap_or_default(),
                hpa: name_of(&h.metadata),
                condition: p.condition,
                reason: p.reason,
                message: p.message,
            });
        }
    }
}

/// nodeproof's conditions on one node; whether there are any.
fn node_conditions(node: &Node, now: SystemTime, opts: &Options, out: &mut Vec<Problem>) -> bool {
    let name = name_of(&node.metadata);
    let owned: Vec<_> = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| Some((ConditionType::parse(&c.type_)?, c)))
        .collect();
    if owned.is_empty() {
        out.push(Problem::NodeproofMissing { node: name });
        return false;
    }
    // Each stale condition and the age of its heartbeat (`None`: it has none).
    let stale: Vec<(ConditionType, Option<Duration>)> = owned
        .iter()
        .map(|(kind, c)| (*kind, time(&c.last_heartbeat_time).map(|t| age(now, t))))
        .filter(|(_, beat)| beat.is_none_or(|b| b > opts.heartbeat_max_age))
        .collect();
    if !stale.is_empty() {
        // A condition never beaten makes the node's age unknown.
        let ages: Option<Vec<Duration>> = stale.iter().map(|(_, b)| *b).collect();
        out.push(Problem::HeartbeatStale {
            node: name.clone(),
            conditions: stale.iter().map(|(k, _)| *k).collect(),
            age_seconds: ages.and_then(|a| a.into_iter().max()).map(|d| d.as_secs()),
        });
    }
    for (kind, c) in owned {
        let status = ConditionStatus::parse(&c.status);
        if status != ConditionStatus::True {
            out.push(Problem::ConditionNotTrue {
                node: name.clone(),
                condition: kind,
                status,
                reason: c.reason.clone().unwrap_or_default(),
                message: c.message.clone().unwrap_or_default(),
            });
        }
    }
    true
}

fn contracts(snap: &Snapshot, out: &mut Vec<Problem>) -> (Vec<Contract>, Vec<ContractSummary>) {
    let mut good = Vec::new();
    for rc in &snap.runtime_classes {
        let class = name_of(&rc.metadata);
        let annotations = rc.metadata.annotations.clone().unwrap_or_default();
        match contract::contract_of(&class, &annotations) {
            Some(Ok(c)) => good.push(c),
            Some(Err(e)) => out.push(Problem::ContractUnusable {
                class,
                error: e.to_string(),
            }),
            None => {}
        }
    }
    good.sort_by(|a, b| a.class.cmp(&b.class));
    let summaries: Vec<ContractSummary> = good
        .iter()
        .map(|c| {
            let label = c.label_key();
            let mut s = ContractSummary {
                class: c.class.clone(),
                label: label.clone(),
                ready: 0,
                not_ready: 0,
                unlabelled: 0,
            };
            for node in &snap.nodes {
                match node_label(node, &label).and_then(ContractState::parse) {
                    Some(ContractState::Ready) => s.ready += 1,
                    Some(ContractState::NotReady) => s.not_ready += 1,
                    None => s.unlabelled += 1,
                }
            }
            s
        })
        .collect();
    for s in &summaries {
        if s.ready == 0 {
            out.push(Problem::ContractReadyNowhere {
                class: s.class.clone(),
                nodes: snap.nodes.len(),
            });
        }
    }
    (good, summaries)
}

fn node_label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// `spec.schedulingGates` (GA in 1.30): a pod is not scheduled while any
/// remains, and gates can only be removed after creation, so a gated pod's
/// creation time is when its wait began.
fn gated_pods(snap: &Snapshot, now: SystemTime, opts: &Options, out: &mut Vec<Problem>) {
    for pod in &snap.pods {
        let gates: Vec<String> = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_ref())
            .into_iter()
            .flatten()
            .map(|g| g.name.clone())
            .collect();
        if gates.is_empty() {
            continue;
        }
        let Some(created) = time(&pod.metadata.creation_timestamp) else {
            continue;
        };
        let gated = age(now, created);
        if gated <= opts.gated_longer_than {
            continue;
        }
        let (namespace, name) = (
            pod.metadata.namespace.clone().unwrap_or_default(),
            name_of(&pod.metadata),
        );
        out.push(Problem::PodGated {
            last_event: last_event(&snap.pod_events, pod),
            namespace,
            pod: name,
            gates,
            gated_seconds: gated.as_secs(),
        });
    }
}

/// The latest Event about `pod` (by uid when the Event has one, else by
/// namespace and name), as `Reason: message`.
fn last_event(events: &[Event], pod: &Pod) -> Option<String> {
    let about = |e: &&Event| {
        let o = &e.involved_object;
        o.kind.as_deref() == Some("Pod")
            && match (&o.uid, &pod.metadata.uid) {
                (Some(a), Some(b)) => a == b,
                _ => o.namespace == pod.metadata.namespace && o.name == pod.metadata.name,
            }
    };
    let when = |e: &Event| {
        e.event_time
            .as_ref()
            .map(|t| SystemTime::from(t.0))
            .or_else(|| time(&e.last_timestamp))
            .or_else(|| time(&e.first_timestamp))
            .or_else(|| time(&e.metadata.creation_timestamp))
    };
    events
        .iter()
        .filter(about)
        .max_by_key(|e| when(e))
        .map(|e| {
            format!(
                "{}: {}",
                e.reason.as_deref().unwrap_or(""),
                e.message.as_deref().unwrap_or("")
            )
        })
}

/// Running (or about to run) pods bound to a node whose label for their
/// class is not `ready`: scheduled before the class had its nodeSelector,
/// or the node went not-ready after.
fn misplaced_pods(snap: &Snapshot, contracts: &[Contract], out: &mut Vec<Problem>) {
    let nodes: BTreeMap<String, &Node> = snap
        .nodes
        .iter()
        .map(|n| (name_of(&n.metadata), n))
        .collect();
    let by_class: BTreeMap<&str, &Contract> =
        contracts.iter().map(|c| (c.class.as_str(), c)).collect();
    for pod in &snap.pods {
        let Some(spec) = &pod.spec else { continue };
        let (Some(node), Some(class), false) =
            (&spec.node_name, &spec.runtime_class_name, finished(pod))
        else {
            continue;
        };
        let Some(c) = by_class.get(class.as_str()) else {
            continue;
        };
        // A node gone from the list is the node lifecycle controller's business.
        let Some(n) = nodes.get(node) else { continue };
        let label = node_label(n, &c.label_key());
        if label.and_then(ContractState::parse) != Some(ContractState::Ready) {
            out.push(Problem::PodOnNotReadyNode {
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                pod: name_of(&pod.metadata),
                node: node.clone(),
                class: class.clone(),
                label: label.map(str::to_string),
            });
        }
    }
}

fn finished(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed")
}

/// The policy's gates that released `pod`: those whose pod condition
/// (`gate.nodeproof.dev/<name>`, any status) or readiness nodeSelector key
/// the pod carries. Gates waiting for no condition are left out: their
/// RuntimeClass contract is [`Problem::PodOnNotReadyNode`]'s to judge.
fn released_by<'p>(pod: &Pod, policy: &'p Policy) -> Vec<&'p Gate> {
    let conditions: Vec<&str> = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .map(|c| c.type_.as_str())
        .collect();
    let selector = pod.spec.as_ref().and_then(|s| s.node_selector.as_ref());
    policy
        .gates
        .iter()
        .filter(|g| !g.conditions.is_empty())
        .filter(|g| {
            conditions.contains(&pod_condition_type(&g.name).as_str())
                || selector.is_some_and(|s| s.contains_key(&readiness_label(&g.name)))
        })
        .collect()
}

/// Why `node` is not ready for `gate`: the first of its conditions that
/// `ready_for` refuses on its own; `None` when the node is ready.
fn first_cause(
    gate: &Gate,
    node: &NodeFacts,
    now: SystemTime,
    stale_after: Duration,
) -> Option<GateCause> {
    if ready_for(gate, node, now, stale_after) {
        return None;
    }
    gate.conditions.iter().find_map(|kind| {
        let one = Gate {
            conditions: vec![*kind],
            ..gate.clone()
        };
        if ready_for(&one, node, now, stale_after) {
            return None;
        }
        Some(match node.conditions.get(kind) {
            None => GateCause::Missing { condition: *kind },
            Some(c) if c.stale(now, stale_after) => GateCause::Stale {
                condition: *kind,
                age_seconds: c.heartbeat.map(|h| age(now, h).as_secs()),
            },
            Some(c) => GateCause::NotTrue {
                condition: *kind,
                status: c.status,
                reason: c.reason.clone(),
            },
        })
    })
}

/// Pods a nodeproof gate released, bound and not finished, judged against
/// their node as the gate controller judges readiness: one finding per pod
/// (its first gate not ready), and per gate how many are on ready nodes.
fn released_pods(
    snap: &Snapshot,
    now: SystemTime,
    policy: &Policy,
    out: &mut Vec<Problem>,
) -> Vec<GateSummary> {
    let nodes: BTreeMap<String, &Node> = snap
        .nodes
        .iter()
        .map(|n| (name_of(&n.metadata), n))
        .collect();
    // Facts of the nodes that host a released pod, built once each.
    let mut facts: BTreeMap<&str, NodeFacts> = BTreeMap::new();
    let mut counts: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for pod in &snap.pods {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        if finished(pod) {
            continue;
        }
        let gates = released_by(pod, policy);
        if gates.is_empty() {
            continue;
        }
        // A node gone from the list is the node lifecycle controller's business.
        let Some(n) = nodes.get(node) else { continue };
        let f = facts.entry(node).or_insert_with(|| NodeFacts::of(n));
        let mut reported = false;
        for gate in gates {
            let c = counts.entry(&gate.name).or_default();
            match first_cause(gate, f, now, policy.stale_after) {
                None => c.0 += 1,
                Some(cause) => {
                    c.1 += 1;
                    if !reported {
                        reported = true;
                        out.push(Problem::ReleasedPodOnNotReadyNode {
                            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                            pod: name_of(&pod.metadata),
                            node: node.to_string(),
                            gate: gate.name.clone(),
                            cause,
                        });
                    }
                }
            }
        }
    }
    policy
        .gates
        .iter()
        .filter_map(|g| {
            let (on_ready, on_not_ready) = *counts.get(g.name.as_str())?;
            Some(GateSummary {
                gate: g.name.clone(),
                on_ready,
                on_not_ready,
            })
        })
        .collect()
}

impl std::fmt::Display for GateCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GateCause::Missing { condition } => write!(f, "{condition} is missing"),
            GateCause::Stale {
                condition,
                age_seconds: Some(age),
            } => write!(f, "{condition} heartbeat is {age}s old"),
            GateCause::Stale {
                condition,
                age_seconds: None,
            } => write!(f, "{condition} has no heartbeat"),
            GateCause::NotTrue {
                condition,
                status,
                reason,
            } if reason.is_empty() => write!(f, "{condition} is {status}"),
            GateCause::NotTrue {
                condition,
                status,
                reason,
            } => write!(f, "{condition} is {status} ({reason})"),
        }
    }
}

/// The one-line text of a finding.
impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::MetricsApiNotRegistered => write!(
                f,
                "metrics API: neither APIService v1.metrics.k8s.io nor v1beta1.metrics.k8s.io is registered (install metrics-server)"
            ),
            Problem::MetricsApiNotAvailable {
                version,
                status,
                reason,
                message,
            } => write!(
                f,
                "metrics API: APIService {} Available={status} {reason}: {message}",
                version.api_service()
            ),
            Problem::NodeMetricsNotServed {
                version,
                code,
                message,
            } => write!(
                f,
                "metrics API: GET /apis/{version}/nodes answered {code}: {message}"
            ),
            Problem::PodMetricsNotServed {
                version,
                code,
                message,
            } => write!(
                f,
                "metrics API: GET /apis/{version}/pods answered {code}: {message}"
            ),
            Problem::PodMetricsIncomplete {
                version: _,
                missing,
                running,
                examples,
            } => {
                write!(
                    f,
                    "metrics API: {missing} of {running} Running pods have no fresh PodMetrics ({}",
                    examples.join(", ")
                )?;
                if *missing > examples.len() {
                    write!(f, ", ...")?;
                }
                write!(f, "); HPAs scaling on them are blind")
            }
            Problem::MetricsApiSlow {
                version,
                latency,
                limit_ms,
            } => write!(
                f,
                "metrics API: {version} NodeMetrics list p99 {} ms (p50 {} ms, {} requests) is over {limit_ms} ms; check metrics-server's resources and the aggregator",
                latency.p99_ms, latency.p50_ms, latency.samples
            ),
            Problem::HpaNotScaling {
                namespace,
                hpa,
                condition,
                reason,
                message,
            } => write!(
                f,
                "HPA {namespace}/{hpa}: {condition}=False {reason}: {message}"
            ),
            Problem::MasterRoleWithoutControlPlane { node } => write!(
                f,
                "node {node}: labelled {MASTER_ROLE} without {CONTROL_PLANE_ROLE}; add the control-plane label before removing the old one"
            ),
            Problem::MasterRoleReference {
                object,
                field,
                usage,
            } => write!(
                f,
                "{object}: {field} ({usage}) still names the master role; use {CONTROL_PLANE_ROLE}"
            ),
            Problem::NodeMetricsMissing { node } => {
                write!(f, "metrics API: no NodeMetrics for Ready node {node}")
            }
            Problem::NodeMetricsStale { node, age_seconds } => write!(
                f,
                "metrics API: NodeMetrics of node {node} are {age_seconds}s old"
            ),
            Problem::NodeproofMissing { node } => {
                write!(f, "node {node}: no nodeproof conditions (agent not running?)")
            }
            Problem::HeartbeatStale {
                node,
                conditions,
                age_seconds,
            } => {
                let list: Vec<&str> = conditions.iter().map(|c| c.as_str()).collect();
                match age_seconds {
                    None => write!(f, "node {node}: {} without a heartbeat", list.join(", ")),
                    Some(age) => write!(
                        f,
                        "node {node}: heartbeat of {} is {age}s old (agent stopped?)",
                        list.join(", ")
                    ),
                }
            }
            Problem::ConditionNotTrue {
                node,
                condition,
                status,
                reason,
                message,
            } => write!(f, "node {node}: {condition}={status} {reason}: {message}"),
            Problem::ContractUnusable { error, .. } => write!(f, "{error}"),
            Problem::ContractReadyNowhere { class, nodes } => write!(
                f,
                "RuntimeClass {class}: contract ready on none of {nodes} nodes; its pods cannot be scheduled"
            ),
            Problem::PodGated {
                namespace,
                pod,
                gates,
                gated_seconds,
                last_event,
            } => {
                write!(
                    f,
                    "pod {namespace}/{pod}: gated for {gated_seconds}s by {}",
                    gates.join(", ")
                )?;
                match last_event {
                    Some(e) => write!(f, " ({e})"),
                    None => write!(f, " (no event says why)"),
                }
            }
            Problem::PodOnNotReadyNode {
                namespace,
                pod,
                node,
                class,
                label,
            } => write!(
                f,
                "pod {namespace}/{pod}: bound to node {node} where RuntimeClass {class} is {}",
                label.as_deref().unwrap_or("not judged (no label)")
            ),
            Problem::ProfileChangeBroke {
                profile,
                previous,
                version,
                since,
                syscalls,
                pods,
                nodes,
            } => write!(
                f,
                "profile {profile}: the change at {since} (sha256 {}… → {}…) denies {} that the previous version allowed, in {} on {}; restore the previous version or allow them",
                profile_changes::short(previous),
                profile_changes::short(version),
                syscalls.join(", "),
                nodeproof_findings::count(pods.len(), "pod", "pods"),
                nodeproof_findings::count(*nodes, "node", "nodes"),
            ),
            Problem::ReleasedPodOnNotReadyNode {
                namespace,
                pod,
                node,
                gate,
                cause,
            } => write!(
                f,
                "pod {namespace}/{pod} (released by {gate}) runs on node {node}, whose {cause}: the node broke after binding, or the pod was placed without nodeproof's gate"
            ),
        }
    }
}

/// The Metrics API's line of the text report.
fn metrics_line(m: &MetricsSummary) -> String {
    let Some(version) = m.version else {
        return "metrics API: not registered\n".into();
    };
    let latency = m.latency.map_or_else(
        || "not served".to_string(),
        |l| {
            format!(
                "p50 {} ms, p99 {} ms over {} requests",
                l.p50_ms, l.p99_ms, l.samples
            )
        },
    );
    format!(
        "metrics API: {version}, {latency}; fresh for {}/{} Ready nodes, {}/{} Running pods\n",
        m.nodes_fresh, m.ready_nodes, m.pods_fresh, m.running_pods
    )
}

/// The text report.
pub fn render_text(report: &Report) -> String {
    let mut out = format!(
        "nodes: {} ({} Ready, {} with nodeproof)\n",
        report.nodes, report.ready_nodes, report.nodeproof_nodes
    );
    out.push_str(&metrics_line(&report.metrics));
    for c in &report.contracts {
        out.push_str(&format!(
            "contract {}: ready on {} of {} nodes ({} not-ready, {} unlabelled)\n",
            c.class,
            c.ready,
            c.ready + c.not_ready + c.unlabelled,
            c.not_ready,
            c.unlabelled
        ));
    }
    for g in &report.gates {
        out.push_str(&format!(
            "gate {}: {} running, {} on {}\n",
            g.gate,
            nodeproof_findings::count(g.on_ready + g.on_not_ready, "released pod", "released pods"),
            g.on_ready,
            if g.on_ready == 1 {
                "a ready node"
            } else {
                "ready nodes"
            }
        ));
    }
    for c in &report.profile_changes {
        out.push_str(&format!(
            "profile {} changed at {} (sha256 {}… → {}…): denials in {} on {} since\n",
            c.profile,
            c.since,
            profile_changes::short(&c.previous),
            profile_changes::short(&c.version),
            nodeproof_findings::count(c.pods.len(), "pod", "pods"),
            nodeproof_findings::count(c.nodes(), "node", "nodes"),
        ));
        for p in &c.pods {
            let calls: Vec<String> = p
                .syscalls
                .iter()
                .map(|(s, v)| format!("{s} (previous version: {})", v.as_str()))
                .collect();
            out.push_str(&format!(
                "  {}/{} on {}: {}\n",
                p.namespace,
                p.pod,
                p.node,
                calls.join(", ")
            ));
        }
    }
    if let Some(b) = &report.baseline {
        out.push_str(&baseline::render_text(b));
    }
    if report.findings.is_empty() {
        out.push_str("ok: no problems found\n");
    } else {
        out.push_str(&format!("{} problems:\n", report.findings.len()));
        for f in &report.findings {
            out.push_str(&format!("  {f}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_api::{MetricsList, MetricsSample};
    use serde_json::{json, Value};

    const NOW: u64 = 1_800_000_000;

    fn at(secs_ago: u64) -> String {
        nodeproof_report::conditions::rfc3339(
            SystemTime::UNIX_EPOCH + Duration::from_secs(NOW - secs_ago),
        )
    }

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(NOW)
    }

    fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).expect("fixture")
    }

    fn node(name: &str) -> Value {
        json!({"metadata": {"name": name, "labels": {"runtimeclass.nodeproof.dev/vllm": "ready"}},
        "status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady"},
            {"type": "SeccompProfilesReady", "status": "True", "reason": "ProfilesOK",
             "message": "3 profiles ok", "lastHeartbeatTime": at(60)},
        ]}})
    }

    /// A healthy cluster: two Ready nodes running nodeproof, the Metrics
    /// API Available and fresh, a contract ready on both, a pod of the class
    /// on n1, a pod gated for a minute.
    struct Fixture {
        service: Option<Value>,
        metrics: MetricsList,
        nodes: Vec<Value>,
        classes: Vec<Value>,
        pods: Vec<Value>,
        events: Vec<Value>,
    }

    fn healthy() -> Fixture {
        Fixture {
            service: Some(json!({"metadata": {"name": "v1beta1.metrics.k8s.io"},
                "status": {"conditions": [{"type": "Available", "status": "True", "reason": "Passed"}]}})),
            metrics: MetricsList::Served(
                ["n1", "n2"]
                    .map(|n| MetricsSample {
                        namespace: None,
                        name: n.into(),
                        timestamp: Some(now() - Duration::from_secs(10)),
                    })
                    .to_vec(),
            ),
            nodes: vec![node("n1"), node("n2")],
            classes: vec![json!({"metadata": {"name": "vllm",
                "annotations": {"nodeproof.dev/localhost-profiles": "profiles/vllm-strict.json"}},
                "handler": "runc"})],
            pods: vec![
                json!({"metadata": {"name": "server", "namespace": "ml", "uid": "u1"},
                       "spec": {"nodeName": "n1", "runtimeClassName": "vllm", "containers": []},
                       "status": {"phase": "Running"}}),
                json!({"metadata": {"name": "waiting", "namespace": "ml", "uid": "u2",
                                    "creationTimestamp": at(60)},
                       "spec": {"schedulingGates": [{"name": "nodeproof.dev/gpu-driver-ready"}],
                                "containers": []}}),
            ],
            events: vec![],
        }
    }

    impl Fixture {
        fn evaluate(self) -> Vec<Problem> {
            evaluate(&self.snapshot(), now(), &Options::default()).findings
        }

        fn snapshot(self) -> Snapshot {
            Snapshot {
                metrics: metrics_read(self.service, self.metrics),
                nodes: self.nodes.into_iter().map(typed).collect(),
                runtime_classes: self.classes.into_iter().map(typed).collect(),
                pods: self.pods.into_iter().map(typed).collect(),
                pod_events: self.events.into_iter().map(typed).collect(),
                warning_events: vec![],
                denial_events: vec![],
                hpas: vec![],
                role_objects: RoleObjects::default(),
            }
        }
    }

    /// The Metrics API as `read` leaves it: `service` registers v1beta1,
    /// whose NodeMetrics list answered `nodes`, ten times in 20 ms each.
    fn metrics_read(service: Option<Value>, nodes: MetricsList) -> MetricsApiRead {
        let services: Vec<_> = service
            .into_iter()
            .map(|s| (MetricsVersion::V1beta1, typed(s)))
            .collect();
        let Some(version) = metrics_api::choose(&services) else {
            return MetricsApiRead::unregistered();
        };
        let served = matches!(nodes, MetricsList::Served(_));
        MetricsApiRead {
            services,
            version: Some(version),
            nodes,
            pods: MetricsList::Served(vec![]),
            latencies: if served {
                vec![Duration::from_millis(20); 10]
            } else {
                vec![]
            },
        }
    }

    fn set_condition(node: &mut Value, kind: &str, patch: Value) {
        let list = node["status"]["conditions"].as_array_mut().unwrap();
        let c = list.iter_mut().find(|c| c["type"] == kind).unwrap();
        for (k, v) in patch.as_object().unwrap() {
            c[k] = v.clone();
        }
    }

    #[test]
    fn a_healthy_cluster_has_no_findings_and_counts_its_contracts() {
        let snap = healthy().snapshot();
        let r = evaluate(&snap, now(), &Options::default());
        assert!(r.ok(), "{:?}", r.findings);
        assert_eq!((r.nodes, r.ready_nodes, r.nodeproof_nodes), (2, 2, 2));
        assert_eq!(
            r.contracts,
            [ContractSummary {
                class: "vllm".into(),
                label: "runtimeclass.nodeproof.dev/vllm".into(),
                ready: 2,
                not_ready: 0,
                unlabelled: 0
            }]
        );
    }

    #[test]
    fn each_broken_part_is_one_finding() {
        type Break = fn(&mut Fixture);
        let table: Vec<(&str, Break, Vec<Problem>)> = vec![
            ("APIService missing", |f| f.service = None, vec![Problem::MetricsApiNotRegistered]),
            (
                "APIService Available=False",
                |f| {
                    f.service = Some(json!({"metadata": {"name": "v1beta1.metrics.k8s.io"},
                        "status": {"conditions": [{"type": "Available", "status": "False",
                            "reason": "FailedDiscoveryCheck",
                            "message": "failing or missing response from https://10.96.0.5:443"}]}}))
                },
                vec![Problem::MetricsApiNotAvailable {
                    version: MetricsVersion::V1beta1,
                    status: ConditionStatus::False,
                    reason: "FailedDiscoveryCheck".into(),
                    message: "failing or missing response from https://10.96.0.5:443".into(),
                }],
            ),
            (
                "APIService without conditions yet",
                |f| f.service = Some(json!({"metadata": {"name": "v1beta1.metrics.k8s.io"}})),
                vec![Problem::MetricsApiNotAvailable {
                    version: MetricsVersion::V1beta1,
                    status: ConditionStatus::Unknown,
                    reason: String::new(),
                    message: "no Available condition".into(),
                }],
            ),
            (
                "NodeMetrics not served",
                |f| {
                    f.metrics = MetricsList::NotServed {
                        code: 503,
                        message: "service unavailable".into(),
                    }
                },
                vec![Problem::NodeMetricsNotServed {
                    version: MetricsVersion::V1beta1,
                    code: 503,
                    message: "service unavailable".into(),
                }],
            ),
            (
                "registered but no NodeMetrics for a node",
                |f| {
                    if let MetricsList::Served(m) = &mut f.metrics {
                        m.retain(|m| m.name != "n2");
                    }
                },
                vec![Problem::NodeMetricsMissing { node: "n2".into() }],
            ),
            (
                "stale NodeMetrics",
                |f| {
                    if let MetricsList::Served(m) = &mut f.metrics {
                        m[0].timestamp = Some(now() - Duration::from_secs(300));
                    }
                },
                vec![Problem::NodeMetricsStale {
                    node: "n1".into(),
                    age_seconds: 300,
                }],
            ),
            (
                "a NotReady node needs no metrics",
                |f| {
                    set_condition(&mut f.nodes[1], "Ready", json!({"status": "False"}));
                    if let MetricsList::Served(m) = &mut f.metrics {
                        m.retain(|m| m.name != "n2");
                    }
                },
                vec![],
            ),
            (
                "a node without nodeproof",
                |f| {
                    f.nodes[1]["status"]["conditions"]
                        .as_array_mut()
                        .unwrap()
                        .retain(|c| c["type"] == "Ready")
                },
                vec![Problem::NodeproofMissing { node: "n2".into() }],
            ),
            (
                "stale heartbeat",
                |f| {
                    set_condition(
                        &mut f.nodes[0],
                        "SeccompProfilesReady",
                        json!({"lastHeartbeatTime": at(1200)}),
                    )
                },
                vec![Problem::HeartbeatStale {
                    node: "n1".into(),
                    conditions: vec![ConditionType::SeccompProfilesReady],
                    age_seconds: Some(1200),
                }],
            ),
            (
                "a condition without a heartbeat",
                |f| {
                    let list = f.nodes[0]["status"]["conditions"].as_array_mut().unwrap();
                    list[1].as_object_mut().unwrap().remove("lastHeartbeatTime");
                },
                vec![Problem::HeartbeatStale {
                    node: "n1".into(),
                    conditions: vec![ConditionType::SeccompProfilesReady],
                    age_seconds: None,
                }],
            ),
            (
                "False condition with its reason",
                |f| {
                    set_condition(
                        &mut f.nodes[1],
                        "SeccompProfilesReady",
                        json!({"status": "False", "reason": "ProfileMissing",
                               "message": "profiles/vllm-strict.json: missing"}),
                    )
                },
                vec![Problem::ConditionNotTrue {
                    node: "n2".into(),
                    condition: ConditionType::SeccompProfilesReady,
                    status: ConditionStatus::False,
                    reason: "ProfileMissing".into(),
                    message: "profiles/vllm-strict.json: missing".into(),
                }],
            ),
            (
                "a contract ready nowhere (and the pod bound to a not-ready node)",
                |f| {
                    for n in &mut f.nodes {
                        n["metadata"]["labels"]["runtimeclass.nodeproof.dev/vllm"] = json!("not-ready");
                    }
                },
                vec![
                    Problem::ContractReadyNowhere {
                        class: "vllm".into(),
                        nodes: 2,
                    },
                    Problem::PodOnNotReadyNode {
                        namespace: "ml".into(),
                        pod: "server".into(),
                        node: "n1".into(),
                        class: "vllm".into(),
                        label: Some("not-ready".into()),
                    },
                ],
            ),
            (
                "a pod on a node without the label",
                |f| f.nodes[0]["metadata"]["labels"] = json!({}),
                vec![Problem::PodOnNotReadyNode {
                    namespace: "ml".into(),
                    pod: "server".into(),
                    node: "n1".into(),
                    class: "vllm".into(),
                    label: None,
                }],
            ),
            (
                "a finished pod on a not-ready node is history",
                |f| {
                    f.nodes[0]["metadata"]["labels"] = json!({});
                    f.pods[0]["status"]["phase"] = json!("Succeeded");
                },
                vec![],
            ),
            (
                "a long-gated pod with the gate controller's event",
                |f| {
                    f.pods[1]["metadata"]["creationTimestamp"] = json!(at(1800));
                    let ev = |reason: &str, message: &str, secs: u64| {
                        json!({"metadata": {"name": format!("waiting.{secs}"), "namespace": "ml"},
                               "involvedObject": {"kind": "Pod", "namespace": "ml", "name": "waiting", "uid": "u2"},
                               "reason": reason, "message": message, "lastTimestamp": at(secs)})
                    };
                    f.events = vec![
                        ev("Old", "older", 900),
                        ev("WaitingForNodes",
                           "waiting for nodeproof.dev/gpu-driver-ready: 0 of 2 matching nodes ready", 30),
                    ];
                },
                vec![Problem::PodGated {
                    namespace: "ml".into(),
                    pod: "waiting".into(),
                    gates: vec!["nodeproof.dev/gpu-driver-ready".into()],
                    gated_seconds: 1800,
                    last_event: Some(
                        "WaitingForNodes: waiting for nodeproof.dev/gpu-driver-ready: 0 of 2 matching nodes ready"
                            .into(),
                    ),
                }],
            ),
            (
                "an unusable contract annotation",
                |f| {
                    f.classes.push(json!({"metadata": {"name": "bad",
                        "annotations": {"nodeproof.dev/localhost-profiles": "/abs.json"}}, "handler": "runc"}))
                },
                vec![Problem::ContractUnusable {
                    class: "bad".into(),
                    error: "RuntimeClass bad: nodeproof.dev/localhost-profiles entry \"/abs.json\" is not a relative path below the seccomp root".into(),
                }],
            ),
        ];
        for (what, broken, want) in table {
            let mut f = healthy();
            broken(&mut f);
            assert_eq!(f.evaluate(), want, "{what}");
        }
    }

    const GPU_GATE: &str = "nodeproof.dev/gpu-driver-ready";
    const GPU_LABEL: &str = "gate.nodeproof.dev/gpu-driver-ready";

    /// A GPU node ready for the GPU gate: GPUDriverReady and GPUHealthy
    /// True and fresh, the readiness label.
    fn gpu_node(name: &str) -> Value {
        let mut n = node(name);
        n["metadata"]["labels"][GPU_LABEL] = json!("ready");
        let list = n["status"]["conditions"].as_array_mut().unwrap();
        for kind in ["GPUDriverReady", "GPUHealthy"] {
            list.push(json!({"type": kind, "status": "True", "reason": "Ok", "lastHeartbeatTime": at(60)}));
        }
        n
    }

    /// A running pod bound to `node`, released by the GPU gate (its pod
    /// condition and readiness nodeSelector, as the controller leaves them).
    fn released_pod(name: &str, node: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}")},
               "spec": {"nodeName": node, "nodeSelector": {GPU_LABEL: "ready"}, "containers": []},
               "status": {"phase": "Running", "conditions": [
                   {"type": "PodScheduled", "status": "True"},
                   {"type": GPU_LABEL, "status": "True", "reason": "NodesReady"}]}})
    }

    fn snapshot(nodes: Vec<Value>, pods: Vec<Value>) -> Snapshot {
        Snapshot {
            metrics: MetricsApiRead::unregistered(),
            nodes: nodes.into_iter().map(typed).collect(),
            runtime_classes: vec![],
            pods: pods.into_iter().map(typed).collect(),
            pod_events: vec![],
            warning_events: vec![],
            denial_events: vec![],
            hpas: vec![],
            role_objects: RoleObjects::default(),
        }
    }

    fn released_findings(r: &Report) -> Vec<Problem> {
        r.findings
            .iter()
            .filter(|f| matches!(f, Problem::ReleasedPodOnNotReadyNode { .. }))
            .cloned()
            .collect()
    }

    #[test]
    fn a_released_pod_on_a_node_that_broke_is_one_finding_with_its_first_cause() {
        type Break = fn(&mut Value);
        let table: Vec<(&str, Break, Option<GateCause>)> = vec![
            ("ready", |_| {}, None),
            (
                "GPUDriverReady False",
                |n| {
                    set_condition(
                        n,
                        "GPUDriverReady",
                        json!({"status": "False", "reason": "NVMLInitFailed"}),
                    )
                },
                Some(GateCause::NotTrue {
                    condition: ConditionType::GPUDriverReady,
                    status: ConditionStatus::False,
                    reason: "NVMLInitFailed".into(),
                }),
            ),
            (
                "the first condition in the gate's order is the cause",
                |n| {
                    set_condition(n, "GPUHealthy", json!({"status": "Unknown", "reason": ""}));
                    set_condition(n, "GPUDriverReady", json!({"lastHeartbeatTime": at(3600)}));
                },
                Some(GateCause::Stale {
                    condition: ConditionType::GPUDriverReady,
                    age_seconds: Some(3600),
                }),
            ),
            (
                "GPUHealthy Unknown",
                |n| set_condition(n, "GPUHealthy", json!({"status": "Unknown", "reason": ""})),
                Some(GateCause::NotTrue {
                    condition: ConditionType::GPUHealthy,
                    status: ConditionStatus::Unknown,
                    reason: String::new(),
                }),
            ),
            (
                "no heartbeat",
                |n| {
                    let list = n["status"]["conditions"].as_array_mut().unwrap();
                    let c = list.iter_mut().find(|c| c["type"] == "GPUHealthy").unwrap();
                    c.as_object_mut().unwrap().remove("lastHeartbeatTime");
                },
                Some(GateCause::Stale {
                    condition: ConditionType::GPUHealthy,
                    age_seconds: None,
                }),
            ),
            (
                "the agent's GPU check gone",
                |n| {
                    n["status"]["conditions"]
                        .as_array_mut()
                        .unwrap()
                        .retain(|c| c["type"] != "GPUDriverReady")
                },
                Some(GateCause::Missing {
                    condition: ConditionType::GPUDriverReady,
                }),
            ),
        ];
        for (what, broken, want) in table {
            let mut n = gpu_node("gpu-a");
            broken(&mut n);
            let r = evaluate(
                &snapshot(vec![n], vec![released_pod("vllm-0", "gpu-a")]),
                now(),
                &Options::default(),
            );
            let want_findings: Vec<Problem> = want
                .clone()
                .into_iter()
                .map(|cause| Problem::ReleasedPodOnNotReadyNode {
                    namespace: "ml".into(),
                    pod: "vllm-0".into(),
                    node: "gpu-a".into(),
                    gate: GPU_GATE.into(),
                    cause,
                })
                .collect();
            assert_eq!(released_findings(&r), want_findings, "{what}");
            let broken = usize::from(want.is_some());
            assert_eq!(
                r.gates,
                [GateSummary {
                    gate: GPU_GATE.into(),
                    on_ready: 1 - broken,
                    on_not_ready: broken,
                }],
                "{what}"
            );
        }
    }

    #[test]
    fn only_running_pods_a_gate_released_are_judged() {
        let mut broken = gpu_node("gpu-a");
        set_condition(
            &mut broken,
            "GPUDriverReady",
            json!({"status": "False", "reason": "NVMLInitFailed"}),
        );
        let mut never_gated = released_pod("plain", "gpu-a");
        never_gated["spec"]
            .as_object_mut()
            .unwrap()
            .remove("nodeSelector");
        never_gated["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "True"}]);
        let mut done = released_pod("done", "gpu-a");
        done["status"]["phase"] = json!("Succeeded");
        let mut unbound = released_pod("unbound", "gpu-a");
        unbound["spec"].as_object_mut().unwrap().remove("nodeName");
        let gone = released_pod("gone", "no-such-node");
        // A gate not in the policy says nothing of what it waited for.
        let mut other = never_gated.clone();
        other["metadata"]["name"] = json!("other");
        other["spec"]["nodeSelector"] = json!({"gate.nodeproof.dev/elsewhere": "ready"});
        let r = evaluate(
            &snapshot(
                vec![broken.clone()],
                vec![never_gated, done, unbound, gone, other],
            ),
            now(),
            &Options::default(),
        );
        assert_eq!(released_findings(&r), []);
        assert_eq!(r.gates, []);
        // The node's own condition is still reported, once, as the node's.
        assert!(r
            .findings
            .iter()
            .any(|f| matches!(f, Problem::ConditionNotTrue { node, .. } if node == "gpu-a")));

        // Released through either mark alone.
        let mut by_selector = released_pod("by-selector", "gpu-a");
        by_selector["status"]["conditions"] = json!([]);
        let mut by_condition = released_pod("by-condition", "gpu-a");
        by_condition["spec"]
            .as_object_mut()
            .unwrap()
            .remove("nodeSelector");
        let r = evaluate(
            &snapshot(vec![broken], vec![by_selector, by_condition]),
            now(),
            &Options::default(),
        );
        let pods: Vec<String> = released_findings(&r)
            .into_iter()
            .map(|f| match f {
                Problem::ReleasedPodOnNotReadyNode { pod, .. } => pod,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(pods, ["by-selector", "by-condition"]);
    }

    #[test]
    fn a_pod_released_by_two_broken_gates_is_one_finding_and_counted_for_each() {
        let mut n = gpu_node("gpu-a");
        set_condition(
            &mut n,
            "GPUDriverReady",
            json!({"status": "False", "reason": "NVMLInitFailed"}),
        );
        set_condition(
            &mut n,
            "SeccompProfilesReady",
            json!({"status": "False", "reason": "ProfileMissing"}),
        );
        let mut pod = released_pod("vllm-0", "gpu-a");
        pod["spec"]["nodeSelector"]["gate.nodeproof.dev/seccomp-ready"] = json!("ready");
        let ok = released_pod("vllm-1", "gpu-b");
        let r = evaluate(
            &snapshot(vec![n, gpu_node("gpu-b")], vec![pod, ok]),
            now(),
            &Options::default(),
        );
        let found = released_findings(&r);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            found[0].to_string(),
            "pod ml/vllm-0 (released by nodeproof.dev/gpu-driver-ready) runs on node gpu-a, whose GPUDriverReady is False (NVMLInitFailed): the node broke after binding, or the pod was placed without nodeproof's gate"
        );
        assert_eq!(
            r.gates,
            [
                GateSummary {
                    gate: GPU_GATE.into(),
                    on_ready: 1,
                    on_not_ready: 1
                },
                GateSummary {
                    gate: "nodeproof.dev/seccomp-ready".into(),
                    on_ready: 0,
                    on_not_ready: 1
                },
            ]
        );
        let text = render_text(&r);
        assert!(
            text.contains(
                "gate nodeproof.dev/gpu-driver-ready: 2 released pods running, 1 on a ready node\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "gate nodeproof.dev/seccomp-ready: 1 released pod running, 0 on ready nodes\n"
            ),
            "{text}"
        );
        let json = serde_json::to_value(&found[0]).unwrap();
        assert_eq!(json["finding"], "released_pod_on_not_ready_node");
        assert_eq!(
            json["cause"],
            json!({"kind": "not_true", "condition": "GPUDriverReady", "status": "False", "reason": "NVMLInitFailed"})
        );
    }

    #[test]
    fn the_configured_gates_and_staleness_are_the_ones_judged() {
        let mut n = gpu_node("gpu-a");
        set_condition(&mut n, "GPUHealthy", json!({"lastHeartbeatTime": at(400)}));
        let pod = released_pod("vllm-0", "gpu-a");
        let default = evaluate(
            &snapshot(vec![n.clone()], vec![pod.clone()]),
            now(),
            &Options::default(),
        );
        assert_eq!(released_findings(&default), []);
        // heartbeat-s = 60: stale after 180s.
        let opts = Options {
            gates: GateConfig {
                heartbeat_s: Some(60),
                ..GateConfig::default()
            }
            .policy(),
            ..Options::default()
        };
        let r = evaluate(&snapshot(vec![n], vec![pod]), now(), &opts);
        assert_eq!(
            released_findings(&r),
            [Problem::ReleasedPodOnNotReadyNode {
                namespace: "ml".into(),
                pod: "vllm-0".into(),
                node: "gpu-a".into(),
                gate: GPU_GATE.into(),
                cause: GateCause::Stale {
                    condition: ConditionType::GPUHealthy,
                    age_seconds: Some(400)
                },
            }]
        );
    }

    #[test]
    fn findings_read_as_one_line_each() {
        let f = Problem::PodGated {
            namespace: "ml".into(),
            pod: "p".into(),
            gates: vec!["a".into(), "b".into()],
            gated_seconds: 700,
            last_event: None,
        };
        assert_eq!(
            f.to_string(),
            "pod ml/p: gated for 700s by a, b (no event says why)"
        );
        let json = serde_json::to_value(&f).unwrap();
        assert_eq!(json["finding"], "pod_gated");
        assert_eq!(json["gated_seconds"], 700);
    }
}
