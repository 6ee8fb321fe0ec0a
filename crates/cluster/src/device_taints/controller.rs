//! The device taints' I/O, a task of `nodeproof gate-controller` beside the
//! gate controller: watches Nodes (their unhealthy-devices annotation),
//! ResourceSlices (the first served of `v1`, `v1beta2`, `v1beta1`) and
//! DeviceTaintRules (`resource.k8s.io/v1beta2`), and while this replica
//! holds its own Lease (`<lease>-device-taints`, so the two controllers
//! fail over independently) creates and deletes rules as [`super::plan`]
//! says.
//!
//! A cluster that does not serve DeviceTaintRule (a 404 on its list path:
//! the feature gates or the version are off) is said once, at warn, and
//! `nodeproof_gate_device_taint_rules_served` is 0; it is asked again every
//! [`Options::recheck`], not at every change. One that serves no
//! ResourceSlices has no DRA devices to taint (said once, at info).
//!
//! Writes are idempotent: names are derived from the device, a create that
//! finds the rule (409) takes it as done, a delete that finds none (404)
//! too, and a delete carries the rule's UID as a precondition, so a rule
//! someone made again under that name meanwhile is not deleted.
//!
//! The three watches are kube-runtime's `watcher`, and every request is
//! the edge's (`nodeproof_apiclient::controller`); what is kept is the
//! facts read of each object (the parsed annotation of the Nodes that carry
//! one, `SliceFacts`, `RuleFacts`), not a `reflector` store of the whole
//! objects: for 5,000 Nodes, one in a hundred with an unhealthy GPU, that
//! is 0.03 MiB against the store's 72.7 MiB, for the same requests
//! (`cargo test -p nodeproof-cluster --test runtime_fit -- --nocapture`).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use tokio::sync::watch;

use nodeproof_apiclient::cluster_read::DynamicKind;
use nodeproof_apiclient::controller::{self as edge, Event as Watched, Events};
use nodeproof_apiclient::dra::VERSIONS;
use nodeproof_apiclient::read::answered;
use nodeproof_apiclient::watch::WatchError;
use nodeproof_apiclient::{Client, DynamicObject, ResourceExt};
use nodeproof_report::device_health::{UnhealthyDevices, UNHEALTHY_DEVICES};

use super::metrics::{DeviceTaintMetrics, Request};
use super::{plan, wanted, DeviceTaintError, RuleFacts, SliceFacts, GROUP, RULE_VERSION};
use crate::gate::leader::{join, LeaderError, LeaseOptions};
use strum::IntoStaticStr;

#[derive(Debug, Clone)]
pub struct Options {
    /// The device taints' own Lease (not the gate controller's).
    pub lease: LeaseOptions,
    /// How often a cluster that serves no DeviceTaintRule or no
    /// ResourceSlices is asked again.
    pub recheck: Duration,
    /// How soon failed writes are tried again.
    pub retry: Duration,
}

impl Options {
    /// The gate controller's lease options with the device taints' Lease name.
    pub fn beside(gate_lease: &LeaseOptions) -> Options {
        Options {
            lease: LeaseOptions {
                name: format!("{}-device-taints", gate_lease.name),
                ..gate_lease.clone()
            },
            recheck: Duration::from_secs(600),
            retry: Duration::from_secs(5),
        }
    }
}

/// DeviceTaintRule, in the one version nodeproof writes.
const RULES: DynamicKind<'static> = DynamicKind {
    group: GROUP,
    version: RULE_VERSION,
    kind: "DeviceTaintRule",
    plural: "devicetaintrules",
};

/// ResourceSlice in `version`.
fn slices(version: &str) -> DynamicKind<'_> {
    DynamicKind {
        group: GROUP,
        version,
        kind: "ResourceSlice",
        plural: "resourceslices",
    }
}

/// What the API server serves, as one round of asking found it.
enum Served {
    /// DeviceTaintRule and ResourceSlices in this version.
    Both {
        slices: &'static str,
    },
    NoRules,
    NoSlices,
}

/// One list of one item each: a 404 means not served.
async fn discover(client: &Client) -> Result<Served, DeviceTaintError> {
    match edge::served(client, RULES).await {
        Ok(true) => {}
        Ok(false) => return Ok(Served::NoRules),
        Err(e) => {
            return Err(DeviceTaintError::List {
                resource: "devicetaintrules",
                version: RULE_VERSION,
                source: Box::new(e),
            })
        }
    }
    for version in VERSIONS {
        match edge::served(client, slices(version)).await {
            Ok(true) => return Ok(Served::Both { slices: version }),
            Ok(false) => continue,
            Err(e) => {
                return Err(DeviceTaintError::List {
                    resource: "resourceslices",
                    version,
                    source: Box::new(e),
                })
            }
        }
    }
    Ok(Served::NoSlices)
}

