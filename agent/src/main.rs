//! `nodeproof`: argument parsing and the choice of implementations. The
//! work is in the library.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{ArgAction, Parser, Subcommand, ValueEnum};

use nodeproof::config::Config;
use nodeproof_findings::{Condition, ConditionStatus, Finding, Status};
use nodeproof_gpu as gpu;

use nodeproof::checks::{profiles, Subsystem};
use nodeproof::sandbox;
use nodeproof_bpfgen::{libseccomp, Native};
use nodeproof_seccomp::cbpf::SockFilter;
use nodeproof_seccomp::compiler::Compiler;
use nodeproof_seccomp::diagnostic::render_text;
use nodeproof_seccomp::filter::Arch;
use nodeproof_seccomp::filter::FilterSpec;
use nodeproof_seccomp::lint::{LintOptions, ProfileReport, Runtime};
use nodeproof_seccomp::model::Seccomp;
use nodeproof_seccomp::{lint, patchbpf, scan};
use nodeproof_trace as trace;

#[derive(Parser)]
#[command(
    name = "nodeproof",
    version,
    about = "Finds seccomp, eBPF and GPU gray failures on a Kubernetes node before pods hit them"
)]
struct Cli {
    /// Config file (default: /etc/nodeproof/config.toml if present, else built-in defaults).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// The kubelet's seccomp root (default /var/lib/kubelet/seccomp).
    #[arg(long, global = true)]
    seccomp_root: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// One-shot report of this node; exit 0 all good, 1 problems found.
    Check {
        #[arg(short = 'o', long, value_enum, default_value_t = Format::Text)]
        output: Format,
        #[command(flatten)]
        report: ReportArgs,
    },
    /// GPU driver and device health (NVML); exit 0 healthy or no GPU, 1 not.
    Gpu {
        #[arg(short = 'o', long, value_enum, default_value_t = Format::Text)]
        output: Format,
    },
    /// Seccomp profile tools.
    Profile {
        #[command(subcommand)]
        command: ProfileCommand,
    },
    /// The agent: watch, trace, probe and report until SIGTERM (systemd Type=notify);
    /// SIGHUP reloads the config. Exit 64 on a bad config.
    Run,
    /// What the kubelet needs before it starts (kubelet.service ExecStartPre=):
    /// profiles, GPU driver, a rootless kubelet's access; exit 0 ready, 1 not.
    Preflight {
        #[arg(short = 'o', long, value_enum, default_value_t = Format::Text)]
        output: Format,
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
        strategy: Option<trace::Strategy>,
        /// Kernel BTF file to use instead of /sys/kernel/btf/vmlinux (e.g. from BTFHub,
        /// for kernels without CONFIG_DEBUG_INFO_BTF; serves the tracepoint strategy).
        #[arg(long)]
        btf: Option<PathBuf>,
        #[arg(short = 'o', long, value_enum, default_value_t = Format::Text)]
        output: Format,
    },
    /// The smallest profile change that allows observed denials: a JSON Patch and the
    /// patched profile. Never writes the profile.
    Advise(AdviseArgs),
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
        #[arg(short = 'o', long, value_enum, default_value_t = Format::Text)]
        output: Format,
    },
}

#[derive(clap::Args)]
struct AdviseArgs {
    /// Only denials of this pod (NAMESPACE/NAME), as resolved in the trace. Without
    /// --profile, the pod is read from the API server and its profile file patched.
    #[arg(long, required_unless_present = "profile")]
    pod: Option<String>,
    /// Only this container: its name (resolved through the pod's status; needs the API
    /// server) or a prefix of its container id, as trace rows carry.
    #[arg(long)]
    container: Option<String>,
    /// The profile to patch (default: the --pod container's Localhost profile under the seccomp root).
    #[arg(long)]
    profile: Option<PathBuf>,
    /// Kubeconfig to read the pod with (default: the kubelet's, then in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// A saved `nodeproof trace -o json` output.
    #[arg(long, conflicts_with = "duration")]
    from: Option<PathBuf>,
    /// Trace live for this long instead (needs root or CAP_BPF+CAP_PERFMON).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    #[command(flatten)]
    mode: ModeArgs,
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Text)]
    output: Format,
}

