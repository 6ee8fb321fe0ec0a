//! The token bucket of `ratelimit` in front of a `Reporter`: every request
//! spends a token first. Apart from `ratelimit` (pure arithmetic on time)
//! because it wraps the reporting trait, which `conditions` (and through
//! it `ratelimit`'s jitter) sits below.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use crate::conditions::StatusUpdate;
use crate::events::EventWrite;
use crate::marks::Taint;
use crate::ratelimit::TokenBucket;
use crate::reporter::{NodeState, ReportError, Reporter};

/// How long to wait, when `e` is the bucket's "not yet" (not a failure).
pub fn deferred(e: &ReportError) -> Option<Duration> {
    match e {
        ReportError::ClientLimited { wait, .. } => Some(*wait),
        _ => None,
    }
}

struct Gate {
    bucket: TokenBucket,
    now: SystemTime,
}

/// A `Reporter` whose every request first spends a token; an empty bucket
/// answers `ReportError::ClientLimited` without a request,
/// which the loop turns into a wait (`deferred`), not a failure. The loop
/// sets the time (`set_now`) before each flush. A Mutex, not a RefCell, so
/// the daemon's loop stays `Send` (it is spawned); never held across an await.
pub struct Limited<R> {
    inner: R,
    gate: Mutex<Gate>,
}

impl<R: Reporter> Limited<R> {
    pub fn new(inner: R, qps: f64, burst: u32) -> Self {
        Limited {
            inner,
            gate: Mutex::new(Gate {
                bucket: TokenBucket::new(qps, burst),
                now: SystemTime::UNIX_EPOCH,
            }),
        }
    }

    pub fn inner(&self) -> &R {
        &self.inner
    }

    pub fn set_now(&self, now: SystemTime) {
        self.gate.lock().unwrap_or_else(|e| e.into_inner()).now = now;
    }

    fn admit(&self) -> Result<(), ReportError> {
        let mut gate = self.gate.lock().unwrap_or_else(|e| e.into_inner());
        let now = gate.now;
        gate.bucket
            .try_take(now)
            .map_err(|wait| ReportError::ClientLimited {
                node: self.inner.node().to_string(),
                wait,
            })
    }
}

impl<R: Reporter> Reporter for Limited<R> {
    fn node(&self) -> &str {
        self.inner.node()
    }

    async fn read_node(&self) -> Result<NodeState, ReportError> {
        self.admit()?;
        self.inner.read_node().await
    }

    async fn patch_status(&self, update: &StatusUpdate) -> Result<(), ReportError> {
        self.admit()?;
        self.inner.patch_status(update).await
    }

    async fn write_event(&self, write: &EventWrite) -> Result<(), ReportError> {
        self.admit()?;
        self.inner.write_event(write).await
    }

    async fn patch_labels(&self, body: &serde_json::Value) -> Result<(), ReportError> {
        self.admit()?;
        self.inner.patch_labels(body).await
    }

    /// One token, though the taint credential makes a GET and a PATCH
    /// (taints are opt-in and change only with a GPU condition).
    async fn set_taints(&self, ours: &[Taint]) -> Result<(), ReportError> {
        self.admit()?;
        self.inner.set_taints(ours).await
    }
}
