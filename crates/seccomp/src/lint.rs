//! The whole pipeline for one profile: parse → decode → (template) →
//! translate → compile → predict, plus the lints that go beyond what the
//! runtime checks. Pure apart from compiling with libseccomp and one
//! `stat` of a notify listener socket.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use serde::Serialize;

use crate::capability::{Capability, CapabilitySet};
use crate::cbpf::{self, SeccompData, BPF_MAXINSNS};
use crate::compiler::{CompileError, CompiledFilter, Compiler};
use crate::decode::{self, resolve_pointer};
use crate::diagnostic::{Code, Diagnostic, Severity};
use crate::filter::{Action, Arch, CmpOp, FilterSpec};
use crate::fnv::Fnv;
use crate::json::{self, LineIndex, Node};
use crate::model::{tpl_seccomp, tpl_syscall, Seccomp, OCI_SECCOMP, TPL_SECCOMP};
use crate::oci_runtime::{EnosysStub, InitCaller, OciRuntime, OciRuntimeKind};
use crate::patchbpf;
use crate::runc_init::{self, Answer, ArgValue, InitSyscall, Kept, Phase};
use crate::spo;
use crate::syscalls::{resolve_syscall_in, Libseccomp};
use crate::template::{self, TemplateContext};
use crate::translate::{self, Stage, Translation};
use strum::IntoStaticStr;

/// The container runtime whose decoder reads the profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// containerd hands the file to runc as an OCI `LinuxSeccomp`.
    Containerd,
    /// CRI-O evaluates the Docker/containers-common template first.
    Crio,
}

impl Runtime {
    /// The bounding set the runtime gives a container that neither adds nor
    /// drops capabilities.
    pub fn default_capabilities(self) -> CapabilitySet {
        match self {
            Runtime::Containerd => CapabilitySet::CONTAINERD_DEFAULT,
            Runtime::Crio => CapabilitySet::CRIO_DEFAULT,
        }
    }

