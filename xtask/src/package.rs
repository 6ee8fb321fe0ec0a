//! `cargo xtask install`, `gen-files` and `deb`: what goes where on a node.
//! One list for both: agent/Cargo.toml's `[package.metadata.deb]` (its
//! `assets` and `conf-files`), read through cargo metadata; `install` copies
//! what the package would hold.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::root;

/// cargo-deb, pinned: the Debian package test builds with the dev profile,
/// which newer cargo-deb versions announce they will refuse.
const CARGO_DEB_VERSION: &str = "3.8.0";

/// Where the release build and [`gen_files`] leave what the package ships
/// (cargo-deb's `target/release/` prefix, relative to the workspace).
const RELEASE: &str = "target/release/";
pub const GENERATED: &str = "target/release/assets/";

/// Destinations only a Debian package has a use for.
const DEB_ONLY: &[&str] = &["usr/share/lintian/"];

#[derive(Debug, clap::Args)]
pub struct InstallArgs {
    /// Install under this directory instead of / (no activation).
    #[arg(long)]
    destdir: Option<PathBuf>,
    /// An already built binary (default: build the release one).
    #[arg(long)]
    bin: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct GenFilesArgs {
    /// The nodeproof binary to ask.
    #[arg(long)]
    pub bin: PathBuf,
    /// Where to write (emptied first).
    #[arg(long)]
    pub out: PathBuf,
}

/// Where each file goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The nodeproof binary.
    Binary,
    /// A file of the repository, relative to its root.
    Repo(PathBuf),
    /// What [`gen_files`] writes, relative to its directory; a name may
    /// start with `*` (every file ending so).
    Generated(String),
}

/// One asset of the package: its source, its absolute destination (a
/// directory when it ends in `/`), its mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asset {
    pub source: Source,
    pub dest: String,
    pub mode: u32,
}

/// What the package holds, from cargo metadata of the workspace: the
/// assets and the configuration files (kept when already there).
pub struct Layout {
    pub assets: Vec<Asset>,
    pub conf_files: Vec<String>,
}

impl Layout {
    pub fn read() -> Result<Layout> {
        Layout::from_metadata(&crate::metadata("Cargo.toml")?)
    }

    fn from_metadata(metadata: &serde_json::Value) -> Result<Layout> {
        let agent = metadata["packages"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == "nodeproof")
            .context("no nodeproof package in the workspace")?;
        let deb = &agent["metadata"]["deb"];
        let mut assets = Vec::new();
        for a in deb["assets"]
            .as_array()
            .context("no [package.metadata.deb] assets")?
        {
            let field = |i: usize| {
                a[i].as_str()
                    .with_context(|| format!("asset {a}: field {i} is not a string"))
            };
            let (src, dest, mode) = (field(0)?, field(1)?, field(2)?);
            if DEB_ONLY.iter().any(|d| dest.starts_with(d)) {
                continue;
            }
            let source = if let Some(g) = src.strip_prefix(GENERATED) {
                Source::Generated(g.to_owned())
            } else if src == format!("{RELEASE}nodeproof") {
                Source::Binary
            } else if let Some(r) = src.strip_prefix("../") {
                // cargo-deb reads other sources relative to the package (agent/).
                Source::Repo(PathBuf::from(r))
            } else {
                bail!("asset {src}: neither the release build's nor a file beside agent/");
            };
            assets.push(Asset {
                source,
                dest: format!("/{dest}"),
                mode: u32::from_str_radix(mode, 8)
                    .with_context(|| format!("asset {src}: mode {mode:?}"))?,
            });
        }
        let conf_files = deb["conf-files"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c.as_str().map(str::to_owned))
            .collect();
        Ok(Layout { assets, conf_files })
    }
}

/// `cargo xtask install [--destdir D] [--bin PATH]`.
pub fn install_command(opts: &InstallArgs) -> Result<()> {
    let bin = match &opts.bin {
        Some(b) => b.clone(),
        None => crate::build_release()?,
    };
    let dest = opts.destdir.clone().unwrap_or_else(|| PathBuf::from("/"));
    let generated = crate::target_dir().join(GENERATED.trim_start_matches("target/"));
    gen_files(&bin, &generated)?;
    let written = install(&Layout::read()?, &root(), &bin, &generated, &dest)?;
    for w in &written {
        eprintln!("installed {}", w.display());
    }
    if opts.destdir.is_none() {
        activate()?;
    }
    Ok(())
}

