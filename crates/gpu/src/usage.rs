//! GPU usage by the pods holding each device: one snapshot's utilization,
//! memory, temperature, power and ECC counts, joined by UUID to the
//! containers holding the GPU or one of its MIG instances (the same
//! [`Allocation`]s the fault attribution reads: pod-resources and DRA).
//!
//! dcgm-exporter reads the same NVML fields but often leaves its pod labels
//! empty (NVIDIA/dcgm-exporter#477); nodeproof already knows the holders.
//! Pure: the caller reads the snapshot and the allocations and says which
//! pods still run.
//!
//! Never stale: rows come from this snapshot alone. A driver that did not
//! answer gives no rows; a field NVML did not give (NotSupported, a lost
//! GPU, a failed call) is `None`, not zero, and has no sample.

use std::collections::BTreeSet;

use serde::Serialize;

use super::faults::Allocation;
use super::probe::{DriverState, MemoryUsage, Snapshot};
use strum::IntoStaticStr;

/// Who holds a device; all empty when no running pod's container does (a
/// DRA claim no container names has an empty `container` only).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Holder {
    pub namespace: String,
    pub pod: String,
    pub container: String,
}

/// The two ECC counts on `/metrics` (`error` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, IntoStaticStr)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum EccError {
    /// Single-bit, corrected by ECC.
    Corrected,
    /// Double-bit: the data was lost (also a fault on the pods, `faults`).
    Uncorrected,
}

impl EccError {
    pub const ALL: [EccError; 2] = [EccError::Corrected, EccError::Uncorrected];

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One device (a GPU, or a MIG instance of a GPU in MIG mode) and one holder.
/// Per-GPU quantities (utilization, temperature, power, ECC) on a MIG
/// instance's row are its parent's: aggregate them by `uuid` with `max`,
/// not `sum`. A device several containers hold has a row per container.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageRow {
    /// The GPU's NVML index.
    pub gpu: u32,
    /// The GPU's UUID.
    pub uuid: String,
    /// The device held: the GPU's UUID, or its MIG instance's (`MIG-…`).
    pub device: String,
    pub holder: Holder,
    /// Fraction of the driver's last sample period in which a kernel ran
    /// (0 to 1); NVML does not give it for a GPU in MIG mode.
    pub utilization_ratio: Option<f64>,
    /// The device's memory: the instance's own for a MIG instance.
    pub memory: Option<MemoryUsage>,
    pub temperature_celsius: Option<u32>,
    pub power_watts: Option<f64>,
    /// Volatile counts (since the driver loaded), by kind.
    pub ecc_corrected: Option<u64>,
    pub ecc_uncorrected: Option<u64>,
}

impl UsageRow {
    pub fn ecc(&self, kind: EccError) -> Option<u64> {
        match kind {
            EccError::Corrected => self.ecc_corrected,
            EccError::Uncorrected => self.ecc_uncorrected,
        }
    }
}

