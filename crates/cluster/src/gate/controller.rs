//! The controller's I/O: watches of Pods, Nodes and RuntimeClasses feed the
//! [`Gatekeeper`]; while this replica leads, each pod a change could affect
//! is judged, its releasable gates removed and its Event written.
//!
//! Pods are watched with the field selector `spec.nodeName=` (server-side:
//! only unbound pods; a gated pod is never bound, the scheduler does not
//! consider it). There is no field selector for `spec.schedulingGates`, so
//! which of those pods carry a configured gate is decided here, client-side
//! ([`PodNeeds::of`]); the others are dropped on arrival.
//!
//! A gate is removed with an RFC 6902 JSON patch on the pod: `test` that the
//! pod is the same (uid) and that the entry at the index is still that gate,
//! then `remove` that index. A concurrent change of the gates (another
//! controller removing its own) shifts the index, the `test` fails (422),
//! nothing is removed, and the pod is judged again from what the watch
//! delivers next: never another controller's gate, never one twice.
//!
//! The watches are kube-runtime's `watcher` (its backoff, re-lists and
//! `Init`/`InitDone` bracketing), and every request is the edge's
//! (`nodeproof_apiclient::controller`); what is kept of each object is the
//! [`Gatekeeper`]'s digest, not a kube-runtime `reflector` store of whole
//! objects, nor its `Controller` (which reconciles one object at a time from
//! such a store, where a pod is judged against every node). Measured by
//! `cargo test -p nodeproof-cluster --test runtime_fit -- --nocapture`: a
//! reflector store holds 72.7 MiB for 5,000 GPU Nodes (no managedFields)
//! and 296.4 MiB for 20,000 gated Pods; the Gatekeeper holds 24.6 MiB for
//! the Nodes (their facts and the label index) and 45.9 MiB with the Pods
//! too; a store would come beside it, since the incremental judgement needs
//! the digests and the changes, not the objects. A reflector makes the
//! same requests as its watcher (one list, one watch per kind: measured
//! there too), so it would save no connection either.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;
use nodeproof_apiclient::controller::{self as edge, Event as Watched};
use nodeproof_apiclient::read::answered;
use nodeproof_apiclient::watch::WatchError;
use nodeproof_apiclient::{Client, Error, ResourceExt};
use tokio::sync::watch;

use super::config::{Gate, Policy};
use super::event::{event_body, event_patch, EventBook, EventWrite};
use super::leader::{join, LeaderError, LeaseOptions};
use super::metrics::{Failure, GateMetrics};
use super::pod::{PodKey, PodNeeds};
use super::state::{pod_key, Decision, Gatekeeper};
use super::steer::{pod_condition, pod_status_patch, release_patch};

#[derive(Debug, Clone)]
pub struct Options {
    pub policy: Policy,
    pub lease: LeaseOptions,
    /// How often heartbeats are checked for staleness and failed writes retried.
    pub tick: Duration,
}

/// What the controller's `/readyz` says: ready once it takes part in the
/// leader election and every watched kind was listed (a standby replica is
/// ready: it can take over). Until then, why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Not in the leader election: the last attempt's error, and when the
    /// next one is.
    Joining {
        error: String,
        retry_in: Duration,
    },
    /// In the election; not every watched kind has been listed yet.
    Listing,
    Ready,
}

impl std::fmt::Display for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Readiness::Joining { error, retry_in } => write!(
                f,
                "not in the leader election: {error}; retrying in {:.1} s",
                retry_in.as_secs_f64()
            ),
            Readiness::Listing => f.write_str("listing Pods, Nodes and RuntimeClasses"),
            Readiness::Ready => f.write_str("ready"),
        }
    }
}

