//! Shared test support.

pub mod apiserver;
pub mod cgroup;
