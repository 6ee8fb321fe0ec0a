//! `advise --from RECORDING`: the smallest allow-list profile for what a
//! container was recorded calling that `profile lint` predicts starts under
//! the runtime. Pure, given a compiler.
//!
//! The profile denies by default (`SCMP_ACT_ERRNO`, EPERM) and allows:
//! - every recorded syscall, on the recorded architectures (native first);
//!   a syscall recorded with the values of exactly one argument, all kept and
//!   at most [`MAX_VALUES`] of them, only for those values (what the pod's
//!   profile compared when it was recorded stays compared); any other
//!   unconditionally;
//! - the runtime's own calls after it loads the filter (runc init's or crun's
//!   container child's, [`crate::runc_init`] and [`crate::crun_init`], in the
//!   profile's noNewPrivileges mode), which a recording of the container never
//!   sees: each is added, then dropped again where lint still predicts a clean
//!   start without it (no error, no warning more than with all of them), one
//!   at a time in name order.
//!
//! A recording only holds what the container called while it was recorded:
//! calls made earlier (its entrypoint's start, when recording began later)
//! are not in it; the result says when the recording began.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{json, Value};

use crate::compiler::Compiler;
use crate::diagnostic::Severity;
use crate::filter::Arch;
use crate::lint::{self, LintOptions, Outcome, ProfileReport};
use crate::oci_runtime::InitCaller;
use crate::recording::Recording;
use crate::runc_init::{GO_RUNTIME_CALLS, INTERMITTENT_CAUSES};
use crate::syscalls::syscall_name_in;

/// The most values of an argument an allow rule is conditioned on; past it
/// the syscall is allowed outright (one rule per value).
pub const MAX_VALUES: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum AllowlistError {
    #[error("the recording has no container named {0}")]
    NoSuchContainer(String),
    #[error("the recording holds no syscall")]
    Empty,
    #[error("no allow-list of the recorded calls starts under {runtime}: {first}")]
    DoesNotStart { runtime: String, first: String },
}

/// The advice: the profile, what went into it, and lint's report of it.
#[derive(Debug, Clone, Serialize)]
pub struct Allowlist {
    pub profile: Value,
    /// The containers whose calls it allows.
    pub containers: Vec<String>,
    /// Recorded syscall names allowed.
    pub recorded: Vec<String>,
    /// Names added for the runtime's own calls after the filter is loaded
    /// and its entrypoint's first calls.
    pub added_for_runtime: Vec<String>,
    /// Syscall numbers no name is known for (left out: a profile names syscalls).
    pub unnamed: Vec<(String, u32)>,
    /// The recording missed calls (its kernel maps were full).
    pub incomplete: bool,
    pub report: ProfileReport,
}

/// Conditions an allow rule keeps: one argument's values.
type ArgRule = Option<(u8, BTreeSet<u64>)>;

