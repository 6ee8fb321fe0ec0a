//! The translation of a decoded profile into the [`FilterSpec`] the runtime
//! hands to libseccomp, rule by rule, in runc's order: runc 1.1.5's
//! `specconv.SetupSeccomp` (errors here refuse the config before any
//! container process exists) and `seccomp.InitSeccomp`/`matchCall` (errors
//! here happen inside runc init, so the container fails to start). Where a
//! release of runc or crun differs, it reads that release's
//! [`SeccompBehaviour`], the data in `runc` and `crun`.

pub use crate::behaviour::Stage;
use crate::behaviour::{resolve_arch, ArchNames, EnosysStub, FlagSupport, SeccompBehaviour};
use crate::diagnostic::{Code, Diagnostic};
use crate::filter::{Action, Arch, CmpOp, Cond, FilterSpec, Rule, RuleOrigin};
use crate::model::Seccomp;
use crate::syscalls::c_string_name;

/// runc's `syscallMaxArguments`.
const MAX_ARGS: u64 = 6;
const EPERM: u16 = 1;

#[derive(Debug)]
pub enum Translation {
    /// No default action and no rules: runc installs no filter.
    Disabled,
    /// The filter runc builds, and diagnostics about how it got there.
    Filter(FilterSpec),
    /// runc fails at `stage`; the diagnostic says why.
    Fails(Stage, Diagnostic),
}

/// runc's action table (`libcontainer/seccomp/config.go`) and `getAction`.
pub fn action(name: &str, errno_ret: Option<u64>) -> Option<Action> {
    // runc passes int16(*errnoRet) to libseccomp, which keeps the low 16 bits.
    let errno = errno_ret.map_or(EPERM, |e| (e & 0xffff) as u16);
    Some(match name {
        "SCMP_ACT_KILL" | "SCMP_ACT_KILL_THREAD" => Action::KillThread,
        "SCMP_ACT_KILL_PROCESS" => Action::KillProcess,
        "SCMP_ACT_TRAP" => Action::Trap,
        "SCMP_ACT_ERRNO" => Action::Errno(errno),
        "SCMP_ACT_TRACE" => Action::Trace(errno),
        "SCMP_ACT_ALLOW" => Action::Allow,
        "SCMP_ACT_LOG" => Action::Log,
        "SCMP_ACT_NOTIFY" => Action::Notify,
        _ => return None,
    })
}

/// What a rule naming a syscall libseccomp does not know becomes: the
/// runtime skips it. A real syscall newer than the runtime's libseccomp is
/// told apart from a misspelling; skipping it matters (a warning) where the
/// rule would stop a call the default action lets run, since the call then
/// runs unfiltered, and is a note otherwise: the call is refused as on a
/// kernel without it, and nothing in the profile needs to change.
fn unresolved_name(
    name: &str,
    pointer: String,
    rule: Action,
    default: Action,
    b: &SeccompBehaviour,
) -> Diagnostic {
    let rt = b.runtime;
    let lib = b.libseccomp;
    let Some(newer) = crate::syscalls::newer_than(lib, name) else {
        return Diagnostic::warning(
            Code::UnknownSyscall,
            pointer,
            format!(
                "libseccomp {} does not know the syscall `{name}`; {} skips it silently",
                lib.as_str(),
                rt.kind().as_str()
            ),
        )
        .with_help(match crate::syscalls::closest_name(lib, name) {
            Some(near) => format!("did you mean `{near}`? check the spelling"),
            None => format!(
                "check the spelling: no syscall libseccomp {} knows is close to `{name}`",
                lib.as_str()
            ),
        });
    };
    let arches = match newer.only_on {
        [] => String::new(),
        only => format!(
            ", {} only",
            only.iter()
                .map(|a| a
                    .scmp_name()
                    .trim_start_matches("SCMP_ARCH_")
                    .to_lowercase())
                .collect::<Vec<_>>()
                .join(" and ")
        ),
    };
    let what = format!(
        "`{name}` is unknown to libseccomp {}, which {rt} links (added in Linux {}{arches}): {} skips the rule",
        lib.as_str(),
        newer.linux_release(),
        rt.kind().as_str(),
    );
    let later = match newer.known_from {
        Some(first) => format!(
            "libseccomp {} knows it (runc 1.1.15, crun 1.21 link it)",
            first.as_str()
        ),
        None => "no libseccomp release nodeproof models knows it yet".to_string(),
    };
    if !rule.lets_syscall_run() && default.lets_syscall_run() {
        Diagnostic::warning(
            Code::SyscallNewerThanLibseccomp,
            pointer,
            format!("{what}, so the container's `{name}` calls run instead of getting {rule}"),
        )
        .with_help(format!(
            "{later}; with this runtime a default action that refuses calls is the only way to stop `{name}`"
        ))
    } else {
        Diagnostic::note(
            Code::SyscallNewerThanLibseccomp,
            pointer,
            format!(
                "{what}, so the container's `{name}` calls get the default action {default}{}, as on a kernel without it",
                if b.enosys_stub == EnosysStub::Absent { "" } else { " (or ENOSYS from runc's stub)" }
            ),
        )
        .with_help(format!("nothing to change in the profile: {later}"))
    }
}

