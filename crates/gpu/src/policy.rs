//! The GPU health policy (the `[gpu]` section of the agent config) and its
//! evaluation. Pure: a snapshot, the PCI list and the time in, verdicts out;
//! the hysteresis state is plain data the caller keeps between cycles.

use nodeproof_findings::ConditionStatus;
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::pci::PciGpu;
use super::probe::{DriverState, GpuInfo, Snapshot};

/// `[gpu]`: where to find NVML and how to judge what it says.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct GpuConfig {
    /// Soname or path of the NVML library.
    pub nvml_library: String,
    /// Where sysfs is mounted (PCI discovery reads `bus/pci/devices` under it).
    pub sysfs_root: PathBuf,
    /// A snapshot that takes longer means the driver is not answering.
    pub nvml_timeout_ms: u64,
    /// Consecutive clean probe intervals before a failed check clears.
    pub clear_after_clean_intervals: u32,
    pub xid: XidPolicy,
    pub memory: MemoryPolicy,
    /// The kubelet's pod-resources socket (what it offers and who holds which device).
    pub pod_resources_socket: PathBuf,
    /// A pod-resources call that takes longer fails.
    pub pod_resources_timeout_ms: u64,
}

/// `[gpu.xid]`: XID classes and per-class count/window thresholds.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct XidPolicy {
    /// XIDs that mean the GPU needs a reset or replacement.
    pub fatal: Vec<u64>,
    /// XIDs an application causes (its own fault, not the GPU's): counted, never judged.
    pub ignored: Vec<u64>,
    pub fatal_count: u32,
    pub fatal_window_s: u64,
    /// Any XID in neither list.
    pub other_count: u32,
    pub other_window_s: u64,
}

/// `[gpu.memory]`: ECC, page retirement and row remapping.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct MemoryPolicy {
    /// Uncorrectable ECC errors since the driver loaded above this fail.
    pub ecc_volatile_uncorrected_max: u64,
    /// Lifetime uncorrectable ECC errors above this fail (unset: not judged).
    pub ecc_aggregate_uncorrected_max: Option<u64>,
    /// Fail while retired pages wait for a reset to take effect (pre-Ampere).
    pub retired_pages_pending: bool,
    /// Fail while remapped rows wait for a reset (Ampere and newer).
    pub row_remap_pending: bool,
    /// Fail when row remapping failed (no spare rows left).
    pub row_remap_failed: bool,
}

impl Default for GpuConfig {
    fn default() -> Self {
        GpuConfig {
            nvml_library: super::nvml::DEFAULT_LIBRARY.into(),
            sysfs_root: PathBuf::from("/sys"),
            nvml_timeout_ms: 5000,
            clear_after_clean_intervals: 3,
            xid: XidPolicy::default(),
            memory: MemoryPolicy::default(),
            pod_resources_socket: PathBuf::from("/var/lib/kubelet/pod-resources/kubelet.sock"),
            pod_resources_timeout_ms: 2000,
        }
    }
}

impl Default for XidPolicy {
    fn default() -> Self {
        XidPolicy {
            fatal: vec![48, 62, 64, 74, 79, 94, 95, 119, 120, 140],
            ignored: vec![13, 31, 43, 45, 68, 109],
            fatal_count: 1,
            fatal_window_s: 600,
            other_count: 3,
            other_window_s: 3600,
        }
    }
}

impl Default for MemoryPolicy {
    fn default() -> Self {
        MemoryPolicy {
            ecc_volatile_uncorrected_max: 0,
            ecc_aggregate_uncorrected_max: None,
            retired_pages_pending: true,
            row_remap_pending: true,
            row_remap_failed: true,
        }
    }
}

