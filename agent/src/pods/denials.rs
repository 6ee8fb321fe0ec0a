//! The tracer's denials on the pods they hit: the watched pod set resolves a
//! cgroup's pod UID to namespace/name and a container id to the container's
//! name and profile; denials become one aggregated Warning Event per
//! (pod, container, syscall, outcome) per interval, and counter values.
//! A denial libc falls back from (ENOSYS on `clone3` under RuntimeDefault:
//! `nodeproof_trace::intended`) is neither: the node's
//! `nodeproof_seccomp_denials_total{outcome="intended-fallback"}` counts it.
//! Pure: rows in, events and totals out; the caller owns the clock.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Pod};

use crate::judge::versions::{self, ProfileVersions};
use nodeproof_report::denial_change::{DenialChange, PreviousVerdict};
use nodeproof_report::refs::Profile;

use nodeproof_apiclient::dra::{pod_claims, PodClaims};
use nodeproof_report::events::ObjectRef;
use nodeproof_report::refs::{pod_refs, PodRefs};
use nodeproof_trace::names::errno_name;
use nodeproof_trace::{Action, PodLookup, PodRef, SummaryRow};

pub const EVENT_REASON: &str = nodeproof_report::denial_change::DENIED_REASON;

struct IndexedPod {
    refs: PodRefs,
    /// Runtime container id (without `containerd://`) → container name.
    ids: HashMap<String, String>,
    /// Runtime container id → when it started (`startedAt`, whole seconds).
    started: HashMap<String, SystemTime>,
    /// `Succeeded` or `Failed`: its containers are gone, though the
    /// kubelet's pod-resources still lists their devices.
    terminated: bool,
    /// Its DRA claims, if it has any.
    claims: Option<PodClaims>,
}

/// The pods bound to this node, by UID (fed by the watch).
#[derive(Default)]
pub struct PodIndex {
    pods: HashMap<String, IndexedPod>,
}

fn strip_runtime(id: &str) -> &str {
    id.split_once("://").map_or(id, |(_, id)| id)
}

/// Runtime container id (without `containerd://`) → container name, from
/// the pod's init, regular and ephemeral container statuses: the ids the
/// tracer reads from cgroup paths. The container before a restart
/// (`lastState.terminated`) too: its last denials may still be counted.
pub fn container_ids(pod: &Pod) -> HashMap<String, String> {
    let mut ids = HashMap::new();
    for (s, id, _) in started_containers(pod) {
        ids.insert(id, s.name.clone());
    }
    ids
}

fn statuses(pod: &Pod) -> impl Iterator<Item = &ContainerStatus> {
    let st = pod.status.as_ref();
    [
        st.and_then(|s| s.init_container_statuses.as_ref()),
        st.and_then(|s| s.container_statuses.as_ref()),
        st.and_then(|s| s.ephemeral_container_statuses.as_ref()),
    ]
    .into_iter()
    .flatten()
    .flatten()
}

/// Every container of the pod's statuses with its runtime id and start
/// time: the current one (`containerID`, `state.running` or
/// `state.terminated`'s `startedAt`) and the one before a restart
/// (`lastState.terminated`, with its own `containerID`).
fn started_containers(pod: &Pod) -> Vec<(&ContainerStatus, String, Option<SystemTime>)> {
    let at = |t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        t.and_then(|t| u64::try_from(t.0.as_second()).ok())
            .map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s))
    };
    let started = |state: Option<&ContainerState>| {
        state.and_then(|st| {
            st.running
                .as_ref()
                .and_then(|r| at(r.started_at.as_ref()))
                .or_else(|| {
                    st.terminated
                        .as_ref()
                        .and_then(|t| at(t.started_at.as_ref()))
                })
        })
    };
    let mut out = Vec::new();
    for s in statuses(pod) {
        if let Some(id) = &s.container_id {
            out.push((s, strip_runtime(id).to_string(), started(s.state.as_ref())));
        }
        if let Some(t) = s.last_state.as_ref().and_then(|l| l.terminated.as_ref()) {
            if let Some(id) = &t.container_id {
                out.push((s, strip_runtime(id).to_string(), at(t.started_at.as_ref())));
            }
        }
    }
    out
}