/// The usage rows of one snapshot. `running` says whether a pod still runs
/// (the kubelet keeps listing terminated pods' devices); a device no
/// running container holds has one row with an empty [`Holder`]. A GPU
/// without a UUID cannot be joined or named and is left out, and so is
/// every GPU when the driver did not answer.
pub fn usage(
    snapshot: &Snapshot,
    allocations: &[Allocation],
    running: impl Fn(&str, &str) -> bool,
) -> Vec<UsageRow> {
    if snapshot.driver != DriverState::Ready {
        return Vec::new();
    }
    let mut out = Vec::new();
    for g in &snapshot.gpus {
        let Some(uuid) = &g.uuid else { continue };
        let base = UsageRow {
            gpu: g.index,
            uuid: uuid.clone(),
            device: uuid.clone(),
            holder: Holder::default(),
            utilization_ratio: g.utilization.map(|u| f64::from(u.gpu_percent) / 100.0),
            memory: g.memory,
            temperature_celsius: g.temperature_c,
            power_watts: g.power_mw.map(|mw| f64::from(mw) / 1000.0),
            ecc_corrected: g.ecc_corrected_volatile,
            ecc_uncorrected: g.ecc_uncorrected_volatile,
        };
        // In MIG mode the device plugin offers the instances, not the GPU.
        let devices: Vec<UsageRow> = if g.mig.is_empty() {
            vec![base]
        } else {
            g.mig
                .iter()
                .filter_map(|m| {
                    Some(UsageRow {
                        device: m.uuid.clone()?,
                        memory: m.memory,
                        ..base.clone()
                    })
                })
                .collect()
        };
        for d in devices {
            let holders: BTreeSet<Holder> = allocations
                .iter()
                .filter(|a| a.device == d.device && running(&a.namespace, &a.pod))
                .map(|a| Holder {
                    namespace: a.namespace.clone(),
                    pod: a.pod.clone(),
                    container: a.container.clone(),
                })
                .collect();
            if holders.is_empty() {
                out.push(d);
                continue;
            }
            out.extend(holders.into_iter().map(|holder| UsageRow {
                holder,
                ..d.clone()
            }));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::{GpuInfo, MigInfo, Utilization};
    use std::time::Duration;

    const GIB: u64 = 1 << 30;

    fn snap(driver: DriverState, gpus: Vec<GpuInfo>) -> Snapshot {
        Snapshot {
            gpus,
            ..Snapshot::failed(driver, Duration::ZERO)
        }
    }

    fn gpu(i: u32) -> GpuInfo {
        GpuInfo {
            index: i,
            uuid: Some(format!("GPU-{i}")),
            temperature_c: Some(40 + i),
            power_mw: Some(70_500),
            ecc_uncorrected_volatile: Some(1),
            ecc_corrected_volatile: Some(9),
            utilization: Some(Utilization {
                gpu_percent: 87,
                memory_percent: 30,
            }),
            memory: Some(MemoryUsage {
                used_bytes: 3 * GIB,
                total_bytes: 80 * GIB,
            }),
            ..GpuInfo::default()
        }
    }

    fn alloc(ns: &str, pod: &str, container: &str, device: &str) -> Allocation {
        Allocation {
            namespace: ns.into(),
            pod: pod.into(),
            container: container.into(),
            device: device.into(),
        }
    }

    fn holders(rows: &[UsageRow]) -> Vec<(&str, &str, &str)> {
        rows.iter()
            .map(|r| {
                (
                    r.device.as_str(),
                    r.holder.pod.as_str(),
                    r.holder.container.as_str(),
                )
            })
            .collect()
    }

    #[test]
    fn each_device_is_labelled_with_its_running_holders_or_none() {
        let mut g1 = gpu(1);
        g1.mig_enabled = Some(true);
        g1.utilization = None; // NVML gives none in MIG mode
        g1.mig = (0..2)
            .map(|k| MigInfo {
                index: k,
                uuid: Some(format!("MIG-1-{k}")),
                name: None,
                memory: Some(MemoryUsage {
                    used_bytes: k as u64 * GIB,
                    total_bytes: 10 * GIB,
                }),
            })
            .collect();
        let allocations = [
            alloc("ml", "vllm-0", "main", "GPU-0"),
            alloc("ml", "vllm-0", "sidecar", "GPU-0"),
            alloc("ml", "done-0", "main", "GPU-2"),
            alloc("ml", "small-0", "main", "MIG-1-1"),
        ];
        let rows = usage(
            &snap(DriverState::Ready, vec![gpu(0), g1, gpu(2)]),
            &allocations,
            |_, pod| pod != "done-0",
        );
        assert_eq!(
            holders(&rows),
            [
                ("GPU-0", "vllm-0", "main"),
                ("GPU-0", "vllm-0", "sidecar"),
                ("MIG-1-0", "", ""),
                ("MIG-1-1", "small-0", "main"),
                // Held only by a terminated pod: nobody's.
                ("GPU-2", "", ""),
            ]
        );
        assert_eq!(rows[0].holder.namespace, "ml");
        assert_eq!(rows[2].holder, Holder::default());
        assert_eq!(rows[0].utilization_ratio, Some(0.87));
        assert_eq!(rows[0].power_watts, Some(70.5));
        assert_eq!(rows[0].ecc(EccError::Corrected), Some(9));
        assert_eq!(rows[0].ecc(EccError::Uncorrected), Some(1));
        // A MIG instance: its own memory, its parent's temperature and uuid.
        let mig = &rows[3];
        assert_eq!((mig.gpu, mig.uuid.as_str()), (1, "GPU-1"));
        assert_eq!(mig.memory.map(|m| m.used_bytes), Some(GIB));
        assert_eq!(mig.memory.map(|m| m.total_bytes), Some(10 * GIB));
        assert_eq!(mig.temperature_celsius, Some(41));
        assert_eq!(mig.utilization_ratio, None);
    }

    #[test]
    fn what_nvml_did_not_give_is_absent_and_a_failed_cycle_has_no_rows() {
        let mut g = gpu(0);
        g.power_mw = None;
        g.ecc_corrected_volatile = None;
        let mut nameless = gpu(1);
        nameless.uuid = None;
        let rows = usage(&snap(DriverState::Ready, vec![g, nameless]), &[], |_, _| {
            true
        });
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (rows[0].power_watts, rows[0].ecc_corrected),
            (None, None),
            "absent, not zero"
        );
        assert_eq!(rows[0].temperature_celsius, Some(40));
        let failed = DriverState::NotAnswering {
            call: "nvmlDeviceGetCount_v2".into(),
            waited_ms: 5000,
        };
        assert!(usage(&snap(failed, vec![gpu(0)]), &[], |_, _| true).is_empty());
    }
}
