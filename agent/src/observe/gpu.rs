//! The GPUs observed: the configured NVML (and CUDA) probe built, and the
//! kubelet's pod-resources read; `crate::judge::gpu` judges what they say.

use std::collections::BTreeMap;
use std::time::Duration;

use nodeproof_gpu::advertised::is_nvidia_resource;
use nodeproof_gpu::cuda::{CudaOptions, CudaProbe};
use nodeproof_gpu::faults::Allocation;
use nodeproof_gpu::nvml::NvmlProbe;
use nodeproof_gpu::GpuConfig;
use nodeproof_podresources::{KubeletPodResources, PodResourcesError, PodResourcesSource};

use nodeproof_gpu::views::{ClaimedDevice, KubeletGpus};

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

/// Reads allocatable devices and allocations.
pub fn read_kubelet(source: &mut dyn PodResourcesSource) -> Result<KubeletGpus, PodResourcesError> {
    let mut allocatable: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for d in source.allocatable()? {
        if is_nvidia_resource(&d.resource) {
            allocatable.entry(d.resource).or_default().extend(d.ids);
        }
    }
    let mut allocations = Vec::new();
    let mut claims = Vec::new();
    for p in source.list()? {
        for c in &p.containers {
            for d in &c.claims {
                let at = Allocation {
                    namespace: p.namespace.clone(),
                    pod: p.name.clone(),
                    container: c.name.clone(),
                    device: String::new(),
                };
                claims.push((
                    at,
                    ClaimedDevice {
                        driver: d.driver.clone(),
                        pool: d.pool.clone(),
                        device: d.device.clone(),
                    },
                ));
            }
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
        claims,
    })
}
