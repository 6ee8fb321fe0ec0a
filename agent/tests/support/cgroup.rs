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
            remove_cgroup(&p);
            if !p.pop() {
                break;
            }
        }
    }
}

/// `rmdir` of a cgroup, retried while the kernel answers EBUSY: a cgroup
/// whose last process has just been reaped can still be populated for a
/// moment (its tasks' exit is finished asynchronously; cgroup v2's
/// `cgroup.events` says `populated 0` once it is), and a single try left
/// empty `nodeproof-test-*` cgroups behind after a suite run.
fn remove_cgroup(p: &std::path::Path) {
    for _ in 0..100 {
        match std::fs::remove_dir(p) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            _ => return,
        }
    }
    eprintln!("test cgroup {} still busy after 2 s; left", p.display());
}

/// A cgroup laid out as the kubelet's cgroupfs driver does
/// (`kubepods/burstable/pod<uid>/<container id>`), when this process may
/// trace (CAP_BPF + CAP_PERFMON) and create cgroups; else `None`, the
/// calling test skipped (or failed, under NODEPROOF_REQUIRE=1) by `require`.
pub fn traceable_kubepods(uid: &str, container_id: &str) -> Option<CgroupDir> {
    use nodeproof_testkit::{require, Need, TRACING};
    require(&[TRACING, Need::Cgroup2])?;
    let cg = CgroupDir::create_at(
        "unified",
        &format!("kubepods/burstable/pod{uid}/{container_id}"),
    );
    Some(cg.expect("Need::Cgroup2 holds, yet the test cgroup could not be made"))
}

/// Forks a child that joins the cgroup of `procs` (its cgroup.procs file),
/// runs `work` and `_exit`s. Returns its pid once it exited; panics unless
/// it exited 0 (3: it could not join the cgroup).
pub fn run_in(procs: &std::path::Path, work: impl FnOnce()) -> u32 {
    // SAFETY: the child writes one file, runs `work` (raw syscalls) and _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let ok = std::fs::write(procs, "0").is_ok();
        work();
        unsafe { libc::_exit(if ok { 0 } else { 3 }) };
    }
    let mut status = 0;
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status}"
    );
    pid as u32
}

/// Forks a child that joins `cg`, names itself `comm`, loads a filter that
/// denies `mkdir` with EPERM and calls it `n` times. Returns its pid once it
/// exited; panics unless it exited 0 (3: it could not join the cgroup).
pub fn deny_mkdir_in(cg: &CgroupDir, comm: &std::ffi::CStr, n: usize) -> u32 {
    deny_in(cg, comm, &["mkdir"], "mkdir", n)
}

/// [`deny_mkdir_in`] with a filter that denies each of `denied` with EPERM
/// (as a profile listing them with `SCMP_ACT_ERRNO` does) and `n` calls of
/// `call` (`mkdir` or `rmdir`: a path, then a mode that rmdir ignores).
pub fn deny_in(
    cg: &CgroupDir,
    comm: &std::ffi::CStr,
    denied: &[&str],
    call: &str,
    n: usize,
) -> u32 {
    use libseccomp::{ScmpAction, ScmpFilterContext, ScmpSyscall};
    let nr = i32::from(ScmpSyscall::from_name(call).unwrap());
    let mut f = ScmpFilterContext::new(ScmpAction::Allow).unwrap();
    for name in denied {
        f.add_rule(
            ScmpAction::Errno(libc::EPERM),
            ScmpSyscall::from_name(name).unwrap(),
        )
        .unwrap();
    }
    run_in(&cg.procs, || {
        // SAFETY: a process name, then raw syscalls, in the forked child.
        unsafe { libc::prctl(libc::PR_SET_NAME, comm.as_ptr()) };
        f.load().unwrap();
        for _ in 0..n {
            unsafe {
                libc::syscall(
                    libc::c_long::from(nr),
                    c"/nonexistent-nodeproof/x".as_ptr(),
                    0o755,
                )
            };
        }
    })
}