/// `check --report`: where and as whom to report (docs/reporting.md).
#[derive(clap::Args, Clone)]
struct ReportArgs {
    /// Also write the node conditions and their events to the API server, then exit.
    #[arg(long)]
    report: bool,
    /// Kubeconfig to read this node's pods and report with (default: the kubelet's,
    /// then in-cluster; none: the pods are not judged and a report is only logged).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The Node's name (default: NODE_NAME, then the hostname).
    #[arg(long)]
    node_name: Option<String>,
}

#[derive(Subcommand)]
enum ProfileCommand {
    /// Predict what the runtime does with profiles; exit 0 all ok, 1 otherwise.
    Lint {
        /// Files or directories (default: the seccomp root).
        paths: Vec<PathBuf>,
        #[command(flatten)]
        mode: ModeArgs,
        /// Fail on warnings too.
        #[arg(long)]
        strict: bool,
        #[arg(short = 'o', long, value_enum, default_value_t = Format::Text)]
        output: Format,
    },
    /// Compile a profile with libseccomp and print the filter without loading it.
    Compile {
        path: PathBuf,
        #[command(flatten)]
        mode: ModeArgs,
        #[arg(long, value_enum, default_value_t = CompileFormat::Pfc)]
        format: CompileFormat,
    },
    /// Run a command under a profile in a forked child and report what happened.
    Test {
        path: PathBuf,
        #[command(flatten)]
        mode: ModeArgs,
        #[arg(last = true, required = true)]
        command: Vec<OsString>,
    },
}

#[derive(clap::Args, Clone)]
struct ModeArgs {
    /// Whose decoder reads the profile (default: detected, else containerd).
    #[arg(long, value_enum)]
    runtime: Option<RuntimeArg>,
    /// The container's noNewPrivileges (containerd: false unless allowPrivilegeEscalation: false).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    no_new_privileges: Option<bool>,
    /// Node architecture (x86_64, aarch64, ... or SCMP_ARCH_*); default: this machine's.
    #[arg(long, value_parser = parse_arch)]
    arch: Option<Arch>,
    /// The runc whose behaviour is predicted. Only 1.1 (learned from Debian 12's 1.1.5) is modelled so far.
    #[arg(long, value_enum, default_value_t = RuncVersion::V1_1)]
    runc_version: RuncVersion,
}

#[derive(Clone, Copy, ValueEnum)]
enum RuncVersion {
    #[value(name = "1.1")]
    V1_1,
}

#[derive(Clone, Copy, ValueEnum)]
enum RuntimeArg {
    Containerd,
    Crio,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum CompileFormat {
    Bpf,
    Pfc,
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let daemon = matches!(cli.command, Command::Run);
    init_logging(daemon);
    if daemon {
        return run_daemon(&cli);
    }
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("nodeproof: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// The journal with native fields (NODEPROOF_CHECK=, SECCOMP_PROFILE=, ...)
/// when stderr is connected to it, else text (or `NODEPROOF_LOG_FORMAT=json`)
/// on stderr. The daemon logs at info, the one-shot commands at warn.
fn init_logging(daemon: bool) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("NODEPROOF_LOG").unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new(if daemon { "info" } else { "warn" })
        });
    if nodeproof::daemon::logs::stderr_is_journal() {
        if let Ok(layer) = tracing_journald::layer() {
            let layer = layer
                .with_field_prefix(None)
                .with_syslog_identifier("nodeproof".into());
            let _ = tracing_subscriber::registry()
                .with(filter)
                .with(layer)
                .try_init();
            return;
        }
    }
    let json = std::env::var("NODEPROOF_LOG_FORMAT").is_ok_and(|f| f == "json");
    // A stderr nobody reads any more (a pipe whose reader left) must not
    // stop the agent: by default a failed write is reported with eprintln!,
    // which panics on that same stderr.
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(nodeproof::daemon::logs::stderr_wants_ansi())
        .log_internal_errors(false);
    let _ = if json {
        fmt.json().try_init()
    } else {
        fmt.try_init()
    };
}

