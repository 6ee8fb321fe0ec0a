//! `nodeproof cluster policy|check`: the cluster side, with a cluster
//! reader's credentials (see docs/cluster.md).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use clap::{Subcommand, ValueEnum};

use nodeproof_cluster::check::{self, baseline};
use nodeproof_cluster::policy::{self, GpuGate, Mode, MutatingVersion};

use super::{exit, parse_duration, Format, OutputArgs};
use nodeproof::config::Config;

#[derive(Subcommand)]
pub(crate) enum ClusterCommand {
    /// Print ValidatingAdmissionPolicies (and bindings) that hold pods of each annotated
    /// RuntimeClass to its Localhost seccomp profiles, ready for `kubectl apply -f -`.
    Policy {
        /// Deny: refuse such pods; warn: admit them with a warning and an audit annotation.
        #[arg(long, value_enum, default_value_t = ModeArg::Deny)]
        mode: ModeArg,
        /// Kubeconfig to read the RuntimeClasses with (default: KUBECONFIG, ~/.kube/config, in-cluster).
        #[arg(long, conflicts_with = "from")]
        kubeconfig: Option<PathBuf>,
        /// The kubeconfig's context to use instead of its current-context (as kubectl --context).
        #[arg(long, conflicts_with = "from")]
        context: Option<String>,
        /// Read the RuntimeClasses from this YAML file instead of the cluster.
        #[arg(long)]
        from: Option<PathBuf>,
        /// Optional: also print a MutatingAdmissionPolicy adding a scheduling gate to pods
        /// requesting nvidia.com/gpu in these namespaces (comma-separated).
        #[arg(long, value_delimiter = ',', value_name = "NAMESPACES")]
        gate_gpu: Vec<String>,
        /// The gate --gate-gpu adds (the gate controller's config names it).
        #[arg(
            long,
            default_value = "nodeproof.dev/gpu-driver-ready",
            requires = "gate_gpu"
        )]
        gpu_gate: String,
        /// The MutatingAdmissionPolicy version the cluster serves: v1alpha1 (1.32, 1.33),
        /// v1beta1 (1.34, 1.35), v1 (1.36+); alpha and beta need the feature gate.
        #[arg(long, value_enum, default_value_t = MutatingVersionArg::V1beta1, requires = "gate_gpu")]
        mutating_version: MutatingVersionArg,
    },
    /// One-shot check of the cluster (Metrics API registered, available, serving and
    /// fresh, nodeproof on every node, contracts, gated and misplaced pods, HPAs, the old
    /// master role), optionally against a baseline; exit 0 all good, 1 problems or
    /// regressions, 2 could not check.
    Check {
        /// Kubeconfig (default: KUBECONFIG, ~/.kube/config, in-cluster).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// The kubeconfig's context to use instead of its current-context (as kubectl --context).
        #[arg(long)]
        context: Option<String>,
        #[command(flatten)]
        out: OutputArgs,
        /// Report pods held by scheduling gates for longer than this.
        #[arg(long, value_parser = parse_duration, default_value = "10m")]
        gated_longer_than: Duration,
        /// nodeproof's conditions with an older lastHeartbeatTime are stale (three heartbeats).
        #[arg(long, value_parser = parse_duration, default_value = "15m")]
        heartbeat_max_age: Duration,
        /// NodeMetrics with an older timestamp are stale.
        #[arg(long, value_parser = parse_duration, default_value = "2m")]
        metrics_max_age: Duration,
        /// How many times the NodeMetrics list is requested to measure its latency.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..=100))]
        metrics_samples: u16,
        /// The Metrics API's p99 latency above this is a problem.
        #[arg(long, value_parser = parse_duration, default_value = "1s")]
        metrics_latency_max: Duration,
        /// Record this check as a baseline in FILE (versioned JSON), to compare after an
        /// upgrade with --baseline.
        #[arg(long, value_name = "FILE")]
        save_baseline: Option<PathBuf>,
        /// Compare with the baseline in FILE: print what regressed, improved and changed;
        /// a regression exits 1.
        #[arg(long, value_name = "FILE")]
        baseline: Option<PathBuf>,
        /// Warning Events are counted by reason over this window (for the baseline).
        #[arg(long, value_parser = parse_duration, default_value = "1h")]
        events_window: Duration,
        /// While the API server does not answer (refused, reset, 5xx, 429), read again with
        /// backoff for up to this long, saying so on stderr, before exiting 2 (a CronJob's pod
        /// may start before its network reaches the Service, or during a control-plane restart).
        #[arg(long, value_parser = parse_duration, default_value = "2m")]
        api_wait: Duration,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum MutatingVersionArg {
    V1alpha1,
    V1beta1,
    V1,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum ModeArg {
    Deny,
    Warn,
}

pub(crate) fn run(command: ClusterCommand, config: &Config) -> Result<ExitCode> {
    match command {
        ClusterCommand::Policy {
            mode,
            kubeconfig,
            context,
            from,
            gate_gpu,
            gpu_gate,
            mutating_version,
        } => {
            let gpu_gate = (!gate_gpu.is_empty()).then_some(GpuGate {
                namespaces: gate_gpu,
                gate: gpu_gate,
                version: match mutating_version {
                    MutatingVersionArg::V1alpha1 => MutatingVersion::V1alpha1,
                    MutatingVersionArg::V1beta1 => MutatingVersion::V1beta1,
                    MutatingVersionArg::V1 => MutatingVersion::V1,
                },
            });
            policy_command(mode, kubeconfig, context, from, gpu_gate.as_ref())
        }
        ClusterCommand::Check {
            kubeconfig,
            context,
            out,
            gated_longer_than,
            heartbeat_max_age,
            metrics_max_age,
            metrics_samples,
            metrics_latency_max,
            save_baseline,
            baseline,
            events_window,
            api_wait,
        } => check_command(
            kubeconfig,
            context,
            out.output,
            &check::Options {
                gated_longer_than,
                heartbeat_max_age,
                metrics_max_age,
                metrics_latency_max,
                // The gates as the gate controller reads them: the same
                // conditions and staleness judge the pods they released.
                gates: config.gate.policy(),
            },
            &Baselines {
                save: save_baseline,
                compare: baseline,
                events_window,
            },
            metrics_samples.into(),
            api_wait,
        ),
    }
}

/// Exit 2: the cluster could not be read, so nothing was checked.
const COULD_NOT_CHECK: u8 = 2;

/// `--save-baseline`, `--baseline` and the window they count Events over.
struct Baselines {
    save: Option<PathBuf>,
    compare: Option<PathBuf>,
    events_window: Duration,
}

/// Says why nothing was checked (stderr, and the document in -o json|yaml).
fn could_not_check(output: Format, e: &anyhow::Error) -> ExitCode {
    let text = super::error_text(e);
    eprintln!("nodeproof cluster check: could not check: {text}");
    if output.structured() {
        println!(
            "{}",
            super::error_document(output, &format!("could not check: {text}"), COULD_NOT_CHECK)
        );
    }
    ExitCode::from(COULD_NOT_CHECK)
}

fn check_command(
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
    output: Format,
    opts: &check::Options,
    baselines: &Baselines,
    metrics_samples: usize,
    api_wait: Duration,
) -> Result<ExitCode> {
    // The baseline first: a file that cannot be compared stops the check
    // before it costs the cluster anything.
    let before = match baselines.compare.as_deref().map(baseline::load).transpose() {
        Ok(b) => b,
        Err(e) => return Ok(could_not_check(output, &e.into())),
    };
    let read_opts = check::ReadOptions {
        metrics_samples,
        warning_events: baselines.save.is_some() || before.is_some(),
    };
    let read = runtime()?.block_on(async {
        let client =
            nodeproof_apiclient::cluster_connect::client(kubeconfig.as_deref(), context.as_deref())
                .await?;
        read_waiting(&client, read_opts, api_wait).await
    });
    let snapshot = match read {
        Ok(s) => s,
        Err(e) => return Ok(could_not_check(output, &e)),
    };
    let now = SystemTime::now();
    let mut report = check::evaluate(&snapshot, now, opts);
    if read_opts.warning_events {
        let after = baseline::Baseline::record(&snapshot, &report, now, baselines.events_window);
        if let Some(path) = &baselines.save {
            if let Err(e) = baseline::save(path, &after) {
                return Ok(could_not_check(output, &e.into()));
            }
            eprintln!("baseline saved to {}", path.display());
        }
        report.baseline = before.map(|b| baseline::compare(&b, &after));
    }
    match output {
        Format::Text => print!("{}", check::render_text(&report)),
        Format::Json | Format::Yaml => print!("{}", super::document(output, &report, true)?),
    }
    Ok(exit(report.ok()))
}

/// `check::read`, read again while the API server does not answer
/// (`ReadError::is_transient`), with kube-runtime's backoff (0.8 s doubling
/// to 30 s, jittered), for up to `wait`: one line on stderr per retry.
async fn read_waiting(
    client: &nodeproof_apiclient::Client,
    opts: check::ReadOptions,
    wait: Duration,
) -> Result<check::Snapshot> {
    let until = std::time::Instant::now() + wait;
    let mut backoff = nodeproof_apiclient::watch::retry_delays();
    loop {
        match check::read(client, opts).await {
            Ok(s) => return Ok(s),
            Err(e) if e.is_transient() => {
                let left = until.saturating_duration_since(std::time::Instant::now());
                let delay = backoff.next().unwrap_or(Duration::from_secs(30)).min(left);
                if wait.is_zero() {
                    return Err(e.into());
                }
                if delay.is_zero() {
                    return Err(anyhow::Error::new(e).context(format!(
                        "the API server did not answer for {} s (--api-wait)",
                        wait.as_secs()
                    )));
                }
                eprintln!(
                    "nodeproof cluster check: {}; retrying in {:.1} s",
                    super::error_text(&anyhow::Error::new(e)),
                    delay.as_secs_f64()
                );
                tokio::time::sleep(delay).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")
}

fn policy_command(
    mode: ModeArg,
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
    from: Option<PathBuf>,
    gpu_gate: Option<&GpuGate>,
) -> Result<ExitCode> {
    let classes = match from {
        Some(path) => {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            policy::runtime_classes_from_yaml(&path.display().to_string(), &text)?
        }
        None => runtime()?.block_on(async {
            let client = nodeproof_apiclient::cluster_connect::client(
                kubeconfig.as_deref(),
                context.as_deref(),
            )
            .await?;
            policy::runtime_classes(&client)
                .await
                .context("cannot list RuntimeClasses")
        })?,
    };
    let (contracts, unusable) = policy::contracts(&classes);
    for e in &unusable {
        eprintln!("skipped: {e}");
    }
    let mode = match mode {
        ModeArg::Deny => Mode::Deny,
        ModeArg::Warn => Mode::Warn,
    };
    print!("{}", policy::render(&contracts, mode, gpu_gate)?);
    Ok(ExitCode::SUCCESS)
}
