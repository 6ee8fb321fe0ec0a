//! Which OCI runtime the node's CRI runtime starts containers with, read
//! from its configuration: CRI-O's `default_runtime` and that runtime's
//! `runtime_path` (`/etc/crio/crio.conf`, then `/etc/crio/crio.conf.d/*.conf`
//! in name order, later files winning, as CRI-O merges them); containerd's
//! CRI `default_runtime_name` and that runtime's `options.BinaryName`
//! (`/etc/containerd/config.toml`, config version 2 and 3). Parsing is pure;
//! [`detect`] reads the files.

use std::path::{Path, PathBuf};

use nodeproof_seccomp::lint::Runtime;
use nodeproof_seccomp::oci_runtime::OciRuntimeKind;
use serde::Deserialize;
use toml::Value;

/// `seccomp.oci-runtime` in the config: which OCI runtime's behaviour is predicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OciRuntimeSetting {
    /// Read from the CRI runtime's configuration on this node.
    #[default]
    Auto,
    Runc,
    Crun,
}

pub const CRIO_CONF: &str = "/etc/crio/crio.conf";
pub const CRIO_CONF_D: &str = "/etc/crio/crio.conf.d";
pub const CONTAINERD_CONF: &str = "/etc/containerd/config.toml";

/// The OCI runtime `setting` names, or the one the node's `cri` runtime is configured with.
pub fn resolve(setting: OciRuntimeSetting, cri: Runtime) -> OciRuntimeKind {
    match setting {
        OciRuntimeSetting::Runc => OciRuntimeKind::Runc,
        OciRuntimeSetting::Crun => OciRuntimeKind::Crun,
        OciRuntimeSetting::Auto => detect(cri),
    }
}

/// Reads the CRI runtime's configuration files on this node.
pub fn detect(cri: Runtime) -> OciRuntimeKind {
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

/// CRI-O: the last `crio.runtime.default_runtime` of `configs` (in merge
/// order), and that runtime's `runtime_path`. CRI-O's own default runtime is
/// crun (since CRI-O 1.31; what most distributions' CRI-O packages run), so
/// no setting means crun.
pub fn crio_runtime(configs: &[String]) -> OciRuntimeKind {
    let mut name = None;
    let mut paths: Vec<(String, String)> = Vec::new();
    for text in configs {
        let Ok(doc) = text.parse::<toml::Table>() else {
            tracing::debug!("a CRI-O config file is not valid TOML; skipped");
            continue;
        };
        let runtime = doc.get("crio").and_then(|c| c.get("runtime"));
        if let Some(n) = runtime
            .and_then(|r| r.get("default_runtime"))
            .and_then(Value::as_str)
        {
            name = Some(n.to_string());
        }
        if let Some(runtimes) = runtime
            .and_then(|r| r.get("runtimes"))
            .and_then(Value::as_table)
        {
            for (n, r) in runtimes {
                if let Some(p) = r.get("runtime_path").and_then(Value::as_str) {
                    paths.push((n.clone(), p.to_string()));
                }
            }
        }
    }
    let name = name.unwrap_or_else(|| "crun".into());
    let path = paths
        .iter()
        .rev()
        .find(|(n, _)| *n == name)
        .map(|(_, p)| p.as_str());
    kind_of(path.unwrap_or(&name)).unwrap_or(OciRuntimeKind::Crun)
}

/// containerd: the CRI plugin's `containerd.default_runtime_name` (default
/// `runc`) and that runtime's `options.BinaryName` (default `runc` on PATH).
pub fn containerd_runtime(config: Option<&str>) -> OciRuntimeKind {
    let Some(doc) = config.and_then(|t| t.parse::<toml::Table>().ok()) else {
        return OciRuntimeKind::Runc;
    };
    // v2: plugins."io.containerd.grpc.v1.cri".containerd; v3: plugins."io.containerd.cri.v1.runtime".containerd.
    let cri = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime"]
        .iter()
        .find_map(|p| doc.get("plugins")?.get(p)?.get("containerd"));
    let Some(cri) = cri else {
        return OciRuntimeKind::Runc;
    };
    let name = cri
        .get("default_runtime_name")
        .and_then(Value::as_str)
        .unwrap_or("runc");
    let binary = cri
        .get("runtimes")
        .and_then(|r| r.get(name))
        .and_then(|r| r.get("options"))
        .and_then(|o| o.get("BinaryName"))
        .and_then(Value::as_str);
    binary.and_then(kind_of).unwrap_or(OciRuntimeKind::Runc)
}

/// runc or crun from a binary's path or a runtime's name.
fn kind_of(path_or_name: &str) -> Option<OciRuntimeKind> {
    let base = Path::new(path_or_name).file_name()?.to_string_lossy();
    if base.contains("crun") {
        Some(OciRuntimeKind::Crun)
    } else if base.contains("runc") {
        Some(OciRuntimeKind::Runc)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crio_defaults_to_crun_and_follows_default_runtime() {
        assert_eq!(crio_runtime(&[]), OciRuntimeKind::Crun);
        let base = "[crio.runtime]\ndefault_runtime = \"runc\"\n[crio.runtime.runtimes.runc]\nruntime_path = \"/usr/bin/runc\"\n".to_string();
        assert_eq!(
            crio_runtime(std::slice::from_ref(&base)),
            OciRuntimeKind::Runc
        );
        // A later drop-in wins, and the runtime's path decides, not its name.
        let drop_in = "[crio.runtime]\ndefault_runtime = \"fast\"\n[crio.runtime.runtimes.fast]\nruntime_path = \"/usr/libexec/crio/crun\"\n".to_string();
        assert_eq!(crio_runtime(&[base, drop_in]), OciRuntimeKind::Crun);
    }

    #[test]
    fn containerd_reads_binary_name_of_the_default_runtime() {
        assert_eq!(containerd_runtime(None), OciRuntimeKind::Runc);
        let v2 = r#"version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "crun"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun.options]
  BinaryName = "/usr/bin/crun"
"#;
        assert_eq!(containerd_runtime(Some(v2)), OciRuntimeKind::Crun);
        let v3 = r#"version = 3
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  BinaryName = "/usr/local/bin/crun"
"#;
        assert_eq!(containerd_runtime(Some(v3)), OciRuntimeKind::Crun);
        assert_eq!(
            containerd_runtime(Some("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\nsnapshotter = \"overlayfs\"\n")),
            OciRuntimeKind::Runc
        );
    }
}
