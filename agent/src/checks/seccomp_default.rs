//! `seccomp-default`: whether the kubelet runs containers that name no
//! seccomp profile under the runtime's RuntimeDefault (`seccompDefault`,
//! GA in Kubernetes 1.27, off unless set) or Unconfined, where every
//! syscall is allowed and a profile edit can never be what denied one.
//!
//! Read as the kubelet reads it (kubelet's `loadConfigFile` and
//! `kubeletConfigFlagPrecedence` in cmd/kubelet/app/server.go): the
//! `--config` file, the `--config-dir` drop-ins over it in name order, the
//! command line's `--seccomp-default` over both; unset, false.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nodeproof_findings::reason::OwnReason;
use nodeproof_findings::{Check, Finding, Status};
use serde::Deserialize;
use strum::{EnumString, IntoStaticStr, VariantArray};

use super::{Command, Context, NodeCheck, Outcome, Schedule};
use crate::observe::kubelet::{self, Unit};

/// The CHECK column of its findings.
pub const CHECK: Check = Check::named("seccomp-default");

/// How often `run` reads the kubelet's configuration again (it changes
/// with a kubelet restart, rarely).
const PERIOD: Duration = Duration::from_secs(300);

/// What the kubelet does with a container that names no seccomp profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, IntoStaticStr, EnumString, VariantArray)]
pub enum SeccompDefaultReason {
    /// RuntimeDefault.
    SeccompDefaultEnabled,
    /// Unconfined: set false, or not set.
    SeccompDefaultDisabled,
    /// The configuration the kubelet is started with cannot be read or
    /// parsed (the kubelet itself would not start).
    KubeletConfigUnreadable,
    /// No kubelet.service on this host (skipped).
    NoKubelet,
}

impl OwnReason for SeccompDefaultReason {
    fn meaning(self) -> &'static str {
        match self {
            SeccompDefaultReason::SeccompDefaultEnabled => {
                "containers without a seccompProfile run under RuntimeDefault"
            }
            SeccompDefaultReason::SeccompDefaultDisabled => {
                "containers without a seccompProfile run Unconfined (a warning)"
            }
            SeccompDefaultReason::KubeletConfigUnreadable => {
                "the kubelet's --config, --config-dir or --seccomp-default cannot be read (a warning)"
            }
            SeccompDefaultReason::NoKubelet => "no kubelet.service on this host (skipped)",
        }
    }
}

pub struct SeccompDefault;

impl NodeCheck for SeccompDefault {
    fn name(&self) -> &'static str {
        "seccomp-default"
    }
    fn about(&self) -> &'static str {
        "Whether the kubelet runs containers that name no seccomp profile under RuntimeDefault (seccompDefault) or Unconfined"
    }
    fn findings(&self) -> &'static [Check] {
        &[CHECK]
    }
    fn reasons(&self) -> Vec<(&'static str, &'static str)> {
        SeccompDefaultReason::all_with_meanings()
    }
    fn commands(&self) -> &'static [Command] {
        &[Command::Check, Command::Preflight, Command::Run]
    }
    fn schedule(&self) -> Schedule {
        Schedule::Every(PERIOD)
    }
    fn round(&self, cx: &Context<'_>, _command: Command) -> Outcome {
        let unit = kubelet::unit(&cx.kubelet.unit_dirs, &cx.kubelet.host);
        let configs = kubelet::config_files(&unit, &cx.kubelet.host);
        crate::judge::Round {
            findings: vec![judge(&unit, &configs)],
            conditions: Vec::new(),
        }
        .into()
    }
}

/// The part of a KubeletConfiguration this check reads.
#[derive(Deserialize)]
struct KubeletConfiguration {
    #[serde(rename = "seccompDefault")]
    seccomp_default: Option<bool>,
}

