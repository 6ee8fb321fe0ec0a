//! GPU faults as they happen (an XID event, new uncorrectable ECC errors, a
//! GPU falling off the bus) and the pods' containers holding the device.
//!
//! [`FaultTracker`] turns snapshots into faults, remembering each GPU's
//! UUID and MIG instances while it still answered: a lost GPU has no
//! readable UUID, yet its pods are found by it. [`attribute`] maps a fault to
//! the allocations of the GPU and of every MIG instance on it (an XID on the
//! parent is one on each instance). Pure: the caller reads the allocations
//! (pod-resources, DRA) and says which pods still run.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::probe::Snapshot;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum FaultKind {
    Xid {
        code: u64,
    },
    /// New uncorrectable ECC errors since the previous snapshot.
    Ecc {
        new_errors: u64,
    },
    /// NVML_ERROR_GPU_IS_LOST, seen for the first time.
    Lost,
}

impl FaultKind {
    /// The `xid` label of `nodeproof_gpu_faults_total`: the code, or `ecc`/`lost`.
    pub fn label(&self) -> String {
        match self {
            FaultKind::Xid { code } => code.to_string(),
            FaultKind::Ecc { .. } => "ecc".into(),
            FaultKind::Lost => "lost".into(),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            FaultKind::Xid { code } => format!("raised XID {code}"),
            FaultKind::Ecc { new_errors } => {
                format!("reported {new_errors} new uncorrectable ECC error(s)")
            }
            FaultKind::Lost => "fell off the bus (NVML_ERROR_GPU_IS_LOST)".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fault {
    pub gpu: u32,
    /// Empty when never read.
    pub uuid: String,
    pub kind: FaultKind,
    /// The device ids the kubelet may have handed out for this GPU: its
    /// UUID and its MIG instances' UUIDs.
    pub devices: Vec<String>,
}

#[derive(Debug, Clone, Default)]
struct Known {
    uuid: Option<String>,
    mig: Vec<String>,
    lost: bool,
    ecc: Option<u64>,
}

/// What a GPU looked like while it answered, by index within one driver
/// session (indices only shift when a GPU leaves enumeration, and then its
/// UUID read earlier still names it here).
#[derive(Debug, Clone, Default)]
pub struct FaultTracker {
    gpus: BTreeMap<u32, Known>,
}

impl FaultTracker {
    /// The faults new in this snapshot.
    pub fn observe(&mut self, snapshot: &Snapshot) -> Vec<Fault> {
        let mut out = Vec::new();
        for g in &snapshot.gpus {
            let k = self.gpus.entry(g.index).or_default();
            if g.uuid.is_some() {
                k.uuid.clone_from(&g.uuid);
            }
            if !g.mig.is_empty() {
                k.mig = g.mig.iter().filter_map(|m| m.uuid.clone()).collect();
            } else if g.mig_enabled == Some(false) {
                k.mig.clear();
            }
            let mut kinds = Vec::new();
            if g.lost && !k.lost {
                kinds.push(FaultKind::Lost);
            }
            k.lost = g.lost;
            if let Some(now) = g.ecc_uncorrected_volatile {
                // The volatile count is since the driver loaded: only its
                // growth happened while these pods held the GPU.
                if let Some(before) = k.ecc.filter(|b| now > *b) {
                    kinds.push(FaultKind::Ecc {
                        new_errors: now - before,
                    });
                }
                k.ecc = Some(now);
            }
            out.extend(kinds.into_iter().map(|kind| self.fault(g.index, kind)));
        }
        for x in &snapshot.xids {
            let Some(index) = x.gpu else { continue };
            let k = self.gpus.entry(index).or_default();
            if x.uuid.is_some() && k.uuid.is_none() {
                k.uuid.clone_from(&x.uuid);
            }
            out.push(self.fault(index, FaultKind::Xid { code: x.xid }));
        }
        out
    }

    fn fault(&self, gpu: u32, kind: FaultKind) -> Fault {
        let k = self.gpus.get(&gpu).cloned().unwrap_or_default();
        let mut devices: Vec<String> = k.uuid.iter().cloned().collect();
        devices.extend(k.mig.iter().cloned());
        Fault {
            gpu,
            uuid: k.uuid.unwrap_or_default(),
            kind,
            devices,
        }
    }
}

/// One device in one container, from pod-resources or a DRA claim.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Allocation {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// GPU or MIG UUID.
    pub device: String,
}

/// A fault on a device a running container holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodFault {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// The device the container holds (the GPU's UUID or one of its MIG instances').
    pub device: String,
    pub gpu: u32,
    pub gpu_uuid: String,
    pub kind: FaultKind,
}

impl PodFault {
    /// "GPU GPU-8f… (index 3) raised XID 79 while allocated to this pod's container vllm"
    pub fn message(&self) -> String {
        let via = if self.device != self.gpu_uuid && !self.device.is_empty() {
            format!(" (its MIG instance {})", self.device)
        } else {
            String::new()
        };
        // A DRA claim no container names is the pod's as a whole.
        let holder = if self.container.is_empty() {
            "this pod".to_string()
        } else {
            format!("this pod's container {}", self.container)
        };
        format!(
            "GPU {} (index {}){via} {} while allocated to {holder}",
            if self.gpu_uuid.is_empty() {
                "uuid unknown"
            } else {
                &self.gpu_uuid
            },
            self.gpu,
            self.kind.describe(),
        )
    }
}

/// Each fault on every container holding the GPU or one of its MIG
/// instances, once per (container, device, fault). `running` says whether a
/// pod still runs: the kubelet keeps listing terminated pods' devices.
pub fn attribute(
    faults: &[Fault],
    allocations: &[Allocation],
    running: impl Fn(&str, &str) -> bool,
) -> Vec<PodFault> {
    let mut out = BTreeSet::new();
    for f in faults {
        for a in allocations {
            if !f.devices.contains(&a.device) || !running(&a.namespace, &a.pod) {
                continue;
            }
            out.insert(PodFault {
                namespace: a.namespace.clone(),
                pod: a.pod.clone(),
                container: a.container.clone(),
                device: a.device.clone(),
                gpu: f.gpu,
                gpu_uuid: f.uuid.clone(),
                kind: f.kind,
            });
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::{DriverState, GpuInfo, MigInfo, XidEvent};
    use std::time::Duration;

    fn snap(gpus: Vec<GpuInfo>, xids: Vec<XidEvent>) -> Snapshot {
        Snapshot {
            driver: DriverState::Ready,
            system: None,
            gpus,
            xids,
            notes: Vec::new(),
            elapsed: Duration::ZERO,
            cuda: None,
        }
    }

    fn gpu(i: u32) -> GpuInfo {
        GpuInfo {
            index: i,
            uuid: Some(format!("GPU-{i}")),
            ecc_uncorrected_volatile: Some(0),
            ..GpuInfo::default()
        }
    }

    fn alloc(pod: &str, device: &str) -> Allocation {
        Allocation {
            namespace: "ml".into(),
            pod: pod.into(),
            container: "main".into(),
            device: device.into(),
        }
    }

    #[test]
    fn a_lost_gpu_is_found_by_the_uuid_read_while_it_answered() {
        let mut t = FaultTracker::default();
        assert!(t.observe(&snap(vec![gpu(0), gpu(1)], vec![])).is_empty());
        let mut lost = GpuInfo {
            uuid: None,
            lost: true,
            ecc_uncorrected_volatile: None,
            ..gpu(1)
        };
        lost.index = 1;
        let f = t.observe(&snap(vec![gpu(0), lost.clone()], vec![]));
        assert_eq!(f.len(), 1);
        assert_eq!((f[0].kind, f[0].uuid.as_str()), (FaultKind::Lost, "GPU-1"));
        // Still lost: not a new fault.
        assert!(t.observe(&snap(vec![gpu(0), lost], vec![])).is_empty());
    }

    #[test]
    fn only_ecc_growth_is_a_fault() {
        let mut t = FaultTracker::default();
        let mut g = gpu(0);
        g.ecc_uncorrected_volatile = Some(4);
        // Errors from before the first look are nobody's here.
        assert!(t.observe(&snap(vec![g.clone()], vec![])).is_empty());
        g.ecc_uncorrected_volatile = Some(6);
        let f = t.observe(&snap(vec![g], vec![]));
        assert_eq!(f[0].kind, FaultKind::Ecc { new_errors: 2 });
    }

    #[test]
    fn an_xid_reaches_the_pods_of_the_gpu_and_of_its_mig_instances_only() {
        let mut t = FaultTracker::default();
        let mut g0 = gpu(0);
        g0.mig_enabled = Some(true);
        g0.mig = (0..2)
            .map(|k| MigInfo {
                index: k,
                uuid: Some(format!("MIG-0-{k}")),
                name: None,
                memory: None,
            })
            .collect();
        let faults = t.observe(&snap(
            vec![g0, gpu(1)],
            vec![XidEvent {
                gpu: Some(0),
                uuid: None,
                xid: 79,
            }],
        ));
        let allocations = [
            alloc("a", "MIG-0-0"),
            alloc("b", "MIG-0-1"),
            alloc("c", "GPU-1"),
            alloc("done", "MIG-0-1"),
        ];
        let got = attribute(&faults, &allocations, |_, pod| pod != "done");
        let pods: Vec<&str> = got.iter().map(|p| p.pod.as_str()).collect();
        assert_eq!(pods, ["a", "b"]);
        assert_eq!(
            got[0].message(),
            "GPU GPU-0 (index 0) (its MIG instance MIG-0-0) raised XID 79 while allocated to this pod's container main"
        );
        assert_eq!(got[0].kind.label(), "79");
    }
}
