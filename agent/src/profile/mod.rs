//! Seccomp profiles: parse → decode (a mirror of the runtime's Go decoder) →
//! translate (what the runtime builds) → compile (libseccomp) → predict
//! (what happens when a container starts with it).

pub mod advise;
pub mod bpf;
pub mod bpfgen;
pub mod compile;
pub mod decode;
pub mod diagnostic;
pub mod filter;
mod fnv;
pub mod json;
pub mod lint;
pub mod model;
pub mod node;
pub mod patchbpf;
pub mod runc;
pub mod runc_init;
pub mod sandbox;
pub mod scan;
pub mod template;
