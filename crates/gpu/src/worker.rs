//! What the probes' worker threads share with their callers: the call in
//! progress, so a caller that stops waiting can name it (the NVML and CUDA
//! probes run every driver call on a dedicated thread and wait at most a
//! timeout).

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// What the worker is doing, shared so a timed-out caller can name the call.
#[derive(Default)]
pub(crate) struct Progress {
    pub(crate) call: String,
    /// Set while a request is being answered.
    pub(crate) busy_since: Option<Instant>,
}

pub(crate) fn lock(p: &Mutex<Progress>) -> MutexGuard<'_, Progress> {
    // A panic in the worker must not turn every later snapshot into a panic.
    p.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn set_call(progress: &Mutex<Progress>, call: impl Into<String>) {
    lock(progress).call = call.into();
}