/// Where the value in force came from.
enum Source<'a> {
    Flag(&'a str),
    File(&'a Path),
    Default,
}

/// The finding for the kubelet `unit` starts, with its configuration
/// files as read (`configs`: the `--config` file, then the drop-ins).
pub fn judge(unit: &Unit, configs: &[(PathBuf, Result<String, String>)]) -> Finding {
    let finding =
        |status, reason: SeccompDefaultReason, subject: String, message: String| Finding {
            check: CHECK,
            subject,
            status,
            reason: reason.into(),
            message,
            detail: (!unit.argv.is_empty())
                .then(|| format!("kubelet command line: {}", unit.argv.join(" "))),
        };
    if unit.files.is_empty() {
        return finding(
            Status::Skipped,
            SeccompDefaultReason::NoKubelet,
            "kubelet.service".into(),
            "no kubelet.service on this host: no kubelet whose seccompDefault to check".into(),
        );
    }
    let mut value = (false, Source::Default);
    for (path, text) in configs {
        let parsed = text.as_ref().map_err(String::clone).and_then(|t| {
            serde_saphyr::from_str::<KubeletConfiguration>(t).map_err(|e| e.to_string())
        });
        match parsed {
            Ok(c) => {
                if let Some(v) = c.seccomp_default {
                    value = (v, Source::File(path));
                }
            }
            Err(e) => {
                let first = e.lines().next().unwrap_or_default().to_string();
                return finding(
                    Status::Warning,
                    SeccompDefaultReason::KubeletConfigUnreadable,
                    path.display().to_string(),
                    format!(
                        "the kubelet's configuration {} cannot be read ({first}): fix it, or the kubelet does not start",
                        path.display()
                    ),
                );
            }
        }
    }
    let flag = unit.bool_flag("seccomp-default");
    match &flag {
        Some(Ok(v)) => value = (*v, Source::Flag(if *v { "--seccomp-default" } else { "--seccomp-default=false" })),
        Some(Err(bad)) => {
            return finding(
                Status::Warning,
                SeccompDefaultReason::KubeletConfigUnreadable,
                "kubelet.service".into(),
                format!("the kubelet is started with --seccomp-default={bad}, which is not a boolean: the kubelet refuses it; give true or false"),
            )
        }
        None => {}
    }
    let set_it = match (&value.1, unit.flag("config")) {
        (Source::Flag(_), _) | (_, None) => "start the kubelet with --seccomp-default".to_string(),
        (_, Some(c)) => format!("set seccompDefault: true in {c}"),
    };
    let (subject, said) = match value.1 {
        Source::Flag(f) => (
            "kubelet.service".to_string(),
            format!("the kubelet is started with {f}"),
        ),
        Source::File(p) => (
            p.display().to_string(),
            format!("seccompDefault: {} in {}", value.0, p.display()),
        ),
        Source::Default => (
            "kubelet.service".to_string(),
            "seccompDefault is not set (the kubelet's default is false)".to_string(),
        ),
    };
    if value.0 {
        finding(
            Status::Ok,
            SeccompDefaultReason::SeccompDefaultEnabled,
            subject,
            format!("containers that name no seccomp profile run under RuntimeDefault ({said})"),
        )
    } else {
        finding(
            Status::Warning,
            SeccompDefaultReason::SeccompDefaultDisabled,
            subject,
            format!("{said}: containers that name no seccomp profile run Unconfined; {set_it} and restart the kubelet"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(args: &[&str]) -> Unit {
        Unit {
            files: vec![PathBuf::from("/lib/systemd/system/kubelet.service")],
            user: None,
            argv: std::iter::once("/usr/bin/kubelet")
                .chain(args.iter().copied())
                .map(String::from)
                .collect(),
        }
    }

    fn file(path: &str, text: &str) -> (PathBuf, Result<String, String>) {
        (PathBuf::from(path), Ok(text.to_string()))
    }

    fn said(f: &Finding) -> (Status, SeccompDefaultReason, &str, &str) {
        (
            f.status,
            f.reason.named().unwrap(),
            f.subject.as_str(),
            f.message.as_str(),
        )
    }

    const CONFIG: &str = "/var/lib/kubelet/config.yaml";

    #[test]
    fn unset_is_unconfined_and_names_the_file_to_set_it_in() {
        let f = judge(
            &unit(&["--config=/var/lib/kubelet/config.yaml"]),
            &[file(CONFIG, "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n")],
        );
        assert_eq!(said(&f), (
            Status::Warning,
            SeccompDefaultReason::SeccompDefaultDisabled,
            "kubelet.service",
            "seccompDefault is not set (the kubelet's default is false): containers that name no seccomp profile run Unconfined; set seccompDefault: true in /var/lib/kubelet/config.yaml and restart the kubelet",
        ));
        // No --config at all: the flag is the way.
        let f = judge(&unit(&[]), &[]);
        assert!(
            f.message
                .ends_with("start the kubelet with --seccomp-default and restart the kubelet"),
            "{}",
            f.message
        );
    }

    #[test]
    fn drop_ins_override_the_file_and_the_flag_overrides_both() {
        let on = file(CONFIG, "kind: KubeletConfiguration\nseccompDefault: true\n");
        let f = judge(&unit(&["--config", CONFIG]), std::slice::from_ref(&on));
        assert_eq!(said(&f), (
            Status::Ok,
            SeccompDefaultReason::SeccompDefaultEnabled,
            CONFIG,
            "containers that name no seccomp profile run under RuntimeDefault (seccompDefault: true in /var/lib/kubelet/config.yaml)",
        ));
        let off = file(
            "/etc/kubernetes/kubelet.conf.d/50-off.conf",
            "seccompDefault: false\n",
        );
        let f = judge(&unit(&["--config", CONFIG]), &[on.clone(), off.clone()]);
        assert_eq!(
            (f.status, f.subject.as_str()),
            (
                Status::Warning,
                "/etc/kubernetes/kubelet.conf.d/50-off.conf"
            )
        );
        let f = judge(
            &unit(&["--config", CONFIG, "--seccomp-default"]),
            &[on.clone(), off],
        );
        assert_eq!(said(&f).1, SeccompDefaultReason::SeccompDefaultEnabled);
        assert_eq!(f.message, "containers that name no seccomp profile run under RuntimeDefault (the kubelet is started with --seccomp-default)");
        let f = judge(
            &unit(&["--config", CONFIG, "--seccomp-default=false"]),
            &[on],
        );
        assert_eq!(said(&f).1, SeccompDefaultReason::SeccompDefaultDisabled);
        assert!(
            f.message
                .starts_with("the kubelet is started with --seccomp-default=false: "),
            "{}",
            f.message
        );
        assert!(
            f.message
                .contains("start the kubelet with --seccomp-default "),
            "{}",
            f.message
        );
    }

    #[test]
    fn what_the_kubelet_would_refuse_is_said_and_no_kubelet_is_skipped() {
        let f = judge(
            &unit(&["--config", CONFIG]),
            &[(
                PathBuf::from(CONFIG),
                Err("No such file or directory (os error 2)".into()),
            )],
        );
        assert_eq!(said(&f), (
            Status::Warning,
            SeccompDefaultReason::KubeletConfigUnreadable,
            CONFIG,
            "the kubelet's configuration /var/lib/kubelet/config.yaml cannot be read (No such file or directory (os error 2)): fix it, or the kubelet does not start",
        ));
        let f = judge(
            &unit(&["--config", CONFIG]),
            &[file(CONFIG, "seccompDefault: maybe\n")],
        );
        assert_eq!(said(&f).1, SeccompDefaultReason::KubeletConfigUnreadable);
        let f = judge(&unit(&["--seccomp-default=yes"]), &[]);
        assert_eq!(said(&f).1, SeccompDefaultReason::KubeletConfigUnreadable);
        let f = judge(&Unit::default(), &[]);
        assert_eq!(
            (f.status, said(&f).1),
            (Status::Skipped, SeccompDefaultReason::NoKubelet)
        );
    }

    /// The check as `preflight` and `check` run it, over a host's files.
    #[test]
    fn a_kubeadm_node_with_seccomp_default_set_in_its_config_is_ok() {
        let dir = tempfile::tempdir().unwrap();
        let layout = crate::observe::kubelet::Layout::under(dir.path());
        let unit_dir = &layout.unit_dirs[0];
        std::fs::create_dir_all(unit_dir.join("kubelet.service.d")).unwrap();
        std::fs::write(
            unit_dir.join("kubelet.service"),
            "[Service]\nExecStart=/usr/bin/kubelet\n",
        )
        .unwrap();
        std::fs::write(
            unit_dir.join("kubelet.service.d/10-kubeadm.conf"),
            "[Service]\nEnvironment=\"KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml\"\nExecStart=\nExecStart=/usr/bin/kubelet $KUBELET_CONFIG_ARGS\n",
        )
        .unwrap();
        std::fs::create_dir_all(&layout.kubelet_root).unwrap();
        std::fs::write(
            layout.kubelet_root.join("config.yaml"),
            "kind: KubeletConfiguration\nseccompDefault: true\n",
        )
        .unwrap();
        let config =
            crate::config::Config::parse(crate::config::EMBEDDED_DEFAULT, Path::new("config.toml"))
                .unwrap();
        let lints = std::sync::Arc::default();
        let cx = Context {
            config: &config,
            seccomp_root: dir.path(),
            kubelet: &layout,
            lints: &lints,
            api: None,
        };
        let out = SeccompDefault.round(&cx, Command::Preflight);
        let f = &out.round.findings[0];
        assert_eq!(
            (f.status, f.subject.clone()),
            (
                Status::Ok,
                layout
                    .kubelet_root
                    .join("config.yaml")
                    .display()
                    .to_string()
            )
        );
        std::fs::write(
            layout.kubelet_root.join("config.yaml"),
            "kind: KubeletConfiguration\n",
        )
        .unwrap();
        let out = SeccompDefault.round(&cx, Command::Run);
        assert_eq!(out.round.findings[0].status, Status::Warning);
    }
}
