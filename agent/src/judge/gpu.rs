//! GPUs as node health: one probe cycle's findings and the `GPUDriverReady`
//! and `GPUHealthy` conditions, with what the kubelet offers (pod-resources)
//! compared with what NVML calls healthy.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use nodeproof_findings::{Check, Condition, ConditionStatus, ConditionType, Finding, Status};
use nodeproof_gpu::advertised::{is_nvidia_resource, Comparison, KubeletView};
use nodeproof_gpu::faults::Allocation;
use nodeproof_gpu::policy::Verdict;
use nodeproof_gpu::reason::GpuReason;
use nodeproof_gpu::usage::UsageRow;
use nodeproof_gpu::views::{DraView, KubeletGpus, NodeDra};
use nodeproof_gpu::GpuReport;
use nodeproof_podresources::PodResourcesError;
use nodeproof_report::device_health::UnhealthyDevices;

use super::Round;

/// The GPU check's name (`/healthz/gpu`, `NODEPROOF_CHECK=gpu`).
pub const CHECK_NAME: &str = "gpu";

/// The round for one GPU cycle. On a node without NVIDIA devices the GPU
/// conditions are absent, not Unknown: there is nothing to fail, and a
/// CPU node must not look degraded.
pub fn round(report: &GpuReport) -> Round {
    Round {
        findings: findings(report),
        conditions: if report.no_gpu() {
            Vec::new()
        } else {
            conditions(report)
        },
    }
}

/// `GPUDriverReady` and `GPUHealthy`, as the policy judged them.
pub fn conditions(report: &GpuReport) -> Vec<Condition> {
    vec![
        condition(
            ConditionType::GPUDriverReady,
            &report.evaluation.driver_ready,
        ),
        condition(ConditionType::GPUHealthy, &report.evaluation.gpu_healthy),
    ]
}

fn condition(kind: ConditionType, v: &Verdict) -> Condition {
    Condition {
        kind,
        status: v.status,
        reason: v.reason.to_string(),
        message: v.message.clone(),
    }
}

