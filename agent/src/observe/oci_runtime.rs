//! The CRI runtime's configuration files read on this node, and crun's
//! `--version` asked; the parsing is pure (`crate::judge::oci_runtime`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nodeproof_seccomp::lint::Runtime;
use nodeproof_seccomp::oci_runtime::OciRuntimeKind;

use crate::judge::oci_runtime::{
    containerd_runtime, crio_runtime, crun_release, Configured, CrunRelease, OciRuntimeSetting,
    VersionError, CONTAINERD_CONF, CRIO_CONF, CRIO_CONF_D,
};

/// The OCI runtime `setting` names, or the one the node's `cri` runtime is
/// configured with (with its binary when detected).
pub fn resolve(setting: OciRuntimeSetting, cri: Runtime) -> Configured {
    let named = |kind: OciRuntimeKind| Configured {
        kind,
        binary: kind.as_str().to_string(),
    };
    match setting {
        OciRuntimeSetting::Runc => named(OciRuntimeKind::Runc),
        OciRuntimeSetting::Crun => named(OciRuntimeKind::Crun),
        OciRuntimeSetting::Auto => detect(cri),
    }
}

/// Reads the CRI runtime's configuration files on this node.
pub fn detect(cri: Runtime) -> Configured {
    match cri {
        Runtime::Crio => {
            let mut files = vec![PathBuf::from(CRIO_CONF)];
            if let Ok(dir) = std::fs::read_dir(CRIO_CONF_D) {
                let mut drop_ins: Vec<PathBuf> = dir
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "conf"))
                    .collect();
                drop_ins.sort();
                files.extend(drop_ins);
            }
            let texts: Vec<String> = files.iter().filter_map(|f| read(f)).collect();
            crio_runtime(&texts)
        }
        Runtime::Containerd => containerd_runtime(read(Path::new(CONTAINERD_CONF)).as_deref()),
    }
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .map_err(|e| tracing::debug!(path = %path.display(), error = %e, "runtime config not read"))
        .ok()
}

/// The crun release `binary` is: `binary --version`, run for at most `timeout`.
pub fn crun_version(binary: &str, timeout: Duration) -> Result<CrunRelease, VersionError> {
    let spawn = |source| VersionError::Spawn {
        binary: binary.to_string(),
        source,
    };
    let mut child = Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(spawn)?;
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait().map_err(spawn)? {
            Some(_) => break,
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(VersionError::Timeout {
                    binary: binary.to_string(),
                    timeout,
                });
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    let mut said = String::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_string(&mut said).map_err(spawn)?;
    }
    crun_release(&said).ok_or_else(|| VersionError::Unrecognised {
        binary: binary.to_string(),
        said: said.lines().next().unwrap_or("").to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::oci_runtime::VERSION_TIMEOUT;

    #[test]
    fn a_version_that_never_comes_is_a_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let slow = dir.path().join("crun");
        std::fs::write(&slow, "#!/bin/sh\nexec sleep 30\n").unwrap();
        std::fs::set_permissions(&slow, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let started = Instant::now();
        let e = crun_version(&slow.to_string_lossy(), Duration::from_millis(200)).unwrap_err();
        assert!(matches!(e, VersionError::Timeout { .. }), "{e}");
        assert!(started.elapsed() < Duration::from_secs(10));
        let e =
            crun_version(&dir.path().join("none").to_string_lossy(), VERSION_TIMEOUT).unwrap_err();
        assert!(matches!(e, VersionError::Spawn { .. }), "{e}");
    }
}
