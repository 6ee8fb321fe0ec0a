//! Shared test support.

pub mod agent;
pub mod apiserver;
pub mod cgroup;
pub mod conditions;
pub mod rbac;
