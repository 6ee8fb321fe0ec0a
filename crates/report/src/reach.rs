//! Whether this process can reach the API server it reports to: what
//! `/readyz` says once the agent reports. Pure: the edge (`nodeproof-apiclient`'s
//! client, through which every request goes) records each request's outcome
//! with the time; the daemon asks for the verdict at a time.
//!
//! Why readiness follows this and not only the first check cycle: a
//! DaemonSet's rolling update counts a Ready pod as available
//! (`maxUnavailable`), so an agent that is Ready while every write fails would
//! let a version that cannot report roll out to every node. Seen on a real
//! node: Ready for minutes while every write failed before the pod network
//! reached the Service.
//!
//! Two kinds of request are tracked apart, each failing from its first
//! failure after its last success: reads (lists, watches, `/readyz` probes:
//! `GET`) and writes (everything else: the Node status, Events, labels).
//! A write that keeps failing means the conditions on the Node go stale even
//! while watches succeed (a 403 on the status, say); a read that keeps
//! failing means the agent judges pods it no longer sees. Liveness is not
//! about this: a process that cannot reach the API server is still alive,
//! and restarting it would not bring the server back.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long requests may keep failing before `/readyz` fails: a few retries
/// of the reporter and the watches (their backoff starts at 0.8 s), one API
/// server restart, and six of the DaemonSet's readiness probes (5 s apart).
pub const UNREACHABLE_AFTER: Duration = Duration::from_secs(30);

/// What one request was, as far as reachability goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// `GET`: a list, a watch, a probe.
    Read,
    /// Any other method: a write.
    Write,
}

/// What became of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A 2xx answer.
    Answered,
    /// No answer (refused, reset, timed out), or one that says the server
    /// cannot serve it or will not serve this client: 5xx, 429, 401, 403.
    /// The text is what the journal and `/readyz` say of it.
    Failed(String),
    /// Any other answer (404, 409, 422, ...): about this object, not about
    /// reaching the server.
    Other,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Track {
    last_ok: Option<Instant>,
    /// The first failure since the last success, and the latest's text.
    failing: Option<(Instant, String)>,
}

impl Track {
    fn record(&mut self, now: Instant, outcome: &Outcome) {
        match outcome {
            Outcome::Answered => {
                self.last_ok = Some(now);
                self.failing = None;
            }
            Outcome::Failed(why) => match &mut self.failing {
                Some((_, latest)) => *latest = why.clone(),
                None => self.failing = Some((now, why.clone())),
            },
            Outcome::Other => {}
        }
    }
}

/// The outcomes so far, for one API server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReachState {
    reads: Track,
    writes: Track,
}

/// Why the API server does not count as reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreached {
    /// No request has been answered yet.
    NotYet { latest_failure: Option<String> },
    /// Requests of `kind` have failed for `for_` (at least
    /// [`UNREACHABLE_AFTER`]).
    Failing {
        kind: RequestKind,
        for_: Duration,
        latest: String,
    },
}

impl std::fmt::Display for Unreached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreached::NotYet {
                latest_failure: None,
            } => f.write_str("the API server has not answered yet"),
            Unreached::NotYet {
                latest_failure: Some(why),
            } => write!(f, "the API server has not answered yet: {why}"),
            Unreached::Failing { kind, for_, latest } => write!(
                f,
                "every {} to the API server has failed for {} s: {latest}",
                match kind {
                    RequestKind::Read => "read",
                    RequestKind::Write => "write",
                },
                for_.as_secs()
            ),
        }
    }
}

impl ReachState {
    pub fn record(&mut self, now: Instant, kind: RequestKind, outcome: &Outcome) {
        match kind {
            RequestKind::Read => self.reads.record(now, outcome),
            RequestKind::Write => self.writes.record(now, outcome),
        }
    }

