//! Why a GPU condition or finding is what it is: the `reason` of
//! `GPUDriverReady`, `GPUHealthy` and the `gpu-driver`, `gpu-health` and
//! `gpu-advertised` findings. The enum is the vocabulary's
//! (`nodeproof_findings::reason`, where a [`Finding`](nodeproof_findings::Finding)'s
//! reason can name it); this is where the GPU checks have always found it.

pub use nodeproof_findings::reason::{GpuReason, ReasonOf};
