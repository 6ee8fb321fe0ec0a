//! GPUs as node health: one probe cycle's findings and the `GPUDriverReady`
//! and `GPUHealthy` conditions, with what the kubelet offers (pod-resources)
//! compared with what NVML calls healthy.

use std::collections::BTreeMap;
use std::time::Duration;

use nodeproof_gpu::advertised::{is_nvidia_resource, KubeletView};
use nodeproof_gpu::cuda::{CudaOptions, CudaProbe};
use nodeproof_gpu::faults::Allocation;
use nodeproof_gpu::nvml::NvmlProbe;
use nodeproof_gpu::{GpuConfig, GpuReport, PolicyState};
use nodeproof_podresources::{KubeletPodResources, PodResourcesError, PodResourcesSource};

use super::Round;

/// The round for one GPU cycle. On a node without NVIDIA devices the GPU
/// conditions are absent, not Unknown: there is nothing to fail, and a
/// CPU node must not look degraded.
pub fn round(report: &GpuReport) -> Round {
    Round {
        findings: report.findings(),
        conditions: if report.no_gpu() {
            Vec::new()
        } else {
            report.conditions()
        },
    }
}

/// The configured NVML probe, with the CUDA probe when `[gpu.cuda]` enables it.
pub fn probe(config: &GpuConfig) -> NvmlProbe {
    let nvml = NvmlProbe::new(
        &config.nvml_library,
        Duration::from_millis(config.nvml_timeout_ms),
    )
    .releasing(config.release_between_cycles);
    let c = &config.cuda;
    if !c.enabled {
        return nvml;
    }
    nvml.with_cuda(CudaProbe::new(CudaOptions {
        library: c.library.clone().into(),
        timeout: Duration::from_millis(c.timeout_ms),
        interval: Duration::from_secs(c.interval_s),
        buffer_bytes: usize::try_from(c.buffer_bytes).unwrap_or(usize::MAX),
        release: config.release_between_cycles,
    }))
}

/// The real pod-resources source: the kubelet's socket from `[gpu]`.
pub fn pod_resources(config: &GpuConfig) -> Result<KubeletPodResources, PodResourcesError> {
    KubeletPodResources::new(
        &config.pod_resources_socket,
        Duration::from_millis(config.pod_resources_timeout_ms),
    )
}

/// What the kubelet says about NVIDIA devices in one read.
#[derive(Debug, Default)]
pub struct KubeletGpus {
    /// Allocatable device ids by NVIDIA resource.
    pub allocatable: BTreeMap<String, Vec<String>>,
    /// Every NVIDIA device held by a container of a pod the kubelet lists
    /// (terminated pods included: the caller filters).
    pub allocations: Vec<Allocation>,
}

/// Reads allocatable devices and allocations. DRA claims are not mapped
/// here: their device names need the node's ResourceSlices.
pub fn read_kubelet(source: &mut dyn PodResourcesSource) -> Result<KubeletGpus, PodResourcesError> {
    let mut allocatable: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for d in source.allocatable()? {
        if is_nvidia_resource(&d.resource) {
            allocatable.entry(d.resource).or_default().extend(d.ids);
        }
    }
    let mut allocations = Vec::new();
    for p in source.list()? {
        for c in &p.containers {
            for d in c.devices.iter().filter(|d| is_nvidia_resource(&d.resource)) {
                allocations.extend(d.ids.iter().map(|id| Allocation {
                    namespace: p.namespace.clone(),
                    pod: p.name.clone(),
                    container: c.name.clone(),
                    device: id.clone(),
                }));
            }
        }
    }
    Ok(KubeletGpus {
        allocatable,
        allocations,
    })
}

/// A Node's allocatable NVIDIA resources by name (`None`: no Node seen).
pub type NodeGpus = Option<BTreeMap<String, u64>>;

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

/// Folds one pod-resources read into the report; a failed read leaves the
/// comparison to the Node's counts (when given) and says why.
pub fn compare(
    report: &mut GpuReport,
    kubelet: &Result<KubeletGpus, PodResourcesError>,
    node_allocatable: Option<BTreeMap<String, u64>>,
) {
    let view = KubeletView {
        node_allocatable,
        allocatable_ids: kubelet.as_ref().ok().map(|k| k.allocatable.clone()),
    };
    nodeproof_gpu::compare_kubelet(report, &view);
    if let (Some(c), Err(e)) = (&mut report.kubelet, kubelet) {
        c.notes.push(format!(
            "pod-resources: {}",
            nodeproof_findings::errors::error_chain(e)
        ));
    }
}

/// One cycle with a fresh probe and policy state (a one-shot command), and
/// the kubelet's pod-resources when its socket is there.
pub fn cycle_once(config: &GpuConfig) -> GpuReport {
    let mut report = nodeproof_gpu::cycle(config, &mut probe(config), &mut PolicyState::default());
    let kubelet = pod_resources(config).and_then(|mut s| read_kubelet(&mut s));
    compare(&mut report, &kubelet, None);
    report
}

#[cfg(test)]
mod tests {
    use super::*;

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
