//! The command line: one module per command, the arguments they share
//! ([`OutputArgs`], [`ModeArgs`]) declared once. The work is in the library;
//! this picks the implementations and prints.

mod advise;
mod check;
mod cluster;
mod daemon;
mod docs;
mod gate;
mod gpu;
mod logging;
mod pods;
mod profile;
mod trace;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{ArgAction, Parser, Subcommand, ValueEnum};

use nodeproof::checks::profiles;
use nodeproof::config::Config;
use nodeproof_seccomp::filter::Arch;
use nodeproof_seccomp::lint::{LintOptions, Runtime};
use nodeproof_seccomp::oci_runtime::{
    CrunVersion, OciRuntime, OciRuntimeKind, RuncVersion as SeccompRuncVersion,
};

pub(crate) use daemon::run as run_daemon;
pub(crate) use logging::init as init_logging;

#[derive(Parser)]
#[command(
    name = "nodeproof",
    version,
    about = "Finds seccomp, eBPF and GPU gray failures on a Kubernetes node before pods hit them"
)]
pub(crate) struct Cli {
    /// Config file (default: /etc/nodeproof/config.toml if present, else built-in defaults).
    #[arg(long, global = true)]
    pub(crate) config: Option<PathBuf>,
    /// The kubelet's seccomp root (default /var/lib/kubelet/seccomp).
    #[arg(long, global = true)]
    pub(crate) seccomp_root: Option<PathBuf>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// One-shot report of this node; exit 0 all good, 1 problems found.
    Check {
        #[command(flatten)]
        out: OutputArgs,
        #[command(flatten)]
        report: check::ReportArgs,
    },
    /// GPU driver and device health (NVML); exit 0 healthy or no GPU, 1 not.
    Gpu {
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Seccomp profile tools.
    Profile {
        #[command(subcommand)]
        command: profile::ProfileCommand,
    },
    /// The agent: watch, trace, probe and report until SIGTERM (systemd Type=notify);
    /// SIGHUP reloads the config. Exit 64 on a bad config.
    Run,
    /// What the kubelet needs before it starts (kubelet.service ExecStartPre=):
    /// profiles, GPU driver, a rootless kubelet's access; exit 0 ready, 1 not.
    Preflight {
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Stream seccomp denials (eBPF); on --duration end or Ctrl-C print exact counts.
    Trace {
        /// How long to trace, e.g. 10s, 2m, 500ms (default: until Ctrl-C).
        #[arg(long, value_parser = parse_duration)]
        duration: Option<Duration>,
        /// Only this command name (comm).
        #[arg(long)]
        comm: Option<String>,
        /// Only this process id.
        #[arg(long)]
        pid: Option<u32>,
        /// Force a detection strategy: fexit, tp_btf or tracepoint (default: the first that loads).
        #[arg(long)]
        strategy: Option<nodeproof_trace::Strategy>,
        /// Kernel BTF file to use instead of /sys/kernel/btf/vmlinux (e.g. from BTFHub,
        /// for kernels without CONFIG_DEBUG_INFO_BTF; serves the tracepoint strategy).
        #[arg(long)]
        btf: Option<PathBuf>,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// The smallest profile change that allows observed denials: a JSON Patch and the
    /// patched profile. Never writes the profile.
    Advise(advise::AdviseArgs),
    /// This node's pods and their seccomp references, judged here: --once prints
    /// (exit 0 all usable, 1 not); otherwise watch and report until Ctrl-C.
    Pods {
        #[arg(long)]
        once: bool,
        /// Kubeconfig (default: the kubelet's, then in-cluster).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// The Node's name (default: NODE_NAME, then the hostname).
        #[arg(long)]
        node_name: Option<String>,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// The cluster side, with cluster-reader credentials: admission policies from the
    /// RuntimeClass contracts, and a one-shot check of the cluster.
    Cluster {
        #[command(subcommand)]
        command: cluster::ClusterCommand,
    },
    /// Cluster mode: remove configured scheduling gates from pods once a node that
    /// could host them reports the conditions each gate waits for ([gate] config).
    GateController(gate::GateArgs),
    /// Print the shell completion script (bash, zsh, fish, elvish, powershell)
    /// on stdout; the package installs bash's, zsh's and fish's.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// The packaging step: completions and man pages into DIR (`cargo xtask install|deb`).
    #[command(hide = true)]
    GenFiles {
        /// Written as DIR/completions/* and DIR/man/*.8.
        #[arg(long)]
        out: PathBuf,
    },
}

/// `-o text|json`, the same on every command that prints.
#[derive(clap::Args, Clone, Copy)]
pub(crate) struct OutputArgs {
    /// Text for people, JSON for scripts.
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Text)]
    pub(crate) output: Format,
}

#[derive(clap::Args, Clone)]
pub(crate) struct ModeArgs {
    /// Whose decoder reads the profile (default: detected, else containerd).
    #[arg(long, value_enum)]
    pub(crate) runtime: Option<RuntimeArg>,
    /// The container's noNewPrivileges (containerd: false unless allowPrivilegeEscalation: false);
    /// alone it means true, a value only with `=` (`--no-new-privileges=false`).
    #[arg(
        long,
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_name = "B"
    )]
    pub(crate) no_new_privileges: Option<bool>,
    /// Node architecture (x86_64, aarch64, ... or SCMP_ARCH_*); default: this machine's.
    #[arg(long, value_parser = parse_arch)]
    pub(crate) arch: Option<Arch>,
    /// The OCI runtime that builds the filter and starts the container (default:
    /// read from CRI-O's or containerd's config on this node; CRI-O: crun, containerd: runc).
    #[arg(long, value_enum)]
    pub(crate) oci_runtime: Option<OciRuntimeArg>,
    /// The runc whose behaviour is predicted when the OCI runtime is runc (1.1 is 1.1.5).
    #[arg(long, value_enum, default_value_t = RuncVersion::V1_1)]
    pub(crate) runc_version: RuncVersion,
    /// The crun whose behaviour is predicted when the OCI runtime is crun (default:
    /// what the node's crun says with `--version` when detected, else 1.21).
    #[arg(long, value_enum)]
    pub(crate) crun_version: Option<CrunVersionArg>,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum RuncVersion {
    /// Debian 12's runc 1.1.5 (the name older nodeproof releases took).
    #[value(name = "1.1")]
    V1_1,
    #[value(name = "1.1.5")]
    V1_1_5,
    /// runc 1.1.15 (Debian 13).
    #[value(name = "1.1.15")]
    V1_1_15,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum OciRuntimeArg {
    Runc,
    Crun,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum CrunVersionArg {
    /// Debian 12's crun 1.8.1.
    #[value(name = "1.8")]
    V1_8,
    /// crun 1.21 (Debian 13).
    #[value(name = "1.21")]
    V1_21,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum RuntimeArg {
    Containerd,
    Crio,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    Text,
    Json,
}

/// humantime's grammar (`10s`, `2m`, `500ms`, `1.5s`, `1h 30m`); a bare number
/// has no unit and is refused, with humantime's reason after ours.
fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("invalid duration {s:?} (try 10s, 2m, 500ms): {e}"))
}

fn parse_arch(s: &str) -> Result<Arch, String> {
    Arch::from_cli_name(s)
        .ok_or_else(|| format!("unknown architecture {s:?} (try x86_64, aarch64, SCMP_ARCH_X86)"))
}

pub(crate) fn run(cli: Cli) -> Result<ExitCode> {
    // Generated from the definitions alone: no config is read, so a broken
    // /etc/nodeproof/config.toml does not break completion or packaging.
    match &cli.command {
        Command::Completions { shell } => {
            docs::completions(*shell, &mut std::io::stdout());
            return Ok(ExitCode::SUCCESS);
        }
        Command::GenFiles { out } => {
            for path in docs::gen_files(out)? {
                println!("{}", path.display());
            }
            return Ok(ExitCode::SUCCESS);
        }
        _ => {}
    }
    let config = Config::load(cli.config.as_deref())?;
    let root = seccomp_root(cli.seccomp_root.as_deref(), &config);
    match cli.command {
        Command::Check { out, report } => check::check(&root, &config, out.output, &report),
        Command::Gpu { out } => gpu::gpu(&config, out.output),
        Command::Run => unreachable!("handled by daemon::run"),
        Command::Preflight { out } => check::preflight(&root, &config, out.output),
        Command::Profile { command } => profile::run(command, &root, &config),
        Command::Trace {
            duration,
            comm,
            pid,
            strategy,
            btf,
            out,
        } => trace::trace(nodeproof_trace::TraceOptions {
            duration,
            comm,
            pid,
            format: match out.output {
                Format::Text => nodeproof_trace::OutputFormat::Text,
                Format::Json => nodeproof_trace::OutputFormat::Json,
            },
            strategy,
            btf_path: btf,
        }),
        Command::Advise(args) => advise::advise(&args, &config, &root),
        Command::Pods {
            once,
            kubeconfig,
            node_name,
            out,
        } => pods::pods(&root, &config, once, kubeconfig, node_name, out.output),
        Command::Cluster { command } => cluster::run(command),
        Command::GateController(args) => gate::gate_controller(&config, args),
        Command::Completions { .. } | Command::GenFiles { .. } => unreachable!("handled above"),
    }
}

/// `--seccomp-root`, else the configured root.
pub(crate) fn seccomp_root(flag: Option<&Path>, config: &Config) -> PathBuf {
    flag.map_or_else(|| config.seccomp.root.clone(), Path::to_path_buf)
}

/// The node's lint settings (`checks::profiles::lint_options`), with the flags on top.
pub(crate) fn lint_options(mode: &ModeArgs, config: &Config) -> LintOptions {
    let mut opts = profiles::lint_options(&config.seccomp);
    match mode.runtime {
        Some(RuntimeArg::Containerd) => opts.runtime = Runtime::Containerd,
        Some(RuntimeArg::Crio) => opts.runtime = Runtime::Crio,
        None => {}
    }
    if let Some(nnp) = mode.no_new_privileges {
        opts.no_new_privileges = nnp;
    }
    if let Some(arch) = mode.arch {
        opts.arch = arch;
    }
    if mode.runtime.is_some() && mode.oci_runtime.is_none() {
        // A runtime named on the command line brings its own default OCI runtime.
        opts.oci_runtime = profiles::on_node(config.seccomp.oci_runtime, opts.runtime).runtime;
    }
    let kind = match mode.oci_runtime {
        Some(OciRuntimeArg::Runc) => OciRuntimeKind::Runc,
        Some(OciRuntimeArg::Crun) => OciRuntimeKind::Crun,
        None => opts.oci_runtime.kind(),
    };
    opts.oci_runtime = match kind {
        OciRuntimeKind::Runc => match mode.runc_version {
            RuncVersion::V1_1 | RuncVersion::V1_1_5 => OciRuntime::Runc(SeccompRuncVersion::V1_1_5),
            RuncVersion::V1_1_15 => OciRuntime::Runc(SeccompRuncVersion::V1_1_15),
        },
        OciRuntimeKind::Crun => OciRuntime::Crun(match (mode.crun_version, opts.oci_runtime) {
            (Some(CrunVersionArg::V1_8), _) => CrunVersion::V1_8,
            (Some(CrunVersionArg::V1_21), _) => CrunVersion::V1_21,
            // The release found on the node, when the node's runtime is crun.
            (None, OciRuntime::Crun(found)) => found,
            (None, OciRuntime::Runc(_)) => CrunVersion::V1_21,
        }),
    };
    opts
}

pub(crate) fn exit(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

pub(crate) static STOP: AtomicBool = AtomicBool::new(false);

/// Ctrl-C and SIGTERM set [`STOP`]; long-running commands poll it and finish
/// cleanly. A second one while stopping ends the process at once (exit
/// 128+signal), the double-Ctrl-C idiom signal-hook documents: the
/// conditional exit is registered first, so it only fires once the flag is
/// already set.
pub(crate) fn stop_on_sigint_sigterm() -> Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    for signal in [SIGINT, SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(signal, 128 + signal, &STOP)
            .and_then(|_| signal_hook::flag::register(signal, &STOP))
            .with_context(|| format!("cannot install the handler for signal {signal}"))?;
    }
    Ok(())
}
