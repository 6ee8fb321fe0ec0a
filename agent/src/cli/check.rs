//! `nodeproof check` (one round of what `run` does) and `nodeproof preflight`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};

use nodeproof::checks::profiles;
use nodeproof::config::Config;
use nodeproof_findings::{Condition, Finding, Status};
use nodeproof_kube::credentials::Lookup;

use super::gpu::gpu_cycle;
use super::{exit, Format};

/// `check --report`: where and as whom to report (docs/reporting.md).
#[derive(clap::Args, Clone)]
pub(crate) struct ReportArgs {
    /// Also write the node conditions and their events to the API server, then exit.
    #[arg(long)]
    pub(crate) report: bool,
    /// Kubeconfig to read this node's pods and report with (default: the kubelet's,
    /// then in-cluster; none: the pods are not judged and a report is only logged).
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// The Node's name (default: NODE_NAME, then the hostname).
    #[arg(long)]
    pub(crate) node_name: Option<String>,
}

/// One round of exactly what `run` does (`checks::node_round`), printed;
/// `--report` writes it as the agent would.
pub(crate) fn check(
    root: &Path,
    config: &Config,
    output: Format,
    report: &ReportArgs,
) -> Result<ExitCode> {
    let mut config = config.clone();
    if report.kubeconfig.is_some() {
        config.report.kubeconfig = report.kubeconfig.clone();
    }
    if report.node_name.is_some() {
        config.report.node_name = report.node_name.clone();
    }
    let round = nodeproof::checks::node_round(root, &config);
    // The lookup `connect` makes for the pods and the report (the same inputs,
    // the same answer): said on stderr, and in `-o json` as `credentials`.
    let credentials = nodeproof_kube::connect::lookup(&config.report);
    eprintln!("credentials: {}", credentials.describe());
    print_check(
        &round.findings,
        &round.conditions,
        Some(&credentials),
        output,
    )?;
    if report.report {
        report_conditions(&round.conditions, &config)?;
    }
    Ok(exit(round.conditions.iter().all(Condition::is_true)))
}

pub(crate) fn preflight(root: &Path, config: &Config, output: Format) -> Result<ExitCode> {
    let opts = profiles::lint_options(&config.seccomp);
    let layout = nodeproof::preflight::Layout::default();
    let findings = nodeproof::preflight::run(root, &opts, gpu_cycle(config), &layout);
    print_check(&findings, &[], None, output)?;
    Ok(exit(findings.iter().all(|f| f.status != Status::Failed)))
}

/// After the checks ran (they never wait on the API server): write their conditions.
fn report_conditions(conditions: &[Condition], config: &Config) -> Result<()> {
    let done = nodeproof_kube::report_once(conditions, &config.report, Duration::from_secs(30))
        .context("could not report to the API server")?;
    eprintln!(
        "reported node {} with {}: {} status writes, {} event writes",
        done.node, done.credentials, done.stats.status_writes, done.stats.event_writes
    );
    Ok(())
}

fn print_check(
    findings: &[Finding],
    conditions: &[Condition],
    credentials: Option<&Lookup>,
    output: Format,
) -> Result<()> {
    let mut out = std::io::stdout().lock();
    if output == Format::Json {
        let mut v = serde_json::json!({ "conditions": conditions, "findings": findings });
        if let Some(c) = credentials {
            v["credentials"] = c.to_json();
        }
        serde_json::to_writer(&mut out, &v)?;
        writeln!(out)?;
        return Ok(());
    }
    let width = findings
        .iter()
        .map(|f| f.subject.len())
        .max()
        .unwrap_or(7)
        .clamp(7, 60);
    writeln!(
        out,
        "{:<16} {:<width$} {:<8} DETAIL",
        "CHECK", "SUBJECT", "STATUS"
    )?;
    for f in findings {
        let status = match f.status {
            Status::Ok => "ok",
            Status::Warning => "warning",
            Status::Failed => "FAILED",
        };
        writeln!(
            out,
            "{:<16} {:<width$} {:<8} {}",
            f.check, f.subject, status, f.message
        )?;
    }
    writeln!(out)?;
    for c in conditions {
        writeln!(out, "{}={} ({}): {}", c.kind, c.status, c.reason, c.message)?;
    }
    Ok(())
}
