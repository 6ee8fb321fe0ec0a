//! Leader election: one replica of the Deployment acts, the other waits.
//!
//! Through a `coordination.k8s.io/v1` Lease (the requests, through
//! kube-lease-manager, are the edge's: `nodeproof_apiclient::lease`, which
//! says how the lease is taken, renewed and released); here, joining and
//! retrying until joined.
//!
//! Its guarantee is a lease's: a replica stops acting when it sees it lost
//! the lease, which can be up to `grace` late with a skewed clock; the
//! gate removal itself is guarded by a JSON patch `test` op, so even two
//! leaders at once never remove a gate twice.

use std::time::Duration;

use nodeproof_apiclient::lease::{elect, LeaseError};
use nodeproof_apiclient::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use nodeproof_apiclient::lease::LeaseOptions;

#[derive(Debug, thiserror::Error)]
#[error("cannot take part in leader election on Lease {namespace}/{name} as {identity}")]
pub struct LeaderError {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    #[source]
    pub source: LeaseError,
}

/// Takes part, trying again until it can or `stop` turns true (`None`):
/// an API server that does not answer at start, or a Role not applied yet,
/// is waited out with kube-runtime's backoff (0.8 s doubling to 30 s,
/// jittered, as client-go's reflector) and said once per attempt, instead
/// of ending the process: a controller that exits is restarted by the
/// kubelet with CrashLoopBackOff, whose delay grows to five minutes, long
/// after the API server is back. `on_failure` hears each failed attempt
/// and the delay before the next (the controller's `/readyz` says it).
pub async fn join(
    client: Client,
    opts: &LeaseOptions,
    stop: &mut watch::Receiver<bool>,
    mut on_failure: impl FnMut(&LeaderError, Duration),
) -> Option<(watch::Receiver<bool>, JoinHandle<()>)> {
    let mut backoff = nodeproof_apiclient::watch::retry_delays();
    loop {
        if *stop.borrow() {
            return None;
        }
        match elect(client.clone(), opts)
            .await
            .map_err(|source| LeaderError {
                namespace: opts.namespace.clone(),
                name: opts.name.clone(),
                identity: opts.identity.clone(),
                source,
            }) {
            Ok(joined) => {
                tracing::info!(identity = %opts.identity, lease = %format!("{}/{}", opts.namespace, opts.name), "joined leader election");
                return Some(joined);
            }
            Err(e) => {
                let delay = backoff.next().unwrap_or(Duration::from_secs(30));
                // Handled here (retried), so logged here, once per attempt.
                tracing::warn!(
                    error = %nodeproof_findings::errors::error_chain(&e),
                    retry_ms = delay.as_millis() as u64,
                    "cannot join leader election yet; retrying"
                );
                on_failure(&e, delay);
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = stop.wait_for(|s| *s) => return None,
                }
            }
        }
    }
}
