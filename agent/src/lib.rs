//! nodeproof: a node agent that finds seccomp, eBPF and GPU gray failures
//! before pods hit them. The binary (`main.rs`) only parses arguments and
//! picks implementations; everything else lives here.

pub mod config;
pub mod daemon;
pub mod finding;
pub mod gpu;
pub mod pods;
pub mod preflight;
pub mod profile;
pub mod report;
pub mod trace;