/// One finding for the driver and one per GPU, then one for what the
/// kubelet offers (when compared).
pub fn findings(report: &GpuReport) -> Vec<Finding> {
    let e = &report.evaluation;
    let status = |v: &Verdict| match v.status {
        ConditionStatus::True => Status::Ok,
        _ if e.no_gpu => Status::Ok,
        _ => Status::Failed,
    };
    let mut out = vec![Finding {
        detail: None,
        check: Check::GPU_DRIVER,
        subject: "NVML".into(),
        status: status(&e.driver_ready),
        reason: e.driver_ready.reason.into(),
        message: e.driver_ready.message.clone(),
    }];
    for g in &e.gpus {
        let failed: Vec<_> = g.checks.iter().filter(|c| !c.ok).collect();
        // Warnings speak only while nothing fails.
        let warned: Vec<_> = g.checks.iter().filter(|c| c.warning).collect();
        let (failed, status) = match (failed.is_empty(), warned.is_empty()) {
            (false, _) => (failed, Status::Failed),
            (true, false) => (warned, Status::Warning),
            (true, true) => (failed, Status::Ok),
        };
        out.push(Finding {
            detail: None,
            check: Check::GPU_HEALTH,
            subject: format!("GPU {} {}", g.index, g.uuid.as_deref().unwrap_or(""))
                .trim_end()
                .to_string(),
            status,
            reason: failed
                .first()
                .map_or(GpuReason::Healthy, |c| c.reason)
                .into(),
            message: if failed.is_empty() {
                "all checks pass".into()
            } else {
                failed
                    .iter()
                    .map(|c| c.message.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            },
        });
    }
    if let Some(c) = &report.kubelet {
        out.push(kubelet_finding(c));
    }
    out
}

/// The kubelet comparison as one finding: failed when an unhealthy device is
/// offered, a warning when healthy devices are not offered.
fn kubelet_finding(c: &Comparison) -> Finding {
    let (status, reason, message) = if let Some(m) = c.unhealthy_message() {
        (Status::Failed, GpuReason::AdvertisedUnhealthy, m)
    } else if let Some(m) = c.not_offered_message() {
        (Status::Warning, GpuReason::HealthyNotAdvertised, m)
    } else if c.resources.is_empty() {
        (Status::Ok, GpuReason::NotCompared, c.notes.join("; "))
    } else {
        let offered: u64 = c.resources.iter().map(|r| r.offered).sum();
        (
            Status::Ok,
            GpuReason::AdvertisedHealthy,
            format!("every one of the {offered} devices the kubelet offers is healthy"),
        )
    };
    Finding {
        detail: None,
        check: Check::GPU_ADVERTISED,
        subject: "kubelet".into(),
        status,
        reason: reason.into(),
        message,
    }
}

/// What `nodeproof gpu` prints: the report's picture, then one line per
/// condition (both, also on a node without GPUs).
pub fn text(report: &GpuReport) -> String {
    let mut t = report.text();
    for c in conditions(report) {
        let _ = writeln!(t, "{}={} ({}): {}", c.kind, c.status, c.reason, c.message);
    }
    t
}

/// The GPUs this cycle judges unhealthy, by UUID, each with its first
/// failing check's reason: what the Node's `gpu.nodeproof.dev/unhealthy-devices`
/// says (the cluster side taints them for DRA). A GPU without a UUID (NVML
/// never gave one) cannot be named and is left out; so is every GPU while
/// the driver is not ready (no GPU is judged then: `GPUDriverReady` says it).
pub fn unhealthy_devices(report: &GpuReport) -> UnhealthyDevices {
    let mut out = UnhealthyDevices::new();
    for g in report.evaluation.gpus.iter().filter(|g| !g.healthy) {
        let (Some(uuid), Some(failed)) = (&g.uuid, g.checks.iter().find(|c| !c.ok)) else {
            continue;
        };
        out.insert(uuid, failed.reason.as_str());
    }
    out
}

/// Every GPU or MIG device held by a container, by UUID: the device
/// plugin's (pod-resources), and DRA claims' (pod-resources' dynamic
/// resources where the kubelet has them, and the claims the API says are
/// reserved for pods here), each DRA device named by this node's slices.
pub fn allocations(kubelet: Option<&KubeletGpus>, dra: Option<&DraView>) -> Vec<Allocation> {
    let mut out: Vec<Allocation> = kubelet.map(|k| k.allocations.clone()).unwrap_or_default();
    if let Some(view) = dra {
        for (at, d) in kubelet.map(|k| k.claims.as_slice()).unwrap_or_default() {
            if let Some(uuid) = view.uuid_of(&d.driver, &d.pool, &d.device) {
                out.push(Allocation {
                    device: uuid.to_string(),
                    ..at.clone()
                });
            }
        }
        out.extend(view.allocations.iter().filter_map(|a| {
            Some(Allocation {
                namespace: a.namespace.clone(),
                pod: a.pod.clone(),
                container: a.container.clone(),
                device: a.uuid.clone()?,
            })
        }));
    }
    out.sort();
    out.dedup();
    out
}

/// Each GPU's and MIG instance's usage in this cycle's snapshot, labelled
/// with the containers holding it (`allocations`, as the faults are
/// attributed) among the pods `running` names (`None`: pods are not
/// watched, every holder listed counts). No snapshot, or a driver that did
/// not answer: no rows.
pub fn usage(
    snapshot: Option<&nodeproof_gpu::Snapshot>,
    allocations: &[Allocation],
    running: Option<&std::collections::BTreeSet<(String, String)>>,
) -> Vec<UsageRow> {
    let Some(snapshot) = snapshot else {
        return Vec::new();
    };
    let rows = nodeproof_gpu::usage::usage(snapshot, allocations, |namespace, pod| {
        running.is_none_or(|r| r.contains(&(namespace.to_string(), pod.to_string())))
    });
    tracing::debug!(
        nodeproof_check = CHECK_NAME,
        gpu_usage_series = rows.len(),
        gpu_usage_held = rows.iter().filter(|r| !r.holder.pod.is_empty()).count(),
        "GPU usage read"
    );
    rows
}

/// The UUIDs this node's ResourceSlices publish, by driver.
fn dra_ids(view: &DraView) -> BTreeMap<String, Vec<String>> {
    let mut ids: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for d in &view.devices {
        if let Some(u) = &d.uuid {
            ids.entry(d.driver.clone()).or_default().push(u.clone());
        }
    }
    ids
}

/// `Node.status.allocatable` of NVIDIA resources: what the scheduler
/// places pods against. Extended resources are whole numbers; a quantity
/// that is not one is left out.
pub fn nvidia_allocatable(node: &k8s_openapi::api::core::v1::Node) -> BTreeMap<String, u64> {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .into_iter()
        .flatten()
        .filter(|(k, _)| is_nvidia_resource(k))
        .filter_map(|(k, q)| Some((k.clone(), q.0.parse().ok()?)))
        .collect()
}

/// Folds one pod-resources read and the DRA view into the report; a failed
/// read leaves the comparison to the Node's counts (when given) and says why.
pub fn compare(
    report: &mut GpuReport,
    kubelet: &Result<KubeletGpus, PodResourcesError>,
    node_allocatable: Option<BTreeMap<String, u64>>,
    dra: &NodeDra,
) {
    let view = KubeletView {
        node_allocatable,
        allocatable_ids: kubelet.as_ref().ok().map(|k| k.allocatable.clone()),
        dra_ids: dra.view().map(dra_ids),
    };
    nodeproof_gpu::compare_kubelet(report, &view);
    if let Some(c) = &mut report.kubelet {
        if let Err(e) = kubelet {
            c.notes.push(format!(
                "pod-resources: {}",
                nodeproof_findings::errors::error_chain(e)
            ));
        }
        match dra {
            NodeDra::Failed(e) => c.notes.push(format!("DRA: {e}")),
            NodeDra::Read(v) => c.notes.extend(v.notes.iter().map(|n| format!("DRA: {n}"))),
            NodeDra::Unread | NodeDra::NotServed => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeproof_gpu::policy::{CheckVerdict, Evaluation, GpuVerdict};

    #[test]
    fn the_unhealthy_devices_are_the_failed_gpus_by_uuid_with_their_first_failed_check() {
        let check = |name, ok, reason| CheckVerdict {
            check: name,
            ok,
            reason,
            message: String::new(),
            clean_intervals: None,
            warning: false,
        };
        let gpu = |index, uuid: Option<&str>, checks: Vec<CheckVerdict>| GpuVerdict {
            index,
            uuid: uuid.map(String::from),
            healthy: checks.iter().all(|c| c.ok),
            checks,
        };
        let verdict = |status| Verdict {
            status,
            reason: GpuReason::DriverReady,
            message: String::new(),
        };
        let report = GpuReport::new(
            Ok(Vec::new()),
            None,
            Evaluation {
                driver_ready: verdict(ConditionStatus::True),
                gpu_healthy: verdict(ConditionStatus::False),
                gpus: vec![
                    gpu(
                        0,
                        Some("GPU-a"),
                        vec![check("lost", true, GpuReason::Healthy)],
                    ),
                    gpu(
                        1,
                        Some("GPU-b"),
                        vec![
                            check("lost", true, GpuReason::Healthy),
                            check("xid", false, GpuReason::FatalXid),
                            check("ecc", false, GpuReason::UncorrectableEcc),
                        ],
                    ),
                    // No UUID: cannot be named.
                    gpu(2, None, vec![check("lost", false, GpuReason::GpuLost)]),
                ],
                no_gpu: false,
            },
        );
        let d = unhealthy_devices(&report);
        assert_eq!(d.encode().as_deref(), Some("GPU-b=FatalXid"));
    }

    #[test]
    fn the_text_is_the_reports_picture_then_one_line_per_condition() {
        let verdict = |status, reason, message: &str| Verdict {
            status,
            reason,
            message: message.into(),
        };
        let report = GpuReport::new(
            Ok(Vec::new()),
            None,
            Evaluation {
                driver_ready: verdict(ConditionStatus::True, GpuReason::DriverReady, "driver 550"),
                gpu_healthy: verdict(
                    ConditionStatus::False,
                    GpuReason::FatalXid,
                    "XID 79 on GPU 0",
                ),
                gpus: Vec::new(),
                no_gpu: false,
            },
        );
        assert_eq!(
            text(&report),
            "PCI: 0 NVIDIA display devices\n\n\
             GPUDriverReady=True (DriverReady): driver 550\n\
             GPUHealthy=False (FatalXid): XID 79 on GPU 0\n"
        );
        assert_eq!(
            findings(&report)[0].message,
            "driver 550",
            "the driver's finding carries the verdict's message"
        );
    }

    #[test]
    fn the_nodes_nvidia_allocatable_is_read_and_the_rest_left_out() {
        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1"},
            "status": {"allocatable": {"cpu": "64", "nvidia.com/gpu": "7",
                "nvidia.com/mig-1g.10gb": "14", "example.com/fpga": "2", "nvidia.com/mig-2g.20gb": "1k"}}
        }))
        .unwrap();
        assert_eq!(
            nvidia_allocatable(&node),
            BTreeMap::from([
                ("nvidia.com/gpu".to_string(), 7),
                ("nvidia.com/mig-1g.10gb".to_string(), 14)
            ])
        );
    }
}
