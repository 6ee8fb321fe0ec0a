//! The profiles' versions at the daemon's edge: fed from the profiles
//! check's read of the seccomp root (no second reader), compiled in the
//! node's mode, and kept in the state directory across restarts
//! (`profile-versions.json`, written whole to a temporary file and renamed
//! over the old one, so a crash leaves the old or the new, never half). A
//! file that cannot be read or decoded is one warning and an empty start.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use nodeproof_bpfgen::Native;
use nodeproof_seccomp::cbpf::SockFilter;
use nodeproof_seccomp::lint::{loaded_program, LintOptions};
use nodeproof_seccomp::scan::ProfileFile;

use super::subsystem::Subsystem;
use crate::config::Config;
use crate::judge::versions::{self, ProfileVersions, VersionChange};

/// The state file's name in the state directory.
pub const STATE_FILE: &str = "profile-versions.json";

#[derive(Debug, thiserror::Error)]
pub enum VersionsFileError {
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Where the versions are kept: `daemon.state-dir`, else systemd's
/// `$STATE_DIRECTORY` (the first, when the unit names several); `None`:
/// nowhere (kept in memory).
pub fn state_file(config: &Config) -> Option<PathBuf> {
    Some(config.daemon.state_dir()?.join(STATE_FILE))
}

/// The versions `path` kept; empty when there is none yet, and (with one
/// warning) when it cannot be read or is not ours.
pub fn load(path: &Path) -> ProfileVersions {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return ProfileVersions::default(),
        Err(e) => {
            tracing::warn!(nodeproof_check = Subsystem::Profiles.as_str(), path = %path.display(), error = %e, "profile versions unreadable; starting without them");
            return ProfileVersions::default();
        }
    };
    match ProfileVersions::decode(&bytes) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(nodeproof_check = Subsystem::Profiles.as_str(), path = %path.display(), error = %super::error_chain(&e), "profile versions file is corrupt; starting without them");
            ProfileVersions::default()
        }
    }
}

/// Writes `versions` to `path`: a temporary file beside it, synced, then
/// renamed over it.
pub fn save(path: &Path, versions: &ProfileVersions) -> Result<(), VersionsFileError> {
    let err = |source| VersionsFileError::Write {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension(format!("json.tmp.{}", std::process::id()));
    let written = (|| {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&versions.encode())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(err)
}

/// The root's files as the profiles check read them, into `versions`: a
/// new version for each file whose contents changed (its program compiled
/// in `opts`' mode), files gone forgotten. Returns the changes.
pub fn observe_files(
    versions: &mut ProfileVersions,
    root: &Path,
    files: &[ProfileFile],
    opts: &LintOptions,
    now: SystemTime,
) -> Vec<VersionChange> {
    let mut present = std::collections::HashSet::new();
    let mut changes = Vec::new();
    // Copies of one profile (a file per team) compile once.
    let mut compiled: std::collections::HashMap<String, Option<Vec<SockFilter>>> =
        std::collections::HashMap::new();
    for f in files {
        let Ok(bytes) = &f.contents else {
            continue;
        };
        let Ok(relative) = f.path.strip_prefix(root) else {
            continue;
        };
        let key = versions::key(relative);
        // A stat, not a second read: the contents are the scan's.
        let mtime = std::fs::metadata(&f.path).and_then(|m| m.modified()).ok();
        if let Some(c) = versions.observe(&key, bytes, mtime, now, || {
            compiled
                .entry(versions::sha256_hex(bytes))
                .or_insert_with(|| loaded_program(bytes, opts, &Native).map(|(_, p)| p))
                .clone()
        }) {
            changes.push(c);
        }
        present.insert(key);
    }
    versions.retain(&present);
    versions.fit_programs();
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_versions_load_back_and_a_corrupt_file_is_an_empty_start() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("state").join(STATE_FILE);
        assert!(load(&file).is_empty(), "no file yet");
        let root = dir.path().join("seccomp");
        std::fs::create_dir_all(root.join("profiles")).unwrap();
        std::fs::write(
            root.join("profiles/a.json"),
            br#"{"defaultAction":"SCMP_ACT_ALLOW"}"#,
        )
        .unwrap();
        let files = nodeproof_seccomp::scan::collect(std::slice::from_ref(&root));
        let mut v = ProfileVersions::default();
        let now = SystemTime::now();
        let changes = observe_files(&mut v, &root, &files, &LintOptions::default(), now);
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].path, "profiles/a.json");
        assert!(v.latest("profiles/a.json").unwrap().program.is_some());
        save(&file, &v).unwrap();
        let back = load(&file);
        assert_eq!(back, ProfileVersions::decode(&v.encode()).unwrap());
        assert_eq!(
            back.versions("profiles/a.json"),
            v.versions("profiles/a.json")
        );
        assert_eq!(
            std::fs::read_dir(file.parent().unwrap()).unwrap().count(),
            1,
            "no temporary file left"
        );
        std::fs::write(&file, b"{\"format\":1,\"profiles\":{\"x\":[{").unwrap();
        assert!(load(&file).is_empty());
        // A directory where the file should be: unreadable, not a crash.
        std::fs::remove_file(&file).unwrap();
        std::fs::create_dir(&file).unwrap();
        assert!(load(&file).is_empty());
        assert!(save(&file, &v).is_err());
    }
}
