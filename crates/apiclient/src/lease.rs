//! Leader election through a `coordination.k8s.io/v1` Lease, for the gate
//! controller and the device taints (crates/cluster's `gate/leader.rs`
//! joins, retries and says why; the Lease requests are here).
//!
//! With kube-lease-manager (0.13, built on kube 5 and k8s-openapi 0.29,
//! maintained, MIT): the lease is taken with a server-side apply of
//! `holderIdentity` under this replica's field manager, so two replicas
//! taking a free lease at once conflict (409) on the field and only one
//! wins; the holder renews it `grace` before it expires; a holder that
//! stops renewing is released by force once expired and taken by the
//! other. Chosen over kube-leader-election (pinned to kube 4) and over a
//! hand-made lock. The requests it makes (get, create, patch of one Lease
//! in the controller's namespace) are the ones
//! deploy/base/gate-controller.yaml allows.

use std::time::Duration;

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The Lease and this replica's part in it.
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

/// kube-lease-manager's error (a request on the Lease failed, or the
/// options were refused).
pub use kube_lease_manager::LeaseManagerError as LeaseError;

/// Starts taking part: the receiver says whether this replica leads. Drop
/// it to leave (the task releases the lease if held, then ends).
pub async fn elect(
    client: Client,
    opts: &LeaseOptions,
) -> Result<(watch::Receiver<bool>, JoinHandle<()>), LeaseError> {
    let manager = LeaseManagerBuilder::new(client, &opts.name)
        .with_namespace(&opts.namespace)
        .with_identity(&opts.identity)
        .with_duration(opts.duration.as_secs().max(2))
        .with_grace(opts.grace.as_secs().max(1))
        .build()
        .await?;
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