/// `cargo xtask deb [ARGS]`: the completions and man pages the package
/// ships come from the binary it ships: built first, asked, then packed by
/// cargo-deb (whose own build is then a no-op).
pub fn deb(args: &[String]) -> Result<()> {
    let bin = crate::build_release()?;
    gen_files(
        &bin,
        &crate::target_dir().join(GENERATED.trim_start_matches("target/")),
    )?;
    let mut deb = cargo_deb()?;
    // cargo-deb's own build is then a no-op only with the same revision.
    deb.env("NODEPROOF_REVISION", crate::revision());
    deb.args(["-p", "nodeproof"]);
    // The Debian convention (dch, dh_make): whoever builds the
    // package names themselves; agent/Cargo.toml's is a placeholder.
    if let Ok(email) = std::env::var("DEBEMAIL") {
        let name = std::env::var("DEBFULLNAME").unwrap_or_else(|_| "nodeproof".into());
        deb.arg("--maintainer").arg(format!("{name} <{email}>"));
    }
    deb.args(args);
    eprintln!("+ {deb:?}");
    let status = deb
        .current_dir(root())
        .status()
        .context("running cargo deb")?;
    if !status.success() {
        bail!("cargo deb failed ({status})");
    }
    Ok(())
}

/// `BIN gen-files --out DIR`: completions and man pages from the binary's
/// own clap definitions (agent/src/cli/docs.rs), fresh in DIR; then the man
/// pages gzipped with `gzip -9n` (no name or time stamp, as dh_compress
/// does; Debian policy 12.1). Done here rather than by cargo-deb, which
/// compresses only assets outside the target directory.
pub fn gen_files(bin: &Path, out: &Path) -> Result<()> {
    if out.exists() {
        std::fs::remove_dir_all(out).with_context(|| format!("clearing {}", out.display()))?;
    }
    let status = Command::new(bin)
        .args(["gen-files", "--out"])
        .arg(out)
        .stdout(Stdio::null())
        .status()
        .with_context(|| format!("running {}", bin.display()))?;
    if !status.success() {
        bail!("{} gen-files failed ({status})", bin.display());
    }
    let man = out.join("man");
    for entry in std::fs::read_dir(&man).with_context(|| format!("reading {}", man.display()))? {
        let page = entry?.path();
        let status = Command::new("gzip")
            .arg("-9nf")
            .arg(&page)
            .status()
            .with_context(|| format!("running gzip on {}", page.display()))?;
        if !status.success() {
            bail!("gzip {} failed ({status})", page.display());
        }
    }
    Ok(())
}

/// Every (source path, destination file) of `layout`: the binary, the
/// repository's files from `repo`, and what [`gen_files`] left in
/// `generated` (globs expanded).
pub fn files(
    layout: &Layout,
    repo: &Path,
    bin: &Path,
    generated: &Path,
) -> Result<Vec<(PathBuf, String, u32)>> {
    let mut files = Vec::new();
    for a in &layout.assets {
        let sources: Vec<PathBuf> = match &a.source {
            Source::Binary => vec![bin.to_path_buf()],
            Source::Repo(r) => vec![repo.join(r)],
            Source::Generated(g) => {
                let (dir, name) = g.rsplit_once('/').unwrap_or(("", g));
                let dir = generated.join(dir);
                match name.strip_prefix('*') {
                    Some(suffix) => {
                        let mut m: Vec<PathBuf> = std::fs::read_dir(&dir)
                            .with_context(|| format!("reading {}", dir.display()))?
                            .map(|e| e.map(|e| e.path()))
                            .collect::<std::io::Result<_>>()?;
                        m.retain(|p| p.to_string_lossy().ends_with(suffix));
                        m.sort();
                        m
                    }
                    None => vec![dir.join(name)],
                }
            }
        };
        if sources.is_empty() {
            bail!("no {:?} under {}", a.source, generated.display());
        }
        for src in sources {
            let dest = if a.dest.ends_with('/') {
                // The binary keeps its name whatever file --bin names.
                let name = match a.source {
                    Source::Binary => "nodeproof".into(),
                    _ => src
                        .file_name()
                        .context("asset without a file name")?
                        .to_string_lossy(),
                };
                format!("{}{name}", a.dest)
            } else {
                a.dest.clone()
            };
            files.push((src, dest, a.mode));
        }
    }
    Ok(files)
}

/// Copies every file of `layout` under `destdir`. An existing
/// configuration file (`conf-files`) is the admin's: kept, the example
/// goes beside it as NAME.example.
fn install(
    layout: &Layout,
    repo: &Path,
    bin: &Path,
    generated: &Path,
    destdir: &Path,
) -> Result<Vec<PathBuf>> {
    use std::os::unix::fs::PermissionsExt;
    let mut written = Vec::new();
    for (src, dest, mode) in files(layout, repo, bin, generated)? {
        let mut target = destdir.join(dest.trim_start_matches('/'));
        if layout.conf_files.contains(&dest) && target.exists() {
            let name = target.file_name().unwrap_or_default().to_string_lossy();
            target.set_file_name(format!("{name}.example"));
        }
        let dir = target.parent().context("install target without a parent")?;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        // Copy to a temporary name and rename: a running binary is replaced, not overwritten.
        let tmp = target.with_extension("xtask-tmp");
        std::fs::copy(&src, &tmp)
            .with_context(|| format!("copying {} to {}", src.display(), tmp.display()))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
        std::fs::rename(&tmp, &target)?;
        written.push(target);
    }
    Ok(written)
}

