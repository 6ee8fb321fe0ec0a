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

    /// A request that got no answer (`ReportError::Transport`: refused,
    /// reset, TLS) cost the API server nothing, and its retries are bounded
    /// by the loop's backoff: its token comes back. Else an outage spends the
    /// bucket (10 tokens, 0.2 a second) on requests that never arrived, and
    /// once the server is back the first changes wait 5 s a write (measured:
    /// a pod named 9.9 s after the server's return instead of 2–5 s). A
    /// timeout or an error answer did reach the server and stays spent.
    fn settle<T>(&self, result: Result<T, ReportError>) -> Result<T, ReportError> {
        if matches!(result, Err(ReportError::Transport { .. })) {
            self.gate
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .bucket
                .give_back();
        }
        result
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
        self.settle(self.inner.read_node().await)
    }

    async fn patch_status(&self, update: &StatusUpdate) -> Result<(), ReportError> {
        self.admit()?;
        self.settle(self.inner.patch_status(update).await)
    }

    async fn write_event(&self, write: &EventWrite) -> Result<(), ReportError> {
        self.admit()?;
        self.settle(self.inner.write_event(write).await)
    }

    async fn patch_labels(&self, body: &serde_json::Value) -> Result<(), ReportError> {
        self.admit()?;
        self.settle(self.inner.patch_labels(body).await)
    }

    /// One token, though the taint credential makes a GET and a PATCH
    /// (taints are opt-in and change only with a GPU condition).
    async fn set_taints(&self, ours: &[Taint]) -> Result<(), ReportError> {
        self.admit()?;
        self.settle(self.inner.set_taints(ours).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::time::Duration;

    /// Answers every read with `answer` (a transport failure or a 500).
    struct Down {
        transport: bool,
        reads: Cell<u32>,
    }

    impl Reporter for Down {
        fn node(&self) -> &str {
            "n1"
        }
        async fn read_node(&self) -> Result<NodeState, ReportError> {
            self.reads.set(self.reads.get() + 1);
            Err(if self.transport {
                ReportError::Transport {
                    op: "get node",
                    node: "n1".into(),
                    source: "connection refused".into(),
                }
            } else {
                ReportError::Api {
                    op: "get node",
                    node: "n1".into(),
                    code: 500,
                    message: "injected".into(),
                }
            })
        }
        async fn patch_status(&self, _: &StatusUpdate) -> Result<(), ReportError> {
            unreachable!()
        }
        async fn write_event(&self, _: &EventWrite) -> Result<(), ReportError> {
            unreachable!()
        }
        async fn patch_labels(&self, _: &serde_json::Value) -> Result<(), ReportError> {
            unreachable!()
        }
        async fn set_taints(&self, _: &[Taint]) -> Result<(), ReportError> {
            unreachable!()
        }
    }

    /// How many of 30 reads at one instant reach the reporter.
    async fn sent(transport: bool) -> u32 {
        let l = Limited::new(
            Down {
                transport,
                reads: Cell::new(0),
            },
            0.2,
            10,
        );
        l.set_now(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        for _ in 0..30 {
            let _ = l.read_node().await;
        }
        l.inner().reads.get()
    }

    #[tokio::test]
    async fn unanswered_requests_give_their_token_back_answered_ones_spend_it() {
        // No answer: nothing reached the server, the bucket stays full.
        assert_eq!(sent(true).await, 30);
        // An error answer reached it: the burst, then nothing.
        assert_eq!(sent(false).await, 10);
    }
}
