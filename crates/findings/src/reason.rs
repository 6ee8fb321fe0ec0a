//! Why a finding is what it is: the reasons nodeproof's checks report, one
//! enum per check, and [`Reason`], their sum, which a [`Finding`](crate::Finding)
//! carries.
//!
//! The checks' enums live here, in the bottom crate, rather than beside the
//! checks that say them, because [`Reason`] names them and every check's
//! crate depends on this one (agent → … → gpu, trace → findings). The other
//! way, one flat enum of every reason here with each check's enum kept in
//! its crate and converted `From`, spells every reason twice and needs a
//! hand-written variant-to-variant table per check. Kept per check, a GPU
//! verdict still cannot carry a profile's reason, and each check's crate
//! re-exports its enum where it always was (`nodeproof_gpu::reason::GpuReason`,
//! `nodeproof_trace::FailureReason`, `nodeproof::judge::profiles::Reason`,
//! `nodeproof::pods::verdict::Reason`). What needs a check's own crate stays
//! there: a profile report's reason (`nodeproof::checks::profiles`), a
//! strategy's from an errno (`nodeproof_trace::loader`).
//!
//! The names are strum's (`IntoStaticStr`), CamelCase as the API's reasons
//! are, and what `check` prints and `-o json` serializes. Two checks may say
//! the same word (`ProfileInvalid` of a file and of a pod's reference,
//! `ProfileMissing` of a pod's and of a static pod's): different values that
//! print alike.
//!
//! A [`Condition`](crate::Condition)'s reason stays a string: the reporter
//! resumes conditions from the Node as the API server returns them, where
//! any component's reason may stand.

use serde::Serialize;
use strum::{EnumString, IntoStaticStr};

/// `seccomp-profile` findings and `SeccompProfilesReady` (the files' part).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, IntoStaticStr, EnumString,
)]
#[serde(into = "&'static str")]
pub enum ProfileReason {
    NoProfiles,
    ProfilesValid,
    ProfileRejected,
    ProfileStartFails,
    ProfileUnreadable,
    ProfileInvalid,
    ProfileOk,
    /// A file under the root that is no profile (a finding's, never the condition's).
    NotAProfile,
}

impl ProfileReason {
    pub const ALL: [ProfileReason; 8] = [
        ProfileReason::NoProfiles,
        ProfileReason::ProfilesValid,
        ProfileReason::ProfileRejected,
        ProfileReason::ProfileStartFails,
        ProfileReason::ProfileUnreadable,
        ProfileReason::ProfileInvalid,
        ProfileReason::ProfileOk,
        ProfileReason::NotAProfile,
    ];

    /// The reason a condition of this check carries, if it is one of this check's.
    pub fn of(c: &crate::Condition) -> Option<ProfileReason> {
        c.reason.parse().ok()
    }
}

/// Why the `oci-runtime` finding says what it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, IntoStaticStr)]
#[serde(into = "&'static str")]
#[strum(prefix = "Runtime")]
pub enum RuntimeReason {
    /// Named by `seccomp.oci-runtime` in the config.
    Configured,
    /// Read from the CRI runtime's configuration (and, for crun, its
    /// `--version`): a release nodeproof models.
    Detected,
    /// crun's `--version` names a release nodeproof does not model; the
    /// nearest modelled one is predicted.
    ReleaseNotModelled,
    /// crun's release could not be read; crun 1.21 is predicted.
    ReleaseUnknown,
}

/// Why a pod's reference is unusable on this node: the `pod-profile`
/// finding's reason and the pods' part of `SeccompProfilesReady`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, IntoStaticStr)]
#[serde(into = "&'static str")]
pub enum PodReason {
    ProfileMissing,
    ProfileInvalid,
    RuntimeClassMismatch,
    /// The pod's RuntimeClass carries a contract this node does not meet.
    RuntimeClassNotReady,
}

impl PodReason {
    /// The pod Event's reason (another vocabulary than the finding's: the
    /// Event is read on the pod, where "Seccomp" says what is missing).
    pub fn event_reason(self) -> &'static str {
        match self {
            PodReason::ProfileMissing => "SeccompProfileMissing",
            PodReason::ProfileInvalid => "SeccompProfileInvalid",
            PodReason::RuntimeClassMismatch => "RuntimeClassMismatch",
            PodReason::RuntimeClassNotReady => "RuntimeClassNotReady",
        }
    }
}

/// An annotated RuntimeClass's contract on this node: the
/// `runtimeclass-contract` finding's reason, and the Node Event's
/// (`const_into_str`: the reporter's Event reasons are constants).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, IntoStaticStr)]
#[serde(into = "&'static str")]
#[strum(prefix = "RuntimeClass", const_into_str)]
pub enum ContractReason {
    Ready,
    NotReady,
}

