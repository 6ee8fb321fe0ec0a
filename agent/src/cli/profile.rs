//! `nodeproof profile lint|compile|test|diff`.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Subcommand, ValueEnum};

use nodeproof::config::Config;
use nodeproof::judge::profiles;
use nodeproof::sandbox;
use nodeproof_bpfgen::{libseccomp, Native};
use nodeproof_findings::count;
use nodeproof_seccomp::against;
use nodeproof_seccomp::cbpf::SockFilter;
use nodeproof_seccomp::compiler::Compiler;
use nodeproof_seccomp::diagnostic::Severity;
use nodeproof_seccomp::diagnostic::{render_text, Code, Diagnostic};
use nodeproof_seccomp::diff::{self, Mode, ProfileDiff};
use nodeproof_seccomp::filter::{Arch, FilterSpec};
use nodeproof_seccomp::lint::{self, LintOptions, Outcome, ProfileReport};
use nodeproof_seccomp::model::Seccomp;
use nodeproof_seccomp::recording::Recording;
use nodeproof_seccomp::{patchbpf, scan};

use super::{exit, lint_options, parse_duration, Format, ModeArgs, OutputArgs};

#[derive(Subcommand)]
pub(crate) enum ProfileCommand {
    /// Predict what the runtime does with profiles; exit 0 all ok, 1 otherwise.
    Lint {
        /// Files or directories (default: the seccomp root); `-` reads one profile
        /// from standard input, named `<stdin>` in the output.
        paths: Vec<PathBuf>,
        #[command(flatten)]
        mode: ModeArgs,
        /// Fail on warnings too.
        #[arg(long)]
        strict: bool,
        /// Leave out the diagnostics with this code, as clippy's `allow` (repeat it
        /// for more codes): not printed or counted, their number said; the outcome stays.
        #[arg(long = "allow", value_name = "CODE", value_parser = parse_code)]
        allow: Vec<Code>,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Compile a profile with libseccomp and print the filter without loading it.
    Compile {
        /// The profile file (OCI or Docker-template JSON).
        path: PathBuf,
        #[command(flatten)]
        mode: ModeArgs,
        /// pfc: libseccomp's pseudo-filter code; bpf: the program runc loads, its
        /// -ENOSYS stub first, one instruction a line.
        #[arg(long, value_enum, default_value_t = CompileFormat::Pfc)]
        format: CompileFormat,
    },
    /// Run a command under a profile in a forked child and report what happened,
    /// including the first denial in any thread or process it starts.
    Test {
        /// The profile file to run the command under.
        path: PathBuf,
        #[command(flatten)]
        mode: ModeArgs,
        /// Kill every task of the command still alive after this long
        /// (`30s`, `2m`); without it the run waits for all of them.
        #[arg(long, value_parser = parse_duration)]
        timeout: Option<Duration>,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<OsString>,
    },
    /// What NEW's filter decides differently from OLD's, per architecture, syscall
    /// and argument values; exit 0 none harsher, 1 NEW denies or kills where OLD
    /// did not, 2 either profile builds no filter. With --against, exit 1 only
    /// when NEW stops a recorded call.
    Diff {
        /// The profile containers run under now.
        old: PathBuf,
        /// The profile about to replace it.
        new: PathBuf,
        /// Recordings (`nodeproof record`) of the pods that run under OLD: name
        /// the recorded calls NEW would stop, with the pods that made them.
        #[arg(long, num_args = 1.., value_name = "RECORDING")]
        against: Vec<PathBuf>,
        #[command(flatten)]
        mode: ModeArgs,
        #[command(flatten)]
        out: OutputArgs,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum CompileFormat {
    Bpf,
    Pfc,
}

/// Runs one `profile` subcommand.
pub(crate) fn run(command: ProfileCommand, root: &Path, config: &Config) -> Result<ExitCode> {
    match command {
        ProfileCommand::Lint {
            paths,
            mode,
            strict,
            allow,
            out,
        } => {
            let opts = lint_options(&mode, config);
            let paths = if paths.is_empty() {
                vec![root.to_path_buf()]
            } else {
                paths
            };
            let files = collect(&paths)?;
            // The text output echoes the source, which standard input cannot give twice.
            let stdin = files
                .iter()
                .find(|f| f.path == Path::new(scan::STDIN_NAME))
                .and_then(|f| f.contents.as_ref().ok().cloned());
            let mut reports = nodeproof::observe::profiles::lint_files(files, &opts);
            let allowed: Vec<usize> = reports.iter_mut().map(|r| leave_out(r, &allow)).collect();
            print_reports(&reports, &allowed, &opts, stdin.as_deref(), out.output)?;
            Ok(exit(reports.iter().all(|r| profiles::passes(r, strict))))
        }
        ProfileCommand::Compile { path, mode, format } => {
            compile_cmd(&path, &lint_options(&mode, config), format)
        }
        ProfileCommand::Test {
            path,
            mode,
            timeout,
            command,
        } => test_cmd(&path, &lint_options(&mode, config), &command, timeout),
        ProfileCommand::Diff {
            old,
            new,
            against,
            mode,
            out,
        } => diff_cmd(
            &old,
            &new,
            &against,
            &lint_options(&mode, config),
            out.output,
        ),
    }
}

/// The profiles the command line names, in its order: `-` is standard input
/// (once: a second `-` would read nothing), any other path is a file or a
/// directory walked.
fn collect(paths: &[PathBuf]) -> Result<Vec<scan::ProfileFile>> {
    let stdin = Path::new("-");
    if paths.iter().filter(|p| p.as_path() == stdin).count() > 1 {
        bail!("`-` (standard input) is named more than once: name it once, it holds one profile");
    }
    let mut files = Vec::new();
    for p in paths {
        if p == stdin {
            files.push(scan::read_stream(std::io::stdin().lock()));
        } else {
            let found = scan::collect(std::slice::from_ref(p));
            let none = p.is_dir() && !found.iter().any(may_be_profile);
            let others = found.len();
            files.extend(found);
            if none {
                files.push(no_profiles(p, others));
            }
        }
    }
    Ok(files)
}

/// Whether a file found under a directory is judged as a profile (read, or
/// unreadable, but not one that is clearly none).
fn may_be_profile(f: &scan::ProfileFile) -> bool {
    f.contents
        .as_ref()
        .err()
        .is_none_or(|d| d.code != Code::NotAProfile)
}

/// A directory named to lint that holds no profile: an error of its own,
/// since nothing was judged.
fn no_profiles(dir: &Path, others: usize) -> scan::ProfileFile {
    let message = match others {
        0 => format!("{} holds no files: no profile to judge", dir.display()),
        n => format!(
            "{} holds no profile: {}, none a seccomp profile",
            dir.display(),
            count(n, "file", "files")
        ),
    };
    scan::ProfileFile {
        path: dir.to_path_buf(),
        contents: Err(Diagnostic::error(Code::NoProfiles, "", message).with_help(
            "name the profile files, or the directory that holds them (the kubelet's seccomp root)",
        )),
    }
}

/// `--allow CODE`: a diagnostic code, by its stable name.
fn parse_code(name: &str) -> std::result::Result<Code, String> {
    if let Some(&code) = Code::ALL.iter().find(|c| c.as_str() == name) {
        return Ok(code);
    }
    let near = Code::ALL
        .iter()
        .map(|c| c.as_str())
        .filter(|c| c.contains(name) || name.contains(c))
        .collect::<Vec<_>>();
    Err(match near.as_slice() {
        [] => "no diagnostic has this code: the codes are the names in brackets in the text output (`warning[allow-by-default]`) and `code` in -o json".to_string(),
        near => format!("no diagnostic has this code; did you mean {}?", near.join(" or ")),
    })
}

/// Drops the diagnostics `--allow` names from `r`; how many it dropped.
fn leave_out(r: &mut ProfileReport, allow: &[Code]) -> usize {
    let before = r.diagnostics.len();
    r.diagnostics.retain(|d| !allow.contains(&d.code));
    before - r.diagnostics.len()
}

/// What an outcome means for the container, so that `ok` beside errors
/// reads as what it is: the container starts, not as the profile says.
fn outcome_meaning(r: &ProfileReport, opts: &LintOptions) -> String {
    let rt = opts.oci_runtime;
    match r.outcome {
        Outcome::Ok => match r.count(Severity::Error) {
            0 => format!("{rt} starts the container"),
            1 => format!(
                "{rt} starts the container, but not as the profile says: see the error above"
            ),
            n => format!(
                "{rt} starts the container, but not as the profile says: see the {n} errors above"
            ),
        },
        Outcome::Rejected => {
            format!("{rt} refuses the profile, so the container is never created")
        }
        Outcome::StartFailed => {
            format!("{rt} builds the filter, but the container does not start")
        }
        Outcome::Unknown if r.diagnostics.iter().any(|d| d.code == Code::NoProfiles) => {
            "no profile found, so nothing is judged".to_string()
        }
        Outcome::Unknown => "the file could not be read, so nothing is predicted".to_string(),
        Outcome::NotAProfile => "no seccomp profile, so nothing is judged".to_string(),
    }
}

/// `stdin`: the profile read from standard input, if any, for the text
/// output's source lines; `allowed`: per report, the diagnostics `--allow` left out.
fn print_reports(
    reports: &[ProfileReport],
    allowed: &[usize],
    opts: &LintOptions,
    stdin: Option<&[u8]>,
    output: Format,
) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match output {
        Format::Json | Format::Yaml => {
            let mut profiles = Vec::with_capacity(reports.len());
            for (r, &n) in reports.iter().zip(allowed) {
                let mut v = serde_json::to_value(r)?;
                if n > 0 {
                    v["allowed"] = n.into();
                }
                profiles.push(v);
            }
            let v = serde_json::json!({ "profiles": profiles });
            write!(out, "{}", super::document(output, &v, false)?)?;
        }
        Format::Text => {
            for (r, &n) in reports.iter().zip(allowed) {
                let mut text = String::new();
                let src = match stdin {
                    Some(bytes) if r.path == scan::STDIN_NAME => bytes.to_vec(),
                    _ => std::fs::read(&r.path).unwrap_or_default(),
                };
                render_text(&r.path, &src, &r.diagnostics, &mut text);
                write!(out, "{text}")?;
                let errors = r.count(Severity::Error);
                let warnings = r.count(Severity::Warning);
                writeln!(
                    out,
                    "{}: outcome {}: {} ({}, {}{}{})\n",
                    r.path,
                    r.outcome.as_str(),
                    outcome_meaning(r, opts),
                    count(errors, "error", "errors"),
                    count(warnings, "warning", "warnings"),
                    if n > 0 {
                        format!(", {n} allowed")
                    } else {
                        String::new()
                    },
                    r.instructions
                        .map_or(String::new(), |n| format!(", {n} BPF instructions")),
                )?;
            }
        }
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
    let mut program = patchbpf::enosys_stub(profile);
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

fn test_cmd(
    path: &Path,
    opts: &LintOptions,
    command: &[OsString],
    timeout: Option<Duration>,
) -> Result<ExitCode> {
    let (profile, spec) = load_spec(path, opts)?;
    let (_, program) = loaded_program(&profile, &spec, opts.arch)?;
    let report = sandbox::run_under_filter(
        &program,
        opts.arch,
        opts.no_new_privileges,
        command,
        timeout,
    )
    .context("could not run the command under the profile")?;
    println!("{report}");
    Ok(exit(report.succeeded()))
}

/// The program the kernel gets for the profile at `path`, or lint's report
/// of why there is none.
fn loaded(path: &Path, opts: &LintOptions) -> std::result::Result<Vec<SockFilter>, ProfileReport> {
    let name = path.to_string_lossy().into_owned();
    let bytes = match scan::read_entry(path, None).contents {
        Ok(bytes) => bytes,
        Err(d) => return Err(ProfileReport::unreadable(name, d)),
    };
    match lint::loaded_program(&bytes, opts, &Native) {
        Some((_, program)) => Ok(program),
        None => Err(lint::lint_source(&name, &bytes, opts, &Native)),
    }
}

fn diff_cmd(
    old: &Path,
    new: &Path,
    against_paths: &[PathBuf],
    opts: &LintOptions,
    output: Format,
) -> Result<ExitCode> {
    // Recordings first: one that cannot be read stops the command before any filter is built.
    let recordings = against_paths
        .iter()
        .map(|p| read_recording(p))
        .collect::<Result<Vec<_>>>()?;
    let (old_program, new_program) = match (loaded(old, opts), loaded(new, opts)) {
        (Ok(o), Ok(n)) => (o, n),
        (o, n) => {
            // Nothing to compare: lint's own account of each profile that builds no filter.
            let reports: Vec<ProfileReport> = [o.err(), n.err()].into_iter().flatten().collect();
            print_reports(&reports, &vec![0; reports.len()], opts, None, output)?;
            return Ok(ExitCode::from(2));
        }
    };
    let mode = Mode::of(opts);
    let diffs = diff::diff_programs(
        &old_program,
        &new_program,
        opts.oci_runtime.behaviour().libseccomp,
        mode,
    )
    .context("cannot compare the filters")?;
    let harsher = diff::any_harsher(&diffs);
    let recorded = (!recordings.is_empty()).then(|| against::against(&diffs, &recordings));
    let mut out = std::io::stdout().lock();
    match output {
        Format::Json | Format::Yaml => {
            let mut v = serde_json::json!({
                "old": old.to_string_lossy(),
                "new": new.to_string_lossy(),
                "mode": mode,
                "harsher": harsher,
                "diffs": diffs,
            });
            if let Some(a) = &recorded {
                v["against"] = serde_json::to_value(a)?;
            }
            write!(out, "{}", super::document(output, &v, false)?)?;
        }
        Format::Text => {
            write!(out, "{}", diff_text(old, new, opts, &diffs))?;
            if let Some(a) = &recorded {
                write!(out, "{}", against_text(new, &recordings, a))?;
            }
        }
    }
    Ok(exit(match &recorded {
        // Against recordings, what counts is whether a call the pods make stops.
        Some(a) => a.broken.is_empty(),
        None => !harsher,
    }))
}

fn read_recording(path: &Path) -> Result<Recording> {
    let bytes = std::fs::read(path)
        .with_context(|| format!("cannot read the recording {}", path.display()))?;
    Recording::from_json(&bytes).with_context(|| {
        format!(
            "{} is not a recording as `nodeproof record` writes it",
            path.display()
        )
    })
}

/// `profile diff --against`'s text: each recorded call NEW stops, then one
/// line saying what it means for the recorded pods.
fn against_text(new: &Path, recordings: &[Recording], a: &against::Against) -> String {
    let subjects: Vec<String> = recordings.iter().map(Recording::subject).collect();
    let mut text = format!(
        "against {} ({}):\n",
        count(recordings.len(), "recording", "recordings"),
        subjects.join(", ")
    );
    for b in &a.broken {
        text += &format!("  {b}\n");
    }
    for i in &a.incomplete {
        text += &format!(
            "  {} container {}: the recording is incomplete ({} calls had no room in the kernel's maps, or argument values were cut): calls it missed are not judged\n",
            i.subject, i.container, i.lost
        );
    }
    let broken_pods: std::collections::BTreeSet<&str> =
        a.broken.iter().map(|b| b.subject.as_str()).collect();
    let possible = a
        .broken
        .iter()
        .filter(|b| b.certainty != against::Certainty::Recorded)
        .count();
    text += &match (a.broken.len(), possible) {
        (0, _) => format!("{} stops no recorded call\n", new.display()),
        (n, 0) => format!(
            "{} stops {} made by {}: those pods fail once they restart with it\n",
            new.display(),
            count(n, "recorded call", "recorded calls"),
            broken_pods.into_iter().collect::<Vec<_>>().join(", "),
        ),
        (n, p) => format!(
            "{} stops {} made by {} ({p} only if arguments not recorded are in the changed range): those pods may fail once they restart with it\n",
            new.display(),
            count(n, "recorded call", "recorded calls"),
            broken_pods.into_iter().collect::<Vec<_>>().join(", "),
        ),
    };
    text
}

/// `profile diff`'s text: the changes per architecture, then one line saying what they mean.
fn diff_text(old: &Path, new: &Path, opts: &LintOptions, diffs: &[ProfileDiff]) -> String {
    let (old, new) = (old.display(), new.display());
    let mut text = String::new();
    for d in diffs {
        let arch = d
            .arch
            .map_or("architectures neither filter names".to_string(), |a| {
                a.to_string()
            });
        text += &format!("{arch}:\n");
        for c in &d.changes {
            text += &format!("  {c}\n");
        }
    }
    let changes: usize = diffs.iter().map(|d| d.changes.len()).sum();
    let harsher = diffs
        .iter()
        .flat_map(|d| &d.changes)
        .filter(|c| c.harsher)
        .count();
    let on = format!("{} on {}", opts.oci_runtime, opts.arch);
    text += &match (changes, harsher) {
        (0, _) => format!(
            "{new} decides as {old} does for every syscall and argument ({on})\n"
        ),
        (n, 0) => format!(
            "{new} changes {} of {old}, none harsher ({on})\n",
            count(n, "case", "cases")
        ),
        (n, h) => format!(
            "{new} denies or kills where {old} did not in {h} of {}: review them before containers restart with it ({on})\n",
            count(n, "changed case", "changed cases")
        ),
    };
    text
}