/// Runs until `stop` turns true: then leaves leader election (releasing the
/// lease if held) and returns.
///
/// Nothing ends it but `stop`: the leader election is joined again, with
/// backoff, whenever it cannot be joined or its task ends (the API server
/// away); `ready` says meanwhile why it is not ready.
pub async fn run(
    client: Client,
    opts: Options,
    metrics: Arc<GateMetrics>,
    mut stop: watch::Receiver<bool>,
    ready: watch::Sender<Readiness>,
) {
    let said = |e: &LeaderError, retry_in: Duration| {
        ready.send_replace(Readiness::Joining {
            error: nodeproof_findings::errors::error_chain(e),
            retry_in,
        });
    };
    let Some((mut leader, mut election)) = join(client.clone(), &opts.lease, &mut stop, said).await
    else {
        return;
    };
    ready.send_replace(Readiness::Listing);
    let mut c = Controller {
        client: client.clone(),
        gk: Gatekeeper::new(opts.policy.clone()),
        events: EventBook::default(),
        metrics,
        leading: false,
        dirty: BTreeSet::new(),
        retry: BTreeSet::new(),
        pending_events: BTreeMap::new(),
        relabel: BTreeSet::new(),
        relabel_retry: BTreeSet::new(),
        pod_conditions: BTreeMap::new(),
        conditions_due: Vec::new(),
    };
    let mut pods = edge::unbound_pods(&client);
    let mut nodes = edge::nodes(&client);
    let mut classes = edge::runtime_classes(&client);
    let mut sync = Sync::default();
    let mut tick = tokio::time::interval(opts.tick);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rejoin = false;
    loop {
        // Biased, in this order: stopping, leadership, Nodes, the tick,
        // RuntimeClasses, then Pods. Node events are few and decide the
        // readiness labels every release is narrowed to, and the tick finds
        // stale heartbeats: a pod watch busy with a thousand released pods
        // must hold back neither.
        tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break,
            changed = leader.changed() => {
                let leads = changed.is_ok() && *leader.borrow_and_update();
                if leads != c.leading {
                    tracing::info!(identity = %opts.lease.identity, leads, "leadership changed");
                    c.leading = leads;
                    c.metrics.set_leader(leads);
                    if leads {
                        c.dirty.extend(c.gk.pod_keys());
                        c.relabel.extend(c.gk.node_names());
                    }
                }
                if changed.is_err() {
                    // The election task ended on its own (it logged why):
                    // this replica no longer knows whether it leads. It
                    // stops acting and joins again (below).
                    c.leading = false;
                    c.metrics.set_leader(false);
                    rejoin = true;
                }
            }
            Some(ev) = nodes.next() => {
                let now = SystemTime::now();
                c.apply(&mut sync.nodes, ev, now, Kind::Node);
            }
            _ = tick.tick() => {
                let now = SystemTime::now();
                let changed = c.gk.tick(now);
                c.dirty.extend(changed.pods);
                c.relabel.extend(changed.nodes);
                let retry = std::mem::take(&mut c.retry);
                c.dirty.extend(retry);
                let retry = std::mem::take(&mut c.relabel_retry);
                c.relabel.extend(retry);
                // Tried once this tick, oldest first (popped from the end).
                c.conditions_due = c.pod_conditions.keys().rev().cloned().collect();
                for (gate, n) in c.gk.gated_by_gate() {
                    c.metrics.set_gated(&gate, n);
                }
            }
            Some(ev) = classes.next() => {
                let now = SystemTime::now();
                c.apply(&mut sync.classes, ev, now, Kind::Class);
            }
            Some(ev) = pods.next() => {
                let now = SystemTime::now();
                c.apply(&mut sync.pods, ev, now, Kind::Pod);
            }
            // More to do from the last round (pods to judge, pending Events): go on, after
            // whatever the watches delivered meanwhile.
            _ = std::future::ready(()), if c.leading && sync.all_listed() && (!c.pending_events.is_empty() || !c.dirty.is_empty() || !c.conditions_due.is_empty()) => {}
        }
        if std::mem::take(&mut rejoin) {
            ready.send_replace(Readiness::Joining {
                error: "the leader election ended".into(),
                retry_in: Duration::ZERO,
            });
            let said = |e: &LeaderError, retry_in: Duration| {
                ready.send_replace(Readiness::Joining {
                    error: nodeproof_findings::errors::error_chain(e),
                    retry_in,
                });
            };
            match join(client.clone(), &opts.lease, &mut stop, said).await {
                Some((l, e)) => {
                    leader = l;
                    election = e;
                    ready.send_replace(Readiness::Listing);
                }
                None => break,
            }
        }
        if sync.all_listed() && *ready.borrow() == Readiness::Listing {
            ready.send_replace(Readiness::Ready);
        }
        if c.leading && sync.all_listed() {
            c.process(&leader).await;
        }
    }
    c.metrics.set_leader(false);
    drop(leader);
    // The election task releases the lease when it sees the receiver gone.
    let _ = tokio::time::timeout(Duration::from_secs(5), election).await;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Pod,
    Node,
    Class,
}

/// A watch's (re)list: names seen since `Init`, to drop the rest at `InitDone`.
#[derive(Debug, Default)]
struct Listing {
    seen: Option<HashSet<String>>,
    listed: bool,
}

#[derive(Debug, Default)]
struct Sync {
    pods: Listing,
    nodes: Listing,
    classes: Listing,
}

