//! Pods on this node and their seccomp references: which profiles and
//! RuntimeClasses they use, whether those work here, and the tracer's
//! denials attributed to them; and the RuntimeClass contracts judged on
//! this node, whose labels steer the scheduler. The judgement is apart
//! from the API server: `state` takes the watches' changes in and judges
//! them (`verdict`, `contract`; it reads the profile files pods reference),
//! `round` turns the judgement into a `judge::Round`; `node` lists the pods
//! once, `watch` keeps watching them for the daemon and feeds `state`.

/// The pods check's name (`/healthz/pods`, `NODEPROOF_CHECK=pods`).
pub const CHECK_NAME: &str = "pods";

pub mod contract;
pub mod denials;
pub mod dra;
pub mod gpu_faults;
pub mod handlers;
pub mod node;
pub mod rollout_guard;
pub mod round;
pub mod state;
pub mod target;
pub mod verdict;
pub mod watch;

use std::time::{Duration, SystemTime};

/// Whether `interval` has passed since `last` at `now` (wall-clock times:
/// events carry them). A clock stepped back before `last` (an NTP step, a
/// VM restored from a snapshot) counts as passed: waiting for the clock to
/// catch up would mute a pod's events for as long as the step.
pub(crate) fn interval_passed(now: SystemTime, last: SystemTime, interval: Duration) -> bool {
    now.duration_since(last).map_or(true, |d| d >= interval)
}