    /// Where the runtime's CRI socket is on a node (the kubelet's
    /// `--container-runtime-endpoint` defaults for each).
    pub fn sockets(self) -> &'static [&'static str] {
        match self {
            Runtime::Containerd => &["/run/containerd/containerd.sock"],
            Runtime::Crio => &["/run/crio/crio.sock", "/var/run/crio/crio.sock"],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Dialect {
    #[serde(rename = "oci")]
    Oci,
    #[serde(rename = "docker-template")]
    DockerTemplate,
}

/// What the runtime reaches with the profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, IntoStaticStr)]
#[strum(serialize_all = "kebab-case")]
pub enum Outcome {
    #[serde(rename = "ok")]
    Ok,
    /// The runtime refuses the profile before any container process exists.
    #[serde(rename = "rejected")]
    Rejected,
    /// The filter loads (or is being loaded) but the container cannot start.
    #[serde(rename = "start-failed")]
    StartFailed,
    /// The file could not be read, so nothing can be predicted.
    #[serde(rename = "unknown")]
    Unknown,
    /// A file found under a directory that is no profile (not JSON, not a
    /// regular file): nothing a pod should name, said and not judged.
    #[serde(rename = "not-a-profile")]
    NotAProfile,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct LintOptions {
    pub runtime: Runtime,
    /// The container's `noNewPrivileges` (containerd: false unless the pod sets
    /// `allowPrivilegeEscalation: false`).
    pub no_new_privileges: bool,
    /// The node's architecture (the filter's native one).
    pub arch: Arch,
    /// Whether to check that a notify listener socket exists on this host.
    pub check_listener: bool,
    /// The OCI runtime that builds the filter and starts the container.
    pub oci_runtime: OciRuntime,
    /// The container's bounding set: init drops every other capability with
    /// a `prctl` of its own, after the filter is loaded when
    /// `noNewPrivileges` is false. `None`: the CRI runtime's default for a
    /// container that neither adds nor drops any.
    pub bounding_set: Option<CapabilitySet>,
}

impl Default for LintOptions {
    fn default() -> Self {
        LintOptions {
            runtime: Runtime::Containerd,
            no_new_privileges: false,
            arch: Arch::native(),
            check_listener: true,
            oci_runtime: OciRuntime::default(),
            bounding_set: None,
        }
    }
}

/// Everything nodeproof says about one profile.
#[derive(Debug, Clone, Serialize)]
pub struct ProfileReport {
    pub path: String,
    pub dialect: Dialect,
    pub outcome: Outcome,
    pub diagnostics: Vec<Diagnostic>,
    /// BPF instructions of the compiled filter (the kernel's limit is 4096).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<usize>,
    /// Architectures the filter covers, native first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub architectures: Vec<String>,
}

impl ProfileReport {
    pub fn count(&self, severity: Severity) -> usize {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == severity)
            .count()
    }

    /// A report for a file that could not be read at all.
    pub fn unreadable(path: String, diagnostic: Diagnostic) -> ProfileReport {
        ProfileReport {
            path,
            dialect: Dialect::Oci,
            outcome: Outcome::Unknown,
            diagnostics: vec![diagnostic],
            instructions: None,
            architectures: Vec::new(),
        }
    }

    /// A report for a file found under a directory that is no profile
    /// ([`Code::NotAProfile`]).
    pub fn not_a_profile(path: String, diagnostic: Diagnostic) -> ProfileReport {
        ProfileReport {
            outcome: Outcome::NotAProfile,
            ..ProfileReport::unreadable(path, diagnostic)
        }
    }

    /// Whether the file is a profile at all (every outcome but
    /// [`Outcome::NotAProfile`]).
    pub fn is_profile(&self) -> bool {
        self.outcome != Outcome::NotAProfile
    }
}

/// Lint one profile's bytes, compiling with `compiler`.
pub fn lint_source(
    path: &str,
    src: &[u8],
    opts: &LintOptions,
    compiler: &dyn Compiler,
) -> ProfileReport {
    let mut report = ProfileReport {
        path: path.to_string(),
        dialect: Dialect::Oci,
        outcome: Outcome::Ok,
        diagnostics: Vec::new(),
        instructions: None,
        architectures: Vec::new(),
    };
    let mut root = match json::parse(src) {
        Ok(root) => root,
        Err(e) => {
            let mut d = Diagnostic::error(Code::JsonSyntax, "", format!("invalid JSON: {e}"))
                .with_span(json::Span {
                    start: e.offset,
                    end: e.offset + 1,
                })
                .with_help("the runtime refuses a profile that is not valid JSON");
            if src.starts_with(b"\xef\xbb\xbf") {
                d = d.with_help(
                    "remove the UTF-8 byte order mark: Go's JSON decoder does not accept it",
                );
            }
            if let Some(object) = spo::from_yaml(src) {
                report.diagnostics.push(object.diagnostic());
            }
            report.diagnostics.push(d);
            report.outcome = Outcome::Rejected;
            return finish(report, src, None);
        }
    };
    if let Some(object) = spo::from_json(&root) {
        report.diagnostics.push(object.diagnostic());
    }
    let outcome = run_pipeline(&mut root, opts, compiler, &mut report);
    report.outcome = outcome;
    finish(report, src, Some(&root))
}

fn finish(mut report: ProfileReport, src: &[u8], root: Option<&Node>) -> ProfileReport {
    let index = LineIndex::new(src);
    for d in &mut report.diagnostics {
        if d.span.is_none() {
            d.span = root.and_then(|root| resolve_pointer(root, &d.pointer));
        }
        // Whole-document findings point at the start, so every diagnostic has a position.
        d.span.get_or_insert(json::Span { start: 0, end: 0 });
        d.locate(&index);
    }
    // Errors first, a start that fails every time before one that fails
    // only sometimes, then by position, so the first line is the cause.
    report.diagnostics.sort_by_key(|d| {
        (
            d.severity,
            d.code.fails_only_sometimes(),
            d.span.map_or(usize::MAX, |s| s.start),
        )
    });
    report
}

/// The filter runc would build from `src`, if it builds one.
pub fn filter_spec(src: &[u8], opts: &LintOptions) -> Option<FilterSpec> {
    let mut root = json::parse(src).ok()?;
    let mut scratch =
        ProfileReport::unreadable(String::new(), Diagnostic::note(Code::IoError, "", ""));
    prepare(&mut root, opts, &mut scratch)
        .ok()
        .map(|(spec, _)| spec)
}

/// The decoded profile and the filter runc would build from `src`, if it builds one.
pub fn profile_and_filter(src: &[u8], opts: &LintOptions) -> Option<(Seccomp, FilterSpec)> {
    let mut root = json::parse(src).ok()?;
    let mut scratch =
        ProfileReport::unreadable(String::new(), Diagnostic::note(Code::IoError, "", ""));
    prepare(&mut root, opts, &mut scratch)
        .ok()
        .map(|(spec, profile)| (profile, spec))
}

fn run_pipeline(
    root: &mut Node,
    opts: &LintOptions,
    compiler: &dyn Compiler,
    report: &mut ProfileReport,
) -> Outcome {
    match prepare(root, opts, report) {
        Ok((spec, profile)) => predict(&spec, &profile, opts, compiler, report),
        Err(outcome) => outcome,
    }
}

/// Decode and translate: the filter spec, or the outcome that stops short of one.
fn prepare(
    root: &mut Node,
    opts: &LintOptions,
    report: &mut ProfileReport,
) -> Result<(FilterSpec, Seccomp), Outcome> {
    let schema = match opts.runtime {
        Runtime::Containerd => &OCI_SECCOMP,
        Runtime::Crio => &TPL_SECCOMP,
    };
    let decoded = decode::decode(root, schema);
    report.dialect = if decoded.template_keys_seen || has_template_keys(&decoded.root) {
        Dialect::DockerTemplate
    } else {
        Dialect::Oci
    };
    report.diagnostics.extend(decoded.diagnostics);
    if decoded.type_error.is_some() {
        return Err(Outcome::Rejected);
    }
    let profile = match opts.runtime {
        Runtime::Containerd => Seccomp::from_oci(decoded.root),
        Runtime::Crio => {
            match template::evaluate(decoded.root, &TemplateContext::for_host(opts.arch)) {
                Ok(p) => p,
                Err(d) => {
                    report.diagnostics.push(d);
                    return Err(Outcome::Rejected);
                }
            }
        }
    };
    let behaviour = opts.oci_runtime.behaviour();
    let resolves = |name: &str| resolve_syscall_in(behaviour.libseccomp, name, opts.arch).is_some();
    let (translation, notes) = translate::translate(&profile, behaviour, &resolves);
    report.diagnostics.extend(notes);
    match translation {
        Translation::Disabled => {
            report.diagnostics.push(
                Diagnostic::error(
                    Code::SeccompDisabled,
                    "",
                    "the profile has no `defaultAction` and no rules, so the runtime runs the container without any seccomp filter",
                )
                .with_help("set defaultAction (e.g. SCMP_ACT_ERRNO) and list the allowed syscalls; use the RuntimeDefault profile type if unconfined was not meant"),
            );
            Err(Outcome::Ok)
        }
        Translation::Fails(stage, d) => {
            report.diagnostics.push(d);
            Err(match stage {
                Stage::Config => Outcome::Rejected,
                Stage::Init => Outcome::StartFailed,
            })
        }
        Translation::Filter(spec) => {
            lint_profile(&profile, report);
            Ok((spec, profile))
        }
    }
}

/// The program the kernel gets for `src`: the runtime's -ENOSYS stub (runc's;
/// crun loads libseccomp's program as it is), then libseccomp's filter, as
/// [`lint_source`] builds it. `None` when no filter is built (the lint
/// report of `src` says why).
pub fn loaded_program(
    src: &[u8],
    opts: &LintOptions,
    compiler: &dyn Compiler,
) -> Option<(FilterSpec, Vec<cbpf::SockFilter>)> {
    let (profile, spec) = profile_and_filter(src, opts)?;
    let compiled = compiler.compile(&spec, opts.arch).ok()?;
    let mut program = opts.oci_runtime.behaviour().enosys_stub.program(
        &profile,
        opts.arch,
        opts.oci_runtime.behaviour().libseccomp,
    );
    program.extend(compiled.program);
    Some((spec, program))
}

/// Compile and predict what happens when the container starts.
fn predict(
    spec: &FilterSpec,
    profile: &Seccomp,
    opts: &LintOptions,
    compiler: &dyn Compiler,
    report: &mut ProfileReport,
) -> Outcome {
    let mut compiled = match compiler.compile(spec, opts.arch) {
        Ok(c) => c,
        Err(e) => {
            let message = match e {
                // Not a refusal: libseccomp never returns, and neither does runc init.
                CompileError::RuleAddLoops { .. } | CompileError::ExportLoops => {
                    format!("the container never starts: {e}")
                }
                _ => format!(
                    "libseccomp refuses the filter, so {} fails to start the container: {e}",
                    opts.oci_runtime
                ),
            };
            report
                .diagnostics
                .push(Diagnostic::error(Code::CompileFailed, "", message));
            return Outcome::StartFailed;
        }
    };
    let behaviour = opts.oci_runtime.behaviour();
    // What the kernel gets: runc's -ENOSYS stub, then libseccomp's program
    // (crun loads libseccomp's program as it is).
    if behaviour.enosys_stub == EnosysStub::ListedArches
        && patchbpf::native_left_out(profile, opts.arch)
    {
        let listed = if profile.architectures.is_empty() {
            "lists no architectures".to_string()
        } else {
            format!("does not list the native {}", opts.arch.scmp_name())
        };
        report.diagnostics.push(
            Diagnostic::warning(
                Code::NativeArchUnlisted,
                "/architectures",
                format!(
                    "`architectures` {listed}{}, so runc's -ENOSYS stub does not cover {}: syscalls numbered above every one the profile names (such as a newer libc's rseq or clone3) get the default action {} instead of failing with ENOSYS",
                    if profile.architectures.is_empty() { "" } else { " (libseccomp adds the native arch to the filter anyway, without runc's stub)" },
                    opts.arch, spec.default_action
                ),
            )
            .with_help(format!("list {} in `architectures`", opts.arch.scmp_name())),
        );
    }
    let mut program = behaviour
        .enosys_stub
        .program(profile, opts.arch, behaviour.libseccomp);
    program.append(&mut compiled.program);
    compiled.program = program;
    report.instructions = Some(compiled.program.len());
    report.architectures = compiled_arches(&compiled);
    lint_conflicts(spec, &compiled, opts.arch, report);
    let mut outcome = Outcome::Ok;
    if compiled.program.len() > BPF_MAXINSNS {
        report.diagnostics.push(
            Diagnostic::error(
                Code::FilterTooLarge,
                "",
                format!(
                    "the compiled filter has {} BPF instructions; the kernel refuses more than {BPF_MAXINSNS}, so {} fails to start the container",
                    compiled.program.len(),
                    opts.oci_runtime
                ),
            )
            .with_help("merge rules with the same action, or drop architectures the node does not run"),
        );
        outcome = Outcome::StartFailed;
    }
    if opts.arch != Arch::X86_64 {
        report.diagnostics.push(Diagnostic::note(
            Code::CrossArchModel,
            "",
            format!(
                "what {} needs after the filter is loaded was learned on x86_64; for {} nodeproof checks the same calls where they exist there",
                init_name(opts.oci_runtime),
                opts.arch
            ),
        ));
    }
    if predict_runtime_needs(spec, &compiled, opts, report) {
        outcome = Outcome::StartFailed;
    }
    if let Some(path) = &spec.listener_path {
        if opts.check_listener && !is_socket(path) {
            let (what, stage_outcome) = match behaviour.listener_unreachable {
                Stage::Init => ("runc cannot hand over the notify fd and the container fails to start", Outcome::StartFailed),
                Stage::Config => ("crun connects to it before it creates the container and refuses the container (\"open seccomp receiver\")", Outcome::Rejected),
            };
            report.diagnostics.push(
                Diagnostic::error(
                    Code::ListenerUnreachable,
                    "/listenerPath",
                    format!("no seccomp agent socket at `{path}` on this host; {what}"),
                )
                .with_help("start the seccomp agent before pods that use this profile, or drop SCMP_ACT_NOTIFY"),
            );
            // A refusal comes before anything the filter does at the start.
            outcome = if stage_outcome == Outcome::Rejected {
                Outcome::Rejected
            } else {
                Outcome::StartFailed
            };
        }
    }
    outcome
}

fn has_template_keys(root: &decode::DObj) -> bool {
    // With the template schema the keys are fields, so look at what was present.
    root.is_a(&TPL_SECCOMP)
        && (root.present(tpl_seccomp::ARCH_MAP)
            || root.obj_list(tpl_seccomp::SYSCALLS).iter().any(|s| {
                s.present(tpl_syscall::NAME)
                    || s.present(tpl_syscall::COMMENT)
                    || s.present(tpl_syscall::INCLUDES)
                    || s.present(tpl_syscall::EXCLUDES)
            }))
}

fn compiled_arches(c: &CompiledFilter) -> Vec<String> {
    let mut v = vec![c.native.scmp_name().to_string()];
    v.extend(
        c.arches
            .iter()
            .filter(|a| **a != c.native)
            .map(|a| a.scmp_name().to_string()),
    );
    v
}

fn is_socket(path: &str) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

/// Lints on the decoded profile that the runtime does not check.
fn lint_profile(p: &Seccomp, report: &mut ProfileReport) {
    if matches!(p.default_action.as_str(), "SCMP_ACT_ALLOW" | "SCMP_ACT_LOG") {
        report.diagnostics.push(
            Diagnostic::warning(
                Code::AllowByDefault,
                "/defaultAction",
                format!("`{}` lets every syscall the rules do not name through; a deny list misses new syscalls", p.default_action),
            )
            .with_help("prefer an allow list: defaultAction SCMP_ACT_ERRNO with the needed syscalls allowed"),
        );
    }
    if p.default_action == "SCMP_ACT_TRACE" {
        report.diagnostics.push(
            Diagnostic::warning(
                Code::TraceWithoutTracer,
                "/defaultAction",
                "`SCMP_ACT_TRACE` hands each call to a ptrace tracer, and no tracer is attached to a container: the kernel fails every syscall the rules do not name with ENOSYS (a blanket ENOSYS)",
            )
            .with_help("say what is meant: defaultAction SCMP_ACT_ERRNO with defaultErrnoRet 38 (ENOSYS)"),
        );
    }
    let errno_like = |a: &str| matches!(a, "SCMP_ACT_ERRNO" | "SCMP_ACT_TRACE");
    let mut check_errno = |errno: Option<u64>, action: &str, pointer: String| {
        let Some(e) = errno else { return };
        if action == "SCMP_ACT_TRACE" {
            // libseccomp takes any 16-bit message for TRACE, and without a
            // tracer the call fails with ENOSYS whatever the value.
            if e > 0xffff {
                report.diagnostics.push(
                    Diagnostic::warning(
                        Code::ErrnoOutOfRange,
                        pointer,
                        format!("errnoRet {e} does not fit: runc keeps the low 16 bits, so a tracer would get message {}; without a tracer the call fails with ENOSYS either way", e & 0xffff),
                    )
                    .with_help("use a value below 65536"),
                );
            }
            return;
        }
        if !errno_like(action) {
            report.diagnostics.push(
                Diagnostic::warning(
                    Code::ErrnoIgnored,
                    pointer,
                    format!("an errno is set but the action is {action}, which ignores it"),
                )
                .with_help("remove it, or use SCMP_ACT_ERRNO"),
            );
            return;
        }
        let (msg, help) = if e == 0 {
            (
                "errno 0 makes the denied syscall return 0 (success) without running".to_string(),
                "use a real errno such as 1 (EPERM) or 38 (ENOSYS)",
            )
        } else if e & 0xffff >= 4095 {
            (
                format!("errno {e} is refused by libseccomp (it must be below 4095), so the container fails to start"),
                "use an errno between 1 and 4094",
            )
        } else if e > 0xffff {
            (
                format!("errno {e} does not fit: runc keeps the low 16 bits, so the syscall fails with errno {}", e & 0xffff),
                "use an errno between 1 and 4094",
            )
        } else {
            return;
        };
        report
            .diagnostics
            .push(Diagnostic::error(Code::ErrnoOutOfRange, pointer, msg).with_help(help));
    };
    check_errno(
        p.default_errno_ret,
        &p.default_action,
        "/defaultErrnoRet".into(),
    );
    for rule in &p.syscalls {
        check_errno(
            rule.errno_ret,
            &rule.action,
            format!("{}/errnoRet", rule.pointer),
        );
    }
    for rule in &p.syscalls {
        for arg in &rule.args {
            if arg.op == "SCMP_CMP_MASKED_EQ" && arg.value == 0 && arg.value_two != 0 {
                report.diagnostics.push(
                    Diagnostic::warning(
                        Code::MaskZero,
                        format!("{}/value", arg.pointer),
                        // libseccomp's _db_rule_gen_arg_64/_32 skip a masked
                        // comparison whose mask word is 0.
                        format!(
                            "SCMP_CMP_MASKED_EQ takes `value` as the mask: with mask 0 libseccomp leaves the comparison out, so it matches every call, though (arg & 0) can never equal valueTwo {}",
                            arg.value_two
                        ),
                    )
                    .with_help("put the mask in `value` and the expected bits in `valueTwo`"),
                );
            }
            if arg.value_two != 0 && arg.op != "SCMP_CMP_MASKED_EQ" {
                report.diagnostics.push(Diagnostic::warning(
                    Code::ValueTwoIgnored,
                    format!("{}/valueTwo", arg.pointer),
                    format!(
                        "`valueTwo` is only used by SCMP_CMP_MASKED_EQ; {} ignores it",
                        arg.op
                    ),
                ));
            }
        }
    }
}

/// The same syscall with different unconditional actions: name which one wins.
fn lint_conflicts(
    spec: &FilterSpec,
    compiled: &CompiledFilter,
    arch: Arch,
    report: &mut ProfileReport,
) {
    // Per syscall, the first unconditional action and where it is; a rule
    // that disagrees is reported, not recorded, so there is only ever one.
    let mut first_seen: HashMap<&str, (Action, &str), BuildHasherDefault<Fnv>> = HashMap::default();
    for rule in spec.rules.iter().filter(|r| r.conds.is_empty()) {
        let &mut (first, first_ptr) = first_seen
            .entry(&rule.syscall)
            .or_insert((rule.action, &rule.origin.pointer));
        if first != rule.action {
            let winner = resolve_syscall_in(spec.libseccomp, &rule.syscall, arch)
                .and_then(|nr| {
                    cbpf::run(
                        &compiled.program,
                        &SeccompData::new(nr, arch.audit_arch(), [0; 6]),
                    )
                    .ok()
                })
                .and_then(Action::from_ret);
            let verdict = winner.map_or(String::new(), |w| {
                format!("; the compiled filter applies {w}")
            });
            report.diagnostics.push(
                Diagnostic::warning(
                    Code::ConflictingActions,
                    format!("{}/names/{}", rule.origin.pointer, rule.origin.name_index),
                    format!(
                        "`{}` is given {} here and {first} at {first_ptr}{verdict}",
                        rule.syscall, rule.action
                    ),
                )
                .with_help("keep one rule per syscall; template conditions (includes/excludes) are not applied by this runtime"),
            );
        }
    }
}

/// Evaluate the filter against what runc init and a minimal entrypoint do
/// after the filter is loaded. Returns whether the container cannot start.
fn predict_runtime_needs(
    spec: &FilterSpec,
    compiled: &CompiledFilter,
    opts: &LintOptions,
    report: &mut ProfileReport,
) -> bool {
    let go_init = opts.oci_runtime.behaviour().init_caller == InitCaller::Go;
    let in_mode = || {
        opts.oci_runtime
            .behaviour()
            .init_syscalls
            .iter()
            .filter(|n| n.in_mode(opts.no_new_privileges))
    };
    // One diagnostic per syscall name, though the table lists some names with several argument sets.
    let mut reported: Vec<&str> = Vec::new();
    let mut kept: Vec<&str> = Vec::new();
    for need in in_mode() {
        if reported.contains(&need.name) {
            continue;
        }
        if let Some(branch) = need.only_after {
            // A fallback's calls are made only when init takes that branch.
            let answer_of = |name: &str| {
                in_mode()
                    .find(|n| n.name == name)
                    .and_then(|n| {
                        filter_action(spec.libseccomp, compiled, opts.arch, n.name, n.args)
                    })
                    .and_then(answer)
            };
            if !branch.taken(&answer_of) {
                continue;
            }
        }
        let zeroed = runc_init::zeroes_unused_slots(go_init, need);
        let fails = |a: Action| answer(a).is_some_and(|x| need.fails_on(x));
        let mut dropping = None;
        let (action, unfixed) = if let Some(index) = runc_init::capability_argument(need) {
            // One call per capability the bounding set lacks, in ascending
            // order, all in the same start: the first answer the caller
            // does not survive ends it; else the first one that kept the
            // call from running (a capability left in the set).
            let calls: Vec<(Capability, Action)> = opts
                .bounding_set
                .unwrap_or_else(|| opts.runtime.default_capabilities())
                .dropped()
                .filter_map(|cap| {
                    let mut args = need.args;
                    args[usize::from(index)] = u64::from(cap.0);
                    filter_action(spec.libseccomp, compiled, opts.arch, need.name, args)
                        .map(|a| (cap, a))
                })
                .collect();
            let Some(&(cap, action)) = calls
                .iter()
                .find(|(_, a)| fails(*a))
                .or_else(|| calls.iter().find(|(_, a)| answer(*a).is_some()))
                .or(calls.first())
            else {
                continue;
            };
            dropping = Some(cap);
            (action, None)
        } else {
            let actions = init_actions(spec, compiled, opts.arch, need, zeroed);
            let Some(&traced) = actions.first() else {
                continue;
            };
            // A rule on an argument init does not fix: the start fails in the
            // starts where it matches, so say it fails, and why only sometimes.
            let unfixed = (actions.iter().any(|&a| fails(a)) && actions.iter().any(|&a| !fails(a)))
                .then(|| unfixed_condition(spec, need, zeroed))
                .flatten();
            let action = match unfixed {
                Some(_) => actions
                    .iter()
                    .copied()
                    .find(|&a| fails(a))
                    .unwrap_or(traced),
                None => traced,
            };
            (action, unfixed)
        };
        let Some(answer) = answer(action) else {
            continue;
        };
        let fallbacks = if need.fails_on(answer) {
            None
        } else {
            // Not run, and runc carries on: what the call should have dropped stays.
            if let Some(what) = need.skipped_drop {
                if !kept.contains(&need.name) {
                    kept.push(need.name);
                    report.diagnostics.push(skipped_drop(
                        spec,
                        need,
                        action,
                        what,
                        opts.oci_runtime,
                        dropping,
                    ));
                }
            }
            // Denied alone it is harmless only while the caller's fallback is allowed.
            let Some((_, alternatives)) =
                runc_init::FALLBACKS.iter().find(|(n, _)| *n == need.name)
            else {
                continue;
            };
            let all_denied = !action.lets_syscall_run()
                && alternatives.iter().all(|alt| {
                    filter_action(spec.libseccomp, compiled, opts.arch, alt, [0; 6])
                        .is_some_and(|a| !a.lets_syscall_run())
                });
            if !all_denied {
                continue;
            }
            Some(*alternatives)
        };
        reported.push(need.name);
        report.diagnostics.push(runtime_denial(
            spec, need, action, opts, fallbacks, unfixed, dropping,
        ));
    }
    !reported.is_empty()
}

/// The conditions of the profile's rules on `need`'s call that examine an
/// argument runc init does not fix (an address, an unused register), as
/// (index, what it is, the values worth trying: each side of the condition).
fn unfixed_conditions(
    spec: &FilterSpec,
    need: &InitSyscall,
    zeroed: bool,
) -> Vec<(u8, ArgValue, Vec<u64>)> {
    let mut found: Vec<(u8, ArgValue, Vec<u64>)> = Vec::new();
    let conds = spec
        .rules
        .iter()
        .filter(|r| r.syscall == need.name)
        .flat_map(|r| &r.conds);
    for c in conds {
        let Some(what) = runc_init::arg_value(need.name, c.index, zeroed) else {
            continue;
        };
        if what.is_fixed() {
            continue;
        }
        let tries: &[u64] = match c.op {
            CmpOp::Eq | CmpOp::Ne => &[c.value, c.value ^ 1],
            CmpOp::Lt | CmpOp::Le | CmpOp::Ge | CmpOp::Gt => {
                &[c.value.wrapping_sub(1), c.value, c.value.wrapping_add(1)]
            }
            // `value` is the mask, `valueTwo` what the masked bits must equal.
            CmpOp::MaskedEq => &[c.value_two, c.value_two ^ c.value],
        };
        match found.iter_mut().find(|(i, _, _)| *i == c.index) {
            Some((_, _, values)) => values.extend(tries),
            None => found.push((c.index, what, tries.to_vec())),
        }
    }
    found
}

fn unfixed_condition(
    spec: &FilterSpec,
    need: &InitSyscall,
    zeroed: bool,
) -> Option<(u8, ArgValue)> {
    unfixed_conditions(spec, need, zeroed)
        .first()
        .map(|&(index, what, _)| (index, what))
}

/// What the filter answers init's call `need`: first with the traced
/// arguments, then with every combination of the values worth trying for the
/// arguments init does not fix (bounded: a few per condition). Empty when the
/// call does not exist on `arch`.
fn init_actions(
    spec: &FilterSpec,
    compiled: &CompiledFilter,
    arch: Arch,
    need: &InitSyscall,
    zeroed: bool,
) -> Vec<Action> {
    const MOST: usize = 256;
    let mut traced = need.args;
    if zeroed {
        // Go's zeros, whatever one trace's registers held there.
        for (i, a) in traced.iter_mut().enumerate() {
            if runc_init::arg_value(need.name, i as u8, true)
                .is_some_and(|v| matches!(v, ArgValue::Zero { .. }))
            {
                *a = 0;
            }
        }
    }
    let mut argsets = vec![traced];
    for (index, _, values) in unfixed_conditions(spec, need, zeroed) {
        let mut next = Vec::new();
        for args in &argsets {
            for &v in &values {
                let mut a = *args;
                a[index as usize] = v;
                if next.len() < MOST && !next.contains(&a) {
                    next.push(a);
                }
            }
        }
        argsets.extend(next);
        argsets.truncate(MOST);
    }
    argsets
        .into_iter()
        .map_while(|args| filter_action(spec.libseccomp, compiled, arch, need.name, args))
        .collect()
}

/// The action the compiled filter takes for `name(args)` on `arch` (`name`
/// resolved with the runtime's libseccomp).
fn filter_action(
    lib: Libseccomp,
    compiled: &CompiledFilter,
    arch: Arch,
    name: &str,
    args: [u64; 6],
) -> Option<Action> {
    // Negative numbers are libseccomp's pseudo-syscalls: the call does not exist on this arch.
    let nr = resolve_syscall_in(lib, name, arch).filter(|&nr| nr >= 0)?;
    let data = SeccompData::new(nr, arch.audit_arch(), args);
    cbpf::run(&compiled.program, &data)
        .ok()
        .and_then(Action::from_ret)
}

/// What the caller of a call answered with `action` gets back; `None` when the call runs.
fn answer(action: Action) -> Option<Answer> {
    match action {
        Action::Allow | Action::Log | Action::Notify => None,
        // No tracer: the kernel fails a TRACE syscall with ENOSYS (seccomp_run_filters → -ENOSYS).
        Action::Trace(_) => Some(Answer::Errno(runc_init::ENOSYS)),
        Action::Errno(e) => Some(Answer::Errno(e)),
        Action::KillThread | Action::KillProcess | Action::Trap => Some(Answer::Killed),
    }
}

/// For a call init makes in some starts only: how often and why.
fn intermittently(need: &InitSyscall, action: Action, opts: &LintOptions) -> String {
    let Some(cause) = need.intermittent_cause() else {
        return String::new();
    };
    let enosys = matches!(answer(action), Some(Answer::Errno(runc_init::ENOSYS)));
    let rate = need.observed_rate(opts.no_new_privileges, enosys).map_or(
        String::new(),
        |(failed, runs)| {
            format!(
                " (in {failed} of {runs} starts with {} here)",
                opts.oci_runtime
            )
        },
    );
    format!(" intermittently{rate}: {cause}")
}

/// Where the rule giving `need` its `action` is, or the default action.
fn rule_pointer(spec: &FilterSpec, need: &InitSyscall, action: Action) -> String {
    spec.rules
        .iter()
        .find(|r| r.syscall == need.name && r.action == action)
        .map_or_else(
            || "/defaultAction".to_string(),
            |r| format!("{}/names/{}", r.origin.pointer, r.origin.name_index),
        )
}

/// A privilege drop of runc init answered with success without running: the
/// container starts, with what the drop should have taken away.
fn skipped_drop(
    spec: &FilterSpec,
    need: &InitSyscall,
    action: Action,
    what: Kept,
    rt: OciRuntime,
    dropping: Option<Capability>,
) -> Diagnostic {
    let kind = rt.kind().as_str();
    Diagnostic::error(
        Code::PrivilegeDropSkipped,
        rule_pointer(spec, need, action),
        format!(
            "{} drops privileges with `{}`{} after the filter is loaded, and the profile answers it with {action}{}: the call does not run, {kind} carries on, and the container starts with {}",
            init_name(rt),
            need.name,
            dropping.map_or(String::new(), |cap| format!(" (PR_CAPBSET_DROP of {cap})")),
            if action == Action::Errno(0) { " (0, success)".to_string() } else { format!(", an error {kind} ignores here") },
            what.describe(init_name(rt))
        ),
    )
    .with_help(format!(
        "allow `{}`; to keep it from running, deny it with EPERM (errnoRet 1) so that the start fails instead of going on without the drop",
        need.name
    ))
}

fn runtime_denial(
    spec: &FilterSpec,
    need: &InitSyscall,
    action: Action,
    opts: &LintOptions,
    fallbacks: Option<&[&str]>,
    unfixed: Option<(u8, ArgValue)>,
    dropping: Option<Capability>,
) -> Diagnostic {
    let pointer = rule_pointer(spec, need, action);
    if let Some((index, what)) = unfixed {
        return Diagnostic::error(
            Code::RuntimeSyscallDeniedByUnfixedArgument,
            pointer,
            format!(
                "runc init makes `{}` after the filter is loaded ({}), and whether the profile answers it with {action} depends on `args[{index}]`, {}: the container fails to start whenever the rule matches, in some starts or in all",
                need.name,
                if opts.no_new_privileges { "noNewPrivileges=true" } else { "noNewPrivileges=false" },
                what.describe(),
            ),
        )
        .with_help(format!(
            "a rule on `args[{index}]` of `{}` cannot be relied on: allow the call, or condition the rule on an argument the caller sets",
            need.name
        ));
    }
    let (code, who) = match need.phase {
        Phase::RuntimeInit if need.flaky => (
            Code::RuntimeSyscallDeniedIntermittently,
            init_name(opts.oci_runtime),
        ),
        Phase::RuntimeInit => (Code::RuntimeSyscallDenied, init_name(opts.oci_runtime)),
        Phase::Entrypoint => (
            Code::EntrypointSyscallDenied,
            "the container's first process",
        ),
    };
    let mode = if opts.no_new_privileges {
        "noNewPrivileges=true"
    } else {
        "noNewPrivileges=false"
    };
    Diagnostic::error(
        code,
        pointer,
        format!(
            "{who} needs `{}`{} after the filter is loaded ({mode}), but the profile answers it with {action}{}{}, so the container fails to start{}",
            need.name,
            dropping.map_or(String::new(), |cap| format!(" to drop {cap} from the bounding set")),
            if action == Action::Errno(0) { " (0 without running, which this caller does not take for success)" } else { "" },
            fallbacks.map_or(String::new(), |alts| format!(" and denies its fallback `{}` too", alts.join("`, `"))),
            intermittently(need, action, opts),
        ),
    )
    .with_help(match answer(action) {
        Some(Answer::Errno(e @ (runc_init::EPERM | runc_init::ENOSYS))) => need.observed_failure(opts.no_new_privileges, e == runc_init::ENOSYS),
        _ => None,
    }.map_or_else(
        || format!("allow `{}` in an SCMP_ACT_ALLOW rule", need.name),
        |seen| format!("allow `{}`; denying it alone, {} failed with: {seen}", need.name, opts.oci_runtime),
    ))
}

/// Who makes the runtime's calls after the filter is loaded.
fn init_name(rt: OciRuntime) -> &'static str {
    match rt.kind() {
        OciRuntimeKind::Runc => "runc init",
        OciRuntimeKind::Crun => "crun's container process",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compiles every filter to `len` instructions that allow everything.
    struct Fixed {
        len: usize,
    }

    impl Compiler for Fixed {
        fn compile(&self, spec: &FilterSpec, native: Arch) -> Result<CompiledFilter, CompileError> {
            let allow = cbpf::SockFilter {
                code: cbpf::op::RET_K,
                jt: 0,
                jf: 0,
                k: 0x7fff_0000,
            };
            Ok(CompiledFilter {
                native,
                arches: std::iter::once(native)
                    .chain(spec.arches.iter().copied())
                    .collect(),
                program: vec![allow; self.len],
                skipped: Vec::new(),
            })
        }
    }

    fn lint_fixed(src: &str, len: usize) -> ProfileReport {
        let opts = LintOptions {
            arch: Arch::X86_64,
            check_listener: false,
            ..Default::default()
        };
        lint_source("p.json", src.as_bytes(), &opts, &Fixed { len })
    }

    fn codes(r: &ProfileReport) -> Vec<Code> {
        r.diagnostics.iter().map(|d| d.code).collect()
    }

    /// runc adds no -ENOSYS section for an architecture the profile does not
    /// list, only its 4-instruction no-op: 4092 instructions then still fit.
    #[test]
    fn the_stub_is_counted_only_for_listed_architectures() {
        let rules = r#""syscalls": [{"names": ["read", "mkdir"], "action": "SCMP_ACT_ALLOW"}]"#;
        for (arches, over) in [
            ("", false),
            (r#""architectures": [],"#, false),
            (r#""architectures": ["SCMP_ARCH_X86"],"#, true),
            (r#""architectures": ["SCMP_ARCH_X86_64"],"#, true),
        ] {
            let src = format!(r#"{{"defaultAction": "SCMP_ACT_KILL_PROCESS", {arches} {rules}}}"#);
            let r = lint_fixed(&src, BPF_MAXINSNS - 4);
            let too_large = codes(&r).contains(&Code::FilterTooLarge);
            assert_eq!(too_large, over, "{arches}: {:?}", r.diagnostics);
            assert_eq!(r.instructions > Some(BPF_MAXINSNS), over, "{arches}");
            let unlisted = codes(&r).contains(&Code::NativeArchUnlisted);
            assert_eq!(
                unlisted,
                !arches.contains("X86_64"),
                "{arches}: {:?}",
                r.diagnostics
            );
        }
        let r = lint_fixed(
            &format!(r#"{{"defaultAction": "SCMP_ACT_KILL_PROCESS", {rules}}}"#),
            10,
        );
        assert_eq!(r.instructions, Some(14));
        let d = r
            .diagnostics
            .iter()
            .find(|d| d.code == Code::NativeArchUnlisted)
            .unwrap();
        assert_eq!(d.severity, Severity::Warning);
        assert!(
            d.message
                .contains("SCMP_ACT_KILL_PROCESS instead of failing with ENOSYS"),
            "{}",
            d.message
        );
        // A permissive default gets no stub anywhere, so there is nothing to warn about.
        let r = lint_fixed(
            r#"{"defaultAction": "SCMP_ACT_LOG", "syscalls": [{"names": ["mkdir"], "action": "SCMP_ACT_ERRNO"}]}"#,
            10,
        );
        assert!(
            !codes(&r).contains(&Code::NativeArchUnlisted),
            "{:?}",
            r.diagnostics
        );
    }

    fn template_keys(src: &str, schema: &'static decode::Schema) -> bool {
        let mut node = json::parse(src.as_bytes()).unwrap();
        has_template_keys(&decode::decode(&mut node, schema).root)
    }

    /// Each template-only key names the dialect alone; the rest do not.
    #[test]
    fn the_template_fields_present_name_the_dialect() {
        for src in [
            r#"{"archMap": []}"#,
            r#"{"syscalls": [{"names": ["read"]}, {"name": "read"}]}"#,
            r#"{"syscalls": [{"comment": ""}]}"#,
            r#"{"syscalls": [{"includes": {}}]}"#,
            r#"{"syscalls": [{"excludes": {}}]}"#,
        ] {
            assert!(template_keys(src, &TPL_SECCOMP), "{src}");
            // The OCI schema drops them; the decoder notices that instead.
            assert!(!template_keys(src, &OCI_SECCOMP), "{src}");
        }
        let oci = r#"{"defaultAction": "SCMP_ACT_ERRNO", "architectures": [], "flags": [],
            "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "errnoRet": 1, "args": []}]}"#;
        assert!(!template_keys(oci, &TPL_SECCOMP));
    }

    /// An operator's SeccompProfile object is said to be one, before the
    /// JSON error the runtime gives for it, and as JSON too (where the
    /// runtime drops every field and runs the container unconfined).
    #[test]
    fn a_security_profiles_operator_object_is_named_as_such() {
        let yaml = "apiVersion: security-profiles-operator.x-k8s.io/v1beta1\nkind: SeccompProfile\nmetadata:\n  name: p1\n  namespace: ns\nspec:\n  defaultAction: SCMP_ACT_LOG\n";
        let r = lint_fixed(yaml, 10);
        assert_eq!(r.outcome, Outcome::Rejected);
        let codes: Vec<_> = r.diagnostics.iter().map(|d| d.code).collect();
        assert_eq!(codes, [Code::SpoSeccompProfile, Code::JsonSyntax]);
        assert_eq!(
            (r.diagnostics[0].line, r.diagnostics[0].column),
            (Some(1), Some(1))
        );
        let json = r#"{"apiVersion":"security-profiles-operator.x-k8s.io/v1","kind":"SeccompProfile","metadata":{"name":"p1"},"spec":{"defaultAction":"SCMP_ACT_LOG"}}"#;
        let r = lint_fixed(json, 10);
        assert_eq!(r.diagnostics[0].code, Code::SpoSeccompProfile);
        assert!(r
            .diagnostics
            .iter()
            .any(|d| d.code == Code::SeccompDisabled));
    }
}