impl Sync {
    /// Nothing is judged before every kind was listed once: a pod judged
    /// against half the nodes would get a wrong Event.
    fn all_listed(&self) -> bool {
        self.pods.listed && self.nodes.listed && self.classes.listed
    }
}

struct Controller {
    client: Client,
    gk: Gatekeeper,
    events: EventBook,
    metrics: Arc<GateMetrics>,
    leading: bool,
    /// Pods to judge at the next chance.
    dirty: BTreeSet<PodKey>,
    /// Pods whose writes failed: judged again at the next tick.
    retry: BTreeSet<PodKey>,
    /// The Event message each waiting pod should carry, not yet written.
    pending_events: BTreeMap<PodKey, String>,
    /// Nodes whose readiness labels to look at (and write) next round.
    relabel: BTreeSet<String>,
    /// Nodes whose label write failed: looked at again at the next tick.
    relabel_retry: BTreeSet<String>,
    /// Pod conditions not yet written (a failed write is tried again at the
    /// next ticks, [`CONDITION_TRIES`] times in all: the pod is bound by then
    /// and no longer watched).
    pod_conditions: BTreeMap<PodKey, PendingCondition>,
    /// The pending conditions of the last tick not yet tried, each tried once
    /// per tick, at most [`CONDITIONS_PER_ROUND`] a round.
    conditions_due: Vec<PodKey>,
}

#[derive(Debug, Clone)]
struct PendingCondition {
    namespace: String,
    name: String,
    conditions: Vec<serde_json::Value>,
    tries: u32,
}

/// Writes of one pod condition before it is given up (and said so).
const CONDITION_TRIES: u32 = 3;

/// Event writes per round of the loop (see `Controller::process`).
const EVENTS_PER_ROUND: usize = 100;
/// Release conditions written per round, like the Events: they say why a
/// pod was released (`kubectl describe pod`), and a tick's thousand of them
/// written in one round would hold the next releases back for as many
/// sequential requests. (`gate_scale` could not tell the difference on this
/// machine: its runs varied 2-3x with the machine's load, before and after.)
const CONDITIONS_PER_ROUND: usize = 100;
/// Pods judged (and released) per round of the loop.
const RELEASES_PER_ROUND: usize = 100;