/// `nodeproof run`: exit 64 (EX_USAGE... of sysexits, as systemd's
/// RestartPreventExitStatus= names it) on a bad config, 1 on other failures.
fn run_daemon(cli: &Cli) -> ExitCode {
    use nodeproof::daemon::{self, notify};
    let notifier: Box<dyn notify::Notifier> = match notify::SdNotify::from_env() {
        Ok(Some(n)) => Box::new(n),
        Ok(None) => Box::new(notify::NoNotify),
        Err(e) => {
            eprintln!("nodeproof: {:#}", anyhow::Error::from(e));
            Box::new(notify::NoNotify)
        }
    };
    let opts = daemon::Options {
        config_path: cli.config.clone(),
        seccomp_root: cli.seccomp_root.clone(),
    };
    match daemon::run(&opts, notifier) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = if matches!(e, daemon::DaemonError::Config(_)) {
                64
            } else {
                1
            };
            eprintln!("nodeproof: {:#}", anyhow::Error::from(e));
            ExitCode::from(code)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    let config = Config::load(cli.config.as_deref())?;
    let root = seccomp_root(cli.seccomp_root.as_deref(), &config);
    match cli.command {
        Command::Check { output, report } => check(&root, &config, output, &report),
        Command::Gpu { output } => gpu_cmd(&config, output),
        Command::Run => unreachable!("handled by run_daemon"),
        Command::Preflight { output } => preflight(&root, &config, output),
        Command::Profile { command } => match command {
            ProfileCommand::Lint {
                paths,
                mode,
                strict,
                output,
            } => {
                let opts = lint_options(&mode, &config);
                let paths = if paths.is_empty() { vec![root] } else { paths };
                let files = scan::collect(&paths);
                let reports = profiles::lint_files(files, &opts);
                print_reports(&reports, output)?;
                Ok(exit(reports.iter().all(|r| profiles::passes(r, strict))))
            }
            ProfileCommand::Compile { path, mode, format } => {
                compile_cmd(&path, &lint_options(&mode, &config), format)
            }
            ProfileCommand::Test {
                path,
                mode,
                command,
            } => test_cmd(&path, &lint_options(&mode, &config), &command),
        },
        Command::Trace {
            duration,
            comm,
            pid,
            strategy,
            btf,
            output,
        } => trace_cmd(trace::TraceOptions {
            duration,
            comm,
            pid,
            format: match output {
                Format::Text => trace::OutputFormat::Text,
                Format::Json => trace::OutputFormat::Json,
            },
            strategy,
            btf_path: btf,
        }),
        Command::Advise(args) => advise_cmd(&args, &config, &root),
        Command::Pods {
            once,
            kubeconfig,
            node_name,
            output,
        } => pods_cmd(&root, &config, once, kubeconfig, node_name, output),
    }
}

fn pods_cmd(
    root: &Path,
    config: &Config,
    once: bool,
    kubeconfig: Option<PathBuf>,
    node_name: Option<String>,
    output: Format,
) -> Result<ExitCode> {
    use nodeproof::pods::node as pods;
    let mut opts = nodeproof::checks::pods::options(config, root);
    opts.kubeconfig = kubeconfig.or(opts.kubeconfig);
    opts.node_name = node_name.or(opts.node_name);
    if !once {
        stop_on_sigint_sigterm()?;
        pods::daemon(&opts, config.report.policy(), &STOP)?;
        return Ok(ExitCode::SUCCESS);
    }
    let r = pods::once(&opts)?;
    // What the agent reports for this node: the files' part folded in, as `run` folds it.
    let files = profiles::round(root, &profiles::lint_root(root, &opts.lint));
    let node_condition = nodeproof::checks::node_conditions([
        (Subsystem::Profiles, &files.conditions[..]),
        (Subsystem::Pods, std::slice::from_ref(&r.condition)),
    ])
    .into_iter()
    .find(|c| c.kind == r.condition.kind);
    match output {
        Format::Text => {
            print!("{}", pods::render(&r, root));
            if let Some(c) = &node_condition {
                println!(
                    "reported: {} {} {}: {}",
                    c.kind, c.status, c.reason, c.message
                );
            }
        }
        Format::Json => {
            let findings: Vec<_> = r
                .findings
                .iter()
                .map(|f| {
                    serde_json::json!({"namespace": f.namespace, "pod": f.pod, "container": f.container,
                        "subject": f.subject, "reason": f.reason.as_str(), "event_reason": f.reason.event_reason(),
                        "message": f.message})
                })
                .collect();
            println!(
                "{}",
                serde_json::json!({"node": r.node, "pods": r.pods, "findings": findings,
                    "condition": r.condition, "node_condition": node_condition})
            );
        }
    }
    Ok(exit(r.condition.status == ConditionStatus::True))
}

