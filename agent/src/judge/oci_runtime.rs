//! Which OCI runtime the node's CRI runtime starts containers with, read
//! from its configuration: CRI-O's `default_runtime` and that runtime's
//! `runtime_path` (`/etc/crio/crio.conf`, then `/etc/crio/crio.conf.d/*.conf`
//! in name order, later files winning, as CRI-O merges them); containerd's
//! CRI `default_runtime_name` and that runtime's `options.BinaryName`
//! (`/etc/containerd/config.toml`, config version 2 and 3). Parsing is pure;
//! [`detect`] reads the files. A crun found so has its release read from
//! `crun --version` ([`crun_version`]).

use std::path::Path;
use std::time::Duration;

use nodeproof_seccomp::oci_runtime::{CrunVersion, OciRuntimeKind};
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

/// The OCI runtime a CRI runtime is configured with: which one, and the
/// binary it runs (a path, or a name looked up on PATH).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Configured {
    pub kind: OciRuntimeKind,
    pub binary: String,
}

/// CRI-O: the last `crio.runtime.default_runtime` of `configs` (in merge
/// order), and that runtime's `runtime_path`. CRI-O's own default runtime is
/// crun (since CRI-O 1.31; what most distributions' CRI-O packages run), so
/// no setting means crun.
pub fn crio_runtime(configs: &[String]) -> Configured {
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
    let binary = path.unwrap_or(&name).to_string();
    Configured {
        kind: kind_of(&binary).unwrap_or(OciRuntimeKind::Crun),
        binary,
    }
}

/// containerd: the CRI plugin's `containerd.default_runtime_name` (default
/// `runc`) and that runtime's `options.BinaryName` (default `runc` on PATH).
pub fn containerd_runtime(config: Option<&str>) -> Configured {
    let runc = || Configured {
        kind: OciRuntimeKind::Runc,
        binary: "runc".into(),
    };
    let Some(doc) = config.and_then(|t| t.parse::<toml::Table>().ok()) else {
        return runc();
    };
    // v2: plugins."io.containerd.grpc.v1.cri".containerd; v3: plugins."io.containerd.cri.v1.runtime".containerd.
    let cri = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime"]
        .iter()
        .find_map(|p| doc.get("plugins")?.get(p)?.get("containerd"));
    let Some(cri) = cri else {
        return runc();
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
    match binary.and_then(|b| Some((kind_of(b)?, b))) {
        Some((kind, binary)) => Configured {
            kind,
            binary: binary.to_string(),
        },
        None => runc(),
    }
}

/// A crun release as `crun --version` names it, and the modelled release
/// its behaviour is predicted with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CrunRelease {
    /// A release of a series the model was learned from (1.8.x, 1.21.x).
    Modelled(CrunVersion),
    /// Another release (`found`): predicted as the nearest modelled series.
    Nearest { found: String, nearest: CrunVersion },
}

impl CrunRelease {
    /// The modelled release predictions use.
    pub fn modelled(&self) -> CrunVersion {
        match self {
            CrunRelease::Modelled(v) => *v,
            CrunRelease::Nearest { nearest, .. } => *nearest,
        }
    }
}

/// The release in `crun --version`'s output (its first line is `crun
/// version 1.8.1`), or `None` when that is not crun's.
pub fn crun_release(version_output: &str) -> Option<CrunRelease> {
    let found = version_output
        .lines()
        .next()?
        .trim()
        .strip_prefix("crun version ")?
        .split_whitespace()
        .next()?;
    let mut parts = found.split('.').map(|p| p.parse::<u32>().ok());
    let (major, minor) = (parts.next()??, parts.next().flatten().unwrap_or(0));
    const MODELLED: [(u32, CrunVersion); 2] = [(8, CrunVersion::V1_8), (21, CrunVersion::V1_21)];
    if let Some(&(_, v)) = MODELLED.iter().find(|(m, _)| major == 1 && minor == *m) {
        return Some(CrunRelease::Modelled(v));
    }
    // The nearest series by minor release (a tie goes to the newer); any
    // 0.x is nearest 1.8, any 2.x or later nearest 1.21.
    let nearest = match major {
        0 => CrunVersion::V1_8,
        1 => {
            MODELLED
                .iter()
                .min_by_key(|(m, _)| (minor.abs_diff(*m), u32::MAX - m))
                .expect("two modelled releases")
                .1
        }
        _ => CrunVersion::V1_21,
    };
    Some(CrunRelease::Nearest {
        found: found.to_string(),
        nearest,
    })
}