impl GpuConfig {
    /// Every problem at once, each naming its key.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.nvml_library.trim().is_empty() {
            p.push("gpu.nvml-library must not be empty".to_string());
        }
        if self.nvml_timeout_ms == 0 {
            p.push("gpu.nvml-timeout-ms must be at least 1".to_string());
        }
        if self.pod_resources_timeout_ms == 0 {
            p.push("gpu.pod-resources-timeout-ms must be at least 1".to_string());
        }
        if self.clear_after_clean_intervals == 0 {
            p.push("gpu.clear-after-clean-intervals must be at least 1".to_string());
        }
        let x = &self.xid;
        for (key, count) in [
            ("fatal-count", x.fatal_count),
            ("other-count", x.other_count),
        ] {
            if count == 0 {
                p.push(format!("gpu.xid.{key} must be at least 1"));
            }
        }
        let mut both: Vec<_> = x.fatal.iter().filter(|v| x.ignored.contains(v)).collect();
        both.sort();
        both.dedup();
        for v in both {
            p.push(format!(
                "gpu.xid.fatal and gpu.xid.ignored both list XID {v}"
            ));
        }
        for (key, list) in [("fatal", &x.fatal), ("ignored", &x.ignored)] {
            for v in list.iter().filter(|v| **v == 0 || **v > 1000) {
                p.push(format!("gpu.xid.{key}: {v} is not an XID (1..=1000)"));
            }
        }
        p
    }

    pub fn class_of(&self, xid: u64) -> XidClass {
        if self.xid.fatal.contains(&xid) {
            XidClass::Fatal
        } else if self.xid.ignored.contains(&xid) {
            XidClass::Ignored
        } else {
            XidClass::Other
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum XidClass {
    Fatal,
    Ignored,
    Other,
}

impl XidClass {
    pub fn as_str(self) -> &'static str {
        match self {
            XidClass::Fatal => "fatal",
            XidClass::Ignored => "ignored",
            XidClass::Other => "other",
        }
    }
}

/// The per-GPU checks, in the order a message names them.
pub const CHECKS: [&str; 5] = ["lost", "xid", "ecc", "row-remap", "retired-pages"];

/// What the caller keeps between cycles.
#[derive(Debug, Default, Clone)]
pub struct PolicyState {
    gpus: BTreeMap<u32, GpuState>,
    /// Cumulative XID events by (gpu index, class), for the metrics counters.
    pub xid_totals: BTreeMap<(u32, XidClass), u64>,
}

#[derive(Debug, Default, Clone)]
struct GpuState {
    uuid: Option<String>,
    /// (time, class, xid) of judged XIDs still inside their window.
    xids: VecDeque<(u64, XidClass, u64)>,
    /// Per check: the failure being held and the clean intervals seen since.
    held: BTreeMap<&'static str, (Breach, u32)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Breach {
    reason: &'static str,
    message: String,
}

/// The result of one evaluation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Evaluation {
    pub driver_ready: Verdict,
    pub gpu_healthy: Verdict,
    pub gpus: Vec<GpuVerdict>,
    /// No NVIDIA PCI device on this node: nothing to check.
    pub no_gpu: bool,
}

