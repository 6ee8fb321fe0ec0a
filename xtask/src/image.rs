//! `cargo xtask image`: the nodeproof container image, written as an OCI
//! image layout and as one tarball that `docker load`, `podman load` and
//! `ctr images import` all read, without a registry or a container daemon.
//!
//! One layer: the binary at /usr/bin/nodeproof, exactly the shared
//! libraries `ldd` says it loads (libseccomp, glibc's, the loader), CA
//! certificates, the runtime-default profile, /etc/passwd and /etc/group
//! naming the image's user (65532, non-root: the gate controller and
//! `cluster check` need no privilege; the DaemonSet runs the tracer as uid
//! 0 with CAP_BPF and CAP_PERFMON, deploy/base/daemonset.yaml says why) and an
//! empty /tmp. NVML is not in it: libnvidia-ml comes from the node's driver
//! (the NVIDIA container toolkit mounts it), loaded at run time.
//!
//! Why not static: NVML is reached only with dlopen of the driver's
//! libnvidia-ml, a glibc-linked shared library, which neither a musl binary
//! nor a statically linked glibc one can load; linking only libseccomp
//! statically (the crate's LIBSECCOMP_LINK_TYPE=static, Debian ships
//! libseccomp.a) would drop one 0.1 MB library. So the binary stays dynamic
//! and the image carries exactly the libraries `ldd` names.
//!
//! Reproducible: entries sorted, owned by 0:0, every time the commit's
//! (`SOURCE_DATE_EPOCH`, else HEAD's committer time), gzip with a fixed
//! header, JSON written in a fixed key order: the same binary, files and
//! epoch give the same digest (tested).
//!
//! Measured with the release binary (38.9 MB, symbols kept so a crash's
//! backtrace names functions; 29.9 MB stripped): the libraries add 3.3 MB,
//! the layer is 42.5 MB as a tar and 14.7 MB gzipped.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::json;

use crate::archive::{self, gzip, sha256, File};
use crate::root;

/// The image's user and group: non-root, the `nonroot` id distroless uses.
pub const UID: u32 = 65532;

#[derive(Debug, clap::Args)]
pub struct ImageArgs {
    /// An already built binary (default: build the release one).
    #[arg(long)]
    bin: Option<PathBuf>,
    /// Where to write the layout (DIR/oci) and the tarball (DIR/nodeproof-image.tar).
    /// Default: `image/` under cargo's target directory (`target/image` unless
    /// `CARGO_TARGET_DIR` or a cargo config moves it).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The image's name, without the tag (the tag is the version). Default:
    /// the name deploy/base/kustomization.yaml runs.
    #[arg(long)]
    name: Option<String>,
}

/// Where the image's reference is written once: the base's `images:` entry.
pub const KUSTOMIZATION: &str = "deploy/base/kustomization.yaml";

