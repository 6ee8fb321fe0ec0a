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
mod record;
mod trace;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{ArgAction, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

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
    version = env!("NODEPROOF_VERSION_LINE"),
    about = "Finds seccomp, eBPF and GPU gray failures on a Kubernetes node before pods hit them"
)]
pub(crate) struct Cli {
    /// Config file (default: /etc/nodeproof/config.toml if present, else built-in defaults).
    #[arg(long, global = true)]
    pub(crate) config: Option<PathBuf>,
    /// The kubelet's seccomp root (default /var/lib/kubelet/seccomp).
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) seccomp_root: Option<PathBuf>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// One-shot report of this node; exit 0 all good, 1 problems found, 3 something
    /// not judged (the pods, with credentials that do not work).
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
    Trace(trace::TraceArgs),
    /// What a pod's containers (or a cgroup's tasks) call, recorded in the kernel for
    /// --duration: per arch the syscalls and the argument values their profile's rules
    /// compare, as JSON (read by profile diff --against and advise --from).
    Record(record::RecordArgs),
    /// The smallest profile change that allows observed denials: a JSON Patch and the
    /// patched profile, from a saved trace (--from) or a live one (10s unless --duration).
    /// Never writes the profile.
    Advise(advise::AdviseArgs),
    /// This node's pods and their seccomp references, judged here: --once prints
    /// (exit 0 all usable, 1 not); otherwise watch and report until Ctrl-C.
    Pods {
        /// Judge the pods once, print them and exit (default: watch and report until Ctrl-C).
        #[arg(long)]
        once: bool,
        /// Kubeconfig (default: the kubelet's, then in-cluster).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// The --kubeconfig file's context instead of its current-context (as kubectl --context).
        #[arg(long, requires = "kubeconfig")]
        context: Option<String>,
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
        /// The shell whose completion script to print.
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

/// The commands that read no profiles from the kubelet's seccomp root, with
/// their subcommands: the global `--seccomp-root` is neither shown nor taken
/// there (`nodeproof --seccomp-root DIR CMD`, before the command, is).
const WITHOUT_SECCOMP_ROOT: &[&[&str]] = &[
    &["gpu"],
    &["trace"],
    &["cluster"],
    &["gate-controller"],
    &["completions"],
    &["gen-files"],
    &["profile", "compile"],
    &["profile", "test"],
];

/// The commands that read no config: the global `--config` is neither
/// shown nor taken there.
const WITHOUT_CONFIG: &[&[&str]] = &[&["completions"], &["gen-files"]];

/// The command line's definition: [`Cli`]'s, with the global flags left off
/// the commands they mean nothing to ([`WITHOUT_SECCOMP_ROOT`],
/// [`WITHOUT_CONFIG`]). What `main` parses and what the completions and man
/// pages describe.
pub(crate) fn command() -> clap::Command {
    let mut cmd = Cli::command();
    for path in WITHOUT_SECCOMP_ROOT {
        cmd = refuse_global(cmd, path, "seccomp_root", "seccomp-root", "DIR", "reads no seccomp profiles from the kubelet's root: drop --seccomp-root (it is for check, preflight, run, pods, advise and profile lint)");
    }
    for path in WITHOUT_CONFIG {
        cmd = refuse_global(
            cmd,
            path,
            "config",
            "config",
            "FILE",
            "reads no config: drop --config",
        );
    }
    cmd
}

/// Parses the process's arguments with [`command`]; exits on a usage error (2) or --help (0).
pub(crate) fn parse() -> Cli {
    let matches = command().get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Gives the subcommand at `path` (and every subcommand below it) a hidden
/// `--LONG` of the global flag's id, which keeps the global one off it (clap
/// propagates a global flag only where its id is not defined) and refuses
/// any value with `why`.
fn refuse_global(
    cmd: clap::Command,
    path: &[&str],
    id: &'static str,
    long: &'static str,
    value_name: &'static str,
    why: &'static str,
) -> clap::Command {
    fn refuse_below(cmd: clap::Command, arg: &clap::Arg) -> clap::Command {
        cmd.arg(arg.clone())
            .mut_subcommands(|sub| refuse_below(sub, arg))
    }
    let (first, rest) = path.split_first().expect("a command path");
    cmd.mut_subcommand(*first, |sub| {
        if rest.is_empty() {
            let name = format!("nodeproof {}", sub.get_name());
            let why = format!("`{name}` {why}");
            let arg = clap::Arg::new(id)
                .long(long)
                .value_name(value_name)
                .hide(true)
                .value_parser(move |_: &str| Err::<PathBuf, String>(why.clone()));
            refuse_below(sub, &arg)
        } else {
            refuse_global(sub, rest, id, long, value_name, why)
        }
    })
}

/// `-o text|json`, the same on every command that prints.
#[derive(clap::Args, Clone, Copy)]
pub(crate) struct OutputArgs {
    /// Text for people; JSON (one line) or YAML for scripts.
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
    Yaml,
}

impl Format {
    /// JSON or YAML: one document of the same value either way.
    pub(crate) fn structured(self) -> bool {
        self != Format::Text
    }
}

/// The document `-o json` (compact, one line; `pretty`: indented) or
/// `-o yaml` prints for `value`, with its final newline.
pub(crate) fn document(
    output: Format,
    value: &impl serde::Serialize,
    pretty: bool,
) -> Result<String> {
    Ok(match output {
        Format::Yaml => serde_saphyr::to_string(value)?,
        _ if pretty => format!("{}\n", serde_json::to_string_pretty(value)?),
        _ => format!("{}\n", serde_json::to_string(value)?),
    })
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

impl Cli {
    /// The `-o` the command was given, for the commands that have one.
    pub(crate) fn output(&self) -> Option<Format> {
        match &self.command {
            Command::Check { out, .. }
            | Command::Gpu { out }
            | Command::Preflight { out }
            | Command::Pods { out, .. }
            | Command::Cluster {
                command: cluster::ClusterCommand::Check { out, .. },
            }
            | Command::Profile {
                command: profile::ProfileCommand::Lint { out, .. },
            } => Some(out.output),
            Command::Advise(a) => Some(a.out.output),
            Command::Trace(t) => Some(t.out.output),
            _ => None,
        }
    }
}

/// What `-o json` (one line, no newline) or `-o yaml` prints on standard
/// output when a command fails, so a script reads a failure as it reads a
/// result: `{"error": {"message": <the printed error>, "exit_code": <the
/// exit status>}}` (docs/operations.md).
pub(crate) fn error_document(output: Format, message: &str, exit_code: u8) -> String {
    let v = serde_json::json!({"error": {"message": message, "exit_code": exit_code}});
    match output {
        Format::Yaml => serde_saphyr::to_string(&v)
            .map(|y| y.trim_end().to_string())
            .unwrap_or_else(|_| v.to_string()),
        _ => v.to_string(),
    }
}

/// A failed command's error as printed: its causes on one line, none said
/// twice, and a kube-rs error in words
/// ([`nodeproof_apiclient::client::kube_error_text`]) where the chain reaches one,
/// since kube-rs' own text of an API error is a `Status` Debug dump.
pub(crate) fn error_text(e: &anyhow::Error) -> String {
    // Boxed as often as not (`#[source] Box<nodeproof_apiclient::Error>`): the box is the cause then.
    let kube_error = e.chain().find_map(|c| {
        c.downcast_ref::<nodeproof_apiclient::Error>().or_else(|| {
            c.downcast_ref::<Box<nodeproof_apiclient::Error>>()
                .map(|b| &**b)
        })
    });
    let mut s = String::new();
    for cause in e.chain() {
        let mut text = cause.to_string();
        let mut last = false;
        if let Some(k) = kube_error {
            let raw = k.to_string();
            // A wrapper that prints its kube error inside its own text (kube-runtime's watcher errors).
            if text.contains(&raw) {
                text = text.replace(&raw, &nodeproof_apiclient::client::kube_error_text(k));
                last = true;
            }
        }
        if !s.contains(&text) {
            if !s.is_empty() {
                s.push_str(": ");
            }
            s.push_str(&text);
        }
        if last {
            break;
        }
    }
    s
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
        Command::Trace(args) => trace::trace(&args, &config, &root),
        Command::Advise(args) => advise::advise(&args, &config, &root),
        Command::Record(args) => record::record(&args, &config, &root),
        Command::Pods {
            once,
            kubeconfig,
            context,
            node_name,
            out,
        } => pods::pods(
            &root,
            &config,
            once,
            (kubeconfig, context),
            node_name,
            out.output,
        ),
        Command::Cluster { command } => cluster::run(command, &config),
        Command::GateController(args) => gate::gate_controller(&config, args),
        Command::Completions { .. } | Command::GenFiles { .. } => unreachable!("handled above"),
    }
}

/// `--seccomp-root`, else the configured root.
pub(crate) fn seccomp_root(flag: Option<&Path>, config: &Config) -> PathBuf {
    flag.map_or_else(|| config.seccomp.root.clone(), Path::to_path_buf)
}

/// The node's lint settings (`observe::profiles::lint_options`), with the flags on top.
pub(crate) fn lint_options(mode: &ModeArgs, config: &Config) -> LintOptions {
    let mut opts = nodeproof::observe::profiles::lint_options(&config.seccomp);
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
        opts.oci_runtime =
            nodeproof::observe::profiles::on_node(config.seccomp.oci_runtime, opts.runtime).runtime;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every visible command at every depth, built (globals propagated), with its path.
    fn commands() -> Vec<(String, clap::Command)> {
        fn walk(cmd: &clap::Command, path: String, out: &mut Vec<(String, clap::Command)>) {
            for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
                walk(sub, format!("{path} {}", sub.get_name()), out);
            }
            out.push((path, cmd.clone()));
        }
        let mut cmd = command();
        cmd.build();
        let mut out = Vec::new();
        walk(&cmd, "nodeproof".into(), &mut out);
        out
    }

    fn visible(cmd: &clap::Command, long: &str) -> bool {
        cmd.get_arguments()
            .any(|a| a.get_long() == Some(long) && !a.is_hide_set())
    }

    #[test]
    fn every_command_and_argument_says_what_it_is() {
        let mut blank = Vec::new();
        for (path, cmd) in commands() {
            if cmd.get_about().is_none() && path != "nodeproof" {
                blank.push(path.clone());
            }
            for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    blank.push(format!("{path} {}", arg.get_id()));
                }
            }
        }
        assert!(blank.is_empty(), "no help text: {blank:?}");
    }

    #[test]
    fn global_flags_show_only_where_they_mean_something() {
        let commands = commands();
        let leaf = |path: &str| {
            commands
                .iter()
                .find(|(p, _)| p == path)
                .map(|(_, c)| c)
                .unwrap_or_else(|| panic!("no command {path}"))
        };
        for path in [
            "nodeproof",
            "nodeproof check",
            "nodeproof preflight",
            "nodeproof run",
            "nodeproof pods",
            "nodeproof advise",
            "nodeproof profile lint",
        ] {
            assert!(visible(leaf(path), "seccomp-root"), "{path}");
        }
        for path in [
            "nodeproof gpu",
            "nodeproof trace",
            "nodeproof cluster",
            "nodeproof cluster check",
            "nodeproof cluster policy",
            "nodeproof gate-controller",
            "nodeproof completions",
            "nodeproof profile compile",
            "nodeproof profile test",
        ] {
            assert!(!visible(leaf(path), "seccomp-root"), "{path}");
        }
        assert!(!visible(leaf("nodeproof completions"), "config"));
        assert!(visible(leaf("nodeproof gate-controller"), "config"));
    }

    #[test]
    fn a_global_flag_given_where_it_means_nothing_is_refused_with_the_reason() {
        let err = command()
            .try_get_matches_from(["nodeproof", "gate-controller", "--seccomp-root", "/x"])
            .expect_err("refused");
        let text = err.to_string();
        assert!(
            text.contains("`nodeproof gate-controller` reads no seccomp profiles from the kubelet's root: drop --seccomp-root"),
            "{text}"
        );
        let err = command()
            .try_get_matches_from(["nodeproof", "cluster", "check", "--seccomp-root", "/x"])
            .expect_err("refused");
        assert!(err.to_string().contains("`nodeproof cluster`"), "{err}");
        // Before the command it is the global flag, as scripts give it.
        let m = command()
            .try_get_matches_from(["nodeproof", "--seccomp-root", "/x", "check"])
            .unwrap();
        let cli = Cli::from_arg_matches(&m).unwrap();
        assert_eq!(cli.seccomp_root.as_deref(), Some(Path::new("/x")));
        let m = command()
            .try_get_matches_from(["nodeproof", "pods", "--once", "--seccomp-root", "/y"])
            .unwrap();
        let cli = Cli::from_arg_matches(&m).unwrap();
        assert_eq!(cli.seccomp_root.as_deref(), Some(Path::new("/y")));
        let m = command()
            .try_get_matches_from(["nodeproof", "--seccomp-root", "/x", "gpu"])
            .unwrap();
        assert!(matches!(
            Cli::from_arg_matches(&m).unwrap().command,
            Command::Gpu { .. }
        ));
    }
}
