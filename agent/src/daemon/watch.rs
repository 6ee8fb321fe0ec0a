//! inotify on the seccomp root: a changed, added or removed profile wakes
//! the profile task, so it is re-validated within a second instead of at
//! the next resync. Runs on a thread of its own (the blocking inotify API)
//! and coalesces bursts (an editor's write + rename) into one wake-up.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use tokio::sync::mpsc;

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("cannot create an inotify instance")]
    Init(#[source] std::io::Error),
    #[error("cannot start the watcher thread")]
    Thread(#[source] std::io::Error),
}

/// Quiet time after the last event before waking the profile task.
const SETTLE: Duration = Duration::from_millis(100);

/// A running watcher; stops (and closes its inotify fd) when dropped.
pub struct Watcher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn mask() -> WatchMask {
    WatchMask::CLOSE_WRITE
        | WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::ATTRIB
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
}

/// Watch `root` and its subdirectories; one `()` on `wake` per settled burst.
/// A root that does not exist yet is not watched (the periodic resync sees it appear).
pub fn watch(root: &Path, wake: mpsc::Sender<()>) -> Result<Watcher, WatchError> {
    let mut inotify = Inotify::init().map_err(WatchError::Init)?;
    let mut dirs = HashMap::new();
    add_tree(&mut inotify, root, &mut dirs);
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::Builder::new()
        .name("profile-watch".into())
        .spawn(move || run(inotify, dirs, &flag, &wake))
        .map_err(WatchError::Thread)?;
    Ok(Watcher {
        stop,
        thread: Some(thread),
    })
}

fn add_tree(inotify: &mut Inotify, dir: &Path, dirs: &mut HashMap<WatchDescriptor, PathBuf>) {
    match inotify.watches().add(dir, mask()) {
        Ok(wd) => {
            dirs.insert(wd, dir.to_path_buf());
        }
        Err(e) => {
            tracing::debug!(dir = %dir.display(), error = %e, "not watched");
            return;
        }
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            // Symlinked directories are not followed, like the scanner.
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                add_tree(inotify, &e.path(), dirs);
            }
        }
    }
}

/// Waits up to `timeout` for the fd to become readable.
fn readable(inotify: &Inotify, timeout: Duration) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    let mut pfd = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
    // Saturates: a longer wait than poll can express is the longest it can.
    let ms = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
    nix::poll::poll(&mut pfd, ms).is_ok_and(|n| n > 0)
}

fn run(
    mut inotify: Inotify,
    mut dirs: HashMap<WatchDescriptor, PathBuf>,
    stop: &AtomicBool,
    wake: &mpsc::Sender<()>,
) {
    let mut buf = [0u8; 4096];
    let mut pending = false;
    while !stop.load(Ordering::Relaxed) {
        // Long waits when idle (the stop flag is checked twice a second),
        // short ones while a burst settles.
        let timeout = if pending {
            SETTLE
        } else {
            Duration::from_millis(500)
        };
        if readable(&inotify, timeout) {
            let mut new_dirs = Vec::new();
            match inotify.read_events(&mut buf) {
                Ok(events) => {
                    for e in events {
                        pending = true;
                        if e.mask.contains(EventMask::CREATE | EventMask::ISDIR)
                            || e.mask.contains(EventMask::MOVED_TO | EventMask::ISDIR)
                        {
                            if let (Some(parent), Some(name)) = (dirs.get(&e.wd), e.name) {
                                new_dirs.push(parent.join(name));
                            }
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    tracing::warn!(error = %e, "reading inotify events failed; watcher stops, resyncs continue");
                    return;
                }
            }
            for d in new_dirs {
                add_tree(&mut inotify, &d, &mut dirs);
            }
        } else if pending {
            pending = false;
            if wake.blocking_send(()).is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_change_wakes_promptly_and_bursts_coalesce() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let (tx, mut rx) = mpsc::channel(8);
        let _w = watch(dir.path(), tx).unwrap();
        let start = Instant::now();
        for i in 0..5 {
            std::fs::write(dir.path().join("sub/p.json"), format!("{{\"v\":{i}}}")).unwrap();
        }
        rx.blocking_recv().unwrap();
        // Bounds loose enough for a loaded CI machine, far below the
        // periodic resync (minutes) this watch exists to beat.
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        std::thread::sleep(Duration::from_millis(300));
        // Writes closer together than SETTLE are one wake-up; a scheduler
        // that parks this thread between two of them may split the burst
        // once, never into one wake-up per write.
        let mut more = 0;
        while rx.try_recv().is_ok() {
            more += 1;
        }
        assert!(more <= 1, "5 writes woke {} times", more + 1);
        // A directory created later is watched too.
        std::fs::create_dir(dir.path().join("new")).unwrap();
        rx.blocking_recv().unwrap();
        std::fs::write(dir.path().join("new/q.json"), "{}").unwrap();
        let start = Instant::now();
        rx.blocking_recv().unwrap();
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