impl PodIndex {
    pub fn upsert(&mut self, pod: &Pod) {
        let refs = pod_refs(pod);
        if refs.uid.is_empty() {
            return;
        }
        let ids = container_ids(pod);
        let started = started_containers(pod)
            .into_iter()
            .filter_map(|(_, id, at)| Some((id, at?)))
            .collect();
        let terminated = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed");
        self.pods.insert(
            refs.uid.clone(),
            IndexedPod {
                refs,
                ids,
                started,
                terminated,
                claims: pod_claims(pod),
            },
        );
    }

    pub fn remove(&mut self, uid: &str) {
        self.pods.remove(uid);
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// The UID of a pod bound here that has not terminated (`None`: not
    /// watched, or Succeeded/Failed).
    pub fn running(&self, namespace: &str, name: &str) -> Option<&str> {
        self.pods
            .values()
            .find(|p| !p.terminated && p.refs.namespace == namespace && p.refs.name == name)
            .map(|p| p.refs.uid.as_str())
    }

    /// `(namespace, name)` of every pod bound here that has not terminated:
    /// the GPU usage metrics label a device only with these pods.
    pub fn running_pods(&self) -> std::collections::BTreeSet<(String, String)> {
        self.pods
            .values()
            .filter(|p| !p.terminated)
            .map(|p| (p.refs.namespace.clone(), p.refs.name.clone()))
            .collect()
    }

    /// The DRA claims of the pods that have not terminated, by pod UID.
    pub fn claims(&self) -> Vec<PodClaims> {
        let mut out: Vec<PodClaims> = self
            .pods
            .values()
            .filter(|p| !p.terminated)
            .filter_map(|p| p.claims.clone())
            .collect();
        out.sort_by(|a, b| a.uid.cmp(&b.uid));
        out
    }

    pub fn refs(&self) -> impl Iterator<Item = &PodRefs> {
        self.pods.values().map(|p| &p.refs)
    }

    /// The container's name and its effective profile as written in manifests.
    pub fn container(&self, uid: &str, container_id: &str) -> Option<(String, String)> {
        let p = self.pods.get(uid)?;
        let name = p.ids.get(container_id)?;
        let profile = p
            .refs
            .containers
            .iter()
            .find(|c| &c.name == name)
            .and_then(|c| c.profile.as_ref())
            .map_or_else(|| "none set".to_string(), |(p, _)| p.display());
        Some((name.clone(), profile))
    }

    /// When the container with this runtime id started, and its Localhost
    /// profile's path under the seccomp root: what its version is found by.
    pub fn start_and_profile(&self, uid: &str, container_id: &str) -> Option<(SystemTime, String)> {
        let p = self.pods.get(uid)?;
        let started = *p.started.get(container_id)?;
        let name = p.ids.get(container_id)?;
        match p
            .refs
            .containers
            .iter()
            .find(|c| &c.name == name)
            .and_then(|c| c.profile.as_ref())
        {
            Some((Profile::Localhost(path), _)) => {
                Some((started, versions::key(std::path::Path::new(path))))
            }
            _ => None,
        }
    }
}

impl PodLookup for PodIndex {
    fn pod(&self, uid: &str) -> Option<PodRef> {
        self.pods.get(uid).map(|p| PodRef {
            namespace: p.refs.namespace.clone(),
            name: p.refs.name.clone(),
        })
    }

    fn container_name(&self, container_id: &str) -> Option<String> {
        self.pods
            .values()
            .find_map(|p| p.ids.get(container_id).cloned())
    }
}

/// What one event aggregates.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Key {
    pod_uid: String,
    /// The container's name, else its id (not yet in the pod's status).
    container: String,
    syscall: String,
    action: Action,
    errno: i32,
    /// The container's version (sha256), when its denials follow a change:
    /// a container restarted onto another version is another Event.
    version: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDenialEvent {
    pub pod: ObjectRef,
    pub message: String,
    /// The profile change the denials followed, when the container's
    /// version is not the oldest known (the Event's annotations).
    pub change: Option<DenialChange>,
}

/// A container's denials of one call, judged against the version before
/// the one it started under.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Attribution {
    change: DenialChange,
    /// When the container's version was first seen (the previous one's end).
    since: SystemTime,
}

