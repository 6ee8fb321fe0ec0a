//! containerd's own reading of a `Localhost` reference, before runc sees
//! anything: what happens at CreateContainer.
//!
//! containerd 1.6 (pkg/cri/server/container_create_linux.go,
//! `generateSeccompSpecOpts`) turns a Localhost `SecurityProfile` into
//! contrib/seccomp's `WithProfile(path)`: `os.ReadFile(path)`, then
//! `json.Unmarshal` into the runtime-spec `LinuxSeccomp`. `os.ReadFile`
//! follows symlinks and has no size limit; when it fails (no such file, a
//! dangling link, a link loop, a directory) CreateContainer fails with
//! `cannot load seccomp profile`, the kubelet reports CreateContainerError,
//! and no runc is ever run: nodeproof's `rejected`. (The splice oracle,
//! which puts bytes into config.json, cannot see any of this; the CRI
//! oracle in tests/src/cri does.)
//!
//! What a file holds is then decoded by the same Go decoder the rest of
//! nodeproof mirrors, on the profile alone (so Go's 10000-level nesting
//! limit counts from the profile's own top level), and containerd writes the
//! decoded struct back into the bundle's config.json: runc reads that
//! re-encoding, not the author's bytes.

use std::fs;
use std::io;
use std::path::Path;

use crate::compiler::Compiler;
use crate::diagnostic::{Code, Diagnostic};
use crate::lint::{lint_source, LintOptions, Outcome, ProfileReport, Runtime};
use crate::scan;

/// Why containerd's `os.ReadFile` of a reference fails for certain, whoever reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFailure {
    /// Nothing at the path (ENOENT).
    Missing,
    /// A symlink whose target does not exist (ENOENT through the link).
    DanglingSymlink,
    /// A symlink chain that never ends (ELOOP).
    SymlinkLoop,
    /// A directory (read(2) answers EISDIR).
    Directory,
}

impl ReadFailure {
    fn describe(self) -> &'static str {
        match self {
            ReadFailure::Missing => "does not exist",
            ReadFailure::DanglingSymlink => "is a symlink to nothing",
            ReadFailure::SymlinkLoop => "is a symlink loop",
            ReadFailure::Directory => "is a directory",
        }
    }
}

/// Why containerd cannot read `path`, when that does not depend on who
/// reads it. Permissions are not judged: containerd runs as root, so a file
/// nodeproof cannot read may well be readable to containerd (that stays
/// `unknown`). A FIFO is left out too: `os.ReadFile` blocks on it.
pub fn read_failure(path: &Path) -> Option<ReadFailure> {
    match fs::metadata(path) {
        Ok(m) if m.is_dir() => Some(ReadFailure::Directory),
        Ok(_) => None,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Some(ReadFailure::SymlinkLoop),
        Err(e) if e.kind() == io::ErrorKind::NotFound => match fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => Some(ReadFailure::DanglingSymlink),
            _ => Some(ReadFailure::Missing),
        },
        Err(_) => None,
    }
}

/// nodeproof's report for a pod's `Localhost` reference `path` under
/// `opts.runtime`: containerd's read failures are `rejected` (CreateContainer
/// fails); otherwise the file is read as [`scan`] reads any profile (a
/// symlink followed, capped) and linted.
pub fn lint_localhost(path: &Path, opts: &LintOptions, compiler: &dyn Compiler) -> ProfileReport {
    if let Some(report) = read_failure_report(path, opts) {
        return report;
    }
    let shown = path.to_string_lossy().into_owned();
    match scan::read_entry(path, None).contents {
        Ok(bytes) => lint_source(&shown, &bytes, opts, compiler),
        Err(diagnostic) => ProfileReport::unreadable(shown, diagnostic),
    }
}

/// The `rejected` report for a reference containerd cannot read for certain
/// ([`read_failure`]) under `opts.runtime`, if it is one. CRI-O is not
/// modelled here: such a path stays `unknown` for it.
pub fn read_failure_report(path: &Path, opts: &LintOptions) -> Option<ProfileReport> {
    if opts.runtime != Runtime::Containerd {
        return None;
    }
    let failure = read_failure(path)?;
    let mut report = ProfileReport::unreadable(
        path.to_string_lossy().into_owned(),
        Diagnostic::error(
            Code::IoError,
            "",
            format!(
                "{} {}: containerd cannot load it, so CreateContainer fails",
                path.display(),
                failure.describe()
            ),
        )
        .with_help("the kubelet reports CreateContainerError; put the profile file at this path"),
    );
    report.outcome = Outcome::Rejected;
    Some(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_failures_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("p.json"), "{}").unwrap();
        std::os::unix::fs::symlink("p.json", d.join("good")).unwrap();
        std::os::unix::fs::symlink("none.json", d.join("dangling")).unwrap();
        std::os::unix::fs::symlink("loop2", d.join("loop1")).unwrap();
        std::os::unix::fs::symlink("loop1", d.join("loop2")).unwrap();
        assert_eq!(read_failure(&d.join("p.json")), None);
        assert_eq!(read_failure(&d.join("good")), None);
        assert_eq!(
            read_failure(&d.join("none.json")),
            Some(ReadFailure::Missing)
        );
        assert_eq!(
            read_failure(&d.join("dangling")),
            Some(ReadFailure::DanglingSymlink)
        );
        assert_eq!(
            read_failure(&d.join("loop1")),
            Some(ReadFailure::SymlinkLoop)
        );
        assert_eq!(read_failure(d), Some(ReadFailure::Directory));
    }
}
