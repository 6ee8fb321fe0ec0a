//! Debian packages for tests, fetched without touching the machine: `apt-get
//! download` through a private apt configuration (its own sources list, lists
//! and cache under a directory the caller names, usually under `target/`; the
//! machine's keyring), unpacked with `dpkg-deb -x`. Nothing is installed and
//! no maintainer script runs. Used for the tracer's kernel matrix (a suite's
//! cloud kernel) and for the OCI runtimes of another suite (trixie's crun and runc).
//! The mirror is the machine's own ([`sources::mirror`]).

pub mod sources;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub use sources::{mirror, Mirror, MirrorError};
/// The executables this crate runs.
pub const TOOLS: &[&str] = &["apt-get", "apt-cache", "dpkg-deb"];

#[derive(Debug, thiserror::Error)]
pub enum DebError {
    #[error("running {tool}")]
    Spawn {
        tool: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{tool} failed ({status}): {stderr}")]
    Tool {
        tool: &'static str,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("{path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("apt-get download {package} left no {package}_*.deb in {dir}")]
    NoDeb { package: String, dir: PathBuf },
    #[error(transparent)]
    Mirror(#[from] MirrorError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DebError + '_ {
    move |source| DebError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Runs a host tool to completion; its stdout on success.
pub fn run(tool: &'static str, cmd: &mut Command) -> Result<Vec<u8>, DebError> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|source| DebError::Spawn { tool, source })?;
    if !out.status.success() {
        return Err(DebError::Tool {
            tool,
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(out.stdout)
}

/// apt with its own sources list, lists and cache under `dir/apt`: one suite
/// (`main` only), the machine's keyring, the machine's apt state untouched.
pub struct PrivateApt {
    root: PathBuf,
}

impl PrivateApt {
    /// Sets up `dir/apt` for `suite` (a Debian codename such as `trixie`)
    /// from the machine's mirror ([`mirror`]).
    pub fn new(dir: &Path, suite: &str) -> Result<Self, DebError> {
        let mirror = mirror()?.uri;
        let root = dir.join("apt");
        for sub in ["lists/partial", "cache/archives/partial"] {
            let d = root.join(sub);
            fs::create_dir_all(&d).map_err(io(&d))?;
        }
        let list = root.join("sources.list");
        fs::write(&list, format!("deb {mirror} {suite} main\n")).map_err(io(&list))?;
        Ok(Self { root })
    }

    /// `tool` (apt-get or apt-cache) with the private configuration.
    pub fn command(&self, tool: &str) -> Command {
        let mut c = Command::new(tool);
        let r = self.root.display();
        c.args([
            &format!("-oDir::Etc::sourcelist={r}/sources.list"),
            "-oDir::Etc::sourceparts=-",
            &format!("-oDir::State::Lists={r}/lists"),
            &format!("-oDir::Cache={r}/cache"),
            // The suite's Packages only: no translations or DEP-11 metadata.
            "-oAcquire::IndexTargets::deb::DEP-11::DefaultEnabled=false",
            "-oAcquire::Languages=none",
            "-oAPT::Get::List-Cleanup=false",
        ]);
        c
    }

    pub fn update(&self) -> Result<(), DebError> {
        run("apt-get", self.command("apt-get").args(["-q", "update"])).map(drop)
    }

    /// `apt-cache ARGS...`'s output.
    pub fn cache(&self, args: &[&str]) -> Result<String, DebError> {
        run("apt-cache", self.command("apt-cache").args(args))
            .map(|o| String::from_utf8_lossy(&o).into_owned())
    }

    /// `apt-get download PACKAGE` into `into`; the `.deb`'s path.
    pub fn download(&self, package: &str, into: &Path) -> Result<PathBuf, DebError> {
        fs::create_dir_all(into).map_err(io(into))?;
        run(
            "apt-get",
            self.command("apt-get")
                .args(["-q", "download", package])
                .current_dir(into),
        )?;
        // Named `<package>_<version>_<arch>.deb` (the version's `:` escaped).
        let prefix = format!("{package}_");
        let mut found = Vec::new();
        for e in fs::read_dir(into).map_err(io(into))? {
            let p = e.map_err(io(into))?.path();
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            if name.starts_with(&prefix) && name.ends_with(".deb") {
                found.push(p);
            }
        }
        found.sort();
        found.pop().ok_or_else(|| DebError::NoDeb {
            package: package.to_string(),
            dir: into.to_path_buf(),
        })
    }
}

/// Unpacks a `.deb`'s files under `root` (`dpkg-deb -x`; no maintainer scripts).
pub fn extract(deb: &Path, root: &Path) -> Result<(), DebError> {
    fs::create_dir_all(root).map_err(io(root))?;
    run(
        "dpkg-deb",
        Command::new("dpkg-deb").arg("-x").arg(deb).arg(root),
    )
    .map(drop)
}
