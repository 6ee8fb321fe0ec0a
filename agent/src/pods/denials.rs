//! The tracer's denials on the pods they hit: the watched pod set resolves a
//! cgroup's pod UID to namespace/name and a container id to the container's
//! name and profile; denials become one aggregated Warning Event per
//! (pod, container, syscall, outcome) per interval, and counter values.
//! A denial libc falls back from (ENOSYS on `clone3` under RuntimeDefault:
//! `nodeproof_trace::intended`) is neither: the node's
//! `nodeproof_seccomp_denials_total{outcome="intended-fallback"}` counts it.
//! Pure: rows in, events and totals out; the caller owns the clock.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

use nodeproof_kube::dra::{pod_claims, PodClaims};
use nodeproof_report::events::ObjectRef;
use nodeproof_report::refs::{pod_refs, PodRefs};
use nodeproof_trace::names::errno_name;
use nodeproof_trace::{Action, PodLookup, PodRef, SummaryRow};

pub const EVENT_REASON: &str = nodeproof_report::denial_change::DENIED_REASON;

struct IndexedPod {
    refs: PodRefs,
    /// Runtime container id (without `containerd://`) → container name.
    ids: HashMap<String, String>,
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
/// tracer reads from cgroup paths.
pub fn container_ids(pod: &Pod) -> HashMap<String, String> {
    let mut ids = HashMap::new();
    if let Some(st) = &pod.status {
        let all: [&Option<Vec<ContainerStatus>>; 3] = [
            &st.init_container_statuses,
            &st.container_statuses,
            &st.ephemeral_container_statuses,
        ];
        for s in all.into_iter().flatten().flatten() {
            if let Some(id) = &s.container_id {
                ids.insert(strip_runtime(id).to_string(), s.name.clone());
            }
        }
    }
    ids
}

impl PodIndex {
    pub fn upsert(&mut self, pod: &Pod) {
        let refs = pod_refs(pod);
        if refs.uid.is_empty() {
            return;
        }
        let ids = container_ids(pod);
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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDenialEvent {
    pub pod: ObjectRef,
    pub message: String,
}

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
}

/// Denials → pod events at most once per key per interval, and counters.
pub struct DenialAggregator {
    interval: Duration,
    seen: HashMap<RowKey, u64>,
    pending: BTreeMap<Key, Pending>,
    last_emit: HashMap<Key, SystemTime>,
    /// (namespace, pod, container, syscall, action) → total.
    totals: BTreeMap<(String, String, String, String, &'static str), u64>,
}

impl DenialAggregator {
    pub fn new(interval: Duration) -> Self {
        DenialAggregator {
            interval,
            seen: HashMap::new(),
            pending: BTreeMap::new(),
            last_emit: HashMap::new(),
            totals: BTreeMap::new(),
        }
    }

    /// Takes the tracer's rows with cumulative counts (as `Tracer` keeps
    /// them) and counts what is new since the last call.
    pub fn observe(&mut self, rows: &[SummaryRow], pods: &PodIndex) {
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
            let key = Key {
                pod_uid: uid.to_string(),
                container: container.clone(),
                syscall: r.syscall.clone(),
                action: r.action,
                errno: r.errno,
            };
            self.pending
                .entry(key)
                .or_insert_with(|| Pending {
                    namespace: pod.namespace.clone(),
                    name: pod.name.clone(),
                    profile,
                    count: 0,
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
                message: format!(
                    "denied {} ×{} ({}) in container {}, profile {}",
                    k.syscall,
                    p.count,
                    outcome(k.action, k.errno),
                    k.container,
                    p.profile
                ),
            });
            false
        });
        out
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