/// The allow-list for `containers` of `rec` (all of them when `None`).
pub fn allowlist(
    rec: &Recording,
    container: Option<&str>,
    opts: &LintOptions,
    compiler: &dyn Compiler,
) -> Result<Allowlist, AllowlistError> {
    let chosen: Vec<_> = match container {
        Some(name) => {
            let c: Vec<_> = rec.containers.iter().filter(|c| c.name == name).collect();
            if c.is_empty() {
                return Err(AllowlistError::NoSuchContainer(name.to_string()));
            }
            c
        }
        None => rec.containers.iter().collect(),
    };
    let behaviour = opts.oci_runtime.behaviour();
    let lib = behaviour.libseccomp;
    let mut arches: BTreeSet<Arch> = BTreeSet::new();
    let mut unnamed = Vec::new();
    // name → the argument rule (None: allowed outright).
    let mut names: BTreeMap<String, ArgRule> = BTreeMap::new();
    let mut incomplete = false;
    for c in &chosen {
        incomplete |= c.lost > 0;
        for a in &c.arches {
            arches.insert(a.arch);
            for s in &a.syscalls {
                let Some(name) = syscall_name_in(lib, s.nr as i32, a.arch) else {
                    unnamed.push((a.arch.scmp_name().to_string(), s.nr));
                    continue;
                };
                let kept = match s.args.as_slice() {
                    [arg] if arg.complete && arg.values.len() <= MAX_VALUES => Some((
                        arg.index,
                        arg.values.iter().copied().collect::<BTreeSet<u64>>(),
                    )),
                    _ => None,
                };
                incomplete |= s.args.iter().any(|a| !a.complete);
                names
                    .entry(name)
                    .and_modify(|r| *r = merge(r.take(), kept.clone()))
                    .or_insert(kept);
            }
        }
    }
    if names.is_empty() {
        return Err(AllowlistError::Empty);
    }
    // The runtime's init calls on the native arch whatever it runs, and
    // so does the start of the process it execs (lint's model: a static
    // entrypoint's first calls, which a recording begun after the start
    // lacks): allowed outright (their arguments are their own).
    let native = opts.arch;
    let init: BTreeSet<&str> = behaviour
        .init_syscalls
        .iter()
        .filter(|s| s.in_mode(opts.no_new_privileges))
        .map(|s| s.name)
        .collect();
    // Go's runtime on runc init's locked thread (futex wakes, signal
    // returns, yields, ...) calls when its scheduler does, not when the
    // model's one traced start did: a list dropped by lint's word started
    // 3 of 3 alone and died of a denied futex wake under load (runc 1.1.15,
    // noNewPrivileges). Always allowed, never dropped, where init is Go.
    let go_runtime: BTreeSet<&str> = match behaviour.init_caller {
        InitCaller::Go => GO_RUNTIME_CALLS
            .iter()
            .chain(INTERMITTENT_CAUSES.iter().map(|(n, _)| n))
            .copied()
            .collect(),
        InitCaller::C => BTreeSet::new(),
    };
    let mut added: BTreeSet<String> = BTreeSet::new();
    let mut kept: BTreeSet<String> = BTreeSet::new();
    for n in &go_runtime {
        match names.get_mut(*n) {
            Some(rule) => *rule = None,
            None => {
                kept.insert((*n).to_string());
            }
        }
    }
    for n in init.iter().filter(|n| !go_runtime.contains(*n)) {
        match names.get_mut(*n) {
            Some(rule) => *rule = None,
            None => {
                added.insert((*n).to_string());
            }
        }
    }
    let mut arch_list: Vec<Arch> = vec![native];
    arch_list.extend(arches.iter().copied().filter(|a| *a != native));
    let build = |added: &BTreeSet<String>| -> (Value, ProfileReport) {
        let all: BTreeSet<String> = added.union(&kept).cloned().collect();
        let profile = render(&arch_list, &names, &all);
        let bytes = serde_json::to_vec_pretty(&profile).expect("a JSON value serializes");
        let report = lint::lint_source("allow-list", &bytes, opts, compiler);
        (profile, report)
    };
    let clean = |r: &ProfileReport, warnings: usize| {
        r.outcome == Outcome::Ok
            && r.count(Severity::Error) == 0
            && r.count(Severity::Warning) <= warnings
    };
    let (mut profile, mut report) = build(&added);
    if report.outcome != Outcome::Ok || report.count(Severity::Error) > 0 {
        return Err(AllowlistError::DoesNotStart {
            runtime: opts.oci_runtime.to_string(),
            first: report
                .diagnostics
                .iter()
                .find(|d| d.severity == Severity::Error)
                .map_or_else(
                    || report.outcome.as_str().to_string(),
                    |d| d.message.clone(),
                ),
        });
    }
    let warnings = report.count(Severity::Warning);
    for n in added.clone() {
        let mut trial = added.clone();
        trial.remove(&n);
        let (p, r) = build(&trial);
        if clean(&r, warnings) {
            added = trial;
            profile = p;
            report = r;
        }
    }
    Ok(Allowlist {
        profile,
        containers: chosen.iter().map(|c| c.name.clone()).collect(),
        recorded: names.keys().cloned().collect(),
        added_for_runtime: added.union(&kept).cloned().collect(),
        unnamed,
        incomplete,
        report,
    })
}

/// Two recorded rules for one name: the same argument's values join; any
/// other pair is allowed outright.
fn merge(a: ArgRule, b: ArgRule) -> ArgRule {
    match (a, b) {
        (Some((i, mut x)), Some((j, y))) if i == j => {
            x.extend(y);
            (x.len() <= MAX_VALUES).then_some((i, x))
        }
        _ => None,
    }
}

fn render(arches: &[Arch], names: &BTreeMap<String, ArgRule>, added: &BTreeSet<String>) -> Value {
    let outright: BTreeSet<&str> = names
        .iter()
        .filter(|(_, r)| r.is_none())
        .map(|(n, _)| n.as_str())
        .chain(added.iter().map(String::as_str))
        .collect();
    let mut syscalls = vec![json!({
        "names": outright.into_iter().collect::<Vec<_>>(),
        "action": "SCMP_ACT_ALLOW",
    })];
    for (name, rule) in names {
        if let Some((index, values)) = rule {
            for v in values {
                syscalls.push(json!({
                    "names": [name],
                    "action": "SCMP_ACT_ALLOW",
                    "args": [{"index": index, "value": v, "op": "SCMP_CMP_EQ"}],
                }));
            }
        }
    }
    json!({
        "defaultAction": "SCMP_ACT_ERRNO",
        "architectures": arches.iter().map(|a| a.scmp_name()).collect::<Vec<_>>(),
        "syscalls": syscalls,
    })
}