const ACTION_HELP: &str = "use one of SCMP_ACT_ALLOW, SCMP_ACT_ERRNO, SCMP_ACT_KILL_PROCESS, SCMP_ACT_KILL_THREAD, SCMP_ACT_KILL, SCMP_ACT_TRAP, SCMP_ACT_TRACE, SCMP_ACT_LOG, SCMP_ACT_NOTIFY (case matters)";

/// Translate like the runtime `b` describes (runc's code, with crun's
/// differences read from `b`). `resolves(name)` says whether libseccomp
/// knows the syscall name on the native architecture (both runtimes
/// silently skip the rest).
pub fn translate(
    p: &Seccomp,
    b: &SeccompBehaviour,
    resolves: &dyn Fn(&str) -> bool,
) -> (Translation, Vec<Diagnostic>) {
    let mut notes = Vec::new();
    if p.disables_seccomp() {
        return (Translation::Disabled, notes);
    }
    let rt = b.runtime;
    let fail_config =
        |d: Diagnostic, notes: Vec<Diagnostic>| (Translation::Fails(b.refusal, d), notes);
    // ---- specconv.SetupSeccomp (crun: libcrun_generate_seccomp, libcrun_apply_seccomp) ----
    if let Some(d) = check_flags(p, b) {
        return (Translation::Fails(flag_stage(b), d), notes);
    }
    let mut arches = Vec::new();
    for (i, a) in p.architectures.iter().enumerate() {
        let resolved = match b.arch_names {
            ArchNames::RuncTable {
                arches: table,
                unmodelled,
            } => {
                if unmodelled.contains(&a.as_str()) {
                    Some(None)
                } else {
                    Arch::from_scmp_name(a)
                        .filter(|x| table.contains(x))
                        .map(Some)
                }
            }
            ArchNames::LibseccompNames => resolve_arch(a, b.libseccomp),
        };
        match resolved {
            Some(Some(arch)) => arches.push(arch),
            Some(None) => notes.push(Diagnostic::note(
                Code::UnknownArch,
                format!("/architectures/{i}"),
                format!("{rt} adds `{a}` to the filter (libseccomp {} knows it); nodeproof does not model that architecture, so it checks the others", b.libseccomp.as_str()),
            )),
            None if matches!(b.arch_names, ArchNames::LibseccompNames) => {
                return fail_config(
                    Diagnostic::error(
                        Code::UnknownArch,
                        format!("/architectures/{i}"),
                        format!("`{a}` is not an architecture libseccomp {} knows; {rt} fails to start the container (\"seccomp unknown architecture\")", b.libseccomp.as_str()),
                    )
                    .with_help("use SCMP_ARCH_* names such as SCMP_ARCH_X86_64, SCMP_ARCH_X86, SCMP_ARCH_AARCH64"),
                    notes,
                );
            }
            None => {
                let runc = rt.version();
                let known_to_libseccomp = Arch::from_scmp_name(a).is_some();
                return fail_config(
                    Diagnostic::error(
                        Code::UnknownArch,
                        format!("/architectures/{i}"),
                        format!("`{a}` is not an architecture runc {runc} knows; it refuses the profile (\"string {a} is not a valid arch for seccomp\")"),
                    )
                    .with_help(if known_to_libseccomp {
                        format!("libseccomp knows `{a}`, but runc {runc}'s own architecture map does not: drop it, or run a runc that supports it")
                    } else {
                        "use SCMP_ARCH_* names such as SCMP_ARCH_X86_64, SCMP_ARCH_X86, SCMP_ARCH_AARCH64".to_string()
                    }),
                    notes,
                );
            }
        }
    }
    if let Some(d) = errno_without_errno_action(
        b,
        &p.default_action,
        p.default_errno_ret,
        "/defaultErrnoRet",
    ) {
        return fail_config(d, notes);
    }
    let Some(default_action) = action(&p.default_action, p.default_errno_ret) else {
        let msg = if p.default_action.is_empty() {
            format!(
                "`defaultAction` is missing but rules are present; {} refuses the profile",
                rt.kind().as_str()
            )
        } else {
            format!(
                "`{}` is not a seccomp action {} knows",
                p.default_action,
                rt.kind().as_str()
            )
        };
        return fail_config(
            Diagnostic::error(Code::UnknownAction, "/defaultAction", msg).with_help(ACTION_HELP),
            notes,
        );
    };
    struct Call<'a> {
        name: &'a str,
        name_index: usize,
        action: Action,
        pointer: std::sync::Arc<str>,
        args: &'a [crate::model::ArgCond],
    }
    let mut calls = Vec::with_capacity(p.syscalls.iter().map(|r| r.names.len()).sum());
    for rule in &p.syscalls {
        if let Some(d) = errno_without_errno_action(
            b,
            &rule.action,
            rule.errno_ret,
            &format!("{}/errnoRet", rule.pointer),
        ) {
            return fail_config(d, notes);
        }
        let Some(act) = action(&rule.action, rule.errno_ret) else {
            return fail_config(
                Diagnostic::error(
                    Code::UnknownAction,
                    format!("{}/action", rule.pointer),
                    if rule.action.is_empty() {
                        "rule has no `action`; runc refuses the profile".to_string()
                    } else {
                        format!("`{}` is not a seccomp action runc knows", rule.action)
                    },
                )
                .with_help(ACTION_HELP),
                notes,
            );
        };
        if rule.names.is_empty() {
            notes.push(Diagnostic::warning(
                Code::EmptyNames,
                rule.pointer.clone(),
                "rule names no syscall, so runc adds nothing for it",
            ));
        }
        let pointer: std::sync::Arc<str> = rule.pointer.as_str().into();
        for (name_index, name) in rule.names.iter().enumerate() {
            // runc converts the operators once per name, so a rule without names never checks them.
            for arg in &rule.args {
                if CmpOp::from_scmp_name(&arg.op).is_none() {
                    return fail_config(
                        Diagnostic::error(
                            Code::UnknownOperator,
                            format!("{}/op", arg.pointer),
                            format!("`{}` is not a comparison operator runc knows", arg.op),
                        )
                        .with_help("use SCMP_CMP_EQ, SCMP_CMP_NE, SCMP_CMP_LT, SCMP_CMP_LE, SCMP_CMP_GT, SCMP_CMP_GE or SCMP_CMP_MASKED_EQ"),
                        notes,
                    );
                }
            }
            calls.push(Call {
                name,
                name_index,
                action: act,
                pointer: pointer.clone(),
                args: &rule.args,
            });
        }
    }
    // ---- runc init: InitSeccomp / matchCall ----
    if b.notify_checks && default_action == Action::Notify {
        return fail_init(
            Diagnostic::error(
                Code::NotifyNotAllowed,
                "/defaultAction",
                "runc refuses SCMP_ACT_NOTIFY as the default action (it would need to notify its own write)",
            ),
            notes,
        );
    }
    if let Some(c) = calls
        .iter()
        // InitSeccomp compares the Go string, so `write\0x` passes this check (and notifies write).
        .find(|c| b.notify_checks && c.action == Action::Notify && c.name == "write")
    {
        return fail_init(
            Diagnostic::error(
                Code::NotifyNotAllowed,
                format!("{}/names/{}", c.pointer, c.name_index),
                "runc refuses SCMP_ACT_NOTIFY for `write`: it must write the listener fd to its parent",
            ),
            notes,
        );
    }
    let uses_notify = calls.iter().any(|c| c.action == Action::Notify);
    let mut rules = Vec::with_capacity(calls.len());
    for c in &calls {
        let name_ptr = || format!("{}/names/{}", c.pointer, c.name_index);
        if c.name.is_empty() && b.empty_name_fails {
            return fail_init(
                Diagnostic::error(
                    Code::EmptySyscallName,
                    name_ptr(),
                    "an empty syscall name makes runc init fail (\"empty string is not a valid syscall\")",
                ),
                notes,
            );
        }
        // matchCall checks the Go string for emptiness, so a name that only
        // becomes empty at its NUL gets past that check and fails to resolve.
        let name = c_string_name(c.name);
        if name.len() != c.name.len() {
            notes.push(
                Diagnostic::warning(
                    Code::NulInSyscallName,
                    name_ptr(),
                    if name.is_empty() {
                        format!("{:?} starts with a NUL: runc hands libseccomp the name as a C string, so it reads an empty name, which no syscall has", c.name)
                    } else {
                        format!("{:?} contains a NUL: runc hands libseccomp the name as a C string, so it reads `{name}` and the rule applies to `{name}`", c.name)
                    },
                )
                .with_help("remove the NUL and what follows it, or the whole name if it was not meant"),
            );
        }
        if c.action == default_action {
            notes.push(
                Diagnostic::warning(
                    Code::ShadowedRule,
                    name_ptr(),
                    format!(
                        "`{name}` has the default action {default_action}; runc skips this rule"
                    ),
                )
                .with_help("remove it, or give it a different action"),
            );
            continue;
        }
        if !resolves(name) {
            notes.push(unresolved_name(
                name,
                name_ptr(),
                c.action,
                default_action,
                b,
            ));
            continue;
        }
        let mut conds = Vec::new();
        let mut per_index = [0u32; MAX_ARGS as usize];
        for arg in c.args {
            if arg.index >= MAX_ARGS {
                return fail_init(
                    Diagnostic::error(
                        Code::ArgIndexOutOfRange,
                        format!("{}/index", arg.pointer),
                        format!(
                            "argument index {} is out of range: syscalls have 6 arguments (0-5); runc init fails",
                            arg.index
                        ),
                    ),
                    notes,
                );
            }
            per_index[arg.index as usize] += 1;
            conds.push(Cond {
                index: arg.index as u8,
                op: CmpOp::from_scmp_name(&arg.op).unwrap_or(CmpOp::Eq),
                value: arg.value,
                value_two: arg.value_two,
            });
        }
        let origin = RuleOrigin {
            pointer: c.pointer.clone(),
            name_index: c.name_index,
        };
        if per_index.iter().any(|&n| n > 1) {
            // runc's fallback: one rule per condition, so the conditions are ORed, not ANDed.
            notes.push(
                Diagnostic::error(
                    Code::ConditionsSplit,
                    format!("{}/args", c.pointer),
                    format!(
                        "`{name}` has several conditions on the same argument; runc adds each as its own rule, so they are ORed, not ANDed"
                    ),
                )
                .with_help("libseccomp cannot AND two comparisons of one argument; split the range into separate rules with one condition each, or use SCMP_CMP_MASKED_EQ"),
            );
            for cond in conds {
                rules.push(Rule {
                    syscall: name.to_string(),
                    action: c.action,
                    conds: vec![cond],
                    origin: origin.clone(),
                });
            }
        } else {
            rules.push(Rule {
                syscall: name.to_string(),
                action: c.action,
                conds,
                origin,
            });
        }
    }
    if b.notify_checks && uses_notify && p.listener_path.is_empty() {
        return fail_init(
            Diagnostic::error(
                Code::ListenerPathMissing,
                "/listenerPath",
                "the profile uses SCMP_ACT_NOTIFY but sets no `listenerPath`; runc fails to start the container",
            )
            .with_help("set listenerPath to the seccomp agent's unix socket"),
            notes,
        );
    }
    let spec = FilterSpec {
        default_action,
        arches,
        rules,
        // No path, no socket to hand the fd to (crun then loads the filter without a listener).
        listener_path: (uses_notify && !p.listener_path.is_empty())
            .then(|| p.listener_path.clone()),
        libseccomp: b.libseccomp,
    };
    (Translation::Filter(spec), notes)
}