/// What `--pod`/`--container`/`--profile` point at. The pod is read only
/// when needed: for its profile, to turn a container name into its id, or
/// for its UID (a live trace resolves no pod names).
fn advise_target(
    args: &AdviseArgs,
    config: &Config,
    root: &Path,
) -> Result<nodeproof::pods::target::Target> {
    use nodeproof::pods::{node::get_pod, node::PodsRunError, target};
    let given = target::Target {
        pod_uid: None,
        container: None,
        container_id: args.container.clone(),
        profile: args.profile.clone(),
        no_new_privileges: None,
    };
    let Some(key) = args.pod.as_deref() else {
        return Ok(given);
    };
    if args.profile.is_some() && args.container.is_none() && args.from.is_some() {
        return Ok(given);
    }
    let kubeconfig = args
        .kubeconfig
        .clone()
        .or_else(|| config.report.kubeconfig.clone());
    let pod = match get_pod(kubeconfig.as_deref(), key) {
        Ok(pod) => pod,
        // Offline with a profile given: the container is taken as an id prefix, as before.
        Err(e @ PodsRunError::NoCredentials { .. }) if args.profile.is_some() => {
            if args.from.is_none() {
                eprintln!(
                    "warning: {e}: a live trace names no pods, so --pod {key} may match no denial"
                );
            }
            return Ok(given);
        }
        Err(e) => return Err(e.into()),
    };
    let mut t = target::resolve(
        &pod,
        args.container.as_deref(),
        args.profile.is_none(),
        root,
    )?;
    if let Some(p) = &args.profile {
        t.profile = Some(p.clone());
    }
    Ok(t)
}

fn advise_cmd(args: &AdviseArgs, config: &Config, root: &Path) -> Result<ExitCode> {
    use nodeproof::advise;
    let target = advise_target(args, config, root)?;
    let Some(profile) = target.profile.clone() else {
        bail!("no profile to patch (give --profile or --pod)");
    };
    if args.profile.is_none() || target.container.is_some() {
        eprintln!(
            "advising on {} for pod {}{}",
            profile.display(),
            args.pod.as_deref().unwrap_or(""),
            target
                .container
                .as_ref()
                .map_or(String::new(), |c| format!(" container {c}"))
        );
    }
    let filter = advise::TraceFilter {
        pod: args.pod.clone(),
        container_id: target.container_id.clone(),
        pod_uid: target.pod_uid.clone(),
    };
    let denied = match &args.from {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            advise::denials_from_trace(&path.to_string_lossy(), &text, &filter)?
        }
        None => {
            let opts = trace::TraceOptions {
                duration: Some(args.duration.unwrap_or(Duration::from_secs(10))),
                comm: None,
                pid: None,
                format: trace::OutputFormat::Json,
                strategy: None,
                btf_path: None,
            };
            let summary =
                trace::run(&opts, &mut std::io::sink(), &STOP).context("seccomp tracing failed")?;
            advise::denials(&summary.summary, &filter)
        }
    };
    let path = profile.to_string_lossy();
    let src = std::fs::read(&profile).with_context(|| format!("cannot read {path}"))?;
    let mut opts = lint_options(&args.mode, config);
    // The pod's container says what the runtime sets, unless the flag does.
    if let (None, Some(nnp)) = (args.mode.no_new_privileges, target.no_new_privileges) {
        opts.no_new_privileges = nnp;
    }
    let advice = advise::advise(&path, &src, &denied, &opts)?;
    match args.output {
        Format::Text => print!("{}", advise::render(&advice)),
        Format::Json => println!("{}", serde_json::to_string_pretty(&advice)?),
    }
    Ok(exit(
        advice.outcome == lint::Outcome::Ok && advice.still_denied.is_empty(),
    ))
}

