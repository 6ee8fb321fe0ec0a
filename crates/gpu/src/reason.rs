//! Why a GPU condition or finding is what it is: the `reason` of
//! `GPUDriverReady`, `GPUHealthy` and the `gpu-driver`, `gpu-health` and
//! `gpu-advertised` findings. One enum, so the operations reference is
//! generated from it and a reason cannot be misspelt in one place.

use serde::{Serialize, Serializer};

/// Where a reason appears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasonOf {
    /// `GPUDriverReady` and the `gpu-driver` finding.
    Driver,
    /// `GPUHealthy` and the per-GPU `gpu-health` findings.
    Health,
    /// The `gpu-advertised` finding (and `GPUHealthy` when an offered device is unhealthy).
    Advertised,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GpuReason {
    // GPUDriverReady
    DriverReady,
    NvmlLibraryMissing,
    NvmlInitFailed,
    DriverNotAnswering,
    GpusMissingFromNvml,
    /// No NVIDIA PCI device: both conditions are left out.
    NoGpu,
    // GPUHealthy and gpu-health
    GpusHealthy,
    /// One GPU's finding with every check passing.
    Healthy,
    DriverNotReady,
    GpuLost,
    FatalXid,
    XidRateExceeded,
    UncorrectableEcc,
    RowRemapFailed,
    RowRemapPending,
    RetiredPagesPending,
    CudaLibraryMissing,
    CudaFailed,
    CudaSystemNotReady,
    CudaNotAnswering,
    CudaDeviceMissing,
    FabricNotReady,
    FabricRegistrationFailed,
    FabricDegradedBandwidth,
    NvLinkInactive,
    // gpu-advertised
    AdvertisedHealthy,
    AdvertisedUnhealthy,
    HealthyNotAdvertised,
    NotCompared,
}