/// What was said of the cluster last, so each is said once.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Said {
    Nothing,
    Working,
    NoRules,
    NoSlices,
    Failed(String),
}

/// Runs until `stop` turns true: then leaves its leader election
/// (releasing its Lease if held) and returns.
pub async fn run(
    client: Client,
    opts: Options,
    metrics: Arc<DeviceTaintMetrics>,
    mut stop: watch::Receiver<bool>,
) {
    // Joined with backoff, never given up on (leader::join says why).
    let Some((mut leader, election)) = join(
        client.clone(),
        &opts.lease,
        &mut stop,
        |_: &LeaderError, _| {},
    )
    .await
    else {
        return;
    };
    let mut said = Said::Nothing;
    loop {
        let found = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            r = discover(&client) => r,
        };
        let wait = match found {
            Ok(Served::Both { slices }) => {
                metrics.set_served(true);
                if said != Said::Working {
                    tracing::info!(
                        version = RULE_VERSION,
                        resource_slices = slices,
                        lease = %opts.lease.name,
                        "tainting unhealthy DRA devices with DeviceTaintRules"
                    );
                    said = Said::Working;
                }
                let mut f = Follower::new(client.clone(), metrics.clone(), slices);
                match f.follow(&mut leader, &mut stop, opts.retry).await {
                    Ended::Stop => break,
                    // Asked again at once: the 404 was the watch's, the
                    // list that follows finds out and says what it is.
                    Ended::NotServed => continue,
                }
            }
            Ok(Served::NoRules) => {
                metrics.set_served(false);
                if said != Said::NoRules {
                    tracing::warn!(
                        version = RULE_VERSION,
                        recheck_s = opts.recheck.as_secs(),
                        "DeviceTaintRule (resource.k8s.io/v1beta2) is not served: enable the DRADeviceTaints \
                         and DRADeviceTaintRules feature gates and the resource.k8s.io/v1beta2 API on \
                         kube-apiserver for unhealthy GPUs to be kept from new DRA claims; asking again later"
                    );
                    said = Said::NoRules;
                }
                opts.recheck
            }
            Ok(Served::NoSlices) => {
                metrics.set_served(true);
                if said != Said::NoSlices {
                    tracing::info!(
                        recheck_s = opts.recheck.as_secs(),
                        "resource.k8s.io serves no ResourceSlices: no DRA devices to taint; asking again later"
                    );
                    said = Said::NoSlices;
                }
                opts.recheck
            }
            Err(e) => {
                let text = nodeproof_findings::errors::error_chain(&e);
                if said != Said::Failed(text.clone()) {
                    tracing::warn!(error = %text, "cannot tell whether DeviceTaintRules are served; retrying");
                    said = Said::Failed(text);
                }
                opts.retry.max(Duration::from_secs(30))
            }
        };
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            _ = tokio::time::sleep(wait) => {}
        }
    }
    drop(leader);
    // The election task releases the lease when it sees the receiver gone.
    let _ = tokio::time::timeout(Duration::from_secs(5), election).await;
}

enum Ended {
    Stop,
    NotServed,
}

/// A watch's (re)list: names seen since `Init`, to drop the rest at `InitDone`.
#[derive(Debug, Default)]
struct Listing {
    seen: Option<HashSet<String>>,
    listed: bool,
}

/// The picture from the three watches, and what was said of it.
struct Follower {
    client: Client,
    metrics: Arc<DeviceTaintMetrics>,
    slices_version: &'static str,
    nodes: BTreeMap<String, UnhealthyDevices>,
    slices: BTreeMap<String, SliceFacts>,
    rules: BTreeMap<String, RuleFacts>,
    listed: [Listing; 3],
    /// Said once per value: a node's annotation entries that do not parse,
    /// a slice that does not decode, a wanted name held by a foreign rule.
    said_bad: BTreeMap<String, String>,
    said_taken: BTreeSet<String>,
    /// A write failed: try again at the next retry tick.
    failed: bool,
}

#[derive(Debug, Clone, Copy, IntoStaticStr)]
enum Kind {
    #[strum(serialize = "nodes")]
    Node = 0,
    #[strum(serialize = "resourceslices")]
    Slice = 1,
    #[strum(serialize = "devicetaintrules")]
    Rule = 2,
}