/// `flags` the runtime refuses, if any.
fn check_flags(p: &Seccomp, b: &SeccompBehaviour) -> Option<Diagnostic> {
    match b.flags {
        FlagSupport::Refused if !p.flags.is_empty() => Some(
            Diagnostic::error(
                Code::FlagsUnsupported,
                "/flags",
                "runc 1.1 refuses any seccomp `flags` (\"seccomp flags are not yet supported by runc\")",
            )
            .with_help("remove `flags`; runc 1.2 and later accept them"),
        ),
        FlagSupport::Refused => None,
        FlagSupport::Known(known) => p.flags.iter().enumerate().find(|(_, f)| !known.contains(&f.as_str())).map(|(i, f)| {
            Diagnostic::error(
                Code::FlagsUnsupported,
                format!("/flags/{i}"),
                format!("{} does not know the seccomp flag `{f}` and fails to start the container (\"unknown seccomp option\")", b.runtime),
            )
            .with_help(format!("use one of {}", known.join(", ")))
        }),
    }
}

/// Where a refused flag fails: runc in spec conversion; crun when its child
/// loads the filter (`libcrun_apply_seccomp`).
fn flag_stage(b: &SeccompBehaviour) -> Stage {
    match b.flags {
        FlagSupport::Refused => b.refusal,
        FlagSupport::Known(_) => Stage::Init,
    }
}

