//! Helpers shared by the end-to-end tests.

pub mod campaign;
pub mod cri;
pub mod crio;
pub mod learn;
pub mod lintset;
pub mod oracle;
pub mod reap;
pub mod runtimes;
pub mod splice;

/// Runtime runs at a time in the end-to-end tests (the machines have 2 cores).
pub const PARALLELISM: usize = 2;

/// Run `check` on every job, [`PARALLELISM`] at a time, and collect what it
/// reports (`Some(message)` = a mismatch), in no particular order.
pub fn mismatches<J: Send, F>(jobs: Vec<J>, check: F) -> Vec<String>
where
    F: Fn(J) -> Option<String> + Sync,
{
    let queue = std::sync::Mutex::new(jobs);
    let found = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..PARALLELISM {
            s.spawn(|| loop {
                let Some(job) = queue.lock().unwrap_or_else(|e| e.into_inner()).pop() else {
                    break;
                };
                if let Some(m) = check(job) {
                    found.lock().unwrap_or_else(|e| e.into_inner()).push(m);
                }
            });
        }
    });
    found.into_inner().unwrap_or_else(|e| e.into_inner())
}
