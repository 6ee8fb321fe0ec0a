//! Whether the fuzz smoke must run again: a digest of everything the fuzz
//! targets are built from, compared with the one recorded when the smoke
//! last passed (fuzz/smoke-passed, committed with the change it checked).
//!
//! Why: building the eight targets (cargo-fuzz's instrumented build of
//! kube, k8s-openapi, tokio and the agent, in a target directory of its own)
//! took 370 to 390 s of CI's 1,540 s on the 2-core machine, on every clean
//! clone, also for commits that touched only tests, docs or xtask. The
//! targets link the workspace crates they depend on; a change to any of
//! their sources, to fuzz/ (targets, seeds, lock file), to the toolchain or
//! to the smoke's own settings changes the digest and the smoke runs.
//!
//! The digest: git's blob id of each file (`git hash-object`), tracked or
//! untracked-but-not-ignored, under fuzz/ and the package directory of each
//! workspace crate the targets reach through path dependencies, leaving out
//! each package's tests/, benches/ and examples/ (never linked into a
//! library) and the record itself; then `rustc -vV`, cargo-fuzz's version and
//! the smoke's arguments; all hashed again as one blob.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// Where the digest of the last passing smoke is kept, relative to the root.
pub const RECORD: &str = "fuzz/smoke-passed";

