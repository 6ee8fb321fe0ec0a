//! The GPU health policy (the `[gpu]` section of the agent config) and its
//! evaluation. Pure: a snapshot, the PCI list and the time in, verdicts out;
//! the hysteresis state is plain data the caller keeps between cycles.

use nodeproof_findings::ConditionStatus;
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::pci::PciGpu;
use super::probe::{
    CudaDevice, CudaReport, CudaResult, CudaState, DriverState, FabricInfo, FabricState, GpuInfo,
    Snapshot,
};
use super::reason::GpuReason;
use super::xid;
pub use super::xid::XidClass;

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
    /// Shut NVML down (and close the CUDA library) after every cycle, so the
    /// agent holds no driver handle between cycles: a driver upgrade or
    /// module unload is never blocked by it. Costs a library load and
    /// initialisation per cycle, and XID events raised between cycles are
    /// not seen (the event set does not outlive the session).
    pub release_between_cycles: bool,
    pub cuda: CudaPolicy,
    pub fabric: FabricPolicy,
}

/// What a check's breach does to the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Fails the check (GPUHealthy=False, with hysteresis).
    Fail,
    /// A warning finding; the GPU stays healthy.
    Warn,
    /// Not reported.
    Ignore,
}

/// `[gpu.cuda]`: the opt-in CUDA probe (a context and an allocation per GPU).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct CudaPolicy {
    pub enabled: bool,
    /// Soname or path of the CUDA driver library.
    pub library: String,
    /// A CUDA check that takes longer means CUDA is not answering.
    pub timeout_ms: u64,
    /// Run a fresh CUDA check at most this often (the GPU cycle reuses the last one between).
    pub interval_s: u64,
    /// Bytes allocated and freed per GPU.
    pub buffer_bytes: u64,
    /// What a CUDA failure on a GPU NVML calls healthy does.
    pub failure: Severity,
}

/// `[gpu.fabric]`: NVSwitch fabric registration and NVLink state.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct FabricPolicy {
    /// Fabric registration not completed, or completed with an error.
    pub not_ready: Severity,
    /// The fabric reports degraded bandwidth.
    pub degraded_bandwidth: Severity,
    /// A GPU with NVLinks has inactive links.
    pub nvlink_inactive: Severity,
}

impl Default for CudaPolicy {
    fn default() -> Self {
        CudaPolicy {
            enabled: false,
            library: super::cuda::DEFAULT_LIBRARY.into(),
            timeout_ms: 10_000,
            interval_s: 300,
            buffer_bytes: 1 << 20,
            failure: Severity::Fail,
        }
    }
}

impl Default for FabricPolicy {
    fn default() -> Self {
        FabricPolicy {
            not_ready: Severity::Fail,
            degraded_bandwidth: Severity::Warn,
            nvlink_inactive: Severity::Warn,
        }
    }
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
            release_between_cycles: false,
            cuda: CudaPolicy::default(),
            fabric: FabricPolicy::default(),
        }
    }
}