/// On the live system: the user, the directories, systemd's view of the units.
fn activate() -> Result<()> {
    let run = |cmd: &str, args: &[&str]| -> Result<()> {
        let status = Command::new(cmd)
            .args(args)
            .status()
            .with_context(|| format!("running {cmd}"))?;
        if !status.success() {
            bail!("{cmd} {} failed ({status})", args.join(" "));
        }
        Ok(())
    };
    run("systemd-sysusers", &["nodeproof.conf"])?;
    run("systemd-tmpfiles", &["--create", "nodeproof.conf"])?;
    if Path::new("/run/systemd/system").exists() {
        run("systemctl", &["daemon-reload"])?;
    } else {
        eprintln!("systemd is not running here: no daemon-reload");
    }
    Ok(())
}

/// `cargo deb`: the one on PATH if it is the pinned version, else the pinned
/// version under target/tools (installed there on first use: CI's clean
/// clone caches it with the rest of target/).
pub fn cargo_deb() -> Result<Command> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // Only the pinned version: newer ones announce refusing the dev profile
    // the package test builds with.
    let on_path = Command::new(&cargo)
        .args(["deb", "--version"])
        .output()
        .is_ok_and(|o| {
            o.status.success()
                && String::from_utf8_lossy(&o.stdout).trim()
                    == format!("cargo-deb {CARGO_DEB_VERSION}")
        });
    let tools = crate::target_dir().join("tools");
    let local = tools.join("bin/cargo-deb");
    let mut cmd = if on_path {
        Command::new(&cargo)
    } else {
        if !local.is_file() {
            let root = tools.to_string_lossy();
            crate::cargo(&[
                "install",
                "cargo-deb",
                "--version",
                CARGO_DEB_VERSION,
                "--locked",
                "--root",
                &root,
            ])?;
        }
        Command::new(local)
    };
    cmd.arg("deb");
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_the_packages_assets_less_what_only_a_package_uses() {
        let layout = Layout::read().unwrap();
        let dest_of = |s: &Source| {
            layout
                .assets
                .iter()
                .find(|a| &a.source == s)
                .map(|a| (a.dest.as_str(), a.mode))
        };
        assert_eq!(dest_of(&Source::Binary), Some(("/usr/bin/", 0o755)));
        assert_eq!(
            dest_of(&Source::Repo("systemd/nodeproof.service".into())),
            Some(("/usr/lib/systemd/system/", 0o644))
        );
        assert_eq!(
            dest_of(&Source::Generated("man/*.8.gz".into())),
            Some(("/usr/share/man/man8/", 0o644))
        );
        assert!(layout.assets.iter().all(|a| !a.dest.contains("lintian")));
        assert_eq!(layout.conf_files, ["/etc/nodeproof/config.toml"]);
        for a in &layout.assets {
            if let Source::Repo(r) = &a.source {
                assert!(
                    root().join(r).is_file(),
                    "{} is in the repository",
                    r.display()
                );
            }
        }
    }

    #[test]
    fn install_puts_every_file_in_place_and_keeps_an_existing_config() {
        let layout = Layout::read().unwrap();
        let dest = tempfile::tempdir().unwrap();
        let dest = dest.path();
        let bin = root().join("Cargo.toml"); // any file stands in for the binary
                                             // gen_files' tree, with stand-ins of its files.
        let generated = tempfile::tempdir().unwrap();
        let generated = generated.path();
        for f in [
            "completions/nodeproof",
            "completions/_nodeproof",
            "completions/nodeproof.fish",
            "man/nodeproof.8.gz",
            "man/nodeproof-check.8.gz",
        ] {
            let path = generated.join(f);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, format!(".TH {f}\n")).unwrap();
        }
        let written = install(&layout, &root(), &bin, generated, dest).unwrap();
        let repo_files = layout
            .assets
            .iter()
            .filter(|a| matches!(a.source, Source::Repo(_)))
            .count();
        assert_eq!(written.len(), repo_files + 1 + 5);
        for f in [
            "usr/lib/systemd/system/nodeproof.service",
            "usr/lib/systemd/system/kubelet.service.d/10-nodeproof.conf",
            "usr/lib/sysusers.d/nodeproof.conf",
            "usr/lib/tmpfiles.d/nodeproof.conf",
            "usr/share/nodeproof/grafana/nodeproof.json",
            "usr/share/bash-completion/completions/nodeproof",
            "usr/share/zsh/vendor-completions/_nodeproof",
            "usr/share/fish/vendor_completions.d/nodeproof.fish",
            "usr/share/man/man8/nodeproof.8.gz",
            "usr/share/man/man8/nodeproof-check.8.gz",
        ] {
            assert!(dest.join(f).is_file(), "{f}");
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dest.join("usr/bin/nodeproof"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        std::fs::write(dest.join("etc/nodeproof/config.toml"), "# mine\n").unwrap();
        install(&layout, &root(), &bin, generated, dest).unwrap();
        assert_eq!(
            std::fs::read_to_string(dest.join("etc/nodeproof/config.toml")).unwrap(),
            "# mine\n"
        );
        assert!(dest.join("etc/nodeproof/config.toml.example").is_file());
    }
}
