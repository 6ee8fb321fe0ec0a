//! Leader election: one replica of the Deployment acts, the other waits.
//!
//! Through a `coordination.k8s.io/v1` Lease, with kube-lease-manager
//! (0.13, built on kube 5 and k8s-openapi 0.29, maintained, MIT): the lease
//! is taken with a server-side apply of `holderIdentity` under this
//! replica's field manager, so two replicas taking a free lease at once
//! conflict (409) on the field and only one wins; the holder renews it
//! `grace` before it expires; a holder that stops renewing is released by
//! force once expired and taken by the other. Chosen over kube-leader-election
//! (pinned to kube 4) and over a hand-made lock. The requests it makes
//! (get, create, patch of one Lease in the controller's namespace) are the
//! ones deploy/base/gate-controller.yaml allows.
//!
//! Its guarantee is a lease's: a replica stops acting when it sees it lost
//! the lease, which can be up to `grace` late with a skewed clock; the
//! gate removal itself is guarded by a JSON patch `test` op, so even two
//! leaders at once never remove a gate twice.

use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseOptions {
    pub namespace: String,
    pub name: String,
    /// This replica (the pod's name).
    pub identity: String,
    /// How long a lease holds after its last renewal.
    pub duration: Duration,
    /// The holder renews this long before expiry.
    pub grace: Duration,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot take part in leader election on Lease {namespace}/{name} as {identity}")]
pub struct LeaderError {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    #[source]
    pub source: LeaseManagerError,
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
    let mut backoff = kube::runtime::watcher::DefaultBackoff::default();
    loop {
        if *stop.borrow() {
            return None;
        }
        match elect(client.clone(), opts).await {
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

/// Starts taking part: the receiver says whether this replica leads. Drop
/// it to leave (the task releases the lease if held, then ends).
pub async fn elect(
    client: Client,
    opts: &LeaseOptions,
) -> Result<(watch::Receiver<bool>, JoinHandle<()>), LeaderError> {
    let wrap = |source| LeaderError {
        namespace: opts.namespace.clone(),
        name: opts.name.clone(),
        identity: opts.identity.clone(),
        source,
    };
    let manager = LeaseManagerBuilder::new(client, &opts.name)
        .with_namespace(&opts.namespace)
        .with_identity(&opts.identity)
        .with_duration(opts.duration.as_secs().max(2))
        .with_grace(opts.grace.as_secs().max(1))
        .build()
        .await
        .map_err(wrap)?;
    let (rx, task) = manager.watch().await;
    let identity = opts.identity.clone();
    let handle = tokio::spawn(async move {
        match task.await {
            Ok(Ok(_)) => tracing::info!(%identity, "left leader election"),
            Ok(Err(e)) => {
                tracing::warn!(%identity, error = %e, "leader election ended with an error")
            }
            Err(e) => tracing::warn!(%identity, error = %e, "leader election task failed"),
        }
    });
    Ok((rx, handle))
}
