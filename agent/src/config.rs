//! The agent's configuration file (TOML). Parsing is pure; every problem
//! is reported at once, with the offending key.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::gpu::GpuConfig;
use crate::profile::node::CONDITION;
use crate::report::conditions::{Hysteresis, Policy, OWNED_TYPES};

/// The configuration compiled into the binary, used when no file is given.
pub const EMBEDDED_DEFAULT: &str = include_str!("../../systemd/config.toml");

/// The path a packaged install reads.
pub const DEFAULT_PATH: &str = "/etc/nodeproof/config.toml";

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub seccomp: SeccompConfig,
    #[serde(default)]
    pub gpu: GpuConfig,
    #[serde(default)]
    pub report: ReportConfig,
    #[serde(default)]
    pub daemon: DaemonConfig,
}

/// `nodeproof run`: the long-running agent.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct DaemonConfig {
    /// Where `/healthz`, `/readyz` and `/metrics` are served.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Seconds between GPU probe cycles.
    #[serde(default = "default_gpu_interval")]
    pub gpu_interval_s: u64,
    /// Seconds between full re-lints of the seccomp root (changes are seen
    /// at once through inotify; this catches what inotify cannot, e.g. a
    /// root that appears later or a remounted directory).
    #[serde(default = "default_profile_resync")]
    pub profile_resync_s: u64,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9810))
}

fn default_gpu_interval() -> u64 {
    10
}

fn default_profile_resync() -> u64 {
    300
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            listen: default_listen(),
            gpu_interval_s: default_gpu_interval(),
            profile_resync_s: default_profile_resync(),
        }
    }
}

impl DaemonConfig {
    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.gpu_interval_s == 0 {
            p.push("daemon.gpu-interval-s must be at least 1".to_string());
        }
        if self.profile_resync_s == 0 {
            p.push("daemon.profile-resync-s must be at least 1".to_string());
        }
        p
    }
}

/// Reporting to the API server (docs/reporting.md); flags override it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ReportConfig {
    /// The Node's name (default: NODE_NAME, then the hostname).
    pub node_name: Option<String>,
    /// Credentials (default: the kubelet's kubeconfig, then in-cluster, else log only).
    pub kubeconfig: Option<PathBuf>,
    /// Label the Node `nodeproof.dev/<condition>=true|false` (node identity suffices).
    #[serde(default)]
    pub labels: bool,
    /// Taint the Node while a GPU condition is bad, with this separate
    /// credential (deploy/rbac-taints.yaml); unset: no taints.
    pub taint_kubeconfig: Option<PathBuf>,
    /// Seconds between heartbeat writes when nothing changed (default 300).
    pub heartbeat_s: Option<u64>,
    /// Consecutive bad results before a condition goes False (default 2).
    pub to_bad: Option<u32>,
    /// Consecutive good results before it recovers (default 3).
    pub to_good: Option<u32>,
    /// Per condition type, e.g. `[report.hysteresis.GPUHealthy] to-bad = 1`.
    #[serde(default)]
    pub hysteresis: BTreeMap<String, HysteresisConfig>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct HysteresisConfig {
    pub to_bad: Option<u32>,
    pub to_good: Option<u32>,
}