static STOP: AtomicBool = AtomicBool::new(false);

/// Ctrl-C and SIGTERM set [`STOP`]; long-running commands poll it and finish
/// cleanly. A second one while stopping ends the process at once (exit
/// 128+signal), the double-Ctrl-C idiom signal-hook documents: the
/// conditional exit is registered first, so it only fires once the flag is
/// already set.
fn stop_on_sigint_sigterm() -> Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    for signal in [SIGINT, SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(signal, 128 + signal, &STOP)
            .and_then(|_| signal_hook::flag::register(signal, &STOP))
            .with_context(|| format!("cannot install the handler for signal {signal}"))?;
    }
    Ok(())
}

fn trace_cmd(opts: trace::TraceOptions) -> Result<ExitCode> {
    stop_on_sigint_sigterm()?;
    trace::run(&opts, &mut std::io::stdout().lock(), &STOP).context("seccomp tracing failed")?;
    Ok(ExitCode::SUCCESS)
}

/// `--seccomp-root`, else the configured root.
fn seccomp_root(flag: Option<&Path>, config: &Config) -> PathBuf {
    flag.map_or_else(|| config.seccomp.root.clone(), Path::to_path_buf)
}

/// The node's lint settings (`checks::profiles::lint_options`), with the flags on top.
fn lint_options(mode: &ModeArgs, config: &Config) -> LintOptions {
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
    opts
}

fn exit(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn print_reports(reports: &[ProfileReport], output: Format) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match output {
        Format::Json => {
            serde_json::to_writer(&mut out, &serde_json::json!({ "profiles": reports }))?;
            writeln!(out)?;
        }
        Format::Text => {
            for r in reports {
                let mut text = String::new();
                let src = std::fs::read(&r.path).unwrap_or_default();
                render_text(&r.path, &src, &r.diagnostics, &mut text);
                write!(out, "{text}")?;
                let errors = r.count(nodeproof_seccomp::diagnostic::Severity::Error);
                let warnings = r.count(nodeproof_seccomp::diagnostic::Severity::Warning);
                writeln!(
                    out,
                    "{}: outcome {} ({} errors, {} warnings{})\n",
                    r.path,
                    r.outcome.as_str(),
                    errors,
                    warnings,
                    r.instructions
                        .map_or(String::new(), |n| format!(", {n} BPF instructions")),
                )?;
            }
        }
    }
    Ok(())
}

/// One round of exactly what `run` does (`checks::node_round`), printed;
/// `--report` writes it as the agent would.
fn check(root: &Path, config: &Config, output: Format, report: &ReportArgs) -> Result<ExitCode> {
    let mut config = config.clone();
    if report.kubeconfig.is_some() {
        config.report.kubeconfig = report.kubeconfig.clone();
    }
    if report.node_name.is_some() {
        config.report.node_name = report.node_name.clone();
    }
    let round = nodeproof::checks::node_round(root, &config);
    print_check(&round.findings, &round.conditions, output)?;
    if report.report {
        report_conditions(&round.conditions, &config)?;
    }
    Ok(exit(round.conditions.iter().all(Condition::is_true)))
}