/// Why a tracing strategy did not load; the `SeccompTracingReady=False`
/// reason when none does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, IntoStaticStr)]
#[serde(into = "&'static str")]
pub enum FailureReason {
    /// EPERM/EACCES: missing capabilities, lockdown, or a policy refusing the program type.
    #[strum(serialize = "BPFPermissionDenied")]
    BpfPermissionDenied,
    /// The kernel lacks the attach point, BTF, or a helper.
    KernelUnsupported,
    /// The embedded programs are stubs (built without clang).
    ProgramsNotBuilt,
    /// Anything else (verifier rejection, out of memory).
    #[strum(serialize = "BPFLoadFailed")]
    LoadFailed,
}

impl FailureReason {
    /// Every reason, for tests over all of them.
    pub const ALL: [FailureReason; 4] = [
        Self::BpfPermissionDenied,
        Self::KernelUnsupported,
        Self::ProgramsNotBuilt,
        Self::LoadFailed,
    ];

    /// Why a strategy was refused, in words for a condition's message,
    /// after "fexit was" (the kernel's answer itself is the attempt's
    /// `detail`). EPERM with the capabilities held is the kernel's lockdown
    /// or an LSM refusing the program type; without them the message says
    /// which are missing instead.
    pub fn phrase(self) -> &'static str {
        match self {
            Self::BpfPermissionDenied => "denied by the kernel (lockdown or an LSM)",
            Self::KernelUnsupported => "not supported by this kernel",
            Self::ProgramsNotBuilt => "not built into this nodeproof",
            Self::LoadFailed => "rejected by the kernel's verifier",
        }
    }
}

/// The `seccomp-tracing` finding's and `SeccompTracingReady`'s reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, IntoStaticStr)]
#[serde(into = "&'static str")]
pub enum TracingReason {
    /// A strategy loaded (`SeccompTracingReady=True`).
    StrategyLoaded,
    /// None did, for the reason of the last one tried.
    #[strum(transparent)]
    NotLoaded(FailureReason),
}

/// Where a [`GpuReason`] appears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasonOf {
    /// `GPUDriverReady` and the `gpu-driver` finding.
    Driver,
    /// `GPUHealthy` and the per-GPU `gpu-health` findings.
    Health,
    /// The `gpu-advertised` finding (and `GPUHealthy` when an offered device is unhealthy).
    Advertised,
}

/// Why a GPU condition or finding is what it is: the `reason` of
/// `GPUDriverReady`, `GPUHealthy` and the `gpu-driver`, `gpu-health` and
/// `gpu-advertised` findings. One enum, so the operations reference is
/// generated from it and a reason cannot be misspelt in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, IntoStaticStr)]
#[serde(into = "&'static str")]
pub enum GpuReason {
    // GPUDriverReady
    DriverReady,
    #[strum(serialize = "NVMLLibraryMissing")]
    NvmlLibraryMissing,
    #[strum(serialize = "NVMLInitFailed")]
    NvmlInitFailed,
    DriverNotAnswering,
    #[strum(serialize = "GPUsMissingFromNVML")]
    GpusMissingFromNvml,
    /// No NVIDIA PCI device: both conditions are left out.
    #[strum(serialize = "NoGPU")]
    NoGpu,
    // GPUHealthy and gpu-health
    #[strum(serialize = "GPUsHealthy")]
    GpusHealthy,
    /// One GPU's finding with every check passing.
    Healthy,
    DriverNotReady,
    #[strum(serialize = "GPULost")]
    GpuLost,
    FatalXid,
    XidRateExceeded,
    #[strum(serialize = "UncorrectableECC")]
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

/// A finding's reason: one of its check's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, IntoStaticStr)]
#[serde(into = "&'static str")]
pub enum Reason {
    #[strum(transparent)]
    Profile(ProfileReason),
    #[strum(transparent)]
    Runtime(RuntimeReason),
    #[strum(transparent)]
    Pod(PodReason),
    #[strum(transparent)]
    Contract(ContractReason),
    #[strum(transparent)]
    Tracing(TracingReason),
    #[strum(transparent)]
    Gpu(GpuReason),
    /// A reason of a check the agent defines in its own module (its own
    /// enum, converted with [`Named::of`]).
    #[strum(transparent)]
    Named(Named),
}

/// A reason named by the check that gives it: the check's module keeps the
/// enum (`impl From<ItsReason> for Reason`, through [`Named::of`]), so a
/// new check's reasons need no variant here. Reads back into that enum with
/// its `FromStr` ([`Reason::named`]), never by comparing text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Named(&'static str);

impl Named {
    /// `reason`'s spelling (CamelCase, as conditions and `-o json` spell it).
    pub fn of(reason: impl Into<&'static str>) -> Named {
        Named(reason.into())
    }
}

impl From<Named> for &'static str {
    fn from(n: Named) -> &'static str {
        n.0
    }
}

impl From<&Named> for &'static str {
    fn from(n: &Named) -> &'static str {
        n.0
    }
}

/// A check's own reason enum (its module's): converts into [`Reason`]
/// through [`Named`], and says what each reason means for the docs.
pub trait OwnReason: Copy + Into<&'static str> + strum::VariantArray + 'static {
    /// What the reason means, one line.
    fn meaning(self) -> &'static str;

