//! The `[daemon]` section: `nodeproof run`'s listener and periods. It
//! lives with the composition (not in `daemon`) because the daemon reads
//! the whole config: a section there would make config and daemon import
//! each other.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

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
    /// Seconds the API server's reads or writes may keep failing before
    /// `/readyz` fails (`nodeproof_report::reach`).
    #[serde(default = "default_readiness_unreachable")]
    pub readiness_unreachable_s: u64,
    /// Where the agent keeps what outlives a restart (the profiles'
    /// versions, the recordings of `[record]`). `None`: systemd's
    /// `$STATE_DIRECTORY` (the unit's `StateDirectory=nodeproof`), else
    /// nothing is kept ([`DaemonConfig::state_dir_in`]).
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
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

fn default_readiness_unreachable() -> u64 {
    nodeproof_report::reach::UNREACHABLE_AFTER.as_secs()
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            listen: default_listen(),
            gpu_interval_s: default_gpu_interval(),
            profile_resync_s: default_profile_resync(),
            readiness_unreachable_s: default_readiness_unreachable(),
            state_dir: None,
        }
    }
}

impl DaemonConfig {
    /// The state directory: `state-dir`, else the first path of `env`
    /// (systemd's `$STATE_DIRECTORY`, which joins several with `:`);
    /// `None`: nowhere (what would be kept stays in memory).
    pub fn state_dir_in(&self, env: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
        self.state_dir.clone().or_else(|| {
            env.and_then(|v| std::env::split_paths(v).next())
                .filter(|p| !p.as_os_str().is_empty())
        })
    }

    /// [`DaemonConfig::state_dir_in`] this process's environment.
    pub fn state_dir(&self) -> Option<PathBuf> {
        self.state_dir_in(std::env::var_os("STATE_DIRECTORY").as_deref())
    }

    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.gpu_interval_s == 0 {
            p.push("daemon.gpu-interval-s must be at least 1".to_string());
        }
        if self.readiness_unreachable_s == 0 {
            p.push("daemon.readiness-unreachable-s must be at least 1".to_string());
        }
        if self.profile_resync_s == 0 {
            p.push("daemon.profile-resync-s must be at least 1".to_string());
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn the_state_dir_is_the_config_s_then_systemd_s_first_then_none() {
        let c = DaemonConfig::default();
        assert_eq!(c.state_dir_in(None), None);
        assert_eq!(c.state_dir_in(Some(OsStr::new(""))), None);
        assert_eq!(
            c.state_dir_in(Some(OsStr::new("/var/lib/nodeproof:/var/lib/other"))),
            Some(PathBuf::from("/var/lib/nodeproof"))
        );
        let set = DaemonConfig {
            state_dir: Some("/srv/np".into()),
            ..c
        };
        assert_eq!(
            set.state_dir_in(Some(OsStr::new("/var/lib/x"))),
            Some(PathBuf::from("/srv/np"))
        );
    }
}