/// The reference the manifests run, `newName:newTag` of the one `images:`
/// entry of `kustomization` (its text); the tag must be `version`, the
/// version the image is built from.
pub fn deployed_reference(kustomization: &str, version: &str) -> Result<String> {
    let k: serde_json::Value = serde_saphyr::from_str(kustomization)
        .with_context(|| format!("parsing {KUSTOMIZATION}"))?;
    let images = k["images"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let [image] = images else {
        bail!("{KUSTOMIZATION} must name exactly one image under `images:`");
    };
    let (Some(name), Some(tag)) = (image["newName"].as_str(), image["newTag"].as_str()) else {
        bail!("{KUSTOMIZATION}: set the image's newName and newTag");
    };
    if tag != version {
        bail!("{KUSTOMIZATION} tags the image {tag}, but the crate is {version}: set newTag to {version}");
    }
    Ok(format!("{name}:{tag}"))
}

/// What the image says of itself (the `org.opencontainers.image.*` labels).
#[derive(Debug, Clone)]
pub struct Meta {
    pub version: String,
    /// The commit, `-dirty` appended when the tree had changes.
    pub revision: String,
    /// Where the source is (`git remote get-url origin`, an https URL), if anywhere.
    pub source: Option<String>,
    /// Seconds since the epoch: every time in the image.
    pub epoch: u64,
}

/// What was written, with the digests a user pins.
#[derive(Debug)]
pub struct Written {
    pub reference: String,
    /// The manifest's digest: what `ctr images ls` and a registry show.
    pub digest: String,
    pub layout: PathBuf,
    pub tarball: PathBuf,
}

/// `cargo xtask image [--bin PATH] [--out DIR] [--name NAME]`.
pub fn image_command(args: &ImageArgs) -> Result<()> {
    let bin = match &args.bin {
        Some(b) => b.clone(),
        None => crate::build_release()?,
    };
    let meta = meta()?;
    let files = files(&bin)?;
    let out = args
        .out
        .as_ref()
        .map_or_else(|| crate::target_dir().join("image"), |o| root().join(o));
    let reference = match &args.name {
        Some(name) => format!("{name}:{}", meta.version),
        None => {
            let path = root().join(KUSTOMIZATION);
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            deployed_reference(&text, &meta.version)?
        }
    };
    let w = write(&out, &reference, &meta, &files)?;
    println!("{} {}", w.reference, w.digest);
    eprintln!(
        "xtask: image {} ({}) in {} and {}",
        w.reference,
        w.digest,
        w.layout.display(),
        w.tarball.display()
    );
    Ok(())
}

/// The version (agent/Cargo.toml), the commit and its time.
pub fn meta() -> Result<Meta> {
    let metadata = crate::metadata("Cargo.toml")?;
    let version = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "nodeproof")
        .and_then(|p| p["version"].as_str())
        .context("no nodeproof package in the workspace")?
        .to_string();
    let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) => v
            .parse()
            .with_context(|| format!("SOURCE_DATE_EPOCH {v:?}: not a whole number"))?,
        Err(_) => crate::git(&["log", "-1", "--format=%ct"])
            .and_then(|t| t.parse().ok())
            .unwrap_or(0),
    };
    Ok(Meta {
        version,
        revision: crate::revision(),
        // A URL others can fetch; a clone of a local path names none.
        source: crate::git(&["remote", "get-url", "origin"]).filter(|s| s.starts_with("https://")),
        epoch,
    })
}

/// The layer's files for the binary at `bin`.
pub fn files(bin: &Path) -> Result<Vec<File>> {
    let read = |p: &Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
    let mut files = vec![File {
        path: "/usr/bin/nodeproof".into(),
        bytes: read(bin)?,
        mode: 0o755,
    }];
    for lib in shared_libraries(bin)? {
        // The path the loader looks under; the bytes of what it names (a symlink's target).
        files.push(File {
            path: lib.to_string_lossy().into_owned(),
            bytes: read(&lib)?,
            mode: 0o755,
        });
    }
    let certs = Path::new("/etc/ssl/certs/ca-certificates.crt");
    if !certs.is_file() {
        bail!(
            "{} is missing: install the ca-certificates package (`cargo xtask setup`)",
            certs.display()
        );
    }
    files.push(File {
        path: certs.to_string_lossy().into_owned(),
        bytes: read(certs)?,
        mode: 0o644,
    });
    files.push(File {
        path: "/usr/share/nodeproof/profiles/runtime-default-x86_64.json".into(),
        bytes: read(&root().join("profiles/runtime-default-x86_64.json"))?,
        mode: 0o644,
    });
    files.push(File {
        path: "/etc/passwd".into(),
        bytes: format!(
            "root:x:0:0:root:/root:/sbin/nologin\nnodeproof:x:{UID}:{UID}:nodeproof:/nonexistent:/sbin/nologin\n"
        )
        .into_bytes(),
        mode: 0o644,
    });
    files.push(File {
        path: "/etc/group".into(),
        bytes: format!("root:x:0:\nnodeproof:x:{UID}:\n").into_bytes(),
        mode: 0o644,
    });
    Ok(files)
}

/// The shared libraries `bin` loads and its loader, as `ldd` resolves them
/// on this machine (the image is built where the binary was).
pub fn shared_libraries(bin: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(bin)
        .output()
        .context("running ldd")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "ldd {}: {}{}",
            bin.display(),
            text.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    parse_ldd(&text)
}

