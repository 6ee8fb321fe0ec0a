//! One cycle's GPU picture as a typed report (verdicts, the kubelet
//! comparison), JSON, text and metric values. The agent's checks turn it
//! into findings and conditions, so what `nodeproof gpu` prints is what
//! `check` and the daemon report.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::advertised::Comparison;
use super::pci::{PciError, PciGpu};
use super::policy::{Evaluation, PolicyState, XidClass};
use super::probe::{CudaState, Snapshot};
use nodeproof_findings::ConditionStatus;

#[derive(Debug, Serialize)]
pub struct GpuReport {
    pub pci: Vec<PciGpu>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pci_error: Option<String>,
    pub snapshot: Option<Snapshot>,
    pub evaluation: Evaluation,
    /// What the kubelet offers against NVML (`None`: not compared).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<Comparison>,
}

/// One cycle's metric values, for the daemon to encode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuMetrics {
    /// `nodeproof_gpu_driver_ready`; `None` on a node without NVIDIA devices
    /// (no sample: nothing to be ready).
    pub driver_ready: Option<bool>,
    /// `nodeproof_gpu_health`: per GPU, `all` then each policy check.
    pub health: Vec<GpuHealth>,
    /// `nodeproof_gpu_xid_errors_total`: cumulative XID events by (gpu index, class).
    pub xid_totals: BTreeMap<(u32, XidClass), u64>,
    /// `nodeproof_gpu_device_health`: per device the kubelet offers or NVML
    /// sees, shaped like `device_plugin_health_status{plugin,node}`.
    pub devices: Vec<DeviceHealth>,
    /// The `node` label of the device gauge (set by the daemon).
    pub node: String,
}

/// One device's health under the resource it is offered as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceHealth {
    /// The extended resource (`nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`).
    pub plugin: String,
    /// GPU or MIG UUID.
    pub device: String,
    /// 1: NVML calls it healthy; 0: unhealthy or not seen.
    pub healthy: bool,
}

/// One GPU's verdict on one check (`all`: every check).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuHealth {
    pub gpu: u32,
    /// Empty when NVML did not give it.
    pub uuid: String,
    pub check: &'static str,
    pub ok: bool,
}

impl GpuReport {
    pub fn new(
        pci: Result<Vec<PciGpu>, PciError>,
        snapshot: Option<Snapshot>,
        evaluation: Evaluation,
    ) -> GpuReport {
        let (pci, pci_error) = match pci {
            Ok(list) => (list, None),
            // The source chain (the io error) belongs in the text a user reads.
            Err(e) => (
                Vec::new(),
                Some(nodeproof_findings::errors::error_chain(&e)),
            ),
        };
        GpuReport {
            pci,
            pci_error,
            snapshot,
            evaluation,
            kubelet: None,
        }
    }

    /// Nothing to check on this node (exit 0 with status NoGPU).
    pub fn no_gpu(&self) -> bool {
        self.evaluation.no_gpu
    }

    /// Both conditions True.
    pub fn healthy(&self) -> bool {
        self.evaluation.driver_ready.status == ConditionStatus::True
            && self.evaluation.gpu_healthy.status == ConditionStatus::True
    }

    /// The values behind the GPU metrics (the daemon's `/metrics` encodes
    /// them): per-GPU health by check, XID counters by class, driver
    /// readiness. The usual fleet alert ("GPU health below 95% for 2 minutes")
    /// becomes `100 * avg by (node) (nodeproof_gpu_health{check="all"}) < 95`.
    pub fn metrics(&self, state: &PolicyState) -> GpuMetrics {
        let e = &self.evaluation;
        let mut health = Vec::new();
        for g in &e.gpus {
            let uuid = g.uuid.clone().unwrap_or_default();
            health.push(GpuHealth {
                gpu: g.index,
                uuid: uuid.clone(),
                check: "all",
                ok: g.healthy,
            });
            health.extend(g.checks.iter().map(|c| GpuHealth {
                gpu: g.index,
                uuid: uuid.clone(),
                check: c.check,
                ok: c.ok,
            }));
        }
        GpuMetrics {
            driver_ready: (!e.no_gpu).then(|| e.driver_ready.status == ConditionStatus::True),
            health,
            xid_totals: state.xid_totals.clone(),
            devices: self.kubelet.as_ref().map(device_health).unwrap_or_default(),
            node: String::new(),
        }
    }

