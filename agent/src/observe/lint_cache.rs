//! One lint per profile edit: the reports of the seccomp root's files, kept
//! by (file, lint options, contents), shared by everything that judges a
//! file. The profiles check lints the root after an edit; the pods' judge,
//! woken by that lint, finds the same file in the same mode here and does
//! not lint it again. A pod whose container runs in another mode (its own
//! noNewPrivileges or bounding set) is linted once in that mode, which is
//! another verdict, not a repeat.
//!
//! The contents are part of the key, so an edit is never answered from the
//! cache; a file gone from the root leaves it at the next scan
//! ([`LintCache::retain`]). Lints happen outside the lock, so a slow lint
//! holds up no other reader.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use nodeproof_seccomp::lint::{LintOptions, ProfileReport};

/// Lints made by every cache of this process: the agent's metric, which
/// would show a second cache linting what the shared one holds.
static LINTS_MADE: AtomicU64 = AtomicU64::new(0);

/// Lints made by this process through any [`LintCache`].
pub fn lints_made() -> u64 {
    LINTS_MADE.load(Ordering::Relaxed)
}

/// One file's report in one mode, for the contents it was made from.
struct Entry {
    opts: LintOptions,
    contents: Vec<u8>,
    report: Arc<ProfileReport>,
}

/// The shared reports. Cheap to share: hand out an `Arc`.
#[derive(Default)]
pub struct LintCache {
    files: Mutex<HashMap<PathBuf, Vec<Entry>>>,
    /// Lints made (not answered from the cache), for the metric.
    lints: AtomicU64,
}

impl LintCache {
    /// The report of `path` with `contents` in mode `opts`: from the cache
    /// when the same contents were linted so, else from `lint` (counted and
    /// kept). The report's `path` is `display`, whoever linted it first.
    pub fn report(
        &self,
        path: &Path,
        display: &str,
        contents: &[u8],
        opts: &LintOptions,
        lint: impl FnOnce() -> ProfileReport,
    ) -> ProfileReport {
        if let Some(hit) = self.cached(path, display, contents, opts) {
            return hit;
        }
        let report = Arc::new(lint());
        self.count_lints(1);
        self.insert(path, contents, opts, report.clone());
        with_path(&report, display)
    }

    /// The cached report (naming `display`), if these contents were linted
    /// in this mode.
    pub fn cached(
        &self,
        path: &Path,
        display: &str,
        contents: &[u8],
        opts: &LintOptions,
    ) -> Option<ProfileReport> {
        let files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        files
            .get(path)?
            .iter()
            .find(|e| e.opts == *opts && e.contents == contents)
            .map(|e| with_path(&e.report, display))
    }

    /// Keeps `report` as the one for `path` in mode `opts` (replacing the
    /// mode's report of older contents).
    pub fn insert(
        &self,
        path: &Path,
        contents: &[u8],
        opts: &LintOptions,
        report: Arc<ProfileReport>,
    ) {
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        let modes = files.entry(path.to_path_buf()).or_default();
        modes.retain(|e| e.opts != *opts);
        modes.push(Entry {
            opts: opts.clone(),
            contents: contents.to_vec(),
            report,
        });
    }

    /// Counts a lint made outside [`LintCache::report`] (a batch linted in
    /// parallel and then [`LintCache::insert`]ed).
    pub fn count_lints(&self, n: u64) {
        self.lints.fetch_add(n, Ordering::Relaxed);
        LINTS_MADE.fetch_add(n, Ordering::Relaxed);
    }

    /// Forgets the files not in `present` (the root's files at a scan).
    pub fn retain(&self, present: &HashSet<PathBuf>) {
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        files.retain(|path, _| present.contains(path));
    }

    /// Lints made since the start.
    pub fn lints(&self) -> u64 {
        self.lints.load(Ordering::Relaxed)
    }

    /// Files with at least one report kept.
    pub fn files(&self) -> usize {
        self.files.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

fn with_path(report: &ProfileReport, display: &str) -> ProfileReport {
    let mut r = report.clone();
    if r.path != display {
        r.path = display.to_string();
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeproof_seccomp::diagnostic::{Code, Diagnostic, Severity};

    fn report(path: &str) -> ProfileReport {
        ProfileReport::not_a_profile(
            path.to_string(),
            Diagnostic::new(Code::NotAProfile, Severity::Note, "", "test"),
        )
    }

    #[test]
    fn the_same_contents_in_the_same_mode_are_linted_once() {
        let cache = LintCache::default();
        let opts = LintOptions::default();
        let p = Path::new("/root/a.json");
        let mut made = 0;
        for display in ["/root/a.json", "/root//a.json"] {
            let r = cache.report(p, display, b"{}", &opts, || {
                made += 1;
                report("/root/a.json")
            });
            assert_eq!(r.path, display, "the report names the caller's path");
        }
        assert_eq!(made, 1);
        assert_eq!(cache.lints(), 1);
    }

    #[test]
    fn an_edit_or_another_mode_is_linted_again_and_an_edit_replaces_its_mode() {
        let cache = LintCache::default();
        let p = Path::new("/root/a.json");
        let nnp = LintOptions {
            no_new_privileges: true,
            ..LintOptions::default()
        };
        cache.report(p, "a", b"{}", &LintOptions::default(), || report("a"));
        cache.report(p, "a", b"{}", &nnp, || report("a"));
        cache.report(p, "a", b"{ }", &LintOptions::default(), || report("a"));
        assert_eq!(cache.lints(), 3);
        assert!(cache
            .cached(p, "a", b"{}", &LintOptions::default())
            .is_none());
        assert!(cache
            .cached(p, "a", b"{ }", &LintOptions::default())
            .is_some());
        assert!(cache.cached(p, "a", b"{}", &nnp).is_some());
    }

    #[test]
    fn files_gone_from_the_root_are_forgotten() {
        let cache = LintCache::default();
        let opts = LintOptions::default();
        for f in ["/r/a", "/r/b"] {
            cache.report(Path::new(f), f, b"x", &opts, || report(f));
        }
        cache.retain(&HashSet::from([PathBuf::from("/r/b")]));
        assert_eq!(cache.files(), 1);
        assert!(cache
            .cached(Path::new("/r/a"), "/r/a", b"x", &opts)
            .is_none());
    }
}
