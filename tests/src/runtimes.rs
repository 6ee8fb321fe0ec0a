//! The OCI runtimes the oracles run: runc 1.1.5 and crun 1.8 from this
//! machine's bookworm packages, runc 1.1.15 and crun 1.21 from trixie's,
//! fetched with `apt-get download` through a private apt configuration
//! (`nodeproof_debpkg`) and unpacked under `target/oci-runtimes/`, never
//! installed system-wide.
//!
//! trixie's binaries are built against glibc 2.38+ (bookworm has 2.36), so
//! trixie's libc6 is unpacked beside them, with trixie's libseccomp2 (2.6,
//! what those runtimes run with on trixie), libcap2 and libyajl2. Each binary
//! is copied and given trixie's dynamic loader as its ELF interpreter and the
//! unpacked library directory as its RUNPATH (`patchelf`), not run through
//! `ld.so` or `LD_LIBRARY_PATH`: runc and crun re-execute `/proc/self/exe`
//! (runc init; crun's cloned-binary protection), which must be the runtime
//! itself, and an environment variable would reach the container's process.
//! Libraries not unpacked (libsystemd0 and its dependencies) come from the
//! machine; glibc keeps them working with the newer libc.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use nodeproof_debpkg::{DebError, PrivateApt};
use nodeproof_seccomp::oci_runtime::{CrunVersion, OciRuntime, RuncVersion};
use nodeproof_testkit::Need;

/// One runtime binary the oracles can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuntimeBuild {
    /// bookworm's runc (`apt-get install runc`).
    Runc1_1_5,
    /// trixie's runc, fetched.
    Runc1_1_15,
    /// bookworm's crun (`apt-get install crun`).
    Crun1_8,
    /// trixie's crun, fetched.
    Crun1_21,
}

/// Where a [`RuntimeBuild`] comes from.
enum Source {
    /// Installed from this machine's suite at one of these paths.
    Installed(&'static [&'static str]),
    /// Fetched from trixie: this package, this path inside it.
    Trixie {
        package: &'static str,
        path: &'static str,
    },
}

/// trixie's libraries the fetched runtimes load instead of the machine's.
const TRIXIE_LIBS: &[&str] = &["libc6", "libseccomp2", "libcap2", "libyajl2"];
/// Where they are unpacked (merged /usr).
const TRIXIE_LIB_DIR: &str = "usr/lib/x86_64-linux-gnu";
const TRIXIE_LOADER: &str = "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2";

impl RuntimeBuild {
    pub const ALL: [RuntimeBuild; 4] = [
        RuntimeBuild::Runc1_1_5,
        RuntimeBuild::Runc1_1_15,
        RuntimeBuild::Crun1_8,
        RuntimeBuild::Crun1_21,
    ];

    /// `runc-1.1.5`, `crun-1.21`, ...: the spelling of `NP_CAMPAIGN_ORACLE`.
    pub fn name(self) -> &'static str {
        match self {
            RuntimeBuild::Runc1_1_5 => "runc-1.1.5",
            RuntimeBuild::Runc1_1_15 => "runc-1.1.15",
            RuntimeBuild::Crun1_8 => "crun-1.8",
            RuntimeBuild::Crun1_21 => "crun-1.21",
        }
    }

    pub fn parse(s: &str) -> Option<RuntimeBuild> {
        RuntimeBuild::ALL.into_iter().find(|b| b.name() == s)
    }

    /// The runtime and version nodeproof's model predicts for this build.
    pub fn modelled(self) -> OciRuntime {
        match self {
            RuntimeBuild::Runc1_1_5 => OciRuntime::Runc(RuncVersion::V1_1_5),
            RuntimeBuild::Runc1_1_15 => OciRuntime::Runc(RuncVersion::V1_1_15),
            RuntimeBuild::Crun1_8 => OciRuntime::Crun(CrunVersion::V1_8),
            RuntimeBuild::Crun1_21 => OciRuntime::Crun(CrunVersion::V1_21),
        }
    }

    /// What `--version`'s first line must start with (the build really is that release).
    fn version_line(self) -> &'static str {
        match self {
            RuntimeBuild::Runc1_1_5 => "runc version 1.1.5",
            RuntimeBuild::Runc1_1_15 => "runc version 1.1.15",
            RuntimeBuild::Crun1_8 => "crun version 1.8",
            RuntimeBuild::Crun1_21 => "crun version 1.21",
        }
    }

    fn source(self) -> Source {
        match self {
            RuntimeBuild::Runc1_1_5 => Source::Installed(nodeproof_testkit::RUNC_CANDIDATES),
            RuntimeBuild::Crun1_8 => Source::Installed(&["/usr/bin/crun"]),
            RuntimeBuild::Runc1_1_15 => Source::Trixie {
                package: "runc",
                path: "usr/sbin/runc",
            },
            RuntimeBuild::Crun1_21 => Source::Trixie {
                package: "crun",
                path: "usr/bin/crun",
            },
        }
    }

    /// What an oracle of this build needs from the machine (root, busybox and
    /// `timeout` come with every oracle; see `splice::ORACLE`).
    pub fn needs(self) -> Vec<Need> {
        match self.source() {
            Source::Installed(_) => match self {
                RuntimeBuild::Runc1_1_5 => vec![Need::Runc],
                _ => vec![Need::Tool("crun")],
            },
            Source::Trixie { .. } => nodeproof_debpkg::TOOLS
                .iter()
                .chain(&["patchelf"])
                .map(|t| Need::Tool(t))
                .collect(),
        }
    }

    /// The binary to run: the installed one, or trixie's, fetched into `cache`
    /// on first use. Checked to print this build's version.
    pub fn binary(self, cache: &Path) -> Result<PathBuf, RuntimeError> {
        let bin = match self.source() {
            Source::Installed(candidates) => candidates
                .iter()
                .map(PathBuf::from)
                .find(|p| p.is_file())
                .ok_or(RuntimeError::NotInstalled {
                    build: self,
                    candidates,
                })?,
            Source::Trixie { package, path } => fetch_trixie(self, package, path, cache)?,
        };
        let out = Command::new(&bin)
            .arg("--version")
            .output()
            .map_err(|source| RuntimeError::Io {
                what: format!("run {} --version", bin.display()),
                source,
            })?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() || !text.starts_with(self.version_line()) {
            return Err(RuntimeError::WrongVersion {
                build: self,
                binary: bin,
                said: format!("{text}{}", String::from_utf8_lossy(&out.stderr)),
            });
        }
        Ok(bin)
    }
}