/// The change a row's denials followed: the container's version at its
/// start is not the oldest known, and the version before it is judged on
/// the denied number. Pure.
fn attribution(
    r: &SummaryRow,
    uid: &str,
    id: &str,
    pods: &PodIndex,
    versions: &ProfileVersions,
) -> Option<Attribution> {
    let (started, path) = pods.start_and_profile(uid, id)?;
    let at = versions.at_start(&path, started)?;
    let previous = at.previous?;
    Some(Attribution {
        change: DenialChange {
            profile: path,
            syscall: r.syscall.clone(),
            version: at.current.sha256.clone(),
            version_since: nodeproof_report::conditions::rfc3339(at.current.first_seen),
            previous: previous.sha256.clone(),
            previous_verdict: versions::judge(previous, r.arch, r.nr),
        },
        since: at.current.first_seen,
    })
}

/// What `nodeproof trace` resolves rows with on a node: names from `names`
/// (the kubelet's log directories), and the profile change a pod's
/// container started after from the pods `read` returns (the API server's,
/// read once, when the first row asks: at the end of the trace, so that a
/// container started during it is known) and the versions the agent keeps.
pub struct TraceChanges<'a> {
    names: &'a dyn PodLookup,
    read: Box<dyn Fn() -> PodIndex + 'a>,
    pods: std::cell::OnceCell<PodIndex>,
    versions: ProfileVersions,
}

impl<'a> TraceChanges<'a> {
    pub fn new(
        names: &'a dyn PodLookup,
        versions: ProfileVersions,
        read: impl Fn() -> PodIndex + 'a,
    ) -> Self {
        TraceChanges {
            names,
            read: Box::new(read),
            pods: std::cell::OnceCell::new(),
            versions,
        }
    }
}

impl PodLookup for TraceChanges<'_> {
    fn pod(&self, uid: &str) -> Option<PodRef> {
        self.names.pod(uid)
    }

    fn container_name(&self, container_id: &str) -> Option<String> {
        self.names.container_name(container_id)
    }

    fn change(&self, row: &SummaryRow) -> Option<DenialChange> {
        let uid = row.pod_uid.as_deref()?;
        let id = row.container_id.as_deref()?;
        if self.versions.is_empty() {
            return None;
        }
        let pods = self.pods.get_or_init(|| (self.read)());
        attribution(row, uid, id, pods, &self.versions).map(|a| a.change)
    }
}

/// Attributions kept (per container, arch and number) before the cache is
/// cleared: a node's containers times the calls denied in them stay far
/// below; a churn of containers would otherwise grow it.
const MAX_JUDGED: usize = 4096;

/// Denials in one container of a pod, for one syscall and action, since the
/// aggregator started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDenialTotal {
    pub namespace: String,
    pub pod: String,
    /// The container's name, else its id's prefix.
    pub container: String,
    pub syscall: String,
    pub action: &'static str,
    pub count: u64,
}

/// What the aggregator counts by: a row's identity without its pid, as the
/// daemon's tracer folds the counts of exited processes into one row with
/// pid 0 (`nodeproof_trace::retire`); only the sum over pids keeps growing.
/// The attribution is part of it because on hybrid cgroup hosts one cgroup2
/// id holds processes of many pods.
type RowKey = nodeproof_trace::retire::FoldKey;

struct Pending {
    namespace: String,
    name: String,
    profile: String,
    count: u64,
    change: Option<Attribution>,
}

