//! A test API server with the semantics nodeproof's reporting depends on,
//! one module per concern, objects typed (k8s-openapi) inside and JSON at
//! the edge:
//!
//! - [`tls`]: the serving certificate, the client CA, a handshake that asks
//!   for a client certificate;
//! - [`auth`]: bearer tokens and client certificates, the Node authorizer's
//!   rules (own node only, no GET of nodes/status, pods bound to it, claims
//!   its pods reference);
//! - [`admission`]: NodeRestriction's rules, TaintNodesByCondition,
//!   NamespaceLifecycle, the RuntimeClass plugin, KEP-3838's rules for a
//!   gated pod's placement;
//! - [`kinds`]: the typed objects, decoded on write (400/422 when they do
//!   not decode) and encoded at the edge;
//! - [`store`]: resourceVersions, the change history, snapshots, `limit` /
//!   `continue` pages of one snapshot, 410 Gone after compaction;
//! - [`watch`]: watches from a resourceVersion, BOOKMARKs, 410 Gone;
//! - [`validation`]: apimachinery's name and label rules;
//! - [`merge`]: strategic merge of conditions by type (`$patch: delete`),
//!   JSON merge patch, RFC 6902 JSON patch;
//! - [`faults`]: down, 500, 429 with Retry-After, slow, connections cut;
//! - [`nodes`], [`pods`], [`events`], [`leases`]: each resource's requests
//!   (a Node's create included, and what the node lifecycle controller
//!   does once it is Ready);
//! - [`cluster_check`]: APIServices, the Metrics API, Events cluster-wide;
//! - [`dra`]: `resource.k8s.io` (ResourceSlices, claims, DeviceTaintRules);
//! - [`scheduler`]: an adversarial scheduler for the placement tests;
//! - [`persist`]: objects and the request log across process restarts;
//! - `state`: the store and each concern's part of the state, kept by type,
//!   and [`TestApiServer`], the handle tests hold; each concern above adds
//!   its own `impl TestApiServer` block next to its requests;
//! - `router`, `server`: the routing, and starting the server.
//!
//! Not a Kubernetes: only the handful of paths the agent uses.
//!
//! A crate of its own (dev-only, never shipped) so the test binaries,
//! benches and examples that use it compile it once.

pub mod admission;
pub mod auth;
pub mod cluster_check;
pub mod dra;
pub mod events;
pub mod faults;
pub mod kinds;
pub mod leases;
pub mod merge;
pub mod nodes;
pub mod persist;
pub mod pods;
pub mod query;
mod router;
pub mod scheduler;
mod server;
mod state;
pub mod status;
pub mod store;
pub mod tls;
pub mod validation;
pub mod watch;

pub use admission::NamespacePhase;
pub use auth::{user_name, Identity, PeerCert};
pub use faults::Fault;
pub use persist::{stored_node, stored_requests, Logged, REQUESTS_FILE};
pub use state::TestApiServer;
pub use tls::ServingCert;

#[cfg(test)]
mod tests;