impl fmt::Display for RuntimeBuild {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("{build} is not installed at any of {candidates:?}")]
    NotInstalled {
        build: RuntimeBuild,
        candidates: &'static [&'static str],
    },
    #[error("fetching {build} from trixie")]
    Fetch {
        build: RuntimeBuild,
        #[source]
        source: DebError,
    },
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{build} is not fetched from trixie")]
    NotFromTrixie { build: RuntimeBuild },
    #[error("{} is not {build}: `--version` said {said:?}", binary.display())]
    WrongVersion {
        build: RuntimeBuild,
        binary: PathBuf,
        said: String,
    },
}

/// `cache/trixie/bin/<name>`, made once: the package and [`TRIXIE_LIBS`]
/// unpacked under `cache/trixie/root`, the binary copied and patched.
fn fetch_trixie(
    build: RuntimeBuild,
    package: &str,
    path: &str,
    cache: &Path,
) -> Result<PathBuf, RuntimeError> {
    let dir = cache.join("trixie");
    let bin = dir.join("bin").join(build.name());
    if bin.is_file() {
        return Ok(bin);
    }
    let fetch = |source| RuntimeError::Fetch { build, source };
    let io = |what: String| move |source| RuntimeError::Io { what, source };
    // Unpacked into a private directory and renamed into place, so tests
    // fetching in parallel never see half a tree.
    let private = dir.join(format!("tmp.{}.{}", build.name(), std::process::id()));
    let _ = fs::remove_dir_all(&private);
    let apt = PrivateApt::new(&private, "trixie").map_err(fetch)?;
    apt.update().map_err(fetch)?;
    let root = private.join("root");
    for p in TRIXIE_LIBS.iter().chain(&[package]) {
        let deb = apt.download(p, &private.join("deb")).map_err(fetch)?;
        nodeproof_debpkg::extract(&deb, &root).map_err(fetch)?;
    }
    let final_root = dir.join(format!("root-{}", build.name()));
    let _ = fs::remove_dir_all(&final_root);
    fs::rename(&root, &final_root).map_err(io(format!("install {}", final_root.display())))?;
    let staged = private.join(build.name());
    fs::copy(final_root.join(path), &staged).map_err(io(format!("copy {path}")))?;
    nodeproof_debpkg::run(
        "patchelf",
        Command::new("patchelf")
            .arg("--set-interpreter")
            .arg(final_root.join(TRIXIE_LOADER))
            .arg("--set-rpath")
            .arg(final_root.join(TRIXIE_LIB_DIR))
            .arg(&staged),
    )
    .map_err(fetch)?;
    fs::create_dir_all(dir.join("bin")).map_err(io("mkdir bin".into()))?;
    fs::rename(&staged, &bin).map_err(io(format!("install {}", bin.display())))?;
    let _ = fs::remove_dir_all(&private);
    Ok(bin)
}

/// trixie's dynamic loader and library directory, as unpacked beside a
/// fetched runtime: a program run through them gets trixie's libc and
/// libseccomp 2.6.0 in place of the machine's.
#[derive(Debug, Clone)]
pub struct TrixieLibraries {
    pub loader: PathBuf,
    pub lib_dir: PathBuf,
}

impl TrixieLibraries {
    /// The libraries fetched with `build` (a trixie build; fetched into
    /// `cache` first if need be).
    pub fn of(build: RuntimeBuild, cache: &Path) -> Result<Self, RuntimeError> {
        let Source::Trixie { .. } = build.source() else {
            return Err(RuntimeError::NotFromTrixie { build });
        };
        build.binary(cache)?;
        let root = cache.join("trixie").join(format!("root-{}", build.name()));
        Ok(Self {
            loader: root.join(TRIXIE_LOADER),
            lib_dir: root.join(TRIXIE_LIB_DIR),
        })
    }

    /// `program` run by trixie's loader with trixie's libraries first
    /// (`ld.so --library-path`): nothing of it is patched, nothing reaches
    /// its environment, and `/proc/self/exe` is the loader, so only for
    /// programs that do not re-execute themselves.
    pub fn command(&self, program: &Path) -> Command {
        let mut c = Command::new(&self.loader);
        c.arg("--library-path").arg(&self.lib_dir).arg(program);
        c
    }
}

/// The cache of fetched runtimes under the workspace's `target/`.
pub fn default_cache_dir() -> PathBuf {
    nodeproof_testkit::target_dir().join("oci-runtimes")
}