    /// Reached at `now`: some request was answered, and neither reads nor
    /// writes have kept failing for `bound` or longer.
    pub fn verdict(&self, now: Instant, bound: Duration) -> Result<(), Unreached> {
        for (kind, track) in [
            (RequestKind::Write, &self.writes),
            (RequestKind::Read, &self.reads),
        ] {
            if let Some((since, latest)) = &track.failing {
                let for_ = now.saturating_duration_since(*since);
                if for_ >= bound {
                    return Err(Unreached::Failing {
                        kind,
                        for_,
                        latest: latest.clone(),
                    });
                }
            }
        }
        if self.reads.last_ok.is_none() && self.writes.last_ok.is_none() {
            let latest_failure = [&self.writes, &self.reads]
                .into_iter()
                .find_map(|t| t.failing.as_ref().map(|(_, why)| why.clone()));
            return Err(Unreached::NotYet { latest_failure });
        }
        Ok(())
    }
}

/// [`ReachState`] shared between the client that records and whoever asks.
#[derive(Debug, Clone, Default)]
pub struct Reach(Arc<Mutex<ReachState>>);

impl Reach {
    pub fn record(&self, now: Instant, kind: RequestKind, outcome: &Outcome) {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        s.record(now, kind, outcome);
    }

    pub fn verdict(&self, now: Instant, bound: Duration) -> Result<(), Unreached> {
        let s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        s.verdict(now, bound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Duration = UNREACHABLE_AFTER;

    fn failed(why: &str) -> Outcome {
        Outcome::Failed(why.into())
    }

    #[test]
    fn not_reached_until_something_is_answered() {
        let t0 = Instant::now();
        let mut s = ReachState::default();
        assert_eq!(
            s.verdict(t0, B),
            Err(Unreached::NotYet {
                latest_failure: None
            })
        );
        s.record(t0, RequestKind::Write, &failed("connection refused"));
        let e = s.verdict(t0 + Duration::from_secs(1), B).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the API server has not answered yet: connection refused"
        );
        s.record(
            t0 + Duration::from_secs(2),
            RequestKind::Read,
            &Outcome::Answered,
        );
        // The write still fails, but not for long yet.
        assert_eq!(s.verdict(t0 + Duration::from_secs(2), B), Ok(()));
    }

    #[test]
    fn failing_writes_unready_after_the_bound_even_while_reads_succeed() {
        let t0 = Instant::now();
        let mut s = ReachState::default();
        s.record(t0, RequestKind::Write, &Outcome::Answered);
        s.record(
            t0 + Duration::from_secs(10),
            RequestKind::Write,
            &failed("403 Forbidden"),
        );
        for i in 11..60 {
            let at = t0 + Duration::from_secs(i);
            s.record(at, RequestKind::Read, &Outcome::Answered);
        }
        s.record(
            t0 + Duration::from_secs(39),
            RequestKind::Write,
            &failed("403 Forbidden again"),
        );
        assert_eq!(s.verdict(t0 + Duration::from_secs(39), B), Ok(()));
        let e = s.verdict(t0 + Duration::from_secs(40), B).unwrap_err();
        assert_eq!(
            e.to_string(),
            "every write to the API server has failed for 30 s: 403 Forbidden again"
        );
        // One write answered: reached again at once.
        s.record(
            t0 + Duration::from_secs(41),
            RequestKind::Write,
            &Outcome::Answered,
        );
        assert_eq!(s.verdict(t0 + Duration::from_secs(41), B), Ok(()));
    }

    #[test]
    fn failing_reads_unready_and_other_answers_change_nothing() {
        let t0 = Instant::now();
        let mut s = ReachState::default();
        s.record(t0, RequestKind::Read, &Outcome::Answered);
        s.record(t0, RequestKind::Read, &failed("connection reset"));
        s.record(
            t0 + Duration::from_secs(20),
            RequestKind::Read,
            &Outcome::Other,
        );
        assert!(matches!(
            s.verdict(t0 + B, B),
            Err(Unreached::Failing {
                kind: RequestKind::Read,
                ..
            })
        ));
        // A 404 is an answer about an object: it neither heals nor fails.
        s.record(t0 + B, RequestKind::Write, &Outcome::Other);
        assert!(s.verdict(t0 + B, B).is_err());
    }
}