/// `ldd`'s absolute paths (vmtest's parser, which the kernel matrix's
/// initramfs uses too), sorted, once each; a library `ldd` could not find
/// is an error, not a smaller image.
fn parse_ldd(text: &str) -> Result<Vec<PathBuf>> {
    if let Some(line) = text.lines().find(|l| l.contains("=> not found")) {
        let name = line.split("=>").next().unwrap_or("").trim();
        bail!("the binary needs {name}, which this machine lacks");
    }
    let mut libs: Vec<PathBuf> = nodeproof_vmtest::ldd_paths(text)
        .into_iter()
        .map(PathBuf::from)
        .collect();
    libs.sort();
    libs.dedup();
    Ok(libs)
}

/// The layer: a tar of `files`, their parent directories and an empty
/// /tmp (sticky, world-writable), sorted, every owner 0:0 and every time
/// `epoch`.
pub fn layer(files: &[File], epoch: u64) -> Result<Vec<u8>> {
    archive::tar(files, epoch, &[("tmp/", 0o1777)])
}

/// RFC 3339 in UTC for `epoch`, as OCI's `created` is written.
fn rfc3339(epoch: u64) -> Result<String> {
    let t = time::OffsetDateTime::from_unix_timestamp(
        i64::try_from(epoch).context("the epoch does not fit a signed 64-bit time")?,
    )
    .context("the epoch is out of time's range")?;
    t.format(&time::format_description::well_known::Rfc3339)
        .context("formatting the epoch")
}

/// The blobs of the image: (digest, bytes) of the layer, config and
/// manifest, and the manifest's descriptor fields.
struct Blobs {
    layer: (String, Vec<u8>),
    config: (String, Vec<u8>),
    manifest: (String, Vec<u8>),
}

fn blobs(meta: &Meta, files: &[File]) -> Result<Blobs> {
    let tar = layer(files, meta.epoch)?;
    // The diff id names the uncompressed tar, the digest the blob.
    let diff_id = sha256(&tar);
    let layer = gzip(&tar)?;
    let layer_digest = sha256(&layer);
    let created = rfc3339(meta.epoch)?;
    let mut labels = serde_json::Map::new();
    labels.insert("org.opencontainers.image.title".into(), json!("nodeproof"));
    labels.insert(
        "org.opencontainers.image.description".into(),
        json!("Node agent: seccomp profiles, denials, GPUs, reported to Kubernetes"),
    );
    labels.insert(
        "org.opencontainers.image.version".into(),
        json!(meta.version),
    );
    labels.insert(
        "org.opencontainers.image.revision".into(),
        json!(meta.revision),
    );
    labels.insert("org.opencontainers.image.created".into(), json!(created));
    labels.insert(
        "org.opencontainers.image.licenses".into(),
        json!("Apache-2.0"),
    );
    if let Some(s) = &meta.source {
        labels.insert("org.opencontainers.image.source".into(), json!(s));
    }
    let config = json!({
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": format!("{UID}:{UID}"),
            "Env": ["PATH=/usr/bin"],
            "Entrypoint": ["/usr/bin/nodeproof"],
            "Cmd": ["--help"],
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": created, "created_by": "cargo xtask image"}],
    });
    let config = serde_json::to_vec(&config)?;
    let config_digest = sha256(&config);
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": layer_digest,
            "size": layer.len(),
        }],
    });
    let manifest = serde_json::to_vec(&manifest)?;
    Ok(Blobs {
        layer: (layer_digest, layer),
        config: (config_digest, config),
        manifest: (sha256(&manifest), manifest),
    })
}

