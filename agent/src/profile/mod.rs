//! Seccomp profiles: parse → decode (a mirror of the runtime's Go decoder) →
//! translate (what the runtime builds) → compile (libseccomp) → predict
//! (what happens when a container starts with it).

pub mod bpf;
pub mod compile;
pub mod filter;
pub mod runc_init;
pub mod sandbox;
