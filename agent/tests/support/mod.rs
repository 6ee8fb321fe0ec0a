//! Shared test support.

pub mod agent;
pub use nodeproof_testapi as apiserver;
pub mod cgroup;
pub mod conditions;
pub mod rbac;