/// Writes `out/oci` (an OCI image layout) and `out/nodeproof-image.tar`
/// (that layout plus docker's manifest.json, as `docker save` writes since
/// Docker 25: docker, podman and ctr load it).
///
/// `reference` is the image's full name and tag. Each loader reads its own
/// field: containerd's importer (`ctr images import`, containerd 1.6
/// images/archive/importer.go) takes a tar holding `oci-layout` as an OCI
/// layout, ignores manifest.json, and names the image by
/// `io.containerd.image.name` as written; `podman load` tries an OCI
/// archive before a docker one (containers/common libimage/load.go) and
/// names it by `io.containerd.image.name` before
/// `org.opencontainers.image.ref.name` (libimage/pull.go,
/// nameFromAnnotations), keeping a qualified name as it is; `docker load`
/// reads manifest.json's `RepoTags` with its graph-driver store and the
/// OCI index through containerd's importer with the containerd store. `org.opencontainers.image.ref.name` holds the
/// tag, as `docker save` writes it: the OCI image-layout spec allows a tag
/// or a full reference there, and a tag lets `skopeo copy
/// oci-archive:nodeproof-image.tar:0.1.0` pick the image by its version.
pub fn write(out: &Path, reference: &str, meta: &Meta, files: &[File]) -> Result<Written> {
    let b = blobs(meta, files)?;
    let reference = reference.to_string();
    let index = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": b.manifest.0,
            "size": b.manifest.1.len(),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {
                // containerd's import names the image by this one.
                "io.containerd.image.name": reference,
                "org.opencontainers.image.ref.name": meta.version,
            },
        }],
    });
    let blob_path = |digest: &str| format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"));
    let docker_manifest = json!([{
        "Config": blob_path(&b.config.0),
        "RepoTags": [reference],
        "Layers": [blob_path(&b.layer.0)],
    }]);
    let docs: Vec<(String, Vec<u8>)> = vec![
        (
            "oci-layout".into(),
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ),
        ("index.json".into(), serde_json::to_vec(&index)?),
        (
            "manifest.json".into(),
            serde_json::to_vec(&docker_manifest)?,
        ),
        (blob_path(&b.layer.0), b.layer.1),
        (blob_path(&b.config.0), b.config.1),
        (blob_path(&b.manifest.0), b.manifest.1),
    ];
    let layout = out.join("oci");
    if layout.exists() {
        std::fs::remove_dir_all(&layout)
            .with_context(|| format!("clearing {}", layout.display()))?;
    }
    let mut tarball = tar::Builder::new(Vec::new());
    let mut dirs: Vec<&str> = vec!["blobs/", "blobs/sha256/"];
    let mut sorted: Vec<&(String, Vec<u8>)> = docs.iter().collect();
    sorted.sort_by(|a, c| a.0.cmp(&c.0));
    for d in dirs.drain(..) {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_mtime(meta.epoch);
        h.set_size(0);
        tarball.append_data(&mut h, d, std::io::empty())?;
    }
    for (path, bytes) in sorted {
        let mut h = tar::Header::new_ustar();
        h.set_mode(0o644);
        h.set_mtime(meta.epoch);
        h.set_size(bytes.len() as u64);
        tarball.append_data(&mut h, path, bytes.as_slice())?;
        // The layout directory holds the OCI files only.
        if path != "manifest.json" {
            let target = layout.join(path);
            std::fs::create_dir_all(target.parent().unwrap_or(&layout))?;
            std::fs::write(&target, bytes)
                .with_context(|| format!("writing {}", target.display()))?;
        }
    }
    let tar_path = out.join("nodeproof-image.tar");
    std::fs::create_dir_all(out)?;
    std::fs::write(&tar_path, tarball.into_inner()?)
        .with_context(|| format!("writing {}", tar_path.display()))?;
    Ok(Written {
        reference,
        digest: b.manifest.0,
        layout,
        tarball: tar_path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(epoch: u64) -> Meta {
        Meta {
            version: "0.1.0".into(),
            revision: "abc".into(),
            source: None,
            epoch,
        }
    }

    #[test]
    fn ldd_output_names_the_libraries_and_the_loader_not_the_vdso() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                    \tlibseccomp.so.2 => /lib/x86_64-linux-gnu/libseccomp.so.2 (0x00007f1)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f3)\n";
        assert_eq!(
            parse_ldd(text).unwrap(),
            [
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib/x86_64-linux-gnu/libseccomp.so.2",
                "/lib64/ld-linux-x86-64.so.2"
            ]
            .map(PathBuf::from)
        );
        let missing = parse_ldd("\tlibnope.so.1 => not found\n").unwrap_err();
        assert!(missing.to_string().contains("libnope.so.1"), "{missing}");
    }

    /// The reference is written once, in the base's kustomization, with the
    /// crate's version as its tag; the README's path (c) and the docs say
    /// the same one.
    #[test]
    fn the_deployed_reference_is_the_kustomizations_and_the_docs_say_it() {
        let text = std::fs::read_to_string(root().join(KUSTOMIZATION)).unwrap();
        let version = env!("CARGO_PKG_VERSION");
        let reference = deployed_reference(&text, version).unwrap();
        assert_eq!(reference, format!("localhost/nodeproof:{version}"));
        for doc in ["README.md", "docs/operations.md"] {
            let said = std::fs::read_to_string(root().join(doc)).unwrap();
            assert!(said.contains(&reference), "{doc} does not name {reference}");
        }
        let other = deployed_reference(&text, "9.9.9").unwrap_err();
        assert!(other.to_string().contains("set newTag to 9.9.9"), "{other}");
        let two = "images:\n  - {name: a, newName: x, newTag: '1'}\n  - {name: b, newName: y, newTag: '1'}\n";
        assert!(deployed_reference(two, "1").is_err());
    }

    #[test]
    fn times_are_rfc3339_in_utc() {
        assert_eq!(rfc3339(0).unwrap(), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400).unwrap(), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_465_776).unwrap(), "2026-12-05T10:16:16Z");
    }

    /// The same files and epoch give the same digest, in another directory
    /// and another run; another epoch, another digest. /bin/true stands in
    /// for the binary (a dynamic executable `ldd` resolves the same way).
    #[test]
    fn the_digest_depends_on_the_files_and_the_epoch_only() {
        let files = files(Path::new("/bin/true")).unwrap();
        assert!(
            files.iter().any(|f| f.path.ends_with("/libc.so.6")),
            "{:?}",
            files.iter().map(|f| &f.path).collect::<Vec<_>>()
        );
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let name = "localhost/nodeproof:0.1.0";
        let first = write(a.path(), name, &meta(1_700_000_000), &files).unwrap();
        let again = write(b.path(), name, &meta(1_700_000_000), &files).unwrap();
        assert_eq!(first.digest, again.digest);
        assert_eq!(
            std::fs::read(&first.tarball).unwrap(),
            std::fs::read(&again.tarball).unwrap()
        );
        let later = write(b.path(), name, &meta(1_700_000_001), &files).unwrap();
        assert_ne!(first.digest, later.digest);
        assert_eq!(first.reference, name);
        // The layout holds what the index names.
        let index: serde_json::Value =
            serde_json::from_slice(&std::fs::read(first.layout.join("index.json")).unwrap())
                .unwrap();
        assert_eq!(index["manifests"][0]["digest"], first.digest.as_str());
        let annotations = &index["manifests"][0]["annotations"];
        assert_eq!(annotations["io.containerd.image.name"], name);
        assert_eq!(annotations["org.opencontainers.image.ref.name"], "0.1.0");
        let blob = first
            .layout
            .join("blobs/sha256")
            .join(first.digest.trim_start_matches("sha256:"));
        assert_eq!(sha256(&std::fs::read(blob).unwrap()), first.digest);
    }

    #[test]
    fn the_layer_is_sorted_owned_by_root_and_dated_by_the_epoch() {
        let files = vec![
            File {
                path: "/usr/bin/nodeproof".into(),
                bytes: b"bin".to_vec(),
                mode: 0o755,
            },
            File {
                path: "/etc/passwd".into(),
                bytes: b"root".to_vec(),
                mode: 0o644,
            },
        ];
        let bytes = layer(&files, 42).unwrap();
        let mut archive = tar::Archive::new(bytes.as_slice());
        let mut seen = Vec::new();
        for e in archive.entries().unwrap() {
            let e = e.unwrap();
            let h = e.header();
            assert_eq!(
                (h.uid().unwrap(), h.gid().unwrap(), h.mtime().unwrap()),
                (0, 0, 42)
            );
            seen.push((e.path().unwrap().display().to_string(), h.mode().unwrap()));
        }
        assert_eq!(
            seen,
            [
                ("etc/".to_string(), 0o755),
                ("etc/passwd".into(), 0o644),
                ("tmp/".into(), 0o1777),
                ("usr/".into(), 0o755),
                ("usr/bin/".into(), 0o755),
                ("usr/bin/nodeproof".into(), 0o755),
            ]
        );
        let twice = [files.clone(), files].concat();
        assert!(layer(&twice, 42).is_err());
    }
}
