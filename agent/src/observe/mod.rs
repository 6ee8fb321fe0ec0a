//! What the checks observe on this node: the reads, probes and lints each
//! check's judgement starts from. The seccomp root's files and their lint
//! (one lint per file and mode, `lint_cache`), the CRI runtime's
//! configuration and crun's release, the eBPF programs' load, the NVML
//! probe and the kubelet's pod-resources, the kubelet's unit and
//! configuration, and access(2) as another user. Above `judge` (whose
//! parsers it uses), below `pods`, `checks`, `oneshot` and `daemon`.

pub mod access;
pub mod gpu;
pub mod kubelet;
pub mod lint_cache;
pub mod oci_runtime;
pub mod profiles;
pub mod tracing;
