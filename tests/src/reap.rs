//! Ends what an oracle run started, whatever state the runtime left it in.
//!
//! `runc delete -f ID` kills and removes a container it has state for. A run
//! that `timeout` killed while runc was still creating the container leaves
//! no state (or state already deleted), and its `runc init` lives on, asleep
//! under the profile's filter, reparented to PID 1, in the container's
//! cgroup: seen after a fresh-clone `cargo xtask test`, two such processes a
//! run, in cgroups `nodeproof-<pid>-<n>-<hex>` of every v1 hierarchy. So
//! after every run the oracle kills each process of the container's cgroup,
//! in each hierarchy it exists in, and removes the cgroup.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The cgroup v1 hierarchies and the v2 tree under `root` (`/sys/fs/cgroup`):
/// every directory that holds `cgroup.procs` at its top.
fn hierarchies(root: &Path) -> Vec<PathBuf> {
    if root.join("cgroup.procs").exists() {
        return vec![root.to_path_buf()];
    }
    std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("cgroup.procs").exists())
        .collect()
}

/// The pids in `dir` and every cgroup below it.
fn pids_below(dir: &Path, out: &mut Vec<i32>) {
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            pids_below(&e.path(), out);
        }
    }
}

/// Removes `dir` and the cgroups below it, deepest first.
fn remove_tree(dir: &Path) -> bool {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&e.path());
        }
    }
    std::fs::remove_dir(dir).is_ok() || !dir.exists()
}

/// Kills every process of the cgroup `path` (relative to each hierarchy,
/// e.g. `/nodeproof-1-2-ab`) under `root` and removes it; the processes
/// still there after 5 s, if any.
pub fn reap_cgroup(root: &Path, path: &str) -> Vec<i32> {
    let rel = path.trim_start_matches('/');
    if rel.is_empty() {
        return Vec::new();
    }
    let dirs: Vec<PathBuf> = hierarchies(root)
        .into_iter()
        .map(|h| h.join(rel))
        .filter(|d| d.is_dir())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut pids = Vec::new();
        for d in &dirs {
            pids_below(d, &mut pids);
        }
        pids.sort_unstable();
        pids.dedup();
        for &pid in &pids {
            // SAFETY: a plain signal to a pid read from the container's cgroup.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        // A cgroup is removable once its processes are gone.
        let removed = dirs.iter().all(|d| remove_tree(d));
        if (pids.is_empty() && removed) || Instant::now() >= deadline {
            return pids;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake v1 layout: two hierarchies, the container's cgroup in both,
    /// with a child cgroup; no pids (a fake procs file names none alive).
    #[test]
    fn removes_the_cgroup_in_every_hierarchy() {
        let root = tempfile::tempdir().unwrap();
        for h in ["pids", "memory"] {
            let top = root.path().join(h);
            std::fs::create_dir_all(top.join("nodeproof-1-2-ab/sub")).unwrap();
            std::fs::write(top.join("cgroup.procs"), "").unwrap();
            std::fs::write(top.join("nodeproof-1-2-ab/cgroup.procs"), "").unwrap();
        }
        // rmdir of a real cgroup works with its control files in place; a
        // plain directory needs them gone first.
        for h in ["pids", "memory"] {
            std::fs::remove_file(root.path().join(h).join("nodeproof-1-2-ab/cgroup.procs"))
                .unwrap();
        }
        assert!(reap_cgroup(root.path(), "/nodeproof-1-2-ab").is_empty());
        for h in ["pids", "memory"] {
            assert!(
                !root.path().join(h).join("nodeproof-1-2-ab").exists(),
                "{h}"
            );
            assert!(root.path().join(h).exists());
        }
        assert!(reap_cgroup(root.path(), "/").is_empty(), "never the root");
    }

    /// For real: a process put in a fresh cgroup of this machine (every v1
    /// hierarchy or the v2 tree) is killed and the cgroup removed.
    #[test]
    fn a_process_left_in_a_cgroup_is_killed_and_its_cgroup_removed() {
        let Some(_) = nodeproof_testkit::require(&[nodeproof_testkit::Need::Root]) else {
            return;
        };
        let root = Path::new("/sys/fs/cgroup");
        let name = format!("nodeproof-reap-test-{}", std::process::id());
        let mut child = std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .unwrap();
        let mut joined = 0;
        for h in hierarchies(root) {
            let dir = h.join(&name);
            if std::fs::create_dir(&dir).is_ok()
                && std::fs::write(dir.join("cgroup.procs"), child.id().to_string()).is_ok()
            {
                joined += 1;
            }
        }
        assert!(
            joined > 0,
            "no writable cgroup hierarchy under {}",
            root.display()
        );
        assert!(reap_cgroup(root, &format!("/{name}")).is_empty());
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        for h in hierarchies(root) {
            assert!(!h.join(&name).exists(), "{}", h.display());
        }
    }
}