/// A condition's status, reason and message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// The condition status this verdict backs.
    pub status: ConditionStatus,
    pub reason: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuVerdict {
    pub index: u32,
    pub uuid: Option<String>,
    pub healthy: bool,
    pub checks: Vec<CheckVerdict>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckVerdict {
    pub check: &'static str,
    pub ok: bool,
    pub reason: String,
    pub message: String,
    /// While a failure is held: clean intervals seen so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clean_intervals: Option<u32>,
}

fn verdict(status: ConditionStatus, reason: &str, message: impl Into<String>) -> Verdict {
    Verdict {
        status,
        reason: reason.into(),
        message: message.into(),
    }
}

/// Judge one cycle. `pci` is the discovery result (its error as text);
/// `snapshot` is `None` when discovery found no NVIDIA device; `now` is in
/// seconds (any monotonic origin).
pub fn evaluate(
    config: &GpuConfig,
    state: &mut PolicyState,
    pci: Result<&[PciGpu], String>,
    snapshot: Option<&Snapshot>,
    now: u64,
) -> Evaluation {
    let no_gpu = || Evaluation {
        driver_ready: verdict(
            ConditionStatus::Unknown,
            "NoGPU",
            "no NVIDIA PCI device on this node",
        ),
        gpu_healthy: verdict(
            ConditionStatus::Unknown,
            "NoGPU",
            "no NVIDIA PCI device on this node",
        ),
        gpus: Vec::new(),
        no_gpu: true,
    };
    let Some(snapshot) = snapshot else {
        return no_gpu();
    };
    let driver_ready = driver_verdict(&pci, snapshot);
    if snapshot.driver != DriverState::Ready {
        // The GPUs' held state is kept: a driver that comes back finds it.
        return Evaluation {
            gpu_healthy: verdict(
                ConditionStatus::Unknown,
                "DriverNotReady",
                format!(
                    "GPU health is unknown while the driver is not ready: {}",
                    driver_ready.message
                ),
            ),
            driver_ready,
            gpus: Vec::new(),
            no_gpu: false,
        };
    }
    for x in &snapshot.xids {
        let Some(gpu) = x.gpu else { continue };
        let class = config.class_of(x.xid);
        *state.xid_totals.entry((gpu, class)).or_default() += 1;
        if class != XidClass::Ignored {
            state
                .gpus
                .entry(gpu)
                .or_default()
                .xids
                .push_back((now, class, x.xid));
        }
    }
    let gpus: Vec<GpuVerdict> = snapshot
        .gpus
        .iter()
        .map(|g| judge_gpu(config, state.gpus.entry(g.index).or_default(), g, now))
        .collect();
    let failing: Vec<String> = gpus
        .iter()
        .filter(|g| !g.healthy)
        .flat_map(|g| {
            g.checks.iter().filter(|c| !c.ok).map(move |c| {
                format!(
                    "GPU {} ({}): {}",
                    g.index,
                    g.uuid.as_deref().unwrap_or("uuid unknown"),
                    c.message
                )
            })
        })
        .collect();
    let gpu_healthy = match gpus.iter().flat_map(|g| &g.checks).find(|c| !c.ok) {
        None => verdict(
            ConditionStatus::True,
            "GPUsHealthy",
            format!("{} of {} GPUs healthy", gpus.len(), gpus.len()),
        ),
        Some(first) => verdict(
            ConditionStatus::False,
            &first.reason,
            format!(
                "{} of {} GPUs unhealthy: {}",
                gpus.iter().filter(|g| !g.healthy).count(),
                gpus.len(),
                failing.join("; ")
            ),
        ),
    };
    Evaluation {
        driver_ready,
        gpu_healthy,
        gpus,
        no_gpu: false,
    }
}

fn driver_verdict(pci: &Result<&[PciGpu], String>, snapshot: &Snapshot) -> Verdict {
    let pci_text = match pci {
        Ok(list) => {
            let drivers: Vec<_> = list.iter().filter_map(|g| g.driver.as_deref()).collect();
            let bound = if drivers.is_empty() {
                "no kernel driver bound".to_string()
            } else {
                format!("driver {}", dedup(drivers).join(", "))
            };
            format!("{} NVIDIA PCI devices ({bound})", list.len())
        }
        Err(e) => format!("PCI discovery failed: {e}"),
    };
    match &snapshot.driver {
        DriverState::LibraryMissing { detail } => verdict(
            ConditionStatus::False,
            "NVMLLibraryMissing",
            format!("{pci_text} but the NVML library cannot be loaded: {detail}"),
        ),
        DriverState::InitFailed { call, error } => verdict(
            ConditionStatus::False,
            "NVMLInitFailed",
            format!("{pci_text} but {call} failed: {error}"),
        ),
        DriverState::NotAnswering { call, waited_ms } => verdict(
            ConditionStatus::False,
            "DriverNotAnswering",
            format!("{pci_text} but {call} did not return within {waited_ms} ms"),
        ),
        DriverState::Ready => {
            let sys = snapshot.system.clone().unwrap_or_default();
            let seen = snapshot.gpus.len();
            let versions = format!(
                "driver {}, CUDA {}, NVML {}",
                sys.driver_version.as_deref().unwrap_or("?"),
                sys.cuda_driver_version.as_deref().unwrap_or("?"),
                sys.nvml_version.as_deref().unwrap_or("?")
            );
            let Ok(list) = pci else {
                return verdict(
                    ConditionStatus::True,
                    "DriverReady",
                    format!("NVML answers for {seen} GPUs ({versions}); {pci_text}"),
                );
            };
            let missing: Vec<&PciGpu> = list
                .iter()
                .filter(|p| {
                    !snapshot
                        .gpus
                        .iter()
                        .any(|g| g.pci_bus_id.as_deref() == Some(&p.bus_id))
                })
                .collect();
            // A lost GPU has no readable bus id: count it as seen, not missing.
            let lost = snapshot
                .gpus
                .iter()
                .filter(|g| g.pci_bus_id.is_none())
                .count();
            if missing.len() > lost || seen < list.len() {
                let names: Vec<String> = missing
                    .iter()
                    .map(|p| {
                        format!(
                            "{} ({})",
                            p.bus_id,
                            p.driver.as_deref().unwrap_or("no driver")
                        )
                    })
                    .collect();
                verdict(
                    ConditionStatus::False,
                    "GPUsMissingFromNVML",
                    format!(
                        "NVML sees {seen} of {} NVIDIA PCI devices; not seen: {}",
                        list.len(),
                        names.join(", ")
                    ),
                )
            } else {
                verdict(
                    ConditionStatus::True,
                    "DriverReady",
                    format!(
                        "NVML answers for {seen} of {} NVIDIA PCI devices in {} ms ({versions})",
                        list.len(),
                        snapshot.elapsed.as_millis()
                    ),
                )
            }
        }
    }
}

fn dedup(mut v: Vec<&str>) -> Vec<&str> {
    v.sort_unstable();
    v.dedup();
    v
}

/// This interval's breaches of one GPU, before hysteresis.
fn breaches(
    config: &GpuConfig,
    state: &mut GpuState,
    g: &GpuInfo,
    now: u64,
) -> BTreeMap<&'static str, Breach> {
    let mut b = BTreeMap::new();
    let put = |b: &mut BTreeMap<_, _>, check, reason, message: String| {
        b.insert(check, Breach { reason, message });
    };
    if g.lost {
        put(
            &mut b,
            "lost",
            "GPULost",
            "fallen off the bus (NVML_ERROR_GPU_IS_LOST)".into(),
        );
    }
    // Drop XIDs outside the longer window; judge each class on its own.
    let x = &config.xid;
    let longest = x.fatal_window_s.max(x.other_window_s);
    while state
        .xids
        .front()
        .is_some_and(|(t, _, _)| now.saturating_sub(*t) > longest)
    {
        state.xids.pop_front();
    }
    for (class, count, window, reason) in [
        (XidClass::Fatal, x.fatal_count, x.fatal_window_s, "FatalXid"),
        (
            XidClass::Other,
            x.other_count,
            x.other_window_s,
            "XidRateExceeded",
        ),
    ] {
        let recent: Vec<u64> = state
            .xids
            .iter()
            .filter(|(t, c, _)| *c == class && now.saturating_sub(*t) <= window)
            .map(|(_, _, v)| *v)
            .collect();
        if recent.len() as u64 >= u64::from(count) && !b.contains_key("xid") {
            let list: Vec<String> = recent.iter().map(u64::to_string).collect();
            put(
                &mut b,
                "xid",
                reason,
                format!(
                    "{} {} XID(s) in {window}s (threshold {count}): XID {}",
                    recent.len(),
                    class.as_str(),
                    list.join(", ")
                ),
            );
        }
    }
    let m = &config.memory;
    if let Some(v) = g
        .ecc_uncorrected_volatile
        .filter(|v| *v > m.ecc_volatile_uncorrected_max)
    {
        put(
            &mut b,
            "ecc",
            "UncorrectableECC",
            format!(
                "{v} uncorrectable ECC errors since driver load (max {})",
                m.ecc_volatile_uncorrected_max
            ),
        );
    } else if let (Some(v), Some(max)) =
        (g.ecc_uncorrected_aggregate, m.ecc_aggregate_uncorrected_max)
    {
        if v > max {
            put(
                &mut b,
                "ecc",
                "UncorrectableECC",
                format!("{v} lifetime uncorrectable ECC errors (max {max})"),
            );
        }
    }
    if let Some(r) = g.remapped_rows {
        if r.failed && m.row_remap_failed {
            put(
                &mut b,
                "row-remap",
                "RowRemapFailed",
                "row remapping failed: no spare rows, the GPU needs replacing".into(),
            );
        } else if r.pending && m.row_remap_pending {
            put(
                &mut b,
                "row-remap",
                "RowRemapPending",
                format!(
                    "{} rows remapped, a GPU reset is pending to apply them",
                    r.correctable + r.uncorrectable
                ),
            );
        }
    }
    if g.retired_pages_pending == Some(true) && m.retired_pages_pending {
        put(
            &mut b,
            "retired-pages",
            "RetiredPagesPending",
            "retired pages wait for a GPU reset to take effect".into(),
        );
    }
    b
}