impl ReportConfig {
    /// Every problem of the section, each naming its key.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.heartbeat_s == Some(0) {
            out.push("report.heartbeat-s must be at least 1".to_string());
        }
        let mut counts = vec![
            ("report.to-bad".to_string(), self.to_bad),
            ("report.to-good".to_string(), self.to_good),
        ];
        for (kind, h) in &self.hysteresis {
            if !OWNED_TYPES.contains(&kind.as_str()) {
                out.push(format!(
                    "report.hysteresis.{kind}: not a condition nodeproof reports (one of {})",
                    OWNED_TYPES.join(", ")
                ));
            }
            counts.push((format!("report.hysteresis.{kind}.to-bad"), h.to_bad));
            counts.push((format!("report.hysteresis.{kind}.to-good"), h.to_good));
        }
        out.extend(
            counts
                .into_iter()
                .filter(|(_, v)| *v == Some(0))
                .map(|(k, _)| format!("{k} must be at least 1")),
        );
        out
    }

    /// The reporter's policy for a long-running agent (a one-shot run has no history to smooth).
    pub fn policy(&self) -> Policy {
        let mut policy = Policy::default();
        if let Some(s) = self.heartbeat_s {
            policy.heartbeat = Duration::from_secs(s);
        }
        let base = Hysteresis {
            to_bad: self.to_bad.unwrap_or(policy.hysteresis.to_bad),
            to_good: self.to_good.unwrap_or(policy.hysteresis.to_good),
        };
        policy.hysteresis = base;
        // Profiles and pod references are judged from files and API
        // objects, not noisy probes: smoothing would only hold back the
        // pod problem the issue wants said within 5 s. Configurable still.
        policy
            .per_kind
            .insert(CONDITION.to_string(), Hysteresis::IMMEDIATE);
        for (kind, h) in &self.hysteresis {
            policy.per_kind.insert(
                kind.clone(),
                Hysteresis {
                    to_bad: h.to_bad.unwrap_or(base.to_bad),
                    to_good: h.to_good.unwrap_or(base.to_good),
                },
            );
        }
        policy
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SeccompConfig {
    /// The kubelet's seccomp root (`--seccomp-root` overrides it).
    #[serde(default = "default_root")]
    pub root: PathBuf,
    /// `auto`, `containerd` or `crio`.
    #[serde(default = "default_runtime")]
    pub runtime: String,
    /// The noNewPrivileges mode profiles are judged in (containerd's default for pods is false).
    #[serde(default)]
    pub no_new_privileges: bool,
}

fn default_root() -> PathBuf {
    PathBuf::from("/var/lib/kubelet/seccomp")
}

fn default_runtime() -> String {
    "auto".into()
}

impl Default for SeccompConfig {
    fn default() -> Self {
        SeccompConfig {
            root: default_root(),
            runtime: default_runtime(),
            no_new_privileges: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid config {path}")]
    Parse {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error(
        "invalid config {path}: seccomp.runtime must be auto, containerd or crio, not {value:?}"
    )]
    Runtime { path: PathBuf, value: String },
    #[error("invalid config {path}: {}", problems.join("; "))]
    Problems {
        path: PathBuf,
        problems: Vec<String>,
    },
}

impl Config {
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|source| ConfigError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        if !matches!(
            config.seccomp.runtime.as_str(),
            "auto" | "containerd" | "crio"
        ) {
            return Err(ConfigError::Runtime {
                path: path.to_path_buf(),
                value: config.seccomp.runtime.clone(),
            });
        }
        let mut problems = config.gpu.problems();
        problems.extend(config.report.problems());
        problems.extend(config.daemon.problems());
        if !problems.is_empty() {
            return Err(ConfigError::Problems {
                path: path.to_path_buf(),
                problems,
            });
        }
        Ok(config)
    }

    /// Load `path`, or the packaged file when present, else the embedded default.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let chosen = match path {
            Some(p) => Some(p.to_path_buf()),
            None => Some(PathBuf::from(DEFAULT_PATH)).filter(|p| p.exists()),
        };
        match chosen {
            Some(p) => {
                let text = std::fs::read_to_string(&p).map_err(|source| ConfigError::Read {
                    path: p.clone(),
                    source,
                })?;
                Config::parse(&text, &p)
            }
            None => Config::parse(EMBEDDED_DEFAULT, Path::new("<embedded>")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_parses() {
        let c = Config::parse(EMBEDDED_DEFAULT, Path::new("x")).unwrap();
        assert_eq!(c.seccomp, SeccompConfig::default());
        assert_eq!(c.gpu, GpuConfig::default());
        assert_eq!(c.report, ReportConfig::default());
        assert_eq!(c.daemon, DaemonConfig::default());
    }

    #[test]
    fn gpu_policy_problems_are_reported_at_once_with_their_keys() {
        let text = "[gpu]\nnvml-timeout-ms = 0\n[gpu.xid]\nfatal = [79, 13]\nfatal-count = 0\n\
                    [daemon]\ngpu-interval-s = 0\n";
        let e = Config::parse(text, Path::new("c.toml")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid config c.toml: gpu.nvml-timeout-ms must be at least 1; \
             gpu.xid.fatal-count must be at least 1; \
             gpu.xid.fatal and gpu.xid.ignored both list XID 13; \
             daemon.gpu-interval-s must be at least 1"
        );
        let e = Config::parse("[gpu.memory]\necc-max = 1\n", Path::new("c.toml")).unwrap_err();
        assert!(
            format!("{e:?}").contains("unknown field `ecc-max`"),
            "{e:?}"
        );
    }

    #[test]
    fn report_hysteresis_per_condition() {
        let text =
            "[report]\nheartbeat-s = 60\nto-bad = 3\n[report.hysteresis.GPUHealthy]\nto-good = 5\n";
        let c = Config::parse(text, Path::new("c.toml")).unwrap();
        let p = c.report.policy();
        assert_eq!(p.heartbeat, Duration::from_secs(60));
        assert_eq!(
            p.hysteresis,
            Hysteresis {
                to_bad: 3,
                to_good: 3
            }
        );
        assert_eq!(
            p.per_kind["GPUHealthy"],
            Hysteresis {
                to_bad: 3,
                to_good: 5
            }
        );
        assert_eq!(p.per_kind["SeccompProfilesReady"], Hysteresis::IMMEDIATE);
        let c = Config::parse(
            "[report.hysteresis.SeccompProfilesReady]\nto-bad = 2\n",
            Path::new("c.toml"),
        )
        .unwrap();
        assert_eq!(
            c.report.policy().per_kind["SeccompProfilesReady"],
            Hysteresis {
                to_bad: 2,
                to_good: 3
            }
        );
        let text = "[report]\nto-good = 0\n[report.hysteresis.DiskPressure]\nto-bad = 0\n";
        let e = Config::parse(text, Path::new("c.toml")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid config c.toml: report.hysteresis.DiskPressure: not a condition nodeproof reports \
             (one of SeccompProfilesReady, SeccompTracingReady, GPUDriverReady, GPUHealthy); \
             report.to-good must be at least 1; report.hysteresis.DiskPressure.to-bad must be at least 1"
        );
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        let e = Config::parse("[seccomp]\nroots = \"/x\"\n", Path::new("c.toml")).unwrap_err();
        assert!(
            format!("{:?}", e).contains("unknown field `roots`"),
            "{e:?}"
        );
        let e =
            Config::parse("[seccomp]\nruntime = \"docker\"\n", Path::new("c.toml")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid config c.toml: seccomp.runtime must be auto, containerd or crio, not \"docker\""
        );
    }
}
