//! inotify on the seccomp root: a changed, added or removed profile wakes
//! the profile task, so it is re-validated within a second instead of at
//! the next resync. Runs on a thread of its own (the blocking inotify API)
//! and coalesces bursts (an editor's write + rename) into one wake-up.
//!
//! inotify watches inodes, not paths, so the watches are set again from the
//! root's path (and the task woken) when what the path names may have
//! changed: the root itself moved or deleted, a root that was absent
//! appearing (checked twice a second), or a mount added or removed in this
//! mount namespace (a filesystem mounted over the root makes no inotify
//! event; the kernel signals mount table changes to poll(2) on
//! /proc/<pid>/mountinfo with POLLPRI, fs/proc_namespace.c `mounts_poll`).
//! A node mounts and unmounts all the time (every container's rootfs,
//! volumes, overlay layers): after a mount change the tree is watched again,
//! but the task is woken only if a directory of the tree now names another
//! inode (its device and inode number changed), not for every mount anywhere.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
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
    // The mount table of this thread's namespace (every thread of the agent
    // shares one); without it, mounts are seen at the next resync only.
    let mounts = std::fs::File::open("/proc/thread-self/mountinfo")
        .inspect_err(|e| tracing::debug!(error = %e, "mount changes are not watched"))
        .ok();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let root = root.to_path_buf();
    let thread = std::thread::Builder::new()
        .name("profile-watch".into())
        .spawn(move || {
            let mut w = Watches {
                identity: identity(&dirs),
                inotify,
                root,
                dirs,
            };
            run(&mut w, mounts.as_ref(), &flag, &wake)
        })
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

/// The inotify instance and what it watches, from the root's path.
struct Watches {
    inotify: Inotify,
    root: PathBuf,
    dirs: HashMap<WatchDescriptor, PathBuf>,
    /// [`identity`] of `dirs` when they were watched.
    identity: Vec<(PathBuf, Option<(u64, u64)>)>,
}

/// Each watched directory's path with the (device, inode) it names now,
/// sorted: a mount over any of them changes it, a mount elsewhere does not.
fn identity(dirs: &HashMap<WatchDescriptor, PathBuf>) -> Vec<(PathBuf, Option<(u64, u64)>)> {
    let mut ids: Vec<_> = dirs
        .values()
        .map(|d| {
            let id = std::fs::metadata(d).ok().map(|m| (m.dev(), m.ino()));
            (d.clone(), id)
        })
        .collect();
    ids.sort();
    ids
}

impl Watches {
    /// Drops every watch and sets them again from the root's path; whether
    /// the watched tree now names other directories than when it was last
    /// watched.
    fn rewatch(&mut self) -> bool {
        for (wd, _) in self.dirs.drain() {
            // A watch whose inode is gone is already removed (IN_IGNORED).
            let _ = self.inotify.watches().remove(wd);
        }
        add_tree(&mut self.inotify, &self.root, &mut self.dirs);
        let now = identity(&self.dirs);
        std::mem::replace(&mut self.identity, now) != self.identity
    }

    fn is_root(&self, wd: &WatchDescriptor) -> bool {
        self.dirs.get(wd) == Some(&self.root)
    }
}

/// What woke the thread.
struct Ready {
    events: bool,
    mounts_changed: bool,
}

