//! Reporting to the API server, without a client: what to write and when,
//! through outages and under the Node authorizer. See docs/reporting.md.
//! The kube-rs edge (the `Reporter` on a kube client, connecting, identity,
//! DRA reads) is `nodeproof-apiclient`, which depends on this crate.
//!
//! - `reporter`: the `Reporter` trait (the API server, or a stand-in for
//!   it), `NodeState` and `ReportError`;
//! - `log`: the `Reporter` without credentials (logs what it would write);
//! - `conditions`: pure desired-state computation (hysteresis, continuity,
//!   heartbeat, stale cleanup);
//! - `events`: pure dedup and rate-limit recorder;
//! - `marks`: pure opt-in labels and taints from the conditions;
//! - `contract`: RuntimeClass contracts (annotations, the Node label), pure;
//! - `contract_labels`: this node's contract labels from the agent's
//!   verdicts (hysteresis, continuity, stale cleanup), pure;
//! - `device_health`: the Node annotation naming the GPUs the agent judges
//!   unhealthy (read by the cluster side's DRA device taints), pure;
//! - `driver`: the loop that brings the API server to the desired state;
//! - `once`: that loop once, on the real clock (`check --report`);
//! - `ratelimit`: fleet-safe load, pure (token bucket, heartbeat jitter,
//!   first-write spread, backoff jitter);
//! - `reach`: whether the API server is reached (every request's outcome),
//!   pure: what the agent's `/readyz` says;
//! - `limited`: that token bucket in front of a `Reporter`;
//! - `credentials`: the lookup order of credentials and node name;
//! - `config`: the `[report]` section; `refs`/`taints`: pods' seccomp
//!   references and Kubernetes' toleration matching, pure.

pub mod conditions;
pub mod config;
pub mod contract;
pub mod contract_labels;
pub mod credentials;
pub use nodeproof_findings::denial_change;
pub mod device_health;
pub mod driver;
pub mod events;
pub mod limited;
pub mod log;
pub mod marks;
pub mod once;
pub mod ratelimit;
pub mod reach;
pub mod refs;
pub mod reporter;
pub mod taints;
