//! `nodeproof cluster policy|check`: the cluster side, with a cluster
//! reader's credentials (see docs/cluster.md).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Subcommand, ValueEnum};

use nodeproof_cluster::policy::{self, Mode};

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
        /// Read the RuntimeClasses from this YAML file instead of the cluster.
        #[arg(long)]
        from: Option<PathBuf>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum ModeArg {
    Deny,
    Warn,
}

pub(crate) fn run(command: ClusterCommand) -> Result<ExitCode> {
    match command {
        ClusterCommand::Policy {
            mode,
            kubeconfig,
            from,
        } => policy_command(mode, kubeconfig, from),
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
    from: Option<PathBuf>,
) -> Result<ExitCode> {
    let classes = match from {
        Some(path) => {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            policy::runtime_classes_from_yaml(&path.display().to_string(), &text)?
        }
        None => runtime()?.block_on(async {
            let client = nodeproof_cluster::connect::client(kubeconfig.as_deref()).await?;
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
    print!("{}", policy::render(&contracts, mode)?);
    Ok(ExitCode::SUCCESS)
}