/// Waits up to `timeout` for inotify events or a mount table change.
fn wait(inotify: &Inotify, mounts: Option<&std::fs::File>, timeout: Duration) -> Ready {
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    let mut pfd = vec![PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
    if let Some(m) = mounts {
        pfd.push(PollFd::new(m.as_fd(), PollFlags::POLLPRI));
    }
    // Saturates: a longer wait than poll can express is the longest it can.
    let ms = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
    if !nix::poll::poll(&mut pfd, ms).is_ok_and(|n| n > 0) {
        return Ready {
            events: false,
            mounts_changed: false,
        };
    }
    let has = |i: usize, f: PollFlags| {
        pfd.get(i)
            .and_then(PollFd::revents)
            .is_some_and(|r| r.intersects(f))
    };
    Ready {
        events: has(0, PollFlags::POLLIN),
        // mounts_poll answers POLLERR | POLLPRI once per change it has not
        // reported to this open file yet.
        mounts_changed: has(1, PollFlags::POLLPRI | PollFlags::POLLERR),
    }
}

fn run(
    w: &mut Watches,
    mounts: Option<&std::fs::File>,
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
        let ready = wait(&w.inotify, mounts, timeout);
        // A mount change wakes the task only if the tree it watches changed.
        let mut changed = ready.mounts_changed && w.rewatch();
        let mut rewatch = false;
        if ready.events {
            let mut new_dirs = Vec::new();
            match w.inotify.read_events(&mut buf) {
                Ok(events) => {
                    for e in events {
                        // A watch this thread removed (rewatch) says IN_IGNORED
                        // once: nothing changed on disk.
                        if e.mask.contains(EventMask::IGNORED) && !w.dirs.contains_key(&e.wd) {
                            continue;
                        }
                        pending = true;
                        if w.is_root(&e.wd)
                            && e.mask.intersects(
                                EventMask::MOVE_SELF | EventMask::DELETE_SELF | EventMask::IGNORED,
                            )
                        {
                            rewatch = true;
                        }
                        if e.mask.contains(EventMask::CREATE | EventMask::ISDIR)
                            || e.mask.contains(EventMask::MOVED_TO | EventMask::ISDIR)
                        {
                            if let (Some(parent), Some(name)) = (w.dirs.get(&e.wd), e.name) {
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
            if !new_dirs.is_empty() {
                for d in new_dirs {
                    add_tree(&mut w.inotify, &d, &mut w.dirs);
                }
                w.identity = identity(&w.dirs);
            }
        }
        // A root that was absent (never created, moved away) and is there now.
        if !w.dirs.values().any(|d| *d == w.root) && w.root.is_dir() {
            rewatch = true;
        }
        if rewatch {
            w.rewatch();
            changed = true;
        }
        if changed {
            pending = true;
        } else if !ready.events && pending {
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

    /// One wake-up within a second, then quiet.
    fn woken(rx: &mut mpsc::Receiver<()>, what: &str) {
        let start = Instant::now();
        while rx.try_recv().is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "no wake-up after {what}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
        while rx.try_recv().is_ok() {}
    }

    /// Found by the soak harness (agent/tests/soak.rs): a root moved away
    /// and replaced by another directory, or mounted over, changed what the
    /// agent should judge without an inotify event on the watched inodes,
    /// and SeccompProfilesReady stayed stale until the resync (300 s).
    #[test]
    fn a_replaced_or_mounted_over_root_is_watched_again() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("seccomp");
        std::fs::create_dir(&root).unwrap();
        let (tx, mut rx) = mpsc::channel(8);
        let _w = watch(&root, tx).unwrap();

        // Moved away: a wake-up (the profiles are gone from the path).
        std::fs::rename(&root, dir.path().join("old")).unwrap();
        woken(&mut rx, "the root was moved away");
        // Another directory takes its place: seen, and watched.
        std::fs::create_dir(&root).unwrap();
        woken(&mut rx, "a new root appeared");
        std::fs::write(root.join("p.json"), "{}").unwrap();
        woken(&mut rx, "a profile was written into the new root");
        // The old directory is not watched any more.
        std::fs::write(dir.path().join("old/q.json"), "{}").unwrap();
        std::thread::sleep(Duration::from_millis(400));
        assert!(rx.try_recv().is_err(), "woken by the old root");

        // Mounted over: needs root and a mount namespace of its own.
        let Some(_) = nodeproof_testkit::require(&[nodeproof_testkit::Need::Root]) else {
            return;
        };
        let over = dir.path().join("over");
        std::fs::create_dir(&over).unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let (root2, over2) = (root.clone(), over.clone());
        std::thread::spawn(move || {
            use std::ffi::CString;
            let c = |p: &Path| CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: plain syscalls on this thread's own (unshared) mount namespace.
            unsafe {
                assert_eq!(libc::unshare(libc::CLONE_NEWNS), 0);
                let slash = CString::new("/").unwrap();
                let flags = libc::MS_REC | libc::MS_PRIVATE;
                assert_eq!(
                    libc::mount(
                        std::ptr::null(),
                        slash.as_ptr(),
                        std::ptr::null(),
                        flags,
                        std::ptr::null()
                    ),
                    0
                );
            }
            let (tx, mut rx) = mpsc::channel(8);
            let _w = watch(&root2, tx).unwrap();
            std::thread::sleep(Duration::from_millis(100));
            // SAFETY: as above.
            let bound = unsafe {
                libc::mount(
                    c(&over2).as_ptr(),
                    c(&root2).as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                )
            };
            assert_eq!(bound, 0, "{}", std::io::Error::last_os_error());
            woken(&mut rx, "a directory was mounted over the root");
            std::fs::write(root2.join("covering.json"), "{}").unwrap();
            woken(&mut rx, "a profile was written into the mounted directory");
            // SAFETY: as above.
            assert_eq!(unsafe { libc::umount(c(&root2).as_ptr()) }, 0);
            woken(&mut rx, "the mount was removed");
            // A mount outside the tree (a node mounts every container's
            // rootfs and volumes) is no reason to judge the profiles again.
            let tmpfs = CString::new("tmpfs").unwrap();
            // SAFETY: as above.
            let mounted = unsafe {
                libc::mount(
                    tmpfs.as_ptr(),
                    c(&elsewhere).as_ptr(),
                    tmpfs.as_ptr(),
                    0,
                    std::ptr::null(),
                )
            };
            assert_eq!(mounted, 0, "{}", std::io::Error::last_os_error());
            std::thread::sleep(Duration::from_millis(400));
            assert!(rx.try_recv().is_err(), "woken by a mount outside the root");
            // SAFETY: as above.
            assert_eq!(unsafe { libc::umount(c(&elsewhere).as_ptr()) }, 0);
        })
        .join()
        .unwrap();
    }
}
