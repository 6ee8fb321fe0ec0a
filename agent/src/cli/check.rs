//! `nodeproof check` (one round of what `run` does) and `nodeproof preflight`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};

use nodeproof::config::Config;
use nodeproof_findings::{Condition, Finding, NotJudged, Status};
use nodeproof_report::credentials::Lookup;
use nodeproof_report::events::PodEvent;

use super::{exit, Format};
use nodeproof::checks::Command;

/// `check --report`: where and as whom to report (docs/reporting.md).
#[derive(clap::Args, Clone)]
pub(crate) struct ReportArgs {
    /// Also write the node conditions and their events to the API server, then exit.
    #[arg(long)]
    pub(crate) report: bool,
    /// Kubeconfig to read this node's pods and report with (default: the kubelet's,
    /// then in-cluster; none found: the pods are not judged, which `check` says,
    /// and a report is only logged). One that cannot be used exits 3.
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// The --kubeconfig file's context instead of its current-context (as kubectl --context).
    #[arg(long, requires = "kubeconfig")]
    pub(crate) context: Option<String>,
    /// The Node's name (default: NODE_NAME, then the hostname).
    #[arg(long)]
    pub(crate) node_name: Option<String>,
}

/// Exit 3: something `check` was to judge was not judged (the pods, with
/// credentials given or found that do not work); it wins over 1, since the
/// conditions printed are then not the whole answer.
pub(crate) const NOT_JUDGED: u8 = 3;

/// One round of exactly what `run` does (`oneshot::node_round`), printed;
/// `--report` writes it as the agent would: the conditions and the pods'
/// Events.
pub(crate) fn check(
    root: &Path,
    config: &Config,
    output: Format,
    report: &ReportArgs,
) -> Result<ExitCode> {
    let mut config = config.clone();
    if report.kubeconfig.is_some() {
        config.report.kubeconfig = report.kubeconfig.clone();
        config.report.context = report.context.clone();
    }
    if report.node_name.is_some() {
        config.report.node_name = report.node_name.clone();
    }
    // One runtime and one connection: the pods, DRA and the report share it.
    let session = nodeproof::oneshot::Session::open(&config);
    let round = nodeproof::oneshot::node_round(Command::Check, root, &config, Some(&session));
    // The lookup `connect` makes for the pods and the report (the same inputs,
    // the same answer): said on stderr, and in `-o json` as `credentials`.
    let credentials = nodeproof_apiclient::connect::lookup(&config.report);
    eprintln!("credentials: {}", credentials.describe());
    print_check(
        &round.findings,
        &round.conditions,
        &round.not_judged,
        Some(&credentials),
        output,
    )?;
    if report.report {
        report_conditions(session, &round.conditions, &round.events, &config)?;
    }
    Ok(check_exit(&round.conditions, &round.not_judged))
}

/// 0 every condition True and everything judged that was to be; 3 when
/// something that was to be judged was not ([`NOT_JUDGED`]); else 1.
fn check_exit(conditions: &[Condition], not_judged: &[NotJudged]) -> ExitCode {
    if not_judged.iter().any(|n| n.fails) {
        ExitCode::from(NOT_JUDGED)
    } else {
        exit(conditions.iter().all(Condition::is_true))
    }
}

/// What the kubelet needs before it starts, as far as this node alone can
/// tell: every check of the registry that preflight runs, the API server
/// not asked.
pub(crate) fn preflight(root: &Path, config: &Config, output: Format) -> Result<ExitCode> {
    let round = nodeproof::oneshot::node_round(Command::Preflight, root, config, None);
    let findings = round.findings;
    print_check(&findings, &[], &[], None, output)?;
    Ok(exit(findings.iter().all(|f| f.status != Status::Failed)))
}

/// After the checks ran (they never wait on the API server): write their
/// conditions and the pods' Events.
fn report_conditions(
    session: nodeproof::oneshot::Session,
    conditions: &[Condition],
    events: &[PodEvent],
    config: &Config,
) -> Result<()> {
    let deadline = Duration::from_secs(30);
    let done = session
        .report(conditions, events, config, deadline)
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
    not_judged: &[NotJudged],
    credentials: Option<&Lookup>,
    output: Format,
) -> Result<()> {
    let mut out = std::io::stdout().lock();
    if output.structured() {
        let mut v = serde_json::json!({
            "conditions": conditions,
            "findings": findings,
            "not_judged": not_judged,
        });
        if let Some(c) = credentials {
            v["credentials"] = c.to_json();
        }
        write!(out, "{}", super::document(output, &v, false)?)?;
        return Ok(());
    }
    let width = findings
        .iter()
        .map(|f| f.subject.len())
        .max()
        .unwrap_or(7)
        .clamp(7, 60);
    // The CHECK column fits the longest name (`static-pod-profile`).
    let cw = findings
        .iter()
        .map(|f| f.check.as_str().len())
        .max()
        .unwrap_or(0)
        .max(16);
    writeln!(
        out,
        "{:<cw$} {:<width$} {:<8} DETAIL",
        "CHECK", "SUBJECT", "STATUS"
    )?;
    for f in findings {
        writeln!(
            out,
            "{:<cw$} {:<width$} {:<8} {}",
            f.check,
            f.subject,
            f.status.as_str(),
            f.message
        )?;
    }
    writeln!(out)?;
    for c in conditions {
        writeln!(out, "{}={} ({}): {}", c.kind, c.status, c.reason, c.message)?;
    }
    for n in not_judged {
        writeln!(out, "{n}")?;
    }
    Ok(())
}