impl Controller {
    fn apply<K: ResourceExt>(
        &mut self,
        listing: &mut Listing,
        ev: Result<Watched<K>, WatchError>,
        now: SystemTime,
        kind: Kind,
    ) where
        Controller: Upsert<K>,
    {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                // The watcher retries with backoff; said once per failure.
                self.metrics.failed(Failure::Watch);
                tracing::warn!(?kind, error = %nodeproof_findings::errors::error_chain(&e), "watch failed; retrying");
                return;
            }
        };
        match ev {
            Watched::Init => listing.seen = Some(HashSet::new()),
            Watched::InitApply(o) => {
                if let Some(seen) = &mut listing.seen {
                    seen.insert(Self::key_of(&o));
                }
                self.upsert(&o, now);
            }
            Watched::InitDone => {
                let seen = listing.seen.take().unwrap_or_default();
                for gone in self.known(kind).into_iter().filter(|k| !seen.contains(k)) {
                    self.remove(kind, &gone);
                }
                listing.listed = true;
            }
            Watched::Apply(o) => self.upsert(&o, now),
            Watched::Delete(o) => {
                let key = Self::key_of(&o);
                self.remove(kind, &key);
            }
        }
    }

    fn key_of<K: ResourceExt>(o: &K) -> String {
        match o.namespace() {
            Some(ns) => format!("{ns}/{}", o.name_any()),
            None => o.name_any(),
        }
    }

    fn known(&self, kind: Kind) -> Vec<String> {
        match kind {
            Kind::Pod => self.gk.pod_keys(),
            Kind::Node => self.gk.node_names(),
            Kind::Class => self.gk.class_names(),
        }
    }

    fn remove(&mut self, kind: Kind, key: &str) {
        match kind {
            Kind::Pod => {
                self.gk.delete_pod(key);
                self.events.forget(&key.to_string());
                self.pending_events.remove(key);
            }
            Kind::Node => {
                let keys = self.gk.delete_node(key);
                self.dirty.extend(keys);
            }
            Kind::Class => {
                let keys = self.gk.delete_class(key);
                self.dirty.extend(keys);
            }
        }
    }

    /// Judges the dirty pods and carries out the decisions, while leading.
    /// Still the leader? Checked before every write.
    fn still_leading(&mut self, leader: &watch::Receiver<bool>) -> bool {
        if !*leader.borrow() {
            self.leading = false;
            self.metrics.set_leader(false);
        }
        self.leading
    }

    /// Judges the dirty pods; removes what can go first (it is what pods
    /// wait for), then writes at most [`EVENTS_PER_ROUND`] of the pending
    /// Events, so that a large judgement (the first one, or a pool of nodes
    /// changing) takes turns with the watches instead of holding them.
    async fn process(&mut self, leader: &watch::Receiver<bool>) {
        let now = SystemTime::now();
        // Labels first: a pod released in this round is narrowed to them.
        let relabel = std::mem::take(&mut self.relabel);
        for node in relabel {
            if !self.still_leading(leader) {
                return;
            }
            self.write_labels(&node, now).await;
        }
        // At most RELEASES_PER_ROUND pods judged per round: a pool turning
        // ready releases its pods over several rounds, between which the
        // watches deliver (the other nodes turning ready get their labels
        // sooner, so the pods released later find them).
        let mut dirty = Vec::new();
        while dirty.len() < RELEASES_PER_ROUND {
            let Some(k) = self.dirty.pop_first() else {
                break;
            };
            dirty.push(k);
        }
        let decisions: Vec<Decision> = dirty.iter().filter_map(|k| self.gk.judge(k, now)).collect();
        for d in decisions {
            if !self.still_leading(leader) {
                return;
            }
            let key = d.key.clone();
            match self.release(d, now).await {
                Some(message) => {
                    self.pending_events.insert(key, message);
                }
                None => {
                    self.pending_events.remove(&key);
                }
            }
        }
        for _ in 0..EVENTS_PER_ROUND {
            let Some((key, message)) = self.pending_events.pop_first() else {
                break;
            };
            if !self.still_leading(leader) {
                return;
            }
            let Some(needs) = self.gk.pod(&key).map(|e| e.needs.clone()) else {
                continue;
            };
            self.write_event(&needs, &message, SystemTime::now()).await;
        }
        for _ in 0..CONDITIONS_PER_ROUND {
            let Some(key) = self.conditions_due.pop() else {
                break;
            };
            let Some(p) = self.pod_conditions.remove(&key) else {
                continue;
            };
            if !self.still_leading(leader) {
                self.pod_conditions.insert(key, p);
                return;
            }
            self.write_pod_condition(key, p).await;
        }
    }

    /// Makes `node`'s readiness labels what its conditions say now.
    async fn write_labels(&mut self, node: &str, now: SystemTime) {
        let Some(patch) = self.gk.label_patch(node, now) else {
            return;
        };
        match edge::patch_node(&self.client, node, &patch).await {
            Ok(n) => {
                tracing::info!(node, labels = %patch["metadata"]["labels"], "readiness labels written");
                // What the patch returns is the node as it now is: judge
                // with it at once rather than waiting for the watch.
                let keys = self.gk.upsert_node(&n, now);
                self.dirty.extend(keys);
            }
            Err(e) if answered(&e, 404) => {}
            Err(e) => {
                self.metrics.failed(Failure::Label);
                tracing::warn!(node, error = %e, "writing the node's readiness labels failed; retrying");
                self.relabel_retry.insert(node.to_string());
            }
        }
    }

    /// Writes a released pod's conditions through `pods/status`.
    async fn write_pod_condition(&mut self, key: PodKey, mut p: PendingCondition) {
        let patch = pod_status_patch(p.conditions.clone());
        match edge::patch_pod_status(&self.client, &p.namespace, &p.name, &patch).await {
            Ok(_) => {}
            Err(e) if answered(&e, 404) => {}
            Err(e) => {
                self.metrics.failed(Failure::PodCondition);
                p.tries += 1;
                if p.tries < CONDITION_TRIES {
                    tracing::warn!(pod = %key, error = %e, "writing the pod's release condition failed; retrying");
                    self.pod_conditions.insert(key, p);
                } else {
                    tracing::error!(pod = %key, error = %e, tries = p.tries, "writing the pod's release condition failed; giving up (its gate is removed)");
                }
            }
        }
    }

    /// Removes the gates `d` releases (narrowing the pod to their ready
    /// nodes, in one guarded patch) and queues the pod's conditions; the
    /// message of the Event the pod should carry, if it still waits.
    async fn release(&mut self, d: Decision, now: SystemTime) -> Option<String> {
        let needs = self.gk.pod(&d.key).map(|e| e.needs.clone())?;
        if !d.release.is_empty() {
            let policy = self.gk.policy().clone();
            let gates: Vec<(&Gate, usize)> = d
                .release
                .iter()
                .filter_map(|(name, index)| Some((policy.gate(name)?, *index)))
                .collect();
            let names: Vec<&str> = gates.iter().map(|(g, _)| g.name.as_str()).collect();
            let span = tracing::info_span!("release", pod = %d.key, gates = ?names);
            let _g = span.enter();
            let patch = release_patch(&needs, &gates);
            match edge::patch_pod(&self.client, &needs.namespace, &needs.name, patch).await {
                Ok(_) => {
                    let age = needs.created.and_then(|c| now.duration_since(c).ok());
                    let mut conditions = Vec::new();
                    for (gate, _) in &gates {
                        self.gk.mark_released(&d.key, &gate.name);
                        self.metrics.released(&gate.name, age);
                        if let Some(v) = d.released.iter().find(|v| v.gate == gate.name) {
                            conditions.push(pod_condition(gate, v, now));
                        }
                    }
                    tracing::info!("scheduling gates removed");
                    if !conditions.is_empty() {
                        self.write_pod_condition(
                            d.key.clone(),
                            PendingCondition {
                                namespace: needs.namespace.clone(),
                                name: needs.name.clone(),
                                conditions,
                                tries: 0,
                            },
                        )
                        .await;
                    }
                }
                Err(e) if is_race(&e) => {
                    // The gates changed under us: the watch brings the new
                    // list, and the pod is judged again from it.
                    tracing::debug!(error = %e, "the pod changed before the patch; judged again");
                    self.retry.insert(d.key.clone());
                    return None;
                }
                Err(e) => {
                    self.metrics.failed(Failure::Release);
                    tracing::warn!(error = %e, "removing the scheduling gate failed; retrying");
                    self.retry.insert(d.key.clone());
                    return None;
                }
            }
        }
        let message = d.message();
        if message.is_none() {
            self.events.forget(&d.key);
        }
        message
    }

    async fn write_event(&mut self, needs: &PodNeeds, message: &str, now: SystemTime) {
        let Some(mut write) = self.events.next(needs, message) else {
            return;
        };
        loop {
            let result = match &write {
                EventWrite::Create { name, message } => {
                    let body: Event =
                        match serde_json::from_value(event_body(needs, name, message, now)) {
                            Ok(b) => b,
                            Err(e) => {
                                tracing::error!(error = %e, "cannot build the Event");
                                return;
                            }
                        };
                    edge::create_event(&self.client, &needs.namespace, &body).await
                }
                EventWrite::Update {
                    name,
                    message,
                    count,
                } => {
                    edge::patch_event(
                        &self.client,
                        &needs.namespace,
                        name,
                        &event_patch(message, *count, now),
                    )
                    .await
                }
            };
            match result {
                Ok(()) => return,
                Err(e) if answered(&e, 409) && matches!(write, EventWrite::Create { .. }) => {
                    // Written by the leader before this one: update it.
                    match self.events.exists(&needs.key) {
                        Some(update) => write = update,
                        None => return,
                    }
                }
                Err(e) => {
                    self.metrics.failed(Failure::Event);
                    tracing::warn!(pod = %needs.key, error = %e, "writing the pod's Event failed; retrying");
                    self.events.failed(&needs.key);
                    self.retry.insert(needs.key.clone());
                    return;
                }
            }
        }
    }
}

