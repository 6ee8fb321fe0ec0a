//! The scheduling-gate controller (`nodeproof gate-controller`): removes a
//! configured gate from a pod's `spec.schedulingGates` once at least one
//! node could host the pod and reports every condition the gate waits for
//! (docs/gate-controller.md).
//!
//! Pure, with the time passed in:
//! - `config`: the `[gate]` section (gate → conditions, staleness);
//! - `resources`: extended resources requested, as the scheduler adds them up;
//! - `affinity`: nodeSelector and required node affinity, all operators;
//! - `node`, `pod`: what is judged of Nodes, gated Pods, RuntimeClasses;
//! - `judge`: one pod's gates against the nodes → `Verdict`s;
//! - `state`: the picture kept from the watches, and which pods a change affects;
//! - `event`: the one aggregated Event per gated pod;
//! - `steer`: readiness labels on the Nodes and the narrowing patch at release.
//!
//! I/O, through the edge's requests (`nodeproof_apiclient::controller` and
//! `::lease`): `controller` (the loop over the watches, gate removal by
//! guarded JSON patch, Events), `leader` (joining a coordination.k8s.io/v1
//! Lease, retried), `metrics` (prometheus-client).

pub mod affinity;
pub mod config;
pub mod controller;
pub mod event;
pub mod judge;
pub mod leader;
pub mod metrics;
pub mod node;
pub mod pod;
pub mod resources;
pub mod state;
pub mod steer;