impl Kind {
    fn as_str(self) -> &'static str {
        self.into()
    }
}

impl Follower {
    fn new(client: Client, metrics: Arc<DeviceTaintMetrics>, slices_version: &'static str) -> Self {
        Follower {
            client,
            metrics,
            slices_version,
            nodes: BTreeMap::new(),
            slices: BTreeMap::new(),
            rules: BTreeMap::new(),
            listed: Default::default(),
            said_bad: BTreeMap::new(),
            said_taken: BTreeSet::new(),
            failed: false,
        }
    }

    async fn follow(
        &mut self,
        leader: &mut watch::Receiver<bool>,
        stop: &mut watch::Receiver<bool>,
        retry: Duration,
    ) -> Ended {
        let mut nodes: Events<Node> = edge::nodes(&self.client);
        let mut slices: Events<DynamicObject> = edge::dynamic(
            &self.client,
            slices(self.slices_version),
            Kind::Slice.as_str(),
        );
        let mut rules: Events<DynamicObject> =
            edge::dynamic(&self.client, RULES, Kind::Rule.as_str());
        let mut tick = tokio::time::interval(retry);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut leading = *leader.borrow_and_update();
        let mut dirty = true;
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return Ended::Stop,
                changed = leader.changed(), if changed_ok(leader) => {
                    leading = changed.is_ok() && *leader.borrow_and_update();
                    if changed.is_err() {
                        tracing::warn!("the device taints' leader election ended: no more DeviceTaintRule writes");
                    }
                    dirty = true;
                }
                Some(ev) = nodes.next() => {
                    if self.apply(Kind::Node, ev, |f, o: &Node| f.upsert_node(o)) {
                        return Ended::NotServed;
                    }
                    dirty = true;
                }
                Some(ev) = slices.next() => {
                    if self.apply(Kind::Slice, ev, |f, o: &DynamicObject| f.upsert_slice(o)) {
                        return Ended::NotServed;
                    }
                    dirty = true;
                }
                Some(ev) = rules.next() => {
                    if self.apply(Kind::Rule, ev, |f, o: &DynamicObject| f.upsert_rule(o)) {
                        return Ended::NotServed;
                    }
                    dirty = true;
                }
                _ = tick.tick() => {
                    dirty |= std::mem::take(&mut self.failed);
                }
            }
            if dirty && self.listed.iter().all(|l| l.listed) {
                self.metrics
                    .set_rules(self.rules.values().filter(|r| r.ours).count());
                if leading {
                    self.reconcile(leader).await;
                }
                dirty = false;
            }
        }
    }

    /// Folds one watch event in; true when the resource is not served (404).
    fn apply<K: ResourceExt>(
        &mut self,
        kind: Kind,
        ev: Result<Watched<K>, WatchError>,
        upsert: impl Fn(&mut Self, &K),
    ) -> bool {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) if e.not_served() => return true,
            Err(e) => {
                // The watcher retries with backoff.
                self.metrics.failed(Request::Watch);
                tracing::warn!(resource = kind.as_str(), error = %nodeproof_findings::errors::error_chain(&e), "device taints: watch failed; retrying");
                return false;
            }
        };
        let listing = &mut self.listed[kind as usize];
        match ev {
            Watched::Init => listing.seen = Some(HashSet::new()),
            Watched::InitApply(o) => {
                if let Some(seen) = &mut listing.seen {
                    seen.insert(o.name_any());
                }
                upsert(self, &o);
            }
            Watched::InitDone => {
                let seen = listing.seen.take().unwrap_or_default();
                listing.listed = true;
                match kind {
                    Kind::Node => self.nodes.retain(|k, _| seen.contains(k)),
                    Kind::Slice => self.slices.retain(|k, _| seen.contains(k)),
                    Kind::Rule => self.rules.retain(|k, _| seen.contains(k)),
                }
            }
            Watched::Apply(o) => upsert(self, &o),
            Watched::Delete(o) => {
                let name = o.name_any();
                match kind {
                    Kind::Node => {
                        self.nodes.remove(&name);
                    }
                    Kind::Slice => {
                        self.slices.remove(&name);
                    }
                    Kind::Rule => {
                        self.rules.remove(&name);
                    }
                }
            }
        }
        false
    }

    fn upsert_node(&mut self, node: &Node) {
        let name = node.name_any();
        let value = node
            .annotations()
            .get(UNHEALTHY_DEVICES)
            .cloned()
            .unwrap_or_default();
        let (devices, bad) = UnhealthyDevices::parse(&value);
        let key = format!("node/{name}");
        if bad.is_empty() {
            self.said_bad.remove(&key);
        } else if self.said_bad.get(&key) != Some(&value) {
            let entries: Vec<String> = bad.iter().map(ToString::to_string).collect();
            tracing::warn!(node = %name, annotation = UNHEALTHY_DEVICES, error = %entries.join("; "), "left out of the node's unhealthy devices");
            self.said_bad.insert(key, value);
        }
        if devices.is_empty() {
            self.nodes.remove(&name);
        } else {
            self.nodes.insert(name, devices);
        }
    }

    fn upsert_slice(&mut self, slice: &DynamicObject) {
        let name = slice.name_any();
        let spec = slice.data.get("spec").cloned().unwrap_or_default();
        match SliceFacts::of(&name, &spec, self.slices_version) {
            Ok(facts) => {
                self.said_bad.remove(&format!("slice/{name}"));
                self.slices.insert(name, facts);
            }
            Err(e) => {
                let text = nodeproof_findings::errors::error_chain(&e);
                let key = format!("slice/{name}");
                if self.said_bad.get(&key) != Some(&text) {
                    tracing::warn!(resource_slice = %name, error = %text, "ResourceSlice left out");
                    self.said_bad.insert(key, text);
                }
                self.slices.remove(&name);
            }
        }
    }

    fn upsert_rule(&mut self, rule: &DynamicObject) {
        let obj = serde_json::to_value(rule).unwrap_or_default();
        let facts = RuleFacts::of(&obj);
        self.rules.insert(facts.name.clone(), facts);
    }

    /// Carries out the plan, checking before each write that this replica
    /// still leads.
    async fn reconcile(&mut self, leader: &watch::Receiver<bool>) {
        let p = plan(&wanted(&self.nodes, &self.slices), &self.rules);
        for name in &p.taken {
            if self.said_taken.insert(name.clone()) {
                tracing::warn!(device_taint_rule = %name, "a DeviceTaintRule nodeproof does not manage holds the name of one it wants; left alone, the device is not tainted by nodeproof");
            }
        }
        self.said_taken.retain(|n| p.taken.contains(n));
        for w in &p.create {
            if !*leader.borrow() {
                return;
            }
            let body: DynamicObject = match serde_json::from_value(w.to_json()) {
                Ok(b) => b,
                Err(e) => {
                    tracing::error!(device_taint_rule = %w.name, error = %e, "cannot build the DeviceTaintRule");
                    continue;
                }
            };
            match edge::create_dynamic(&self.client, RULES, &body).await {
                Ok(created) => {
                    tracing::info!(
                        device_taint_rule = %w.name, node = %w.node, driver = %w.driver, pool = %w.pool,
                        device = %w.device, uuid = %w.uuid, reason = %w.reason,
                        "unhealthy GPU tainted NoSchedule for new DRA claims"
                    );
                    self.upsert_rule(&created);
                }
                // Made meanwhile (by the other replica, or before a lost answer): the watch brings it.
                Err(e) if answered(&e, 409) => {}
                Err(e) => {
                    self.metrics.failed(Request::Create);
                    self.failed = true;
                    let e = DeviceTaintError::Create {
                        name: w.name.clone(),
                        source: Box::new(e),
                    };
                    tracing::warn!(error = %nodeproof_findings::errors::error_chain(&e), "retrying");
                }
            }
        }
        for name in &p.delete {
            if !*leader.borrow() {
                return;
            }
            let uid = self.rules.get(name).and_then(|r| r.uid.clone());
            match edge::delete_dynamic(&self.client, RULES, name, uid).await {
                Ok(_) => {
                    tracing::info!(device_taint_rule = %name, "GPU healthy again (or gone): its DeviceTaintRule deleted");
                    self.rules.remove(name);
                }
                // Gone already, or made again under that name (the precondition): the watch says what is there.
                Err(e) if answered(&e, 404) || answered(&e, 409) => {}
                Err(e) => {
                    self.metrics.failed(Request::Delete);
                    self.failed = true;
                    let e = DeviceTaintError::Delete {
                        name: name.clone(),
                        source: Box::new(e),
                    };
                    tracing::warn!(error = %nodeproof_findings::errors::error_chain(&e), "retrying");
                }
            }
        }
        self.metrics
            .set_rules(self.rules.values().filter(|r| r.ours).count());
    }
}

/// Whether the election still sends (a closed channel would wake the loop forever).
fn changed_ok(leader: &watch::Receiver<bool>) -> bool {
    leader.has_changed().is_ok()
}
