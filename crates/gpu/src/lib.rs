//! GPU driver and device health: PCI discovery from sysfs, an NVML probe on
//! a dedicated thread, a TOML policy with hysteresis, and the typed report
//! (verdicts, text, metric values) they produce, and the GPUs' usage by the
//! pods holding them (`usage`), and what the kubelet, the Node and DRA say
//! of the node's GPUs (`views`). The agent's checks turn the report into
//! findings and conditions.
//!
//! The probe is the only edge (it needs a driver); discovery takes a sysfs
//! root and the policy is pure, so both are tested without a GPU. The NVML
//! probe itself is tested through the real FFI against a fake
//! `libnvidia-ml.so.1` (`agent/tests/fake-nvml/`).

pub mod advertised;
pub mod cuda;
pub mod faults;
pub mod nvml;
pub mod pci;
pub mod policy;
pub mod probe;
pub mod reason;
pub mod report;
pub mod usage;
pub mod views;
mod worker;
pub mod xid;

use std::time::{SystemTime, UNIX_EPOCH};

pub use policy::{GpuConfig, PolicyState};
pub use probe::{GpuProbe, Snapshot};
pub use reason::GpuReason;
pub use report::{DeviceHealth, GpuHealth, GpuMetrics, GpuReport};

/// One probe cycle: discover, probe (only when NVIDIA devices exist, so no
/// driver library is loaded on CPU nodes), evaluate against the policy.
pub fn cycle(config: &GpuConfig, probe: &mut dyn GpuProbe, state: &mut PolicyState) -> GpuReport {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    cycle_at(config, probe, state, now)
}

/// `cycle` at a given time in seconds, so windows and hysteresis are testable.
pub fn cycle_at(
    config: &GpuConfig,
    probe: &mut dyn GpuProbe,
    state: &mut PolicyState,
    now: u64,
) -> GpuReport {
    let pci = pci::discover(&config.sysfs_root);
    let snapshot = match &pci {
        Ok(devices) if devices.is_empty() => None,
        _ => Some(probe.snapshot()),
    };
    let evaluation = policy::evaluate(
        config,
        state,
        pci.as_deref().map_err(|e| e.to_string()),
        snapshot.as_ref(),
        now,
    );
    GpuReport::new(pci, snapshot, evaluation)
}

/// Folds the kubelet's view into a cycle's report: the comparison, and
/// `GPUHealthy` False (`AdvertisedUnhealthy`) when the kubelet offers a
/// device NVML calls unhealthy or cannot see. Nothing on a node without
/// NVIDIA devices.
pub fn compare_kubelet(report: &mut GpuReport, view: &advertised::KubeletView) {
    if report.no_gpu() {
        return;
    }
    let devices = match &report.snapshot {
        Some(s) => advertised::nvml_devices(s, &report.evaluation),
        None => Vec::new(),
    };
    let comparison = advertised::compare(view, devices);
    advertised::apply(&mut report.evaluation, &comparison);
    report.kubelet = Some(comparison);
}
