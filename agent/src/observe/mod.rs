//! What the checks observe on this node: the reads, probes and lints each
//! check's pure judgement (`crate::judge`) starts from. The seccomp root's
//! files and their lint, the CRI runtime's configuration and crun's
//! release, the eBPF programs' load, the NVML probe and the kubelet's
//! pod-resources. Above `checks`, below `pods`, `oneshot` and `daemon`:
//! the checks take what is observed here as arguments, so `checks` does no
//! I/O and is tested with values.

pub mod access;
pub mod gpu;
pub mod kubelet;
pub mod lint_cache;
pub mod oci_runtime;
pub mod profiles;
pub mod tracing;