/// crun's `seccomp_action_supports_errno` check; runc has none.
fn errno_without_errno_action(
    b: &SeccompBehaviour,
    action: &str,
    errno_ret: Option<u64>,
    pointer: &str,
) -> Option<Diagnostic> {
    (b.errno_ret_needs_errno_action
        && errno_ret.is_some()
        && !matches!(action, "SCMP_ACT_ERRNO" | "SCMP_ACT_TRACE"))
    .then(|| {
        Diagnostic::error(
            Code::ErrnoIgnored,
            pointer.to_string(),
            format!("{} refuses an errno with {action} (\"errno value specified for action\"), so the container fails to start", b.runtime),
        )
        .with_help("remove the errno, or use SCMP_ACT_ERRNO")
    })
}

fn fail_init(d: Diagnostic, notes: Vec<Diagnostic>) -> (Translation, Vec<Diagnostic>) {
    (Translation::Fails(Stage::Init, d), notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::behaviour::RuncVersion;
    use crate::diagnostic::Severity;
    use crate::model::{ArgCond, SyscallRule};
    use crate::runc::{RUNC_1_1_15, RUNC_1_1_5};

    fn rule(names: &[&str], action: &str) -> SyscallRule {
        SyscallRule {
            names: names.iter().map(|s| s.to_string()).collect(),
            action: action.to_string(),
            pointer: "/syscalls/0".into(),
            ..Default::default()
        }
    }

    fn known(name: &str) -> bool {
        !name.starts_with("no_such")
    }

    fn run(p: &Seccomp) -> (Translation, Vec<Diagnostic>) {
        translate(p, &RUNC_1_1_5, &known)
    }

    #[test]
    fn actions_follow_runc() {
        assert_eq!(action("SCMP_ACT_KILL", None), Some(Action::KillThread));
        assert_eq!(action("SCMP_ACT_ERRNO", None), Some(Action::Errno(1)));
        assert_eq!(action("SCMP_ACT_ERRNO", Some(38)), Some(Action::Errno(38)));
        assert_eq!(
            action("SCMP_ACT_ERRNO", Some(65537)),
            Some(Action::Errno(1))
        );
        assert_eq!(action("SCMP_ACT_TRACE", None), Some(Action::Trace(1)));
        assert_eq!(action("scmp_act_allow", None), None);
    }

    #[test]
    fn table_of_failures() {
        let base = Seccomp {
            default_action: "SCMP_ACT_ERRNO".into(),
            ..Default::default()
        };
        type Case = (
            &'static str,
            fn(&mut Seccomp),
            Option<(Stage, Code, &'static str)>,
        );
        let cases: Vec<Case> = vec![
            ("ok", |_| {}, None),
            (
                "flags",
                |p| p.flags = vec!["SECCOMP_FILTER_FLAG_LOG".into()],
                Some((Stage::Config, Code::FlagsUnsupported, "/flags")),
            ),
            (
                "arch",
                |p| p.architectures = vec!["x86_64".into()],
                Some((Stage::Config, Code::UnknownArch, "/architectures/0")),
            ),
            (
                "arch libseccomp knows but runc 1.1.5 does not",
                |p| p.architectures = vec!["SCMP_ARCH_X86_64".into(), "SCMP_ARCH_RISCV64".into()],
                Some((Stage::Config, Code::UnknownArch, "/architectures/1")),
            ),
            (
                "arch neither knows",
                |p| p.architectures = vec!["SCMP_ARCH_LOONGARCH64".into()],
                Some((Stage::Config, Code::UnknownArch, "/architectures/0")),
            ),
            (
                "every arch in runc 1.1.5's map",
                |p| {
                    p.architectures = RuncVersion::V1_1_5
                        .arches()
                        .iter()
                        .map(|a| a.scmp_name().to_string())
                        .collect()
                },
                None,
            ),
            (
                "default",
                |p| p.default_action = "SCMP_ACT_NOPE".into(),
                Some((Stage::Config, Code::UnknownAction, "/defaultAction")),
            ),
            (
                "no default",
                |p| {
                    p.default_action.clear();
                    p.syscalls = vec![rule(&["mkdir"], "SCMP_ACT_ALLOW")];
                },
                Some((Stage::Config, Code::UnknownAction, "/defaultAction")),
            ),
            (
                "rule action",
                |p| p.syscalls = vec![rule(&[], "allow")],
                Some((Stage::Config, Code::UnknownAction, "/syscalls/0/action")),
            ),
            (
                "op",
                |p| {
                    let mut r = rule(&["mkdir"], "SCMP_ACT_ALLOW");
                    r.args = vec![ArgCond {
                        op: "EQ".into(),
                        pointer: "/syscalls/0/args/0".into(),
                        ..Default::default()
                    }];
                    p.syscalls = vec![r];
                },
                Some((
                    Stage::Config,
                    Code::UnknownOperator,
                    "/syscalls/0/args/0/op",
                )),
            ),
            (
                "op without names is never checked",
                |p| {
                    let mut r = rule(&[], "SCMP_ACT_ALLOW");
                    r.args = vec![ArgCond {
                        op: "EQ".into(),
                        ..Default::default()
                    }];
                    p.syscalls = vec![r];
                },
                None,
            ),
            (
                "empty name",
                |p| p.syscalls = vec![rule(&[""], "SCMP_ACT_ALLOW")],
                Some((Stage::Init, Code::EmptySyscallName, "/syscalls/0/names/0")),
            ),
            (
                "index",
                |p| {
                    let mut r = rule(&["mkdir"], "SCMP_ACT_ALLOW");
                    r.args = vec![ArgCond {
                        index: 6,
                        op: "SCMP_CMP_EQ".into(),
                        pointer: "/syscalls/0/args/0".into(),
                        ..Default::default()
                    }];
                    p.syscalls = vec![r];
                },
                Some((
                    Stage::Init,
                    Code::ArgIndexOutOfRange,
                    "/syscalls/0/args/0/index",
                )),
            ),
            (
                "notify default",
                |p| p.default_action = "SCMP_ACT_NOTIFY".into(),
                Some((Stage::Init, Code::NotifyNotAllowed, "/defaultAction")),
            ),
            (
                "notify write",
                |p| {
                    p.listener_path = "/run/agent.sock".into();
                    p.syscalls = vec![rule(&["read", "write"], "SCMP_ACT_NOTIFY")];
                },
                Some((Stage::Init, Code::NotifyNotAllowed, "/syscalls/0/names/1")),
            ),
            (
                "notify without listener",
                |p| p.syscalls = vec![rule(&["mkdir"], "SCMP_ACT_NOTIFY")],
                Some((Stage::Init, Code::ListenerPathMissing, "/listenerPath")),
            ),
        ];
        for (what, edit, want) in cases {
            let mut p = base.clone();
            edit(&mut p);
            let (t, _) = run(&p);
            match (t, want) {
                (Translation::Filter(_), None) => {}
                (Translation::Fails(stage, d), Some((ws, wc, wp))) => {
                    assert_eq!(
                        (stage, d.code, d.pointer.as_str()),
                        (ws, wc, wp),
                        "case {what}"
                    );
                }
                (t, w) => panic!("case {what}: got {t:?}, want {w:?}"),
            }
        }
    }

    #[test]
    fn an_arch_outside_runcs_map_is_refused_with_runcs_message() {
        let p = Seccomp {
            default_action: "SCMP_ACT_ALLOW".into(),
            architectures: vec!["SCMP_ARCH_RISCV64".into()],
            ..Default::default()
        };
        let Translation::Fails(Stage::Config, d) = run(&p).0 else {
            panic!("riscv64 accepted")
        };
        assert!(
            d.message
                .contains("\"string SCMP_ARCH_RISCV64 is not a valid arch for seccomp\""),
            "{}",
            d.message
        );
        assert!(d.help.unwrap().contains("libseccomp knows"));
        assert_eq!(
            RuncVersion::V1_1_5.arch("SCMP_ARCH_X86_64"),
            Some(Arch::X86_64)
        );
        assert_eq!(RuncVersion::V1_1_5.arch("SCMP_ARCH_RISCV64"), None);
    }

    #[test]
    fn names_end_at_a_nul_like_c_strings() {
        assert_eq!(c_string_name("execve\0x"), "execve");
        assert_eq!(c_string_name("\0execve"), "");
        assert_eq!(c_string_name("execve"), "execve");
        let p = Seccomp {
            default_action: "SCMP_ACT_ALLOW".into(),
            syscalls: vec![rule(&["execve\0x", "\0mkdir"], "SCMP_ACT_ERRNO")],
            ..Default::default()
        };
        // The resolver is libseccomp's: it must be asked for the cut name.
        let (t, notes) = translate(&p, &RUNC_1_1_5, &|n| n == "execve");
        let Translation::Filter(spec) = t else {
            panic!("{t:?}")
        };
        // execve is denied; the empty name is not a syscall (not runc init's empty-name failure).
        let rules: Vec<_> = spec.rules.iter().map(|r| r.syscall.as_str()).collect();
        assert_eq!(rules, ["execve"]);
        let codes: Vec<_> = notes.iter().map(|d| (d.code, d.pointer.as_str())).collect();
        assert_eq!(
            codes,
            [
                (Code::NulInSyscallName, "/syscalls/0/names/0"),
                (Code::NulInSyscallName, "/syscalls/0/names/1"),
                (Code::UnknownSyscall, "/syscalls/0/names/1"),
            ]
        );
        assert!(
            notes[0].message.contains("reads `execve`"),
            "{}",
            notes[0].message
        );
    }

    #[test]
    fn disabled_shadowed_unknown_and_split() {
        assert!(matches!(run(&Seccomp::default()).0, Translation::Disabled));
        let mut range = rule(&["personality", "no_such_call", "getpid"], "SCMP_ACT_ALLOW");
        range.args = vec![
            ArgCond {
                index: 0,
                op: "SCMP_CMP_GE".into(),
                value: 1,
                ..Default::default()
            },
            ArgCond {
                index: 0,
                op: "SCMP_CMP_LE".into(),
                value: 5,
                ..Default::default()
            },
        ];
        let p = Seccomp {
            default_action: "SCMP_ACT_ERRNO".into(),
            syscalls: vec![range, rule(&["mkdir"], "SCMP_ACT_ERRNO")],
            ..Default::default()
        };
        let (t, notes) = run(&p);
        let Translation::Filter(spec) = t else {
            panic!("{t:?}")
        };
        let codes: Vec<_> = notes.iter().map(|d| d.code).collect();
        assert_eq!(
            codes,
            [
                Code::ConditionsSplit,
                Code::UnknownSyscall,
                Code::ConditionsSplit,
                Code::ShadowedRule
            ]
        );
        // personality and getpid, each split into two one-condition rules.
        assert_eq!(spec.rules.len(), 4);
        assert!(spec.rules.iter().all(|r| r.conds.len() == 1));
    }

    /// A real syscall newer than the runtime's libseccomp is said as such
    /// (with the Linux release), a misspelled one gets a "did you mean".
    #[test]
    fn newer_syscalls_are_told_apart_from_misspellings() {
        let lint = |default: &str, names: &[&str], action: &str, b: &SeccompBehaviour| {
            let p = Seccomp {
                default_action: default.into(),
                syscalls: vec![rule(names, action)],
                ..Default::default()
            };
            let resolves = |n: &str| {
                crate::syscalls::resolve_syscall_in(b.libseccomp, n, Arch::X86_64).is_some()
            };
            translate(&p, b, &resolves).1
        };
        let notes = lint(
            "SCMP_ACT_ERRNO",
            &["mseal", "opennat", "riscv_hwprobe"],
            "SCMP_ACT_ALLOW",
            &RUNC_1_1_5,
        );
        let got: Vec<_> = notes.iter().map(|d| (d.severity, d.code)).collect();
        assert_eq!(
            got,
            [
                (Severity::Note, Code::SyscallNewerThanLibseccomp),
                (Severity::Warning, Code::UnknownSyscall),
                (Severity::Note, Code::SyscallNewerThanLibseccomp),
            ]
        );
        assert_eq!(
            notes[0].message,
            "`mseal` is unknown to libseccomp 2.5.4, which runc 1.1.5 links (added in Linux 6.10): runc skips the rule, so the container's `mseal` calls get the default action SCMP_ACT_ERRNO(1) (or ENOSYS from runc's stub), as on a kernel without it"
        );
        assert!(!notes[0].help.as_deref().unwrap().contains("spelling"));
        assert_eq!(
            notes[1].help.as_deref(),
            Some("did you mean `openat`? check the spelling")
        );
        assert!(
            notes[2]
                .message
                .contains("(added in Linux 6.4, riscv64 only)"),
            "{}",
            notes[2].message
        );
        // A denial the runtime drops lets the call run: a warning.
        let notes = lint("SCMP_ACT_ALLOW", &["mseal"], "SCMP_ACT_ERRNO", &RUNC_1_1_5);
        assert_eq!(notes[0].severity, Severity::Warning);
        assert!(
            notes[0]
                .message
                .ends_with("calls run instead of getting SCMP_ACT_ERRNO(1)"),
            "{}",
            notes[0].message
        );
        // libseccomp 2.6.0 knows mseal, not open_tree_attr (Linux 6.15).
        assert!(lint("SCMP_ACT_ERRNO", &["mseal"], "SCMP_ACT_ALLOW", &RUNC_1_1_15).is_empty());
        let notes = lint(
            "SCMP_ACT_ERRNO",
            &["open_tree_attr"],
            "SCMP_ACT_ALLOW",
            &RUNC_1_1_15,
        );
        assert!(notes[0].message.starts_with("`open_tree_attr` is unknown to libseccomp 2.6.0, which runc 1.1.15 links (added in Linux 6.15)"), "{}", notes[0].message);
    }
}