/// Denials → pod events at most once per key per interval, and counters.
pub struct DenialAggregator {
    interval: Duration,
    seen: HashMap<RowKey, u64>,
    pending: BTreeMap<Key, Pending>,
    last_emit: HashMap<Key, SystemTime>,
    /// (namespace, pod, container, syscall, action) → total.
    totals: BTreeMap<(String, String, String, String, &'static str), u64>,
    /// The profiles' versions (the daemon's); `None`: no attribution.
    versions: Option<Arc<Mutex<ProfileVersions>>>,
    /// (container id, arch, nr) → the change its denials followed.
    judged: HashMap<(String, &'static str, i32), Attribution>,
    /// Pod denials after a change, by the previous version's verdict.
    after_change: BTreeMap<PreviousVerdict, u64>,
}

impl DenialAggregator {
    pub fn new(interval: Duration) -> Self {
        DenialAggregator {
            interval,
            seen: HashMap::new(),
            pending: BTreeMap::new(),
            last_emit: HashMap::new(),
            totals: BTreeMap::new(),
            versions: None,
            judged: HashMap::new(),
            after_change: BTreeMap::new(),
        }
    }

    /// Denials that follow a profile change name it: the container's
    /// version at its start is looked up in `versions`.
    pub fn with_versions(mut self, versions: Arc<Mutex<ProfileVersions>>) -> Self {
        self.versions = Some(versions);
        self
    }

    /// The change a row's denials followed: the container's version is
    /// not the oldest known, and the version before it is judged on the
    /// denied number (cached per container, arch and number).
    fn attribute(
        &mut self,
        r: &SummaryRow,
        uid: &str,
        id: &str,
        pods: &PodIndex,
        versions: Option<&ProfileVersions>,
    ) -> Option<Attribution> {
        let key = (id.to_string(), r.arch, r.nr);
        if let Some(a) = self.judged.get(&key) {
            return Some(a.clone());
        }
        let a = attribution(r, uid, id, pods, versions?)?;
        if self.judged.len() >= MAX_JUDGED {
            self.judged.clear();
        }
        self.judged.insert(key, a.clone());
        Some(a)
    }

    /// Takes the tracer's rows with cumulative counts (as `Tracer` keeps
    /// them) and counts what is new since the last call.
    pub fn observe(&mut self, rows: &[SummaryRow], pods: &PodIndex) {
        let shared = self.versions.clone();
        let guard = shared
            .as_ref()
            .map(|v| v.lock().unwrap_or_else(|p| p.into_inner()));
        let versions = guard.as_deref();
        let mut sums: HashMap<RowKey, (&SummaryRow, u64)> = HashMap::new();
        for r in rows {
            let rk = nodeproof_trace::retire::fold_key(r);
            sums.entry(rk).or_insert((r, 0)).1 += r.count;
        }
        // Only keys the tracer still has: a key that comes back later (its
        // rows were dropped) starts again from nothing.
        self.seen.retain(|k, _| sums.contains_key(k));
        for (rk, (r, count)) in sums {
            let before = self.seen.insert(rk, count).unwrap_or(0);
            // A smaller count is a restarted tracer: everything it has is new.
            let delta = if count >= before {
                count - before
            } else {
                count
            };
            // Intended by the profile and retried by libc: nothing for the
            // pod's owner to act on (the node-wide counter keeps it).
            if delta == 0 || r.kind().is_intended() {
                continue;
            }
            let Some(uid) = r.pod_uid.as_deref() else {
                continue;
            };
            let Some(pod) = pods.pod(uid) else {
                continue;
            };
            let id = r.container_id.clone().unwrap_or_default();
            let (container, profile) = pods
                .container(uid, &id)
                .unwrap_or_else(|| (short(&id), "unknown".into()));
            let change = self.attribute(r, uid, &id, pods, versions);
            if let Some(a) = &change {
                *self
                    .after_change
                    .entry(a.change.previous_verdict)
                    .or_default() += delta;
            }
            let key = Key {
                pod_uid: uid.to_string(),
                container: container.clone(),
                syscall: r.syscall.clone(),
                action: r.action,
                errno: r.errno,
                version: change.as_ref().map(|a| a.change.version.clone()),
            };
            self.pending
                .entry(key)
                .or_insert_with(|| Pending {
                    namespace: pod.namespace.clone(),
                    name: pod.name.clone(),
                    profile,
                    count: 0,
                    change,
                })
                .count += delta;
            *self
                .totals
                .entry((
                    pod.namespace,
                    pod.name,
                    container,
                    r.syscall.clone(),
                    r.action.as_str(),
                ))
                .or_default() += delta;
        }
        // Pods deleted from this node take their series and their event
        // clocks with them: on a node that churns pods these would only grow.
        let here: HashSet<(&str, &str)> = pods
            .refs()
            .map(|p| (p.namespace.as_str(), p.name.as_str()))
            .collect();
        self.totals
            .retain(|(ns, pod, ..), _| here.contains(&(ns.as_str(), pod.as_str())));
        let pending = &self.pending;
        self.last_emit
            .retain(|k, _| pods.pod(&k.pod_uid).is_some() || pending.contains_key(k));
    }

    /// Events due at `now`: a key's denials since its last event, if that
    /// event is at least an interval old. The rest wait, still counted.
    pub fn due(&mut self, now: SystemTime) -> Vec<PodDenialEvent> {
        let mut out = Vec::new();
        let interval = self.interval;
        let last_emit = &mut self.last_emit;
        self.pending.retain(|k, p| {
            let ready = last_emit
                .get(k)
                .is_none_or(|t| super::interval_passed(now, *t, interval));
            if !ready {
                return true;
            }
            last_emit.insert(k.clone(), now);
            out.push(PodDenialEvent {
                pod: ObjectRef {
                    kind: "Pod",
                    namespace: p.namespace.clone(),
                    name: p.name.clone(),
                    uid: Some(k.pod_uid.clone()),
                },
                message: message(k, p),
                change: p.change.as_ref().map(|a| a.change.clone()),
            });
            false
        });
        out
    }

    /// The values of `nodeproof_pod_seccomp_denials_after_change_total`:
    /// pod denials in containers that started under a version that is not
    /// the oldest known, by what the version before did with the call
    /// (every verdict, 0 when none).
    pub fn after_change(&self) -> BTreeMap<PreviousVerdict, u64> {
        [
            PreviousVerdict::Allowed,
            PreviousVerdict::Denied,
            PreviousVerdict::Unknown,
        ]
        .into_iter()
        .map(|v| (v, self.after_change.get(&v).copied().unwrap_or(0)))
        .collect()
    }

    /// The values of `nodeproof_pod_seccomp_denials_total` by pod,
    /// container, syscall, action (a name of its own: the daemon's
    /// `nodeproof_seccomp_denials_total` counts every process, pod or not).
    pub fn totals(&self) -> Vec<PodDenialTotal> {
        self.totals
            .iter()
            .map(
                |((namespace, pod, container, syscall, action), &count)| PodDenialTotal {
                    namespace: namespace.clone(),
                    pod: pod.clone(),
                    container: container.clone(),
                    syscall: syscall.clone(),
                    action,
                    count,
                },
            )
            .collect()
    }
}

/// The Event's message: the denials, and where they follow a change, the
/// version the container started under and what the one before did.
fn message(k: &Key, p: &Pending) -> String {
    let plain = format!(
        "denied {} ×{} ({}) in container {}, profile {}",
        k.syscall,
        p.count,
        outcome(k.action, k.errno),
        k.container,
        p.profile
    );
    let Some(a) = &p.change else {
        return plain;
    };
    let c = &a.change;
    let said = match c.previous_verdict {
        PreviousVerdict::Allowed => format!("allowed {}", k.syscall),
        PreviousVerdict::Denied => "denied it too".to_string(),
        PreviousVerdict::Unknown => "cannot be judged".to_string(),
    };
    let since = time_of_day(a.since);
    format!(
        "{plain} as of {since} (sha256 {}…); the previous version (sha256 {}…, until {since}) {said}",
        &c.version[..c.version.len().min(8)],
        &c.previous[..c.previous.len().min(8)],
    )
}

/// `14:22:05`, UTC (the annotations carry the whole RFC 3339 time).
fn time_of_day(t: SystemTime) -> String {
    let full = nodeproof_report::conditions::rfc3339(t);
    full.get(11..19).map_or(full.clone(), str::to_string)
}

fn short(id: &str) -> String {
    if id.is_empty() {
        "unknown".into()
    } else {
        id[..id.len().min(12)].to_string()
    }
}

fn outcome(action: Action, errno: i32) -> String {
    match action {
        Action::Errno => errno_name(errno).map_or_else(|| format!("errno {errno}"), str::to_string),
        Action::NotifyError => format!(
            "{} from the notify supervisor",
            errno_name(errno).map_or_else(|| format!("errno {errno}"), str::to_string)
        ),
        Action::Kill => "killed by SIGSYS".into(),
        Action::Trap => "SIGSYS trap".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(v).expect("pod JSON")
    }

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn index() -> PodIndex {
        let mut idx = PodIndex::default();
        idx.upsert(&pod(json!({
            "metadata": {"name": "vllm-0", "namespace": "ml", "uid": "u1"},
            "spec": {"containers": [{"name": "vllm", "securityContext": {"seccompProfile":
                {"type": "Localhost", "localhostProfile": "profiles/vllm-strict.json"}}}]},
            "status": {"containerStatuses": [{"name": "vllm", "containerID": format!("containerd://{ID}"),
                "image": "i", "imageID": "", "ready": true, "restartCount": 0}]}
        })));
        idx
    }

    fn row(count: u64, uid: Option<&str>) -> SummaryRow {
        SummaryRow {
            pid: 42,
            comm: "python3".into(),
            syscall: "mkdir".into(),
            nr: 83,
            arch: "x86_64",
            action: Action::Errno,
            errno: 1,
            count,
            cgroup_id: 7,
            cgroup: None,
            container_id: Some(ID.into()),
            container: None,
            pod_uid: uid.map(str::to_string),
            pod: None,
            change: None,
        }
    }

    #[test]
    fn one_event_per_key_per_interval_with_the_count() {
        let idx = index();
        assert_eq!(
            idx.pod("u1"),
            Some(PodRef {
                namespace: "ml".into(),
                name: "vllm-0".into()
            })
        );
        let mut agg = DenialAggregator::new(Duration::from_secs(60));
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        // Not a pod's (no UID): counted nowhere here.
        let host = SummaryRow {
            cgroup_id: 8,
            ..row(5, None)
        };
        agg.observe(&[row(12, Some("u1")), host], &idx);
        let ev = agg.due(t0);
        assert_eq!(ev.len(), 1);
        assert_eq!(
            ev[0].message,
            "denied mkdir ×12 (EPERM) in container vllm, profile localhost/profiles/vllm-strict.json"
        );
        assert_eq!((ev[0].pod.kind, ev[0].pod.name.as_str()), ("Pod", "vllm-0"));
        // Cumulative counts: 12 → 20 is 8 new; held back within the interval.
        agg.observe(&[row(20, Some("u1"))], &idx);
        assert!(agg.due(t0 + Duration::from_secs(30)).is_empty());
        agg.observe(&[row(21, Some("u1"))], &idx);
        let ev = agg.due(t0 + Duration::from_secs(60));
        assert_eq!(ev.len(), 1);
        assert!(
            ev[0].message.starts_with("denied mkdir ×9 (EPERM)"),
            "{}",
            ev[0].message
        );
        // Nothing new: nothing to say.
        agg.observe(&[row(21, Some("u1"))], &idx);
        assert!(agg.due(t0 + Duration::from_secs(600)).is_empty());
        assert_eq!(
            agg.totals(),
            vec![PodDenialTotal {
                namespace: "ml".into(),
                pod: "vllm-0".into(),
                container: "vllm".into(),
                syscall: "mkdir".into(),
                action: "errno",
                count: 21
            }]
        );
    }

    #[test]
    fn unknown_container_id_is_named_by_its_prefix() {
        let mut idx = index();
        let mut agg = DenialAggregator::new(Duration::from_secs(60));
        let mut r = row(3, Some("u1"));
        r.container_id = Some("fedcba9876543210fedc".into());
        r.action = Action::Kill;
        agg.observe(&[r], &idx);
        let ev = agg.due(SystemTime::UNIX_EPOCH);
        assert_eq!(
            ev[0].message,
            "denied mkdir ×3 (killed by SIGSYS) in container fedcba987654, profile unknown"
        );
        idx.remove("u1");
        assert!(idx.is_empty());
    }

    /// The daemon's tracer moves an exited process's count into a row with
    /// pid 0 (`nodeproof_trace::retire`): counted once, and the aggregator
    /// keeps no state for pids that are gone.
    #[test]
    fn exited_processes_folded_by_the_tracer_are_not_counted_twice() {
        let idx = index();
        let mut agg = DenialAggregator::new(Duration::from_secs(60));
        let at = |pid, count| SummaryRow {
            pid,
            ..row(count, Some("u1"))
        };
        agg.observe(&[at(42, 5)], &idx);
        // 42 exited with 6; 43 started and was denied twice.
        agg.observe(&[at(0, 6), at(43, 2)], &idx);
        // Many more come and go, one denial each: when `pid` runs, 43 and
        // every one before it are folded.
        for pid in 44..1044 {
            agg.observe(&[at(0, 8 + u64::from(pid - 44)), at(pid, 1)], &idx);
        }
        assert_eq!(agg.totals()[0].count, 6 + 2 + 1000);
        assert_eq!(agg.seen.len(), 1, "one key: the pids are not part of it");
    }

    #[test]
    fn a_deleted_pod_takes_its_totals_along() {
        let mut idx = index();
        let mut agg = DenialAggregator::new(Duration::from_secs(60));
        agg.observe(&[row(3, Some("u1"))], &idx);
        agg.due(SystemTime::UNIX_EPOCH);
        assert_eq!(agg.totals().len(), 1);
        idx.remove("u1");
        agg.observe(&[row(3, Some("u1"))], &idx);
        assert!(agg.totals().is_empty());
        assert!(agg.last_emit.is_empty());
    }

    /// ENOSYS on `clone3`, as moby's and containerd's default profiles
    /// answer it so that glibc falls back to `clone`: no Event and no pod
    /// total; an EPERM beside it, and ENOSYS on a syscall libc does not
    /// retry, still make theirs.
    #[test]
    fn intended_fallbacks_make_no_event_and_no_pod_total() {
        let idx = index();
        let mut agg = DenialAggregator::new(Duration::from_secs(60));
        let clone3 = SummaryRow {
            syscall: "clone3".into(),
            nr: 435,
            errno: libc::ENOSYS,
            ..row(40, Some("u1"))
        };
        agg.observe(std::slice::from_ref(&clone3), &idx);
        assert!(agg.due(SystemTime::UNIX_EPOCH).is_empty());
        assert!(agg.totals().is_empty());
        let openat2 = SummaryRow {
            syscall: "openat2".into(),
            nr: 437,
            errno: libc::ENOSYS,
            ..row(2, Some("u1"))
        };
        agg.observe(
            &[
                SummaryRow {
                    count: 80,
                    ..clone3
                },
                row(3, Some("u1")),
                openat2,
            ],
            &idx,
        );
        let mut messages: Vec<_> = agg
            .due(SystemTime::UNIX_EPOCH)
            .into_iter()
            .map(|e| e.message)
            .collect();
        messages.sort();
        assert_eq!(
            messages,
            [
                "denied mkdir ×3 (EPERM) in container vllm, profile localhost/profiles/vllm-strict.json",
                "denied openat2 ×2 (ENOSYS) in container vllm, profile localhost/profiles/vllm-strict.json",
            ]
        );
        let totals: Vec<_> = agg
            .totals()
            .into_iter()
            .map(|t| (t.syscall, t.count))
            .collect();
        assert_eq!(totals, [("mkdir".into(), 3), ("openat2".into(), 2)]);
    }

    /// A container restarted after its profile was edited: its denials name
    /// the change and what the version before did; the container before the
    /// restart (lastState), under the version it started with, the oldest
    /// known, gets the plain message.
    #[test]
    fn denials_after_a_profile_change_name_it_and_are_counted_by_verdict() {
        use crate::judge::versions::{sha256_hex, ProfileVersions};
        use nodeproof_bpfgen::Native;
        use nodeproof_seccomp::lint::{loaded_program, LintOptions};
        let v1: &[u8] = br#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["rmdir"],"action":"SCMP_ACT_ERRNO"}]}"#;
        let v2: &[u8] = br#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","rmdir"],"action":"SCMP_ACT_ERRNO"}]}"#;
        let compile =
            |src: &[u8]| loaded_program(src, &LintOptions::default(), &Native).map(|(_, p)| p);
        let t = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + s);
        let mut versions = ProfileVersions::default();
        versions.observe("profiles/app.json", v1, None, t(100), || compile(v1));
        versions.observe("profiles/app.json", v2, None, t(200), || compile(v2));
        let versions = Arc::new(Mutex::new(versions));
        let (old, new) = ("a".repeat(64), "b".repeat(64));
        let mut idx = PodIndex::default();
        idx.upsert(&pod(json!({
            "metadata": {"name": "app-0", "namespace": "ml", "uid": "u2"},
            "spec": {"containers": [{"name": "app", "securityContext": {"seccompProfile":
                {"type": "Localhost", "localhostProfile": "profiles/app.json"}}}]},
            "status": {"containerStatuses": [{"name": "app", "containerID": format!("containerd://{new}"),
                "image": "i", "imageID": "", "ready": true, "restartCount": 1,
                "state": {"running": {"startedAt": "2027-01-15T08:03:21Z"}},
                "lastState": {"terminated": {"containerID": format!("containerd://{old}"), "exitCode": 1,
                    "startedAt": "2027-01-15T08:01:50Z", "finishedAt": "2027-01-15T08:03:20Z"}}}]}
        })));
        // 2027-01-15T08:00:00Z is 1_800_000_000 (the versions' t(0)).
        assert_eq!(
            idx.start_and_profile("u2", &new),
            Some((t(201), "profiles/app.json".to_string()))
        );
        let mut agg = DenialAggregator::new(Duration::from_secs(60)).with_versions(versions);
        let row = |id: &str, syscall: &str, nr: i32, count| SummaryRow {
            syscall: syscall.into(),
            nr,
            container_id: Some(id.to_string()),
            cgroup_id: if id == old { 9 } else { 10 },
            ..row(count, Some("u2"))
        };
        agg.observe(
            &[row(&new, "mkdir", 83, 40), row(&old, "rmdir", 84, 2)],
            &idx,
        );
        let mut ev = agg.due(t(300));
        ev.sort_by(|a, b| a.message.cmp(&b.message));
        let (h1, h2) = (sha256_hex(v1), sha256_hex(v2));
        assert_eq!(
            ev[0].message,
            format!(
                "denied mkdir ×40 (EPERM) in container app, profile localhost/profiles/app.json as of 08:03:20 (sha256 {}…); the previous version (sha256 {}…, until 08:03:20) allowed mkdir",
                &h2[..8],
                &h1[..8]
            )
        );
        let change = ev[0].change.clone().unwrap();
        assert_eq!(
            (
                change.profile.as_str(),
                change.syscall.as_str(),
                change.version_since.as_str()
            ),
            ("profiles/app.json", "mkdir", "2027-01-15T08:03:20Z")
        );
        assert_eq!((change.version, change.previous), (h2, h1));
        assert_eq!(change.previous_verdict, PreviousVerdict::Allowed);
        assert_eq!(
            ev[1].message,
            "denied rmdir ×2 (EPERM) in container app, profile localhost/profiles/app.json"
        );
        assert_eq!(ev[1].change, None);
        // rmdir in the restarted container: v1 denied it too.
        agg.observe(
            &[
                row(&new, "mkdir", 83, 40),
                row(&old, "rmdir", 84, 2),
                row(&new, "rmdir", 84, 3),
            ],
            &idx,
        );
        let ev = agg.due(t(400));
        assert_eq!(ev.len(), 1);
        assert!(
            ev[0].message.ends_with(") denied it too"),
            "{}",
            ev[0].message
        );
        assert_eq!(
            agg.after_change(),
            BTreeMap::from([
                (PreviousVerdict::Allowed, 40),
                (PreviousVerdict::Denied, 3),
                (PreviousVerdict::Unknown, 0)
            ])
        );
    }

    /// An NTP step back (or a VM restored from a snapshot) must not mute a
    /// pod's events until the clock catches up.
    #[test]
    fn a_clock_stepped_back_does_not_mute_events() {
        let idx = index();
        let mut agg = DenialAggregator::new(Duration::from_secs(60));
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        agg.observe(&[row(1, Some("u1"))], &idx);
        assert_eq!(agg.due(t0).len(), 1);
        agg.observe(&[row(2, Some("u1"))], &idx);
        let back = t0 - Duration::from_secs(3600);
        assert_eq!(agg.due(back).len(), 1, "an hour back: due now");
        // From the new time on, the interval holds again.
        agg.observe(&[row(3, Some("u1"))], &idx);
        assert!(agg.due(back + Duration::from_secs(30)).is_empty());
        assert_eq!(agg.due(back + Duration::from_secs(60)).len(), 1);
    }
}
