//! Counts of processes that have exited, kept in user space so that the
//! in-kernel count map holds only live processes.
//!
//! The kernel map (`np_counts`) is keyed by process, syscall and outcome and
//! holds 16,384 keys. Nothing deletes a key when its process exits, so on a
//! node where short-lived processes are denied (a shell loop, a crash-looping
//! container) the map fills within hours; from then on new denials are only
//! counted as `lost_counts`, and every read copies every row, up to 16,384
//! (the daemon's memory grows with the processes ever denied). A [`Pump`] that
//! retires moves each gone process's final count here, folded into one row
//! per cgroup, attribution, comm, syscall and outcome with `pid` 0, and
//! deletes its key.
//!
//! Sums are kept: in one read, a count is either still in the kernel or
//! already here, never both. A reader that sums rows by everything but the
//! pid (as the daemon's denial aggregator and metrics do) sees totals that
//! only grow.
//!
//! [`Pump`]: crate::Pump

use std::collections::HashMap;

use crate::summary::SummaryRow;
use crate::Action;

/// Folded rows kept at most: as many as the kernel map has keys. Past it,
/// the rows least recently added to are dropped, an eighth at a time; a
/// reader then sees their keys vanish (not shrink), as when a pod goes.
pub const RETIRED_ROWS: usize = 16384;

/// Everything a folded row is identified by: a row's fields but the pid and
/// the count. A reader that sums rows by this key (the daemon's denial
/// aggregator does) sees totals that only grow.
pub type FoldKey = (
    u64,
    Option<String>,
    Option<String>,
    String,
    i32,
    &'static str,
    Action,
    i32,
);

pub fn fold_key(r: &SummaryRow) -> FoldKey {
    (
        r.cgroup_id,
        r.container_id.clone(),
        r.pod_uid.clone(),
        r.comm.clone(),
        r.nr,
        r.arch,
        r.action,
        r.errno,
    )
}

/// The final counts of exited processes, folded and bounded.
pub struct Retired {
    rows: HashMap<FoldKey, (SummaryRow, u64)>,
    tick: u64,
    cap: usize,
}

impl Default for Retired {
    fn default() -> Self {
        Self::with_capacity(RETIRED_ROWS)
    }
}

impl Retired {
    pub fn with_capacity(cap: usize) -> Self {
        Retired {
            rows: HashMap::new(),
            tick: 0,
            cap: cap.max(1),
        }
    }

    /// Adds an exited process's final row (its attribution resolved while
    /// the process's cgroup was still known).
    pub fn add(&mut self, row: SummaryRow) {
        self.tick += 1;
        let key = fold_key(&row);
        if let Some((kept, used)) = self.rows.get_mut(&key) {
            kept.count += row.count;
            *used = self.tick;
            return;
        }
        if self.rows.len() >= self.cap {
            let mut used: Vec<u64> = self.rows.values().map(|(_, u)| *u).collect();
            let drop = (self.cap / 8).max(1);
            let (_, cut, _) = used.select_nth_unstable(drop - 1);
            let cut = *cut;
            self.rows.retain(|_, (_, u)| *u > cut);
        }
        self.rows
            .insert(key, (SummaryRow { pid: 0, ..row }, self.tick));
    }

    /// The folded rows (pid 0), in no particular order.
    pub fn rows(&self) -> impl Iterator<Item = &SummaryRow> {
        self.rows.values().map(|(r, _)| r)
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// Whether process `pid` of this PID namespace is gone (`kill(pid, 0)`
/// says ESRCH; EPERM means it exists). The kernel's keys carry host pids, so
/// this answers for them only in the host's PID namespace: see
/// [`in_host_pid_namespace`].
pub fn process_exited(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// Whether this process runs in the initial PID namespace, where the pids
/// the eBPF programs record (`bpf_get_current_pid_tgid`, host pids) are its
/// own: `NSpid:` in /proc/self/status lists one pid per namespace level.
pub fn in_host_pid_namespace() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| nspid_levels(&s) == Some(1))
}

fn nspid_levels(status: &str) -> Option<usize> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|v| v.split_whitespace().count())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pid: u32, comm: &str, nr: i32, count: u64) -> SummaryRow {
        SummaryRow {
            pid,
            comm: comm.into(),
            syscall: "x".into(),
            nr,
            arch: "x86_64",
            action: Action::Errno,
            errno: 1,
            count,
            cgroup_id: 7,
            cgroup: None,
            container_id: Some("c1".into()),
            container: None,
            pod_uid: Some("u1".into()),
            pod: None,
            change: None,
        }
    }

    #[test]
    fn processes_fold_into_one_row_without_their_pid() {
        let mut r = Retired::default();
        r.add(row(10, "uname", 63, 2));
        r.add(row(11, "uname", 63, 3));
        r.add(row(12, "uname", 99, 1));
        let mut rows: Vec<_> = r.rows().cloned().collect();
        rows.sort_by_key(|r| r.nr);
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].pid, rows[0].nr, rows[0].count), (0, 63, 5));
        assert_eq!((rows[1].pid, rows[1].nr, rows[1].count), (0, 99, 1));
    }

    #[test]
    fn attribution_stays_apart() {
        let mut r = Retired::default();
        r.add(row(10, "uname", 63, 2));
        r.add(SummaryRow {
            pod_uid: Some("u2".into()),
            ..row(11, "uname", 63, 3)
        });
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn bounded_dropping_the_least_recently_added() {
        let mut r = Retired::with_capacity(16);
        for nr in 0..16 {
            r.add(row(1, "a", nr, 1));
        }
        // Row 0 is added to again: the oldest are now 1 and 2.
        r.add(row(2, "a", 0, 1));
        r.add(row(3, "a", 100, 1));
        assert!(r.len() <= 16, "{}", r.len());
        let nrs: Vec<i32> = r.rows().map(|r| r.nr).collect();
        assert!(nrs.contains(&0) && nrs.contains(&100), "{nrs:?}");
        assert!(!nrs.contains(&1) && !nrs.contains(&2), "{nrs:?}");
        for i in 0..10_000 {
            r.add(row(4, "a", 1000 + i, 1));
        }
        assert!(r.len() <= 16);
    }

    #[test]
    fn nspid_levels_counts_namespaces() {
        assert_eq!(nspid_levels("Name:\tx\nNSpid:\t4242\n"), Some(1));
        assert_eq!(nspid_levels("NSpid:\t4242\t17\n"), Some(2));
        assert_eq!(nspid_levels("Name:\tx\n"), None);
    }

    #[test]
    fn this_process_and_a_reaped_child() {
        assert!(!process_exited(std::process::id()));
        assert!(!process_exited(0));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(process_exited(pid));
    }
}