impl Default for XidPolicy {
    fn default() -> Self {
        XidPolicy {
            // The shipped XID catalog (data/xid-catalog.toml) decides the defaults.
            fatal: xid::codes_of(XidClass::Fatal),
            ignored: xid::codes_of(XidClass::Ignored),
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
        if self.cuda.library.trim().is_empty() {
            p.push("gpu.cuda.library must not be empty".to_string());
        }
        for (key, v) in [
            ("timeout-ms", self.cuda.timeout_ms),
            ("buffer-bytes", self.cuda.buffer_bytes),
        ] {
            if v == 0 {
                p.push(format!("gpu.cuda.{key} must be at least 1"));
            }
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

/// The per-GPU checks, in the order a message names them.
pub const CHECKS: [&str; 8] = [
    "lost",
    "xid",
    "ecc",
    "row-remap",
    "retired-pages",
    "cuda",
    "fabric",
    "nvlink",
];

/// What the caller keeps between cycles.
#[derive(Debug, Default, Clone)]
pub struct PolicyState {
    gpus: BTreeMap<GpuKey, GpuState>,
    /// Cumulative XID events by (gpu index, class), for the metrics counters.
    pub xid_totals: BTreeMap<(u32, XidClass), u64>,
}

/// Who a GPU is across cycles. NVML's enumeration index is not an identity:
/// when a GPU drops out of enumeration (fallen off the bus, unbound) NVML
/// numbers the GPUs after it one lower, so history kept by index would move
/// to another GPU. The key is the first identity the policy learned for the
/// GPU: its UUID, else its PCI bus id, else (neither ever readable) its index.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum GpuKey {
    Uuid(String),
    PciBusId(String),
    Index(u32),
}

#[derive(Debug, Default, Clone)]
struct GpuState {
    uuid: Option<String>,
    pci_bus_id: Option<String>,
    /// The index NVML gave this GPU in the last snapshot that listed it: a
    /// lost GPU answers neither UUID nor bus id, only its index.
    last_index: Option<u32>,
    /// (time, class, xid) of judged XIDs still inside their window.
    xids: VecDeque<(u64, XidClass, u64)>,
    /// Per check: the failure being held and the clean intervals seen since.
    held: BTreeMap<&'static str, (Breach, u32)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Breach {
    reason: GpuReason,
    message: String,
    severity: Severity,
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
    pub reason: GpuReason,
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
    pub reason: GpuReason,
    pub message: String,
    /// While a failure is held: clean intervals seen so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clean_intervals: Option<u32>,
    /// A breach the policy rates a warning: `ok` (the GPU stays healthy),
    /// reported with its reason and message.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub warning: bool,
}

fn verdict(status: ConditionStatus, reason: GpuReason, message: impl Into<String>) -> Verdict {
    Verdict {
        status,
        reason,
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
            GpuReason::NoGpu,
            "no NVIDIA PCI device on this node",
        ),
        gpu_healthy: verdict(
            ConditionStatus::Unknown,
            GpuReason::NoGpu,
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
                GpuReason::DriverNotReady,
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
    let keys = state.identify(&snapshot.gpus);
    for x in &snapshot.xids {
        let Some(gpu) = x.gpu else { continue };
        let class = config.class_of(x.xid);
        *state.xid_totals.entry((gpu, class)).or_default() += 1;
        if class != XidClass::Ignored {
            // The event's UUID was read when its handle was registered, so it
            // names the GPU even when the GPU no longer answers.
            let key = x
                .uuid
                .as_ref()
                .and_then(|u| state.find(|s| s.uuid.as_ref() == Some(u), &[]))
                .or_else(|| {
                    let at = snapshot.gpus.iter().position(|g| g.index == gpu)?;
                    Some(keys[at].clone())
                })
                .unwrap_or_else(|| x.uuid.clone().map_or(GpuKey::Index(gpu), GpuKey::Uuid));
            state
                .gpus
                .entry(key)
                .or_default()
                .xids
                .push_back((now, class, x.xid));
        }
    }
    let gpus: Vec<GpuVerdict> = snapshot
        .gpus
        .iter()
        .zip(keys)
        .map(|(g, key)| {
            let gpu_state = state.gpus.entry(key).or_default();
            judge_gpu(config, gpu_state, g, snapshot.cuda.as_ref(), now)
        })
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
            GpuReason::GpusHealthy,
            format!("{} of {} GPUs healthy", gpus.len(), gpus.len()),
        ),
        Some(first) => verdict(
            ConditionStatus::False,
            first.reason,
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

impl PolicyState {
    /// The first GPU state (not in `taken`) that `matches`.
    fn find(&self, matches: impl Fn(&GpuState) -> bool, taken: &[GpuKey]) -> Option<GpuKey> {
        self.gpus
            .iter()
            .find(|(k, s)| !taken.contains(k) && matches(s))
            .map(|(k, _)| k.clone())
    }

    /// The key of each GPU in the snapshot, in its order: by UUID, else by
    /// PCI bus id, else by the index a GPU had in the previous snapshot (a
    /// lost GPU), else a new key. Records this snapshot's identities.
    fn identify(&mut self, gpus: &[GpuInfo]) -> Vec<GpuKey> {
        let mut keys: Vec<GpuKey> = Vec::with_capacity(gpus.len());
        for g in gpus {
            let known = if let Some(uuid) = &g.uuid {
                self.find(|s| s.uuid.as_ref() == Some(uuid), &keys)
                    .or_else(|| {
                        // Learned by bus id while the UUID was unreadable.
                        let pci = g.pci_bus_id.as_ref()?;
                        self.find(
                            |s| s.uuid.is_none() && s.pci_bus_id.as_ref() == Some(pci),
                            &keys,
                        )
                    })
            } else if let Some(pci) = &g.pci_bus_id {
                self.find(|s| s.pci_bus_id.as_ref() == Some(pci), &keys)
            } else {
                self.find(|s| s.last_index == Some(g.index), &keys)
            };
            let key = known.unwrap_or_else(|| match (&g.uuid, &g.pci_bus_id) {
                (Some(u), _) => GpuKey::Uuid(u.clone()),
                (None, Some(p)) => GpuKey::PciBusId(p.clone()),
                (None, None) => GpuKey::Index(g.index),
            });
            keys.push(key);
        }
        for s in self.gpus.values_mut() {
            s.last_index = None;
        }
        for (g, key) in gpus.iter().zip(&keys) {
            let s = self.gpus.entry(key.clone()).or_default();
            s.last_index = Some(g.index);
            if g.uuid.is_some() {
                s.uuid.clone_from(&g.uuid);
            }
            if g.pci_bus_id.is_some() {
                s.pci_bus_id.clone_from(&g.pci_bus_id);
            }
        }
        keys
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
            GpuReason::NvmlLibraryMissing,
            format!("{pci_text} but the NVML library cannot be loaded: {detail}"),
        ),
        DriverState::InitFailed { call, error } => verdict(
            ConditionStatus::False,
            GpuReason::NvmlInitFailed,
            format!("{pci_text} but {call} failed: {error}"),
        ),
        DriverState::NotAnswering { call, waited_ms } => verdict(
            ConditionStatus::False,
            GpuReason::DriverNotAnswering,
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
                    GpuReason::DriverReady,
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
                    GpuReason::GpusMissingFromNvml,
                    format!(
                        "NVML sees {seen} of {} NVIDIA PCI devices; not seen: {}",
                        list.len(),
                        names.join(", ")
                    ),
                )
            } else {
                verdict(
                    ConditionStatus::True,
                    GpuReason::DriverReady,
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
    cuda: Option<&CudaReport>,
    now: u64,
) -> BTreeMap<&'static str, Breach> {
    let mut b = BTreeMap::new();
    let put = |b: &mut BTreeMap<_, _>, check, reason, message: String| {
        b.insert(
            check,
            Breach {
                reason,
                message,
                severity: Severity::Fail,
            },
        );
    };
    let mut rated = |check, severity, (reason, message): (GpuReason, String)| {
        if severity != Severity::Ignore {
            b.insert(
                check,
                Breach {
                    reason,
                    message,
                    severity,
                },
            );
        }
    };
    if let Some(breach) = cuda.filter(|_| !g.lost).and_then(|c| cuda_breach(c, g)) {
        rated("cuda", config.cuda.failure, breach);
    }
    let f = &config.fabric;
    if let Some(fabric) = &g.fabric {
        if let Some(breach) = fabric_breach(fabric) {
            rated("fabric", f.not_ready, breach);
        } else if fabric.degraded_bandwidth() {
            rated(
                "fabric",
                f.degraded_bandwidth,
                (
                    GpuReason::FabricDegradedBandwidth,
                    "the NVLink fabric reports degraded bandwidth".into(),
                ),
            );
        }
    }
    let inactive: Vec<String> = g
        .nvlinks
        .iter()
        .filter(|l| !l.active)
        .map(|l| l.link.to_string())
        .collect();
    if !inactive.is_empty() {
        rated(
            "nvlink",
            f.nvlink_inactive,
            (
                GpuReason::NvLinkInactive,
                format!(
                    "NVLink {} of {} links inactive: {}",
                    inactive.len(),
                    g.nvlinks.len(),
                    inactive.join(", ")
                ),
            ),
        );
    }
    if g.lost {
        put(
            &mut b,
            "lost",
            GpuReason::GpuLost,
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
        (
            XidClass::Fatal,
            x.fatal_count,
            x.fatal_window_s,
            GpuReason::FatalXid,
        ),
        (
            XidClass::Other,
            x.other_count,
            x.other_window_s,
            GpuReason::XidRateExceeded,
        ),
    ] {
        let recent: Vec<u64> = state
            .xids
            .iter()
            .filter(|(t, c, _)| *c == class && now.saturating_sub(*t) <= window)
            .map(|(_, _, v)| *v)
            .collect();
        if recent.len() as u64 >= u64::from(count) && !b.contains_key("xid") {
            let mut codes = recent.clone();
            codes.sort_unstable();
            codes.dedup();
            let list: Vec<String> = codes.into_iter().map(xid::describe).collect();
            put(
                &mut b,
                "xid",
                reason,
                format!(
                    "{} {} XID(s) in {window}s (threshold {count}): {}",
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
            GpuReason::UncorrectableEcc,
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
                GpuReason::UncorrectableEcc,
                format!("{v} lifetime uncorrectable ECC errors (max {max})"),
            );
        }
    }
    if let Some(r) = g.remapped_rows {
        if r.failed && m.row_remap_failed {
            put(
                &mut b,
                "row-remap",
                GpuReason::RowRemapFailed,
                "row remapping failed: no spare rows, the GPU needs replacing".into(),
            );
        } else if r.pending && m.row_remap_pending {
            put(
                &mut b,
                "row-remap",
                GpuReason::RowRemapPending,
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
            GpuReason::RetiredPagesPending,
            "retired pages wait for a GPU reset to take effect".into(),
        );
    }
    b
}

/// The CUDA probe's verdict on one GPU NVML answered for: a node-wide CUDA
/// failure applies to every GPU; otherwise the CUDA device with the GPU's
/// UUID (or bus id) must have created a context and allocated.
fn cuda_breach(c: &CudaReport, g: &GpuInfo) -> Option<(GpuReason, String)> {
    let named = |call: &str, r: &CudaResult| {
        let text = r
            .text
            .as_deref()
            .map_or(String::new(), |t| format!(", {t}"));
        let what = format!("CUDA {call} failed: {} ({}{text})", r.name, r.code);
        if r.code == CudaResult::SYSTEM_NOT_READY {
            // cuda.h: the system is not yet ready to start any CUDA work;
            // on NVSwitch systems the fabric manager configures the fabric first.
            (
                GpuReason::CudaSystemNotReady,
                format!("{what} while NVML answers: on NVSwitch systems the fabric manager is not running or has not finished"),
            )
        } else {
            (GpuReason::CudaFailed, what)
        }
    };
    match &c.state {
        CudaState::LibraryMissing { detail } => Some((
            GpuReason::CudaLibraryMissing,
            format!("the CUDA library cannot be loaded: {detail}"),
        )),
        CudaState::InitFailed { call, result } => Some(named(call, result)),
        CudaState::NotAnswering { call, waited_ms } => Some((
            GpuReason::CudaNotAnswering,
            format!("CUDA {call} did not return within {waited_ms} ms"),
        )),
        CudaState::Ready => {
            let same = |d: &&CudaDevice| match (&g.uuid, &d.uuid) {
                (Some(a), Some(b)) => a == b,
                _ => g.pci_bus_id.is_some() && g.pci_bus_id == d.pci_bus_id,
            };
            match c.devices.iter().find(same) {
                None => Some((
                    GpuReason::CudaDeviceMissing,
                    format!(
                        "not among the {} devices CUDA enumerates (CUDA_VISIBLE_DEVICES in the agent's environment?)",
                        c.devices.len()
                    ),
                )),
                Some(d) => d.failure.as_ref().map(|f| named(&f.call, &f.result)),
            }
        }
    }
}

fn fabric_breach(f: &FabricInfo) -> Option<(GpuReason, String)> {
    let hint = "on NVSwitch systems nvidia-fabricmanager registers each GPU";
    match f.state {
        FabricState::NotStarted => Some((
            GpuReason::FabricNotReady,
            format!("GPU fabric registration not started ({hint})"),
        )),
        FabricState::InProgress => Some((
            GpuReason::FabricNotReady,
            format!("GPU fabric registration in progress ({hint})"),
        )),
        FabricState::Completed => f.error.as_ref().map(|e| {
            (
                GpuReason::FabricRegistrationFailed,
                format!("GPU fabric registration completed with an error: {e}"),
            )
        }),
        FabricState::Unknown(v) => Some((
            GpuReason::FabricNotReady,
            format!("GPU fabric state {v} is not one nodeproof knows"),
        )),
        FabricState::NotSupported => None,
    }
}

/// Hysteresis: a breach fails its check at once; a failed check clears
/// only after `clear_after_clean_intervals` intervals in a row without one.
/// A breach rated a warning is reported as it is, without hysteresis.
fn judge_gpu(
    config: &GpuConfig,
    state: &mut GpuState,
    g: &GpuInfo,
    cuda: Option<&CudaReport>,
    now: u64,
) -> GpuVerdict {
    let mut now_breaches = breaches(config, state, g, cuda, now);
    let need = config.clear_after_clean_intervals;
    let mut checks = Vec::new();
    for check in CHECKS {
        let now_breach = now_breaches.remove(check);
        if let Some(b) = now_breach.as_ref().filter(|b| b.severity == Severity::Warn) {
            checks.push(CheckVerdict {
                check,
                ok: true,
                reason: b.reason,
                message: b.message.clone(),
                clean_intervals: None,
                warning: true,
            });
            continue;
        }
        let verdict = match (now_breach, state.held.remove(check)) {
            (Some(b), _) => {
                let v = CheckVerdict {
                    check,
                    ok: false,
                    reason: b.reason,
                    message: b.message.clone(),
                    clean_intervals: Some(0),
                    warning: false,
                };
                state.held.insert(check, (b, 0));
                v
            }
            (None, Some((b, clean))) if clean + 1 < need => {
                let v = CheckVerdict {
                    check,
                    ok: false,
                    reason: b.reason,
                    message: format!(
                        "{} (clean for {} of {need} intervals)",
                        b.message,
                        clean + 1
                    ),
                    clean_intervals: Some(clean + 1),
                    warning: false,
                };
                state.held.insert(check, (b, clean + 1));
                v
            }
            (None, _) => CheckVerdict {
                check,
                ok: true,
                reason: GpuReason::Healthy,
                message: "ok".into(),
                clean_intervals: None,
                warning: false,
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
            cuda: None,
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
                "ignored xids",
                |_| {},
                &[13, 31, 43, 45, 63, 68, 92, 154],
                ConditionStatus::True,
                "GPUsHealthy",
            ),
            // NVIDIA's catalog: context-switch timeout needs a GPU reset.
            (
                "xid 109",
                |_| {},
                &[109],
                ConditionStatus::False,
                "FatalXid",
            ),
            // Contained to one application: restart it, reset when convenient.
            (
                "one xid 94",
                |_| {},
                &[94],
                ConditionStatus::True,
                "GPUsHealthy",
            ),
            (
                "3 xid 94",
                |_| {},
                &[94, 94, 94],
                ConditionStatus::False,
                "XidRateExceeded",
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

    /// GPU 1 drops out of enumeration, so NVML renumbers GPU 2 as index 1:
    /// GPU 2's fatal XID must stay with GPU 2, and GPU 1's lost state must
    /// not land on the GPU that now has its index.
    #[test]
    fn history_follows_the_uuid_not_the_index() {
        let config = GpuConfig::default();
        let mut state = PolicyState::default();
        let mut lost = gpu(1);
        lost.lost = true;
        let xid_on_2 = Snapshot {
            xids: vec![XidEvent {
                gpu: Some(2),
                uuid: Some("GPU-2".into()),
                xid: 79,
            }],
            ..snapshot(vec![gpu(0), lost, gpu(2)], &[])
        };
        let e = evaluate(&config, &mut state, Ok(&pci(3)), Some(&xid_on_2), 0);
        let unhealthy = |e: &Evaluation| -> Vec<Option<String>> {
            e.gpus
                .iter()
                .filter(|g| !g.healthy)
                .map(|g| g.uuid.clone())
                .collect()
        };
        assert_eq!(
            unhealthy(&e),
            [Some("GPU-1".to_string()), Some("GPU-2".to_string())]
        );
        // Next cycle: GPU 1 is gone, GPU 2 answers as index 1.
        let mut renumbered = gpu(2);
        renumbered.index = 1;
        let e = evaluate(
            &config,
            &mut state,
            Ok(&pci(3)),
            Some(&snapshot(vec![gpu(0), renumbered], &[])),
            60,
        );
        let g = &e.gpus[1];
        assert_eq!((g.index, g.uuid.as_deref()), (1, Some("GPU-2")));
        let failed: Vec<&str> = g
            .checks
            .iter()
            .filter(|c| !c.ok)
            .map(|c| c.reason.as_str())
            .collect();
        assert_eq!(failed, ["FatalXid"], "{:?}", e.gpu_healthy.message);
        assert!(e.gpus[0].healthy);
    }

    /// A GPU that answers GPU_IS_LOST has no UUID or bus id this cycle; it
    /// keeps the identity its index had last cycle.
    #[test]
    fn a_lost_gpu_keeps_last_cycles_identity() {
        let config = GpuConfig::default();
        let mut state = PolicyState::default();
        evaluate(
            &config,
            &mut state,
            Ok(&pci(2)),
            Some(&snapshot(vec![gpu(0), gpu(1)], &[])),
            0,
        );
        let lost = GpuInfo {
            index: 1,
            lost: true,
            ..GpuInfo::default()
        };
        let e = evaluate(
            &config,
            &mut state,
            Ok(&pci(2)),
            Some(&snapshot(vec![gpu(0), lost], &[(1, 79)])),
            60,
        );
        assert_eq!(e.gpus[1].uuid.as_deref(), Some("GPU-1"));
        assert_eq!(e.gpu_healthy.reason, "GPULost");
        assert!(
            e.gpu_healthy
                .message
                .contains("GPU 1 (GPU-1): fallen off the bus"),
            "{}",
            e.gpu_healthy.message
        );
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
