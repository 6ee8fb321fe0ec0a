//! GPU faults on the pods holding the device: the GPU probe attributes each
//! XID, ECC growth or lost GPU to the containers pod-resources lists for the
//! GPU and its MIG instances (`nodeproof_gpu::faults`); here the watched
//! pods drop the terminated ones (the kubelet keeps listing their devices)
//! and resolve the pod's UID, and faults become one aggregated Warning
//! Event per (pod, container, GPU, fault) per interval, as the seccomp
//! denials do, plus counter values. Pure: faults in, events and totals out;
//! the caller owns the clock.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use nodeproof_gpu::faults::{FaultKind, PodFault};
use nodeproof_report::events::ObjectRef;

use super::denials::PodIndex;

pub const EVENT_REASON: &str = "GPUFault";

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Key {
    pod_uid: String,
    container: String,
    gpu_uuid: String,
    kind: FaultKind,
}

struct Pending {
    fault: PodFault,
    count: u64,
}

/// One Event's worth.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodGpuFaultEvent {
    pub pod: ObjectRef,
    pub message: String,
}

/// `nodeproof_gpu_faults_total{namespace,pod,container,xid}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuFaultTotal {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// The XID code, or `ecc` / `lost`.
    pub xid: String,
    pub count: u64,
}

pub struct GpuFaultAggregator {
    interval: Duration,
    pending: BTreeMap<Key, Pending>,
    last_emit: HashMap<Key, SystemTime>,
    totals: BTreeMap<(String, String, String, String), u64>,
}

impl GpuFaultAggregator {
    pub fn new(interval: Duration) -> Self {
        GpuFaultAggregator {
            interval,
            pending: BTreeMap::new(),
            last_emit: HashMap::new(),
            totals: BTreeMap::new(),
        }
    }

    /// Counts faults on pods that run here now; the rest are dropped.
    pub fn observe(&mut self, faults: &[PodFault], pods: &PodIndex) {
        for f in faults {
            let Some(uid) = pods.running(&f.namespace, &f.pod) else {
                continue;
            };
            let key = Key {
                pod_uid: uid.to_string(),
                container: f.container.clone(),
                gpu_uuid: f.gpu_uuid.clone(),
                kind: f.kind,
            };
            self.pending
                .entry(key)
                .or_insert_with(|| Pending {
                    fault: f.clone(),
                    count: 0,
                })
                .count += 1;
            *self
                .totals
                .entry((
                    f.namespace.clone(),
                    f.pod.clone(),
                    f.container.clone(),
                    f.kind.label(),
                ))
                .or_default() += 1;
        }
    }

    /// Events due at `now`: a key's faults since its last event, if that
    /// event is at least an interval old.
    pub fn due(&mut self, now: SystemTime) -> Vec<PodGpuFaultEvent> {
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
            let times = if p.count > 1 {
                format!(" (×{})", p.count)
            } else {
                String::new()
            };
            out.push(PodGpuFaultEvent {
                pod: ObjectRef {
                    kind: "Pod",
                    namespace: p.fault.namespace.clone(),
                    name: p.fault.pod.clone(),
                    uid: Some(k.pod_uid.clone()),
                },
                message: format!("{}{times}", p.fault.message()),
            });
            false
        });
        out
    }

    pub fn totals(&self) -> Vec<GpuFaultTotal> {
        self.totals
            .iter()
            .map(|((namespace, pod, container, xid), &count)| GpuFaultTotal {
                namespace: namespace.clone(),
                pod: pod.clone(),
                container: container.clone(),
                xid: xid.clone(),
                count,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, uid: &str, phase: &str) -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ml", "uid": uid},
            "spec": {"containers": [{"name": "vllm"}]},
            "status": {"phase": phase}
        }))
        .expect("pod JSON")
    }

    fn fault(pod: &str, xid: u64) -> PodFault {
        PodFault {
            namespace: "ml".into(),
            pod: pod.into(),
            container: "vllm".into(),
            device: "GPU-8f".into(),
            gpu: 3,
            gpu_uuid: "GPU-8f".into(),
            kind: FaultKind::Xid { code: xid },
        }
    }

    #[test]
    fn one_event_per_pod_and_fault_per_interval_terminated_pods_dropped() {
        let mut idx = PodIndex::default();
        idx.upsert(&pod("vllm-0", "u1", "Running"));
        idx.upsert(&pod("batch-0", "u2", "Succeeded"));
        let mut agg = GpuFaultAggregator::new(Duration::from_secs(60));
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        agg.observe(
            &[
                fault("vllm-0", 79),
                fault("batch-0", 79),
                fault("unknown", 79),
            ],
            &idx,
        );
        let ev = agg.due(t0);
        assert_eq!(ev.len(), 1, "{ev:?}");
        assert_eq!(
            (ev[0].pod.name.as_str(), ev[0].pod.uid.as_deref()),
            ("vllm-0", Some("u1"))
        );
        assert_eq!(
            ev[0].message,
            "GPU GPU-8f (index 3) raised XID 79 while allocated to this pod's container vllm"
        );
        // Two more within the interval: held, then one event with the count.
        agg.observe(&[fault("vllm-0", 79), fault("vllm-0", 79)], &idx);
        assert!(agg.due(t0 + Duration::from_secs(30)).is_empty());
        let ev = agg.due(t0 + Duration::from_secs(60));
        assert_eq!(ev.len(), 1);
        assert!(
            ev[0].message.ends_with("container vllm (×2)"),
            "{}",
            ev[0].message
        );
        assert_eq!(
            agg.totals(),
            vec![GpuFaultTotal {
                namespace: "ml".into(),
                pod: "vllm-0".into(),
                container: "vllm".into(),
                xid: "79".into(),
                count: 3
            }]
        );
    }
}
