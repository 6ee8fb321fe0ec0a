//! The oracle's two images, built here as OCI image-layout tarballs and
//! imported with `ctr images import` (no registry): one layer holding the
//! static busybox and a few applet links; a "pause" image whose command
//! sleeps (the sandbox only has to hold the pod's namespaces) and a
//! "busybox" image with no command of its own (the container's comes from
//! the CRI request).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use super::CriError;

/// The sandbox image, as containerd's `sandbox_image` names it.
pub const PAUSE: &str = "nodeproof.test/pause:1";
/// The containers' image.
pub const BUSYBOX_IMAGE: &str = "nodeproof.test/busybox:1";

/// Applets linked into the image.
const APPLETS: &[&str] = &["sh", "true", "false", "sleep", "echo", "ls", "cat"];

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> CriError {
    let what = what.into();
    move |source| CriError::Io { what, source }
}

fn run(cmd: &mut Command, what: &str) -> Result<Vec<u8>, CriError> {
    let out = cmd.output().map_err(io_err(format!("run {what}")))?;
    if !out.status.success() {
        return Err(CriError::Tool {
            what: what.into(),
            stderr: String::from_utf8_lossy(&out.stderr).into(),
        });
    }
    Ok(out.stdout)
}

/// A content-addressed blob in `layout/blobs/sha256/`; its descriptor fields.
fn put_blob(layout: &Path, bytes: &[u8]) -> Result<(String, usize), CriError> {
    let tmp = layout.join("blob.tmp");
    fs::write(&tmp, bytes).map_err(io_err("write blob"))?;
    let digest = sha256_file(&tmp)?;
    fs::rename(&tmp, layout.join("blobs/sha256").join(&digest)).map_err(io_err("store blob"))?;
    Ok((format!("sha256:{digest}"), bytes.len()))
}

fn sha256_file(path: &Path) -> Result<String, CriError> {
    let out = run(Command::new("sha256sum").arg(path), "sha256sum")?;
    let text = String::from_utf8_lossy(&out);
    Ok(text
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string())
}

/// Builds `<dir>/<name>.tar`: an OCI image layout of one image named `name`
/// (containerd's `io.containerd.image.name` annotation) whose config is
/// `config` and whose single layer is `layer_tar`.
fn image_tar(dir: &Path, name: &str, layer_tar: &Path, config: Value) -> Result<PathBuf, CriError> {
    let file_name = name.replace(['/', ':'], "_");
    let layout = dir.join(format!("{file_name}.layout"));
    let _ = fs::remove_dir_all(&layout);
    fs::create_dir_all(layout.join("blobs/sha256")).map_err(io_err("mkdir layout"))?;
    let layer_digest = sha256_file(layer_tar)?;
    let layer_size = fs::metadata(layer_tar).map_err(io_err("stat layer"))?.len();
    fs::copy(layer_tar, layout.join("blobs/sha256").join(&layer_digest))
        .map_err(io_err("copy layer"))?;
    let mut config = config;
    config["architecture"] = json!(go_arch());
    config["os"] = json!("linux");
    // An uncompressed layer: its diff id is its digest.
    config["rootfs"] = json!({"type": "layers", "diff_ids": [format!("sha256:{layer_digest}")]});
    let (config_digest, config_size) =
        put_blob(&layout, &serde_json::to_vec(&config).unwrap_or_default())?;
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": format!("sha256:{layer_digest}"), "size": layer_size}],
    });
    let (manifest_digest, manifest_size) =
        put_blob(&layout, &serde_json::to_vec(&manifest).unwrap_or_default())?;
    let index = json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": manifest_size,
            "platform": {"architecture": go_arch(), "os": "linux"},
            "annotations": {"io.containerd.image.name": name},
        }],
    });
    fs::write(
        layout.join("index.json"),
        serde_json::to_vec(&index).unwrap_or_default(),
    )
    .map_err(io_err("write index.json"))?;
    fs::write(
        layout.join("oci-layout"),
        br#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .map_err(io_err("write oci-layout"))?;
    let tar = dir.join(format!("{file_name}.tar"));
    run(
        Command::new("tar")
            .arg("-C")
            .arg(&layout)
            .arg("-cf")
            .arg(&tar)
            .args(["oci-layout", "index.json", "blobs"]),
        "tar (image)",
    )?;
    Ok(tar)
}

/// GOARCH of this machine, as image configs and platforms spell it.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// Imports the image tarball at `tar` (OCI layout or docker-archive) into
/// containerd's `k8s.io` namespace, unpacked for the `native` snapshotter;
/// what `ctr` printed.
pub fn import(tar: &Path, socket: &Path) -> Result<String, CriError> {
    run(
        Command::new("ctr")
            .arg("--address")
            .arg(socket)
            .args([
                "--namespace",
                "k8s.io",
                "images",
                "import",
                "--snapshotter",
                "native",
            ])
            .arg(tar),
        "ctr images import",
    )
    .map(|out| String::from_utf8_lossy(&out).into_owned())
}

/// Builds both images under `dir` from `busybox` (a static binary) and
/// imports them into containerd's `k8s.io` namespace, unpacked for the
/// `native` snapshotter the CRI plugin uses.
pub fn build_and_import(dir: &Path, busybox: &Path, socket: &Path) -> Result<(), CriError> {
    let root = dir.join("layer");
    let _ = fs::remove_dir_all(&root);
    for d in ["bin", "tmp", "proc", "sys", "dev", "etc"] {
        fs::create_dir_all(root.join(d)).map_err(io_err("mkdir layer"))?;
    }
    fs::copy(busybox, root.join("bin/busybox")).map_err(io_err("copy busybox into the layer"))?;
    for applet in APPLETS {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet))
            .map_err(io_err("symlink applet"))?;
    }
    let layer = dir.join("layer.tar");
    run(
        Command::new("tar")
            .args([
                "--sort=name",
                "--owner=0",
                "--group=0",
                "--numeric-owner",
                "--mtime=@0",
                "-C",
            ])
            .arg(&root)
            .arg("-cf")
            .arg(&layer)
            .arg("."),
        "tar (layer)",
    )?;
    let env = json!(["PATH=/bin"]);
    let images = [
        (
            PAUSE,
            json!({"config": {"Env": env, "Cmd": ["/bin/sleep", "2147483647"]}}),
        ),
        (BUSYBOX_IMAGE, json!({"config": {"Env": env}})),
    ];
    for (name, config) in images {
        import(&image_tar(dir, name, &layer, config)?, socket)?;
    }
    Ok(())
}
