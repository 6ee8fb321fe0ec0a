//! The agent's configuration file (TOML). Parsing is pure; every problem
//! is reported at once, with the offending key.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use nodeproof_cluster::gate::config::GateConfig;
use nodeproof_gpu::GpuConfig;
use nodeproof_report::config::ReportConfig;

pub use crate::judge::profiles::SeccompConfig;
mod daemon;
mod record;
pub use daemon::DaemonConfig;
pub use record::{parse_selector, RecordConfig};

/// The configuration compiled into the binary, used when no file is given.
pub const EMBEDDED_DEFAULT: &str = include_str!("../../../systemd/config.toml");

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
    /// The pods `nodeproof run` records (off by default).
    #[serde(default)]
    pub record: RecordConfig,
    /// `nodeproof gate-controller` only (cluster mode).
    #[serde(default)]
    pub gate: GateConfig,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// TOML syntax: the parse stops at the first one, so it is the only problem reported.
    #[error("invalid config {path}:{line}:{column}: {message} (a syntax error ends the parse: nothing after it was checked)")]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    /// Unknown keys and wrong types (`line:column: ...`, in file order), then
    /// the values out of range, all at once.
    #[error("invalid config {path}: {}", problems.join("; "))]
    Problems {
        path: PathBuf,
        problems: Vec<String>,
    },
}

/// At most this many unknown keys or wrong types are collected (each costs a
/// deserialization of the remaining document).
const MAX_SCHEMA_PROBLEMS: usize = 32;

/// Deserializes `text`, collecting every unknown key and wrong type: serde
/// stops at the first, so the offending entry is removed from the parsed
/// document (which keeps every other entry's position) and the rest is
/// deserialized again, until it passes (a removed entry takes its default,
/// so the values of the others can be checked too) or cannot go on (`None`).
/// `Err`: the syntax error, as (line, column, message).
type Schema = (Option<Config>, Vec<String>);

fn deserialize_all(text: &str) -> Result<Schema, (usize, usize, String)> {
    let doc = toml_edit::ImDocument::parse(text).map_err(|e| {
        let (line, column) = e.span().map_or((1, 1), |s| line_column(text, s.start));
        (line, column, e.message().to_string())
    })?;
    let mut root = doc.as_table().clone();
    let mut problems = Vec::new();
    loop {
        let e = match toml_edit::de::from_document::<Config>(toml_edit::DocumentMut::from(
            root.clone(),
        )) {
            Ok(config) => return Ok((Some(config), problems)),
            Err(e) => e,
        };
        let at = e.span().map(|s| s.start);
        let (line, column) = at.map_or((1, 1), |a| line_column(text, a));
        problems.push(format!("{line}:{column}: {}", e.message()));
        // No position, nothing to remove, or too many: what was found is the answer.
        let removed = at.is_some_and(|a| remove_entry_at(&mut root, a));
        if !removed || problems.len() >= MAX_SCHEMA_PROBLEMS {
            return Ok((None, problems));
        }
    }
}

/// Removes the entry whose key or value holds byte `at`, in the innermost
/// table that does. False when none does.
fn remove_entry_at(table: &mut dyn toml_edit::TableLike, at: usize) -> bool {
    let inside = |span: Option<std::ops::Range<usize>>| span.is_some_and(|s| s.contains(&at));
    let mut hit = None;
    for (key, item) in table.iter() {
        let key_span = table.key(key).and_then(toml_edit::Key::span);
        if inside(key_span) || inside(item.span()) || contains_position(item, at) {
            hit = Some(key.to_string());
            break;
        }
    }
    let Some(key) = hit else { return false };
    let key_span = table.key(&key).and_then(toml_edit::Key::span);
    let child = table.get_mut(&key).and_then(|item| match item {
        toml_edit::Item::Table(t) => Some(t as &mut dyn toml_edit::TableLike),
        toml_edit::Item::Value(toml_edit::Value::InlineTable(t)) => Some(t),
        _ => None,
    });
    if !inside(key_span) {
        if let Some(child) = child {
            if remove_entry_at(child, at) {
                return true;
            }
        }
    }
    table.remove(&key).is_some()
}

/// Whether a table (its header, or any entry in it) spans byte `at`: a
/// `[section]` table's own span covers only its header.
fn contains_position(item: &toml_edit::Item, at: usize) -> bool {
    let inside = |span: Option<std::ops::Range<usize>>| span.is_some_and(|s| s.contains(&at));
    match item {
        toml_edit::Item::Table(t) => {
            inside(t.span())
                || t.iter().any(|(k, v)| {
                    inside(t.key(k).and_then(toml_edit::Key::span))
                        || inside(v.span())
                        || contains_position(v, at)
                })
        }
        _ => false,
    }
}