fn preflight(root: &Path, config: &Config, output: Format) -> Result<ExitCode> {
    let opts = profiles::lint_options(&config.seccomp);
    let layout = nodeproof::preflight::Layout::default();
    let findings = nodeproof::preflight::run(root, &opts, gpu_cycle(config), &layout);
    print_check(&findings, &[], output)?;
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

fn print_check(findings: &[Finding], conditions: &[Condition], output: Format) -> Result<()> {
    let mut out = std::io::stdout().lock();
    if output == Format::Json {
        serde_json::to_writer(
            &mut out,
            &serde_json::json!({ "conditions": conditions, "findings": findings }),
        )?;
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

/// Decode and translate one profile, refusing anything that would not load.
fn load_spec(path: &Path, opts: &LintOptions) -> Result<(Seccomp, FilterSpec)> {
    let file = scan::read_entry(path, None);
    let bytes = file
        .contents
        .map_err(|d| anyhow::anyhow!("{}", d.message))?;
    let report = lint::lint_source(&path.to_string_lossy(), &bytes, opts, &Native);
    match lint::profile_and_filter(&bytes, opts) {
        Some(found) => Ok(found),
        None => {
            let cause = report.diagnostics.first().map_or_else(String::new, |d| {
                format!(": {}[{}]: {}", d.severity, d.code, d.message)
            });
            bail!(
                "{} does not produce a filter (outcome {}){cause}",
                path.display(),
                report.outcome.as_str()
            )
        }
    }
}

/// The program runc loads: its -ENOSYS stub, then libseccomp's filter.
fn loaded_program(
    profile: &Seccomp,
    spec: &FilterSpec,
    arch: Arch,
) -> Result<(usize, Vec<SockFilter>)> {
    let compiled = Native
        .compile(spec, arch)
        .context("libseccomp could not compile the filter")?;
    let mut program = patchbpf::enosys_stub(profile, arch);
    let stub = program.len();
    program.extend(compiled.program);
    Ok((stub, program))
}

fn compile_cmd(path: &Path, opts: &LintOptions, format: CompileFormat) -> Result<ExitCode> {
    let (profile, spec) = load_spec(path, opts)?;
    let mut out = std::io::stdout().lock();
    match format {
        CompileFormat::Pfc => {
            let text = libseccomp::export_pfc(&spec, opts.arch)
                .context("libseccomp could not export the filter")?;
            write!(out, "{text}")?;
        }
        CompileFormat::Bpf => {
            let (stub, program) = loaded_program(&profile, &spec, opts.arch)?;
            writeln!(
                out,
                "# runc -ENOSYS stub: {stub} instructions, then libseccomp's filter"
            )?;
            for (i, ins) in program.iter().enumerate() {
                writeln!(
                    out,
                    "{i:04}: code=0x{:04x} jt={} jf={} k=0x{:08x}",
                    ins.code, ins.jt, ins.jf, ins.k
                )?;
            }
            writeln!(
                out,
                "# {} instructions (kernel limit {})",
                program.len(),
                nodeproof_seccomp::cbpf::BPF_MAXINSNS
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn test_cmd(path: &Path, opts: &LintOptions, command: &[OsString]) -> Result<ExitCode> {
    let (profile, spec) = load_spec(path, opts)?;
    let (_, program) = loaded_program(&profile, &spec, opts.arch)?;
    let report = sandbox::run_under_filter(&program, opts.arch, opts.no_new_privileges, command)
        .context("could not run the command under the profile")?;
    println!("{report}");
    Ok(exit(report.succeeded()))
}

// ---- nodeproof gpu ----

/// One GPU probe cycle with the configured NVML library and policy.
fn gpu_cycle(config: &Config) -> gpu::GpuReport {
    nodeproof::checks::gpu::cycle_once(&config.gpu)
}

fn gpu_cmd(config: &Config, output: Format) -> Result<ExitCode> {
    let report = gpu_cycle(config);
    let status = if report.no_gpu() {
        "NoGPU"
    } else if report.healthy() {
        "Healthy"
    } else {
        "Unhealthy"
    };
    let mut out = std::io::stdout().lock();
    match output {
        Format::Json => {
            let value = serde_json::json!({
                "status": status,
                "conditions": report.conditions(),
                "findings": report.findings(),
                "report": report,
            });
            serde_json::to_writer(&mut out, &value)?;
            writeln!(out)?;
        }
        Format::Text => writeln!(out, "{}status: {status}", report.text())?,
    }
    Ok(exit(report.no_gpu() || report.healthy()))
}