    /// The human picture `nodeproof gpu` prints, up to the blank line
    /// before the conditions: the agent's checks make the conditions and
    /// append their lines (`nodeproof::judge::gpu::text`).
    pub fn text(&self) -> String {
        let mut t = String::new();
        if let Some(err) = &self.pci_error {
            let _ = writeln!(t, "PCI: {err}");
        } else {
            let _ = writeln!(t, "PCI: {} NVIDIA display devices", self.pci.len());
            for p in &self.pci {
                let _ = writeln!(
                    t,
                    "  {} class 0x{:06x} driver {}",
                    p.bus_id,
                    p.class,
                    p.driver.as_deref().unwrap_or("-")
                );
            }
        }
        if let Some(s) = &self.snapshot {
            if let Some(sys) = &s.system {
                let _ = writeln!(
                    t,
                    "NVML: driver {} CUDA {} NVML {} devices {} ({} ms)",
                    sys.driver_version.as_deref().unwrap_or("?"),
                    sys.cuda_driver_version.as_deref().unwrap_or("?"),
                    sys.nvml_version.as_deref().unwrap_or("?"),
                    sys.device_count,
                    s.elapsed.as_millis()
                );
            }
            for g in &s.gpus {
                let _ =
                    writeln!(
                    t,
                    "  GPU {} {} {} {} persistence {} ECC DBE vol/agg {}/{} temp {} C power {} W{}",
                    g.index,
                    g.uuid.as_deref().unwrap_or("?"),
                    g.name.as_deref().unwrap_or("?"),
                    g.pci_bus_id.as_deref().unwrap_or("?"),
                    g.persistence_mode.map_or("?", |p| if p { "on" } else { "off" }),
                    opt(g.ecc_uncorrected_volatile),
                    opt(g.ecc_uncorrected_aggregate),
                    opt(g.temperature_c),
                    g.power_mw.map_or("?".to_string(), |p| format!("{:.0}", f64::from(p) / 1000.0)),
                    if g.lost { " LOST" } else { "" }
                );
            }
            for g in s
                .gpus
                .iter()
                .filter(|g| g.fabric.is_some() || !g.nvlinks.is_empty())
            {
                let fabric = g.fabric.as_ref().map_or("-".to_string(), |f| {
                    format!(
                        "{:?}{}",
                        f.state,
                        f.error
                            .as_deref()
                            .map_or(String::new(), |e| format!(" ({e})"))
                    )
                });
                let up = g.nvlinks.iter().filter(|l| l.active).count();
                let _ = writeln!(
                    t,
                    "  GPU {} fabric {fabric} NVLink {up}/{} active",
                    g.index,
                    g.nvlinks.len()
                );
            }
            if let Some(c) = &s.cuda {
                let state = match &c.state {
                    CudaState::Ready => "ready".to_string(),
                    CudaState::LibraryMissing { detail } => format!("library missing: {detail}"),
                    CudaState::InitFailed { call, result } => {
                        format!("{call} failed: {} ({})", result.name, result.code)
                    }
                    CudaState::NotAnswering { call, waited_ms } => {
                        format!("{call} did not return within {waited_ms} ms")
                    }
                };
                let _ = writeln!(
                    t,
                    "CUDA: {state} ({} devices, {} ms{})",
                    c.devices.len(),
                    c.elapsed.as_millis(),
                    if c.fresh { "" } else { ", last run" }
                );
                for d in c.devices.iter().filter(|d| d.failure.is_some()) {
                    if let Some(f) = &d.failure {
                        let _ = writeln!(
                            t,
                            "  CUDA device {} {}: {} {} ({})",
                            d.ordinal,
                            d.uuid.as_deref().unwrap_or("?"),
                            f.call,
                            f.result.name,
                            f.result.code
                        );
                    }
                }
            }
            for x in &s.xids {
                let _ = writeln!(
                    t,
                    "  {} on GPU {}",
                    super::xid::describe(x.xid),
                    x.gpu.map_or("?".into(), |g| g.to_string())
                );
            }
            for n in &s.notes {
                let _ = writeln!(t, "  note: {n}");
            }
        }
        if let Some(c) = &self.kubelet {
            for r in &c.resources {
                let _ = writeln!(
                    t,
                    "kubelet: {} offered {}, healthy {}",
                    r.resource, r.offered, r.healthy
                );
            }
            if let Some(m) = c.not_offered_message() {
                let _ = writeln!(t, "  warning: {m}");
            }
            for n in &c.notes {
                let _ = writeln!(t, "  note: {n}");
            }
        }
        let _ = writeln!(t);
        t
    }
}

/// Each device NVML sees under the resource it is offered as, and each
/// offered id NVML does not see (as unhealthy).
fn device_health(c: &Comparison) -> Vec<DeviceHealth> {
    let mut out: Vec<DeviceHealth> = c
        .devices
        .iter()
        .map(|d| DeviceHealth {
            plugin: d.resource.clone(),
            device: d.id.clone(),
            healthy: d.healthy,
        })
        .collect();
    for r in &c.resources {
        for g in r.offered_unhealthy.iter().filter(|g| g.gpu.is_none()) {
            out.push(DeviceHealth {
                plugin: r.resource.clone(),
                device: g.id.clone(),
                healthy: false,
            });
        }
    }
    out
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "?".into(), |v| v.to_string())
}