    /// Every reason with its meaning, in declaration order.
    fn all_with_meanings() -> Vec<(&'static str, &'static str)> {
        Self::VARIANTS
            .iter()
            .map(|r| ((*r).into(), r.meaning()))
            .collect()
    }
}

impl<R: OwnReason> From<R> for Reason {
    fn from(r: R) -> Reason {
        Reason::Named(Named::of(r))
    }
}

impl Reason {
    /// This reason as a check's own enum `R`, when it is one of `R`'s.
    pub fn named<R: std::str::FromStr>(self) -> Option<R> {
        match self {
            Reason::Named(n) => n.0.parse().ok(),
            _ => None,
        }
    }
}

/// `as_str`, `Display` (padded, as `{:<20}` of a string is) and equality
/// with the spelling (what tests and the JSON compare) for every reason type.
macro_rules! spelled {
    ($($t:ty),* $(,)?) => {$(
        impl $t {
            /// The reason as conditions, findings and `-o json` spell it.
            pub fn as_str(self) -> &'static str {
                self.into()
            }
        }

        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl PartialEq<&str> for $t {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
    )*};
}

spelled!(
    Reason,
    ProfileReason,
    RuntimeReason,
    PodReason,
    ContractReason,
    FailureReason,
    TracingReason,
    GpuReason,
);

/// `Reason::from(GpuReason::GpuLost)`, and `.into()` where a check builds
/// its finding.
macro_rules! sum_of {
    ($($variant:ident($t:ty)),* $(,)?) => {$(
        impl From<$t> for Reason {
            fn from(r: $t) -> Reason {
                Reason::$variant(r)
            }
        }
    )*};
}

sum_of!(
    Profile(ProfileReason),
    Runtime(RuntimeReason),
    Pod(PodReason),
    Contract(ContractReason),
    Tracing(TracingReason),
    Gpu(GpuReason),
);

impl From<FailureReason> for TracingReason {
    fn from(r: FailureReason) -> TracingReason {
        TracingReason::NotLoaded(r)
    }
}

impl From<FailureReason> for Reason {
    fn from(r: FailureReason) -> Reason {
        Reason::Tracing(r.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_names_are_unique_and_all_is_complete() {
        let mut names: Vec<&str> = GpuReason::ALL.iter().map(|r| r.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), GpuReason::ALL.len());
        // `of` is exhaustive by match; every reason has a meaning.
        assert!(GpuReason::ALL.iter().all(|r| !r.meaning().is_empty()));
    }

    #[test]
    fn a_reason_is_spelled_alike_in_json_text_and_as_str() {
        let cases: [(Reason, &str); 8] = [
            (ProfileReason::ProfileStartFails.into(), "ProfileStartFails"),
            (
                RuntimeReason::ReleaseNotModelled.into(),
                "RuntimeReleaseNotModelled",
            ),
            (
                PodReason::RuntimeClassMismatch.into(),
                "RuntimeClassMismatch",
            ),
            (ContractReason::NotReady.into(), "RuntimeClassNotReady"),
            (FailureReason::LoadFailed.into(), "BPFLoadFailed"),
            (TracingReason::StrategyLoaded.into(), "StrategyLoaded"),
            (GpuReason::GpusMissingFromNvml.into(), "GPUsMissingFromNVML"),
            (
                Reason::Named(Named::of("SeccompDefaultOff")),
                "SeccompDefaultOff",
            ),
        ];
        for (reason, name) in cases {
            assert_eq!(reason.as_str(), name);
            assert_eq!(reason, name);
            assert_eq!(format!("{reason:<30}|"), format!("{name:<30}|"));
            assert_eq!(serde_json::to_value(reason).unwrap(), name);
        }
        assert_eq!(
            serde_json::to_value(ProfileReason::NoProfiles).unwrap(),
            "NoProfiles"
        );
        // A check's own enum reads back from its named reason, no other enum does.
        #[derive(Debug, PartialEq, strum::EnumString)]
        enum Own {
            SeccompDefaultOff,
        }
        let named = Reason::Named(Named::of("SeccompDefaultOff"));
        assert_eq!(named.named::<Own>(), Some(Own::SeccompDefaultOff));
        assert_eq!(Reason::from(ProfileReason::NoProfiles).named::<Own>(), None);
    }

    #[test]
    fn a_profile_condition_reads_back_as_its_reason() {
        let c = crate::Condition::new(
            crate::ConditionType::SeccompProfilesReady,
            crate::ConditionStatus::True,
            ProfileReason::NoProfiles.as_str(),
            "m",
        );
        assert_eq!(ProfileReason::of(&c), Some(ProfileReason::NoProfiles));
        let pods = crate::Condition {
            reason: "PodProfilesReady".into(),
            ..c
        };
        assert_eq!(ProfileReason::of(&pods), None);
    }
}
