//! A throwaway cgroup for kernel tests (shared by trace and pods tests):
//! created under a mounted hierarchy, removed leaf first on drop.
#![allow(dead_code)] // each test crate uses part of it

use std::sync::atomic::{AtomicU32, Ordering};

/// A test cgroup under a mounted hierarchy, removed (leaf first) on drop.
pub struct CgroupDir {
    pub top: std::path::PathBuf,
    pub leaf: std::path::PathBuf,
    pub procs: std::path::PathBuf,
    pub id: u64,
}

impl CgroupDir {
    pub fn create(hierarchy: &str) -> Option<Self> {
        Self::create_at(hierarchy, "leaf")
    }

    /// `hierarchy` is tried under /sys/fs/cgroup (hybrid hosts) and then the
    /// mount itself (unified hosts).
    pub fn create_at(hierarchy: &str, sub: &str) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let base = [
            format!("/sys/fs/cgroup/{hierarchy}"),
            "/sys/fs/cgroup".to_string(),
        ]
        .into_iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.join("cgroup.controllers").exists())?;
        static N: AtomicU32 = AtomicU32::new(0);
        let top = base.join(format!(
            "nodeproof-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let leaf = top.join(sub);
        std::fs::create_dir_all(&leaf).ok()?;
        let id = std::fs::metadata(&leaf).ok()?.ino();
        Some(Self {
            procs: leaf.join("cgroup.procs"),
            top,
            leaf,
            id,
        })
    }
}

impl Drop for CgroupDir {
    fn drop(&mut self) {
        let mut p = self.leaf.clone();
        while p.starts_with(&self.top) {
            let _ = std::fs::remove_dir(&p);
            if !p.pop() {
                break;
            }
        }
    }
}