/// Hysteresis: a breach fails its check at once; a failed check clears
/// only after `clear_after_clean_intervals` intervals in a row without one.
fn judge_gpu(config: &GpuConfig, state: &mut GpuState, g: &GpuInfo, now: u64) -> GpuVerdict {
    if g.uuid.is_some() {
        state.uuid.clone_from(&g.uuid);
    }
    let mut now_breaches = breaches(config, state, g, now);
    let need = config.clear_after_clean_intervals;
    let mut checks = Vec::new();
    for check in CHECKS {
        let verdict = match (now_breaches.remove(check), state.held.remove(check)) {
            (Some(b), _) => {
                let v = CheckVerdict {
                    check,
                    ok: false,
                    reason: b.reason.into(),
                    message: b.message.clone(),
                    clean_intervals: Some(0),
                };
                state.held.insert(check, (b, 0));
                v
            }
            (None, Some((b, clean))) if clean + 1 < need => {
                let v = CheckVerdict {
                    check,
                    ok: false,
                    reason: b.reason.into(),
                    message: format!(
                        "{} (clean for {} of {need} intervals)",
                        b.message,
                        clean + 1
                    ),
                    clean_intervals: Some(clean + 1),
                };
                state.held.insert(check, (b, clean + 1));
                v
            }
            (None, _) => CheckVerdict {
                check,
                ok: true,
                reason: "Healthy".into(),
                message: "ok".into(),
                clean_intervals: None,
            },
        };
        checks.push(verdict);
    }
    GpuVerdict {
        index: g.index,
        uuid: g.uuid.clone().or_else(|| state.uuid.clone()),
        healthy: checks.iter().all(|c| c.ok),
        checks,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::probe::{RemappedRows, XidEvent};

    fn pci(n: u32) -> Vec<PciGpu> {
        (0..n)
            .map(|i| PciGpu {
                bus_id: format!("0000:{:02x}:00.0", 0x18 + i),
                class: 0x030200,
                driver: Some("nvidia".into()),
            })
            .collect()
    }

    fn snapshot(gpus: Vec<GpuInfo>, xids: &[(u32, u64)]) -> Snapshot {
        Snapshot {
            driver: DriverState::Ready,
            system: None,
            gpus,
            xids: xids
                .iter()
                .map(|&(g, xid)| XidEvent {
                    gpu: Some(g),
                    uuid: None,
                    xid,
                })
                .collect(),
            notes: Vec::new(),
            elapsed: Duration::from_millis(1),
        }
    }

    fn gpu(i: u32) -> GpuInfo {
        GpuInfo {
            index: i,
            uuid: Some(format!("GPU-{i}")),
            pci_bus_id: Some(format!("0000:{:02x}:00.0", 0x18 + i)),
            ..GpuInfo::default()
        }
    }

    /// One GPU, one interval: what the default policy says.
    #[test]
    fn default_policy_table() {
        type Edit = fn(&mut GpuInfo);
        let cases: &[(&str, Edit, &[u64], ConditionStatus, &str)] = &[
            ("clean", |_| {}, &[], ConditionStatus::True, "GPUsHealthy"),
            (
                "lost",
                |g| g.lost = true,
                &[],
                ConditionStatus::False,
                "GPULost",
            ),
            ("xid 79", |_| {}, &[79], ConditionStatus::False, "FatalXid"),
            ("xid 48", |_| {}, &[48], ConditionStatus::False, "FatalXid"),
            (
                "app xids",
                |_| {},
                &[13, 31, 43, 45, 68, 109],
                ConditionStatus::True,
                "GPUsHealthy",
            ),
            (
                "2 other",
                |_| {},
                &[32, 32],
                ConditionStatus::True,
                "GPUsHealthy",
            ),
            (
                "3 other",
                |_| {},
                &[32, 32, 32],
                ConditionStatus::False,
                "XidRateExceeded",
            ),
            (
                "dbe",
                |g| g.ecc_uncorrected_volatile = Some(1),
                &[],
                ConditionStatus::False,
                "UncorrectableECC",
            ),
            (
                "old dbe",
                |g| g.ecc_uncorrected_aggregate = Some(50),
                &[],
                ConditionStatus::True,
                "GPUsHealthy",
            ),
            (
                "pages",
                |g| g.retired_pages_pending = Some(true),
                &[],
                ConditionStatus::False,
                "RetiredPagesPending",
            ),
            (
                "remap pending",
                |g| {
                    g.remapped_rows = Some(RemappedRows {
                        correctable: 0,
                        uncorrectable: 1,
                        pending: true,
                        failed: false,
                    })
                },
                &[],
                ConditionStatus::False,
                "RowRemapPending",
            ),
            (
                "remap failed",
                |g| {
                    g.remapped_rows = Some(RemappedRows {
                        correctable: 0,
                        uncorrectable: 9,
                        pending: true,
                        failed: true,
                    })
                },
                &[],
                ConditionStatus::False,
                "RowRemapFailed",
            ),
        ];
        for (name, edit, xids, status, reason) in cases {
            let mut g = gpu(0);
            edit(&mut g);
            let xids: Vec<(u32, u64)> = xids.iter().map(|x| (0, *x)).collect();
            let e = evaluate(
                &GpuConfig::default(),
                &mut PolicyState::default(),
                Ok(&pci(1)),
                Some(&snapshot(vec![g], &xids)),
                100,
            );
            assert_eq!(
                (e.gpu_healthy.status, e.gpu_healthy.reason.as_str()),
                (*status, *reason),
                "{name}: {}",
                e.gpu_healthy.message
            );
            assert_eq!(e.driver_ready.reason, "DriverReady", "{name}");
        }
    }

    #[test]
    fn other_xids_count_within_their_window_only() {
        let config = GpuConfig::default();
        let mut state = PolicyState::default();
        for t in [0, 2000] {
            let e = evaluate(
                &config,
                &mut state,
                Ok(&pci(1)),
                Some(&snapshot(vec![gpu(0)], &[(0, 32)])),
                t,
            );
            assert_eq!(e.gpu_healthy.status, ConditionStatus::True);
        }
        // The third within 3600 s of the other two trips; one at 5000 s sees only the 2000 s one.
        let e = evaluate(
            &config,
            &mut state,
            Ok(&pci(1)),
            Some(&snapshot(vec![gpu(0)], &[(0, 32)])),
            3500,
        );
        assert_eq!(e.gpu_healthy.reason, "XidRateExceeded");
        let mut state2 = PolicyState::default();
        for t in [0, 2000, 5000] {
            let e = evaluate(
                &config,
                &mut state2,
                Ok(&pci(1)),
                Some(&snapshot(vec![gpu(0)], &[(0, 32)])),
                t,
            );
            assert_eq!(e.gpu_healthy.status, ConditionStatus::True, "t={t}");
        }
    }

    #[test]
    fn a_new_breach_restarts_the_clean_count() {
        let config = GpuConfig::default();
        let mut state = PolicyState::default();
        let mut lost = gpu(0);
        lost.lost = true;
        let run = |state: &mut PolicyState, g: &GpuInfo, t| {
            evaluate(
                &config,
                state,
                Ok(&pci(1)),
                Some(&snapshot(vec![g.clone()], &[])),
                t,
            )
            .gpu_healthy
            .status
        };
        assert_eq!(run(&mut state, &lost, 0), ConditionStatus::False);
        assert_eq!(run(&mut state, &gpu(0), 60), ConditionStatus::False);
        assert_eq!(run(&mut state, &gpu(0), 120), ConditionStatus::False);
        assert_eq!(run(&mut state, &lost, 180), ConditionStatus::False);
        assert_eq!(run(&mut state, &gpu(0), 240), ConditionStatus::False);
        assert_eq!(run(&mut state, &gpu(0), 300), ConditionStatus::False);
        assert_eq!(run(&mut state, &gpu(0), 360), ConditionStatus::True);
    }

    #[test]
    fn driver_states_and_missing_devices() {
        let config = GpuConfig::default();
        let cases = [
            (
                DriverState::LibraryMissing { detail: "x".into() },
                "NVMLLibraryMissing",
            ),
            (
                DriverState::InitFailed {
                    call: "nvmlInit_v2".into(),
                    error: "Driver Not Loaded".into(),
                },
                "NVMLInitFailed",
            ),
            (
                DriverState::NotAnswering {
                    call: "nvmlInit_v2".into(),
                    waited_ms: 5000,
                },
                "DriverNotAnswering",
            ),
        ];
        for (driver, reason) in cases {
            let s = Snapshot::failed(driver, Duration::ZERO);
            let e = evaluate(
                &config,
                &mut PolicyState::default(),
                Ok(&pci(2)),
                Some(&s),
                0,
            );
            assert_eq!(
                (e.driver_ready.status, e.driver_ready.reason.as_str()),
                (ConditionStatus::False, reason)
            );
            assert_eq!(
                (e.gpu_healthy.status, e.gpu_healthy.reason.as_str()),
                (ConditionStatus::Unknown, "DriverNotReady")
            );
        }
        let e = evaluate(
            &config,
            &mut PolicyState::default(),
            Ok(&pci(2)),
            Some(&snapshot(vec![gpu(0)], &[])),
            0,
        );
        assert_eq!(e.driver_ready.reason, "GPUsMissingFromNVML");
        assert!(
            e.driver_ready
                .message
                .ends_with("not seen: 0000:19:00.0 (nvidia)"),
            "{}",
            e.driver_ready.message
        );
        let e = evaluate(&config, &mut PolicyState::default(), Ok(&[]), None, 0);
        assert!(e.no_gpu);
        assert_eq!(e.driver_ready.reason, "NoGPU");
    }
}