/// How long `crun --version` may take before the release counts as unknown.
pub const VERSION_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    #[error("cannot run `{binary} --version`")]
    Spawn {
        binary: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{binary} --version` did not finish within {timeout:?}")]
    Timeout { binary: String, timeout: Duration },
    #[error("`{binary} --version` said {said:?}, which names no crun release")]
    Unrecognised { binary: String, said: String },
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
        assert_eq!(crio_runtime(&[]).kind, OciRuntimeKind::Crun);
        assert_eq!(crio_runtime(&[]).binary, "crun");
        let base = "[crio.runtime]\ndefault_runtime = \"runc\"\n[crio.runtime.runtimes.runc]\nruntime_path = \"/usr/bin/runc\"\n".to_string();
        assert_eq!(
            crio_runtime(std::slice::from_ref(&base)).kind,
            OciRuntimeKind::Runc
        );
        // A later drop-in wins, and the runtime's path decides, not its name.
        let drop_in = "[crio.runtime]\ndefault_runtime = \"fast\"\n[crio.runtime.runtimes.fast]\nruntime_path = \"/usr/libexec/crio/crun\"\n".to_string();
        assert_eq!(
            crio_runtime(&[base, drop_in]),
            Configured {
                kind: OciRuntimeKind::Crun,
                binary: "/usr/libexec/crio/crun".into()
            }
        );
    }

    #[test]
    fn containerd_reads_binary_name_of_the_default_runtime() {
        assert_eq!(containerd_runtime(None).kind, OciRuntimeKind::Runc);
        let v2 = r#"version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "crun"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun.options]
  BinaryName = "/usr/bin/crun"
"#;
        assert_eq!(containerd_runtime(Some(v2)).binary, "/usr/bin/crun");
        let v3 = r#"version = 3
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  BinaryName = "/usr/local/bin/crun"
"#;
        assert_eq!(containerd_runtime(Some(v3)).kind, OciRuntimeKind::Crun);
        assert_eq!(
            containerd_runtime(Some("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\nsnapshotter = \"overlayfs\"\n")).kind,
            OciRuntimeKind::Runc
        );
    }

    #[test]
    fn crun_versions_map_to_the_modelled_releases() {
        let modelled = |s: &str| crun_release(s).map(|r| r.modelled());
        assert_eq!(
            crun_release("crun version 1.8.1\ncommit: abc\nspec: 1.0.0\n+SYSTEMD +SELINUX"),
            Some(CrunRelease::Modelled(CrunVersion::V1_8))
        );
        assert_eq!(
            crun_release("crun version 1.21\ncommit: x"),
            Some(CrunRelease::Modelled(CrunVersion::V1_21))
        );
        assert_eq!(
            crun_release("crun version 1.14.4"),
            Some(CrunRelease::Nearest {
                found: "1.14.4".into(),
                nearest: CrunVersion::V1_8
            })
        );
        assert_eq!(modelled("crun version 1.15"), Some(CrunVersion::V1_21));
        assert_eq!(modelled("crun version 1.23.1"), Some(CrunVersion::V1_21));
        assert_eq!(modelled("crun version 0.17"), Some(CrunVersion::V1_8));
        assert_eq!(modelled("crun version 2.0"), Some(CrunVersion::V1_21));
        assert_eq!(crun_release("runc version 1.1.5"), None);
        assert_eq!(crun_release(""), None);
        assert_eq!(crun_release("crun version x.y"), None);
    }
}