/// The crates the fuzz targets are built from: fuzz/'s path dependencies
/// and theirs, as package directories relative to `root`.
pub fn linked_packages(root: &Path) -> Result<BTreeSet<PathBuf>> {
    // Both read through xtask's one `cargo metadata` (of this repository).
    let fuzz = crate::metadata("fuzz/Cargo.toml")?;
    let workspace = crate::metadata("Cargo.toml")?;
    let path_deps = |package: &serde_json::Value| -> Vec<PathBuf> {
        package["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            // Dev-dependencies are not linked into a target.
            .filter(|d| d["kind"].is_null() || d["kind"] == "build")
            .filter_map(|d| d["path"].as_str().map(PathBuf::from))
            .collect()
    };
    let dir_of = |package: &serde_json::Value| -> Option<PathBuf> {
        Path::new(package["manifest_path"].as_str()?)
            .parent()
            .map(Path::to_path_buf)
    };
    let mut todo: Vec<PathBuf> = fuzz["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(path_deps)
        .collect();
    let mut seen = BTreeSet::new();
    while let Some(dir) = todo.pop() {
        let dir = dir.canonicalize().unwrap_or(dir);
        if !seen.insert(dir.clone()) {
            continue;
        }
        let package = workspace["packages"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| dir_of(p).is_some_and(|d| d.canonicalize().unwrap_or(d) == dir));
        if let Some(p) = package {
            todo.extend(path_deps(p));
        }
    }
    let root = root.canonicalize().context("the repository's root")?;
    Ok(seen
        .into_iter()
        .filter_map(|d| d.strip_prefix(&root).ok().map(Path::to_path_buf))
        .chain([PathBuf::from("fuzz")])
        .collect())
}

/// Whether `path` (relative to the root) goes into the targets' build.
pub fn is_input(path: &str, packages: &BTreeSet<PathBuf>) -> bool {
    if path == RECORD {
        return false;
    }
    packages.iter().any(|p| {
        let Some(p) = p.to_str() else { return false };
        let Some(rest) = path.strip_prefix(p).and_then(|r| r.strip_prefix('/')) else {
            return false;
        };
        let first = rest.split('/').next().unwrap_or("");
        // fuzz/ is the targets' own package: all of it counts.
        p == "fuzz" || !matches!(first, "tests" | "benches" | "examples")
    })
}

/// The digest of the smoke's inputs; `settings` stands for what else
/// shapes the run (cargo-fuzz's version, the smoke's arguments).
pub fn digest(root: &Path, settings: &str) -> Result<String> {
    let packages = linked_packages(root)?;
    let git = |args: &[&str], input: Option<&[u8]>| -> Result<String> {
        let mut child = Command::new("git")
            .args(args)
            .current_dir(root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("running git {}", args.join(" ")))?;
        let mut stdin = child.stdin.take().context("git's stdin")?;
        let input = input.unwrap_or_default().to_vec();
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        let out = child.wait_with_output()?;
        writer.join().ok();
        if !out.status.success() {
            bail!("git {} failed", args.join(" "));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let listed = git(
        &[
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ],
        None,
    )?;
    let files: Vec<&str> = listed
        .split('\0')
        .filter(|p| !p.is_empty() && is_input(p, &packages))
        // A tracked file deleted in the working tree is not an input.
        .filter(|p| root.join(p).is_file())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if files.is_empty() {
        bail!(
            "no input of the fuzz targets found under {}",
            root.display()
        );
    }
    let ids = git(
        &["hash-object", "--stdin-paths"],
        Some(files.join("\n").as_bytes()),
    )?;
    let ids: Vec<&str> = ids.lines().collect();
    if ids.len() != files.len() {
        bail!(
            "git hash-object gave {} ids for {} files",
            ids.len(),
            files.len()
        );
    }
    let rustc = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .arg("-vV")
        .output()
        .context("running rustc -vV")?;
    let mut manifest = String::from_utf8_lossy(&rustc.stdout).into_owned();
    manifest.push_str(settings);
    manifest.push('\n');
    for (f, id) in files.iter().zip(&ids) {
        manifest.push_str(&format!("{id} {f}\n"));
    }
    Ok(git(&["hash-object", "--stdin"], Some(manifest.as_bytes()))?
        .trim()
        .to_string())
}

/// The digest recorded by the last passing smoke, if any.
pub fn recorded(root: &Path) -> Option<String> {
    let text = std::fs::read_to_string(root.join(RECORD)).ok()?;
    text.lines()
        .find(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.trim().to_string())
}

/// Writes the record after a passing smoke; `summary` is one line per target.
pub fn record(root: &Path, digest: &str, summary: &[String]) -> Result<()> {
    let mut text = String::from(
        "# The fuzz smoke passed on inputs with this digest (xtask/src/smoke_record.rs).\n\
         # `cargo xtask test` skips the smoke while the digest is unchanged: commit this file\n\
         # with the change it checked.\n",
    );
    for line in summary {
        text.push_str(&format!("# {line}\n"));
    }
    text.push_str(digest);
    text.push('\n');
    std::fs::write(root.join(RECORD), text).with_context(|| format!("writing {RECORD}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_the_linked_packages_less_their_tests_and_the_record() {
        let packages: BTreeSet<PathBuf> = ["agent", "crates/seccomp", "fuzz"]
            .iter()
            .map(PathBuf::from)
            .collect();
        for (path, want) in [
            ("agent/src/main.rs", true),
            ("agent/Cargo.toml", true),
            ("agent/build.rs", true),
            ("agent/tests/soak.rs", false),
            ("agent/benches/x.rs", false),
            ("agent/examples/lint_stages.rs", false),
            ("agent/src/tests/x.rs", true),
            ("crates/seccomp/src/lint.rs", true),
            ("crates/seccompx/src/lib.rs", false),
            ("crates/trace/src/lib.rs", false),
            ("fuzz/fuzz_targets/config.rs", true),
            ("fuzz/seeds/config/a", true),
            ("fuzz/smoke-passed", false),
            ("docs/README.md", false),
            ("xtask/src/main.rs", false),
        ] {
            assert_eq!(is_input(path, &packages), want, "{path}");
        }
    }

    #[test]
    fn the_digest_follows_the_inputs_and_the_settings_only() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let packages = linked_packages(root).unwrap();
        // What the targets link, through the agent: every library crate.
        for p in [
            "agent",
            "crates/seccomp",
            "crates/bpfgen",
            "crates/report",
            "crates/apiclient",
            "fuzz",
        ] {
            assert!(packages.contains(Path::new(p)), "{p} in {packages:?}");
        }
        assert!(!packages.contains(Path::new("xtask")));
        assert!(
            !packages.contains(Path::new("tests")),
            "nodeproof-e2e is not linked"
        );
        assert!(
            !packages.contains(Path::new("crates/testkit")),
            "a dev-dependency is not linked: {packages:?}"
        );
        let a = digest(root, "smoke A").unwrap();
        assert_eq!(a.len(), 40, "{a}");
        assert_eq!(digest(root, "smoke A").unwrap(), a);
        assert_ne!(digest(root, "smoke B").unwrap(), a);
    }

    #[test]
    fn the_record_reads_back_past_its_comments() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("fuzz")).unwrap();
        assert_eq!(recorded(dir.path()), None);
        record(dir.path(), "abc123", &["config: 10000 executions".into()]).unwrap();
        assert_eq!(recorded(dir.path()).as_deref(), Some("abc123"));
    }
}