/// Adding or changing one object of a watched kind.
trait Upsert<K> {
    fn upsert(&mut self, o: &K, now: SystemTime);
}

impl Upsert<Pod> for Controller {
    fn upsert(&mut self, o: &Pod, _now: SystemTime) {
        let before = self.gk.pod(&pod_key(o)).is_some();
        let keys = self.gk.upsert_pod(o);
        if keys.is_empty() && before {
            self.events.forget(&pod_key(o));
        }
        self.dirty.extend(keys);
    }
}

impl Upsert<Node> for Controller {
    fn upsert(&mut self, o: &Node, now: SystemTime) {
        let keys = self.gk.upsert_node(o, now);
        self.dirty.extend(keys);
        self.relabel.insert(o.name_any());
    }
}

impl Upsert<RuntimeClass> for Controller {
    fn upsert(&mut self, o: &RuntimeClass, _now: SystemTime) {
        let keys = self.gk.upsert_class(o);
        self.dirty.extend(keys);
    }
}

/// A failed `test` (422: kube-apiserver answers a JSON patch that does not
/// apply with UnprocessableEntity), a conflict, or a pod gone: the pod
/// changed, which the watch will show.
fn is_race(e: &Error) -> bool {
    [404, 409, 422].into_iter().any(|code| answered(e, code))
}