impl GpuReason {
    pub const ALL: [GpuReason; 29] = [
        GpuReason::DriverReady,
        GpuReason::NvmlLibraryMissing,
        GpuReason::NvmlInitFailed,
        GpuReason::DriverNotAnswering,
        GpuReason::GpusMissingFromNvml,
        GpuReason::NoGpu,
        GpuReason::GpusHealthy,
        GpuReason::Healthy,
        GpuReason::DriverNotReady,
        GpuReason::GpuLost,
        GpuReason::FatalXid,
        GpuReason::XidRateExceeded,
        GpuReason::UncorrectableEcc,
        GpuReason::RowRemapFailed,
        GpuReason::RowRemapPending,
        GpuReason::RetiredPagesPending,
        GpuReason::CudaLibraryMissing,
        GpuReason::CudaFailed,
        GpuReason::CudaSystemNotReady,
        GpuReason::CudaNotAnswering,
        GpuReason::CudaDeviceMissing,
        GpuReason::FabricNotReady,
        GpuReason::FabricRegistrationFailed,
        GpuReason::FabricDegradedBandwidth,
        GpuReason::NvLinkInactive,
        GpuReason::AdvertisedHealthy,
        GpuReason::AdvertisedUnhealthy,
        GpuReason::HealthyNotAdvertised,
        GpuReason::NotCompared,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            GpuReason::DriverReady => "DriverReady",
            GpuReason::NvmlLibraryMissing => "NVMLLibraryMissing",
            GpuReason::NvmlInitFailed => "NVMLInitFailed",
            GpuReason::DriverNotAnswering => "DriverNotAnswering",
            GpuReason::GpusMissingFromNvml => "GPUsMissingFromNVML",
            GpuReason::NoGpu => "NoGPU",
            GpuReason::GpusHealthy => "GPUsHealthy",
            GpuReason::Healthy => "Healthy",
            GpuReason::DriverNotReady => "DriverNotReady",
            GpuReason::GpuLost => "GPULost",
            GpuReason::FatalXid => "FatalXid",
            GpuReason::XidRateExceeded => "XidRateExceeded",
            GpuReason::UncorrectableEcc => "UncorrectableECC",
            GpuReason::RowRemapFailed => "RowRemapFailed",
            GpuReason::RowRemapPending => "RowRemapPending",
            GpuReason::RetiredPagesPending => "RetiredPagesPending",
            GpuReason::CudaLibraryMissing => "CudaLibraryMissing",
            GpuReason::CudaFailed => "CudaFailed",
            GpuReason::CudaSystemNotReady => "CudaSystemNotReady",
            GpuReason::CudaNotAnswering => "CudaNotAnswering",
            GpuReason::CudaDeviceMissing => "CudaDeviceMissing",
            GpuReason::FabricNotReady => "FabricNotReady",
            GpuReason::FabricRegistrationFailed => "FabricRegistrationFailed",
            GpuReason::FabricDegradedBandwidth => "FabricDegradedBandwidth",
            GpuReason::NvLinkInactive => "NvLinkInactive",
            GpuReason::AdvertisedHealthy => "AdvertisedHealthy",
            GpuReason::AdvertisedUnhealthy => "AdvertisedUnhealthy",
            GpuReason::HealthyNotAdvertised => "HealthyNotAdvertised",
            GpuReason::NotCompared => "NotCompared",
        }
    }

    /// Where the reason appears.
    pub fn of(self) -> ReasonOf {
        use GpuReason::*;
        match self {
            DriverReady | NvmlLibraryMissing | NvmlInitFailed | DriverNotAnswering
            | GpusMissingFromNvml | NoGpu => ReasonOf::Driver,
            GpusHealthy
            | Healthy
            | DriverNotReady
            | GpuLost
            | FatalXid
            | XidRateExceeded
            | UncorrectableEcc
            | RowRemapFailed
            | RowRemapPending
            | RetiredPagesPending
            | CudaLibraryMissing
            | CudaFailed
            | CudaSystemNotReady
            | CudaNotAnswering
            | CudaDeviceMissing
            | FabricNotReady
            | FabricRegistrationFailed
            | FabricDegradedBandwidth
            | NvLinkInactive => ReasonOf::Health,
            AdvertisedHealthy | AdvertisedUnhealthy | HealthyNotAdvertised | NotCompared => {
                ReasonOf::Advertised
            }
        }
    }

    /// What the reason means, one line (docs/operations.md is generated from it).
    pub fn meaning(self) -> &'static str {
        use GpuReason::*;
        match self {
            DriverReady => "NVML answers for every NVIDIA PCI device",
            NvmlLibraryMissing => "libnvidia-ml.so.1 cannot be loaded (driver not installed, or not in the library path)",
            NvmlInitFailed => "nvmlInit or a device query failed with an NVML error",
            DriverNotAnswering => "an NVML call did not return within the timeout (a hung driver)",
            GpusMissingFromNvml => "a PCI device NVML does not list (driver not bound, or the GPU fell out of enumeration)",
            NoGpu => "no NVIDIA PCI device on this node; the GPU conditions are left out",
            GpusHealthy => "every GPU passes every check",
            Healthy => "this GPU passes every check",
            DriverNotReady => "GPU health is unknown while GPUDriverReady is False",
            GpuLost => "NVML_ERROR_GPU_IS_LOST: the GPU fell off the bus",
            FatalXid => "fatal XIDs (class from data/xid-catalog.toml) reached the threshold in their window",
            XidRateExceeded => "other (non-ignored) XIDs reached the threshold in their window",
            UncorrectableEcc => "uncorrectable ECC errors above the configured maximum",
            RowRemapFailed => "row remapping failed: no spare rows left, the GPU needs replacing",
            RowRemapPending => "rows were remapped; a GPU reset is pending to apply them",
            RetiredPagesPending => "retired pages wait for a GPU reset",
            CudaLibraryMissing => "the CUDA probe cannot load libcuda.so.1",
            CudaFailed => "a CUDA call of the probe failed (the CUresult is named in the message)",
            CudaSystemNotReady => "CUDA_ERROR_SYSTEM_NOT_READY while NVML is fine: the fabric manager is not running",
            CudaNotAnswering => "a CUDA call of the probe did not return within the timeout",
            CudaDeviceMissing => "CUDA does not enumerate a GPU NVML sees",
            FabricNotReady => "the GPU's fabric registration has not completed (NVSwitch systems)",
            FabricRegistrationFailed => "the GPU's fabric registration completed with an error",
            FabricDegradedBandwidth => "the NVLink fabric reports degraded bandwidth",
            NvLinkInactive => "NVLink links of the GPU are inactive",
            AdvertisedHealthy => "every device the kubelet offers is healthy in NVML",
            AdvertisedUnhealthy => "the kubelet offers a device NVML calls unhealthy or cannot see: pods get a broken GPU",
            HealthyNotAdvertised => "a GPU healthy in NVML is not offered (device plugin or DRA driver never marked it healthy again)",
            NotCompared => "the kubelet's view could not be read (no pod-resources socket, no API access)",
        }
    }
}

impl std::fmt::Display for GpuReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for GpuReason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl PartialEq<&str> for GpuReason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_all_is_complete() {
        let mut names: Vec<&str> = GpuReason::ALL.iter().map(|r| r.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), GpuReason::ALL.len());
        // `of` is exhaustive by match; every reason has a meaning.
        assert!(GpuReason::ALL.iter().all(|r| !r.meaning().is_empty()));
    }
}
