//! The cluster side of nodeproof: what acts on the node agents' findings.
//! The node agents prove each node's state and write it on the Node
//! (conditions, `runtimeclass.nodeproof.dev/<class>` contract labels); this
//! crate reads it back cluster-wide and steers scheduling with the APIs
//! Kubernetes really has (scheduling gates, RuntimeClass `scheduling`,
//! ValidatingAdmissionPolicy). It depends on `nodeproof-apiclient` for the shared
//! vocabulary (contracts, toleration matching), never the other way.
//!
//! - `gate`: the scheduling-gate controller (`nodeproof gate-controller`),
//!   docs/gate-controller.md;
//! - `device_taints`: DeviceTaintRules for the GPUs the agents call
//!   unhealthy, run beside the gate controller (same docs, "Unhealthy DRA
//!   devices");
//! - `policy`: `cluster policy`, admission policies from the contracts;
//! - `check`: `cluster check`, one snapshot judged purely (`check::evaluate`);

pub mod check;
pub mod device_taints;
pub mod gate;
pub mod policy;