/// 1-based line and column (in characters) of byte `at`.
fn line_column(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

impl Config {
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let (config, mut problems) =
            deserialize_all(text).map_err(|(line, column, message)| ConfigError::Syntax {
                path: path.to_path_buf(),
                line,
                column,
                message,
            })?;
        let Some(config) = config else {
            return Err(ConfigError::Problems {
                path: path.to_path_buf(),
                problems,
            });
        };
        problems.extend(config.gpu.problems());
        problems.extend(config.report.problems());
        problems.extend(config.daemon.problems());
        problems.extend(config.record.problems());
        problems.extend(config.gate.problems());
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
    use nodeproof_findings::ConditionType;
    use nodeproof_report::conditions::Hysteresis;
    use std::time::Duration;

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
            p.per_kind[&ConditionType::GPUHealthy],
            Hysteresis {
                to_bad: 3,
                to_good: 5
            }
        );
        assert_eq!(
            p.per_kind[&ConditionType::SeccompProfilesReady],
            Hysteresis::IMMEDIATE
        );
        let c = Config::parse(
            "[report.hysteresis.SeccompProfilesReady]\nto-bad = 2\n",
            Path::new("c.toml"),
        )
        .unwrap();
        assert_eq!(
            c.report.policy().per_kind[&ConditionType::SeccompProfilesReady],
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
    fn every_unknown_key_and_wrong_type_is_reported_with_its_position() {
        let daemon_keys =
            "expected one of `listen`, `gpu-interval-s`, `profile-resync-s`, `readiness-unreachable-s`, `state-dir`";
        let cases: &[(&str, &str)] = &[
            (
                "[daemon]\nnope = 1\n",
                &format!("2:1: unknown field `nope`, {daemon_keys}"),
            ),
            (
                // Two unknown keys in one table, a wrong type in another, and a
                // value problem of a key that is fine: all in one run.
                "[seccomp]\nroots = \"/x\"\nno-new-privileges = \"yes\"\n\
                 [daemon]\nnope = 1\ngpu-interval-s = 0\nalso = 2\n",
                &format!(
                    "2:1: unknown field `roots`, expected one of `root`, `runtime`, `no-new-privileges`, `oci-runtime`; \
                     3:21: invalid type: string \"yes\", expected a boolean; \
                     5:1: unknown field `nope`, {daemon_keys}; \
                     7:1: unknown field `also`, {daemon_keys}; \
                     daemon.gpu-interval-s must be at least 1"
                ),
            ),
            (
                "[gpu.xid]\nfatal = \"79\"\n[gpu.memory]\necc-max = 1\n[nope]\nx = 1\n",
                "2:9: invalid type: string \"79\", expected a sequence; \
                 4:1: unknown field `ecc-max`, expected one of `ecc-volatile-uncorrected-max`, \
                 `ecc-aggregate-uncorrected-max`, `retired-pages-pending`, `row-remap-pending`, \
                 `row-remap-failed`; \
                 5:2: unknown field `nope`, expected one of `seccomp`, `gpu`, `report`, `daemon`, `record`, `gate`",
            ),
            (
                "[report.hysteresis.GPUHealthy]\nto-bad = -1\nto_good = 1\n",
                "2:10: invalid value: integer `-1`, expected u32; \
                 3:1: unknown field `to_good`, expected `to-bad` or `to-good`",
            ),
        ];
        for (text, want) in cases {
            let e = Config::parse(text, Path::new("c.toml")).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("invalid config c.toml: {want}"),
                "{text}"
            );
        }
    }

    #[test]
    fn gate_section_typed_with_positions() {
        let text = "[gate]\nheartbeat-s = 60\n[gate.gates.\"nodeproof.dev/gpu-driver-ready\"]\n\
                    conditions = [\"GPUDriverReady\", \"GPUHealthy\"]\n";
        let c = Config::parse(text, Path::new("c.toml")).unwrap();
        let p = c.gate.policy();
        assert_eq!(p.stale_after, Duration::from_secs(180));
        assert_eq!(p.gates.len(), 1, "a gates table replaces the defaults");
        assert_eq!(
            p.gates[0].conditions,
            [ConditionType::GPUDriverReady, ConditionType::GPUHealthy]
        );
        let text = "[gate]\nstale-heartbeats = 0\n[gate.gates.\"x/\"]\n\
                    conditions = [\"GPUReady\"]\nruntime-class-contract = true\n";
        let e = Config::parse(text, Path::new("c.toml")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid config c.toml: 4:15: unknown variant `GPUReady`, expected one of \
             `SeccompProfilesReady`, `SeccompTracingReady`, `GPUDriverReady`, `GPUHealthy`; \
             3:1: missing field `conditions`; gate.stale-heartbeats must be at least 1"
        );
        let text = "[gate]\nstale-heartbeats = 0\n[gate.gates.\"x/\"]\nruntime-class-contract = true\nconditions = []\n";
        let e = Config::parse(text, Path::new("c.toml")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid config c.toml: gate.stale-heartbeats must be at least 1; \
             gate.gates.\"x/\": not a qualified name (a scheduling gate's name is `prefix/name` or `name`, as a label key)"
        );
    }

    #[test]
    fn a_syntax_error_is_the_only_problem_reported_with_its_position() {
        let e = Config::parse("[daemon]\nnope = 1\nlisten = \n", Path::new("c.toml")).unwrap_err();
        assert!(
            matches!(
                e,
                ConfigError::Syntax {
                    line: 3,
                    column: 10,
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "invalid config c.toml:3:10: invalid string\nexpected `\"`, `'` (a syntax error ends the parse: nothing after it was checked)"
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
            "invalid config c.toml: 2:11: unknown variant `docker`, expected one of `auto`, `containerd`, `crio`"
        );
    }
}
