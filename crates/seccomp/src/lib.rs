//! Seccomp profiles as the runtime reads them: parse → decode (a mirror of
//! the runtime's Go decoder) → translate (what runc builds) → compile
//! (through a [`compiler::Compiler`], see `nodeproof-bpfgen`) → predict
//! (what happens when a container starts with it). Pure apart from
//! libseccomp's name tables and the capped file reads of [`scan`].

pub mod against;
pub mod allowlist;
pub mod behaviour;
pub mod capability;
pub mod cbpf;
pub mod compiler;
pub mod containerd;
pub mod crun;
pub mod crun_init;
pub mod decode;
pub mod diagnostic;
pub mod diff;
pub mod filter;
pub mod fnv;
pub mod json;
pub mod lint;
pub mod model;
pub mod oci_runtime;
pub mod patchbpf;
pub mod recording;
pub mod runc;
pub mod runc_init;
pub mod scan;
pub mod spo;
pub mod syscalls;
pub mod template;
pub mod translate;
