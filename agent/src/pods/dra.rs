//! The DRA view for the GPU probe: while the probe asks for it (a node with
//! NVIDIA devices), this node's ResourceSlices and the ResourceClaims of the
//! pods running here are read through the API every GPU interval, and again
//! when the pods' claims change. The reading and decoding are
//! `nodeproof_apiclient::dra`'s; here only the loop, what it publishes, and the
//! log line when the outcome changes (once, not every interval).

use std::sync::Arc;
use std::time::Duration;

use nodeproof_apiclient::dra::{DraReader, PodClaims};
use tokio::sync::watch;

use crate::judge::gpu::CHECK_NAME;
use nodeproof_gpu::views::NodeDra;

/// Reads at most this often when the pods' claims keep changing.
const MIN_GAP: Duration = Duration::from_secs(1);
/// How often a cluster that serves no `resource.k8s.io` version is asked
/// again (three 404s each time), unless a pod here names a claim first:
/// fleets without DRA must not pay three requests per node per GPU interval.
const NOT_SERVED_RECHECK: Duration = Duration::from_secs(600);

/// What a read's outcome is, for the log: said once per change.
fn outcome(read: &NodeDra) -> String {
    match read {
        NodeDra::Unread => String::new(),
        NodeDra::NotServed => "not served".into(),
        // A new count is said too: a pod's claim came or went.
        NodeDra::Read(v) => format!(
            "{} {} {} {}",
            v.version,
            v.devices.len(),
            v.allocations.len(),
            v.notes.join("; ")
        ),
        NodeDra::Failed(e) => e.clone(),
    }
}

/// Runs until its future is dropped (the watcher stopping).
pub async fn follow(
    mut reader: DraReader,
    mut claims: watch::Receiver<Vec<PodClaims>>,
    mut wanted: watch::Receiver<bool>,
    out: Arc<watch::Sender<NodeDra>>,
    interval: Duration,
) {
    let mut said = String::new();
    loop {
        if wanted.wait_for(|w| *w).await.is_err() {
            // No GPU probe any more (the agent is stopping).
            return std::future::pending().await;
        }
        let pods = claims.borrow_and_update().clone();
        let read = NodeDra::of(
            reader
                .read(&pods)
                .await
                .map_err(|e| nodeproof_findings::errors::error_chain(&e)),
        );
        let now = outcome(&read);
        if now != said {
            match &read {
                NodeDra::NotServed => tracing::info!(
                    nodeproof_check = CHECK_NAME,
                    "resource.k8s.io is not served: GPUs are compared without DRA"
                ),
                NodeDra::Read(v) if v.notes.is_empty() => tracing::info!(
                    nodeproof_check = CHECK_NAME,
                    version = %v.version,
                    devices = v.devices.len(),
                    allocations = v.allocations.len(),
                    "reading this node's DRA ResourceSlices and the pods' ResourceClaims"
                ),
                NodeDra::Read(v) => tracing::warn!(
                    nodeproof_check = CHECK_NAME,
                    version = %v.version,
                    error = %v.notes.join("; "),
                    "some ResourceClaims of pods here cannot be read; their devices are not attributed"
                ),
                NodeDra::Failed(e) => tracing::warn!(
                    nodeproof_check = CHECK_NAME,
                    error = %e,
                    "this node's DRA ResourceSlices cannot be read; GPUs are compared without DRA"
                ),
                NodeDra::Unread => {}
            }
            said = now;
        }
        let served = !matches!(read, NodeDra::NotServed);
        out.send_replace(read);
        tokio::time::sleep(MIN_GAP).await;
        let wait = if served {
            interval
        } else {
            NOT_SERVED_RECHECK.max(interval)
        };
        let until = tokio::time::Instant::now() + wait.saturating_sub(MIN_GAP);
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => break,
                r = claims.changed() => {
                    if r.is_err() {
                        return;
                    }
                    if served || !claims.borrow().is_empty() {
                        break;
                    }
                }
            }
        }
    }
}
