//! `cargo xtask dist`: the release bundle. In target/dist (or `--out`):
//!
//! - `nodeproof-<version>-x86_64-linux.tar.gz`: one directory holding the
//!   files the Debian package installs, at the paths it installs them
//!   (usr/bin/nodeproof, the units, the kubelet drop-in, sysusers and
//!   tmpfiles, etc/nodeproof/config.toml, the profiles, man pages,
//!   completions, the alert rules and dashboard), with deploy/, README.md,
//!   CHANGELOG.md and SHA256SUMS of every file beside them;
//! - the .deb (`cargo xtask deb`), unless `--no-deb`;
//! - SHA256SUMS of both.
//!
//! Reproducible as the image is (archive.rs): the same binary and epoch
//! (`SOURCE_DATE_EPOCH`, else the commit's time) give the same bytes.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::archive::{self, File};
use crate::package::{self, Layout};
use crate::root;

#[derive(Debug, clap::Args)]
pub struct DistArgs {
    /// An already built binary (default: build the release one).
    #[arg(long)]
    bin: Option<PathBuf>,
    /// Where to write the bundle.
    /// Default: `dist/` under cargo's target directory (`target/dist` unless
    /// `CARGO_TARGET_DIR` or a cargo config moves it).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Leave the .deb out (it packs the release build's binary).
    #[arg(long)]
    no_deb: bool,
}

/// `cargo xtask dist [--bin PATH] [--out DIR] [--no-deb]`.
pub fn dist_command(args: &DistArgs) -> Result<()> {
    let bin = match &args.bin {
        Some(b) => b.clone(),
        None => crate::build_release()?,
    };
    let meta = crate::image::meta()?;
    let out = args
        .out
        .as_ref()
        .map_or_else(|| crate::target_dir().join("dist"), |o| root().join(o));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let generated = out.join("generated");
    package::gen_files(&bin, &generated)?;
    let name = format!("nodeproof-{}-x86_64-linux", meta.version);
    let files = bundle_files(&name, &Layout::read()?, &root(), &bin, &generated)?;
    std::fs::remove_dir_all(&generated).ok();
    let bytes = archive::gzip(&archive::tar(&files, meta.epoch, &[])?)?;
    let archive_name = format!("{name}.tar.gz");
    std::fs::write(out.join(&archive_name), &bytes)
        .with_context(|| format!("writing {archive_name}"))?;
    let mut sums = vec![(archive_name, archive::sha256_hex(&bytes))];
    if !args.no_deb {
        if args.bin.is_some() {
            bail!("the .deb packs the release build: leave --bin out, or pass --no-deb");
        }
        package::deb(&[])?;
        let deb = newest_deb(&crate::target_dir().join("debian"))?;
        let file = deb.file_name().context("a .deb without a name")?;
        let target = out.join(file);
        std::fs::copy(&deb, &target).with_context(|| format!("copying {}", deb.display()))?;
        let bytes = std::fs::read(&target)?;
        sums.push((
            file.to_string_lossy().into_owned(),
            archive::sha256_hex(&bytes),
        ));
    }
    std::fs::write(out.join("SHA256SUMS"), sha256sums(&sums))?;
    for (f, sum) in &sums {
        println!("{sum}  {}", out.join(f).display());
    }
    Ok(())
}

/// `HEX  NAME` lines, as `sha256sum -c` reads them.
fn sha256sums(sums: &[(String, String)]) -> String {
    sums.iter().map(|(f, s)| format!("{s}  {f}\n")).collect()
}

/// The archive's files under `name/`: the package's files at their
/// installed paths, deploy/, README.md, CHANGELOG.md, and SHA256SUMS of all
/// of them (paths relative to `name/`).
pub fn bundle_files(
    name: &str,
    layout: &Layout,
    repo: &Path,
    bin: &Path,
    generated: &Path,
) -> Result<Vec<File>> {
    let read = |p: &Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
    let mut files = Vec::new();
    for (src, dest, mode) in package::files(layout, repo, bin, generated)? {
        files.push(File {
            path: dest.trim_start_matches('/').to_string(),
            bytes: read(&src)?,
            mode,
        });
    }
    let listed = crate::git(&["ls-files", "-z", "deploy", "README.md", "CHANGELOG.md"])
        .context("listing deploy/ with git")?;
    let mut extra: Vec<&str> = listed.split('\0').filter(|p| !p.is_empty()).collect();
    extra.sort();
    if !extra.contains(&"CHANGELOG.md") || !extra.iter().any(|p| p.starts_with("deploy/")) {
        bail!("deploy/ and CHANGELOG.md must be committed to be bundled");
    }
    for p in extra {
        files.push(File {
            path: p.to_string(),
            bytes: read(&repo.join(p))?,
            mode: 0o644,
        });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let sums: Vec<(String, String)> = files
        .iter()
        .map(|f| (f.path.clone(), archive::sha256_hex(&f.bytes)))
        .collect();
    files.push(File {
        path: "SHA256SUMS".into(),
        bytes: sha256sums(&sums).into_bytes(),
        mode: 0o644,
    });
    for f in &mut files {
        f.path = format!("{name}/{}", f.path);
    }
    Ok(files)
}

/// The .deb cargo-deb wrote last.
fn newest_deb(dir: &Path) -> Result<PathBuf> {
    let mut debs: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .collect();
    debs.sort();
    debs.pop()
        .map(|(_, p)| p)
        .with_context(|| format!("cargo deb left no .deb in {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_read_as_sha256sum_writes_them() {
        assert_eq!(
            sha256sums(&[("a.tar.gz".into(), "00ff".into())]),
            "00ff  a.tar.gz\n"
        );
    }
}
