//! Table-driven tests of the decoder rules and of what each bad input turns
//! into: outcome and diagnostic codes, through the whole lint pipeline.

use nodeproof_bpfgen::Native;
use nodeproof_seccomp::diagnostic::{Code, Severity};
use nodeproof_seccomp::filter::{Action, Arch, CmpOp};
use nodeproof_seccomp::lint::{filter_spec, lint_source, LintOptions, Outcome, Runtime};

fn opts() -> LintOptions {
    LintOptions {
        runtime: Runtime::Containerd,
        no_new_privileges: true,
        arch: Arch::X86_64,
        check_listener: true,
        oci_runtime: Default::default(),
        bounding_set: None,
    }
}

fn codes(src: &str) -> (Outcome, Vec<(Severity, Code)>) {
    let r = lint_source("t.json", src.as_bytes(), &opts(), &Native);
    let mut c: Vec<_> = r.diagnostics.iter().map(|d| (d.severity, d.code)).collect();
    c.sort_by_key(|(s, code)| (*s, code.as_str()));
    (r.outcome, c)
}

use Code::*;
use Severity::{Error as E, Note as N, Warning as W};

#[test]
fn decoder_rules() {
    type Case = (&'static str, &'static str, Outcome, Vec<(Severity, Code)>);
    let cases: Vec<Case> = vec![
        (
            "misspelled args make the rule unconditional",
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ERRNO","agrs":[{"index":0,"value":1,"op":"SCMP_CMP_EQ"}]}]}"#,
            Outcome::Ok,
            vec![(E, MisspelledField), (W, AllowByDefault)],
        ),
        (
            "keys match case-insensitively",
            r#"{"DefaultAction":"SCMP_ACT_ALLOW"}"#,
            Outcome::Ok,
            vec![(W, AllowByDefault), (W, FieldCase)],
        ),
        (
            "the last duplicate wins",
            r#"{"defaultAction":"SCMP_ACT_ERRNO","defaultAction":"SCMP_ACT_ALLOW"}"#,
            Outcome::Ok,
            vec![(W, AllowByDefault), (W, DuplicateField)],
        ),
        (
            "unknown keys are dropped",
            r#"{"defaultAction":"SCMP_ACT_ALLOW","owner":"me"}"#,
            Outcome::Ok,
            vec![(W, AllowByDefault), (W, UnknownField)],
        ),
        (
            "negative number for an unsigned field",
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ERRNO","errnoRet":-1}]}"#,
            Outcome::Rejected,
            vec![(E, JsonType)],
        ),
        (
            "number too large for uint",
            r#"{"defaultAction":"SCMP_ACT_ALLOW","defaultErrnoRet":18446744073709551616}"#,
            Outcome::Rejected,
            vec![(E, JsonType)],
        ),
        (
            "fraction for an unsigned field",
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ERRNO","args":[{"index":1.5,"op":"SCMP_CMP_EQ"}]}]}"#,
            Outcome::Rejected,
            vec![(E, JsonType)],
        ),
        (
            "numeric action (pre-release Docker format)",
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir"],"action":2}]}"#,
            Outcome::Rejected,
            vec![(E, JsonType)],
        ),
        (
            "null is absent",
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":null}"#,
            Outcome::Ok,
            vec![(W, AllowByDefault), (N, NullValue)],
        ),
        (
            "top-level null disables seccomp",
            "null",
            Outcome::Ok,
            vec![(E, SeccompDisabled)],
        ),
        (
            "empty object disables seccomp",
            "{}",
            Outcome::Ok,
            vec![(E, SeccompDisabled)],
        ),
        (
            "top-level array",
            "[]",
            Outcome::Rejected,
            vec![(E, JsonType)],
        ),
        (
            "top-level string",
            "\"x\"",
            Outcome::Rejected,
            vec![(E, JsonType)],
        ),
        ("empty file", "", Outcome::Rejected, vec![(E, JsonSyntax)]),
        (
            "truncated",
            r#"{"defaultAction":"SCMP_A"#,
            Outcome::Rejected,
            vec![(E, JsonSyntax)],
        ),
        (
            "byte order mark",
            "\u{feff}{\"defaultAction\":\"SCMP_ACT_ALLOW\"}",
            Outcome::Rejected,
            vec![(E, JsonSyntax)],
        ),
        (
            "unknown syscall is skipped",
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdirr"],"action":"SCMP_ACT_ERRNO"}]}"#,
            Outcome::Ok,
            vec![(W, AllowByDefault), (W, UnknownSyscall)],
        ),
        (
            "flags are refused by runc 1.1",
            r#"{"defaultAction":"SCMP_ACT_ALLOW","flags":["SECCOMP_FILTER_FLAG_LOG"]}"#,
            Outcome::Rejected,
            vec![(E, FlagsUnsupported)],
        ),
        (
            "lower-case action",
            r#"{"defaultAction":"scmp_act_allow"}"#,
            Outcome::Rejected,
            vec![(E, UnknownAction)],
        ),
        (
            "errno on a non-errno action, errno 0",
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_KILL_PROCESS","errnoRet":1},{"names":["rmdir"],"action":"SCMP_ACT_ERRNO","errnoRet":0}]}"#,
            Outcome::Ok,
            vec![(E, ErrnoOutOfRange), (W, AllowByDefault), (W, ErrnoIgnored)],
        ),
        (
            "legacy per-rule name",
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"name":"mkdir","action":"SCMP_ACT_ERRNO"}]}"#,
            Outcome::Ok,
            vec![(E, LegacyNameField), (W, AllowByDefault), (W, EmptyNames)],
        ),
        (
            "template conditions under containerd",
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ERRNO","includes":{"caps":["CAP_SYS_ADMIN"]}}]}"#,
            Outcome::Ok,
            vec![(E, ConditionalRuleIgnored), (W, AllowByDefault)],
        ),
        (
            "shadowed rule",
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ALLOW"}]}"#,
            Outcome::Ok,
            vec![(W, AllowByDefault), (W, ShadowedRule)],
        ),
        (
            "conflicting actions",
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ERRNO"},{"names":["mkdir"],"action":"SCMP_ACT_KILL_PROCESS"}]}"#,
            Outcome::Ok,
            vec![(W, AllowByDefault), (W, ConflictingActions)],
        ),
        (
            "notify without an agent socket",
            r#"{"defaultAction":"SCMP_ACT_ALLOW","listenerPath":"/nonexistent/agent.sock","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_NOTIFY"}]}"#,
            Outcome::StartFailed,
            vec![(E, ListenerUnreachable), (W, AllowByDefault)],
        ),
    ];
    for (what, src, outcome, want) in cases {
        let mut want = want;
        want.sort_by_key(|(s, code)| (*s, code.as_str()));
        assert_eq!(codes(src), (outcome, want), "case: {what}");
    }
}

#[test]
fn diagnostics_carry_pointer_line_and_column() {
    let src = "{\n  \"defaultAction\": \"SCMP_ACT_ALLOW\",\n  \"syscalls\": [\n    {\"names\": [\"mkdir\"], \"action\": 7}\n  ]\n}\n";
    let r = lint_source("p.json", src.as_bytes(), &opts(), &Native);
    let d = r
        .diagnostics
        .iter()
        .find(|d| d.code == JsonType)
        .expect("type error");
    assert_eq!(d.pointer, "/syscalls/0/action");
    assert_eq!((d.line, d.column), (Some(4), Some(36)));
    assert_eq!(d.message, "`action` must be a string, found number");
    assert_eq!(
        d.help.as_deref(),
        Some("the runtime refuses the profile: json: cannot unmarshal number into Go struct field LinuxSyscall.syscalls.action of type specs.LinuxSeccompAction")
    );
}

#[test]
fn duplicate_arrays_merge_into_decoded_elements_like_go() {
    // Go decodes the second "syscalls" into the elements of the first: the action and
    // the args of element 0 survive, only `names` is replaced.
    let src = r#"{"defaultAction":"SCMP_ACT_ALLOW",
        "syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ERRNO","args":[{"index":1,"value":448,"op":"SCMP_CMP_EQ"}]}],
        "syscalls":[{"names":["rmdir"]}]}"#;
    let spec = filter_spec(src.as_bytes(), &opts()).expect("a filter");
    assert_eq!(spec.rules.len(), 1);
    let rule = &spec.rules[0];
    assert_eq!(
        (rule.syscall.as_str(), rule.action),
        ("rmdir", Action::Errno(1))
    );
    assert_eq!(rule.conds.len(), 1);
    assert_eq!(
        (rule.conds[0].index, rule.conds[0].op, rule.conds[0].value),
        (1, CmpOp::Eq, 448)
    );
}

#[test]
fn deep_nesting_is_a_diagnostic() {
    let deep = format!("{{\"x\":{}{}}}", "[".repeat(20_000), "]".repeat(20_000));
    let (outcome, c) = codes(&deep);
    assert_eq!((outcome, c), (Outcome::Rejected, vec![(E, JsonSyntax)]));
    let ok_deep = format!(
        "{{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"x\":{}{}}}",
        "[".repeat(5_000),
        "]".repeat(5_000)
    );
    assert_eq!(codes(&ok_deep).0, Outcome::Ok);
}

#[test]
fn other_node_architectures() {
    let default = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../profiles/runtime-default-x86_64.json"
    ))
    .unwrap();
    let on = |arch| {
        let opts = LintOptions { arch, ..opts() };
        lint_source("p.json", &default, &opts, &Native)
    };
    // Calls that do not exist on arm64 (arch_prctl, open, ...) are not held against the profile.
    let arm = on(Arch::Aarch64);
    assert_eq!(arm.outcome, Outcome::Ok, "{:#?}", arm.diagnostics);
    assert!(arm.diagnostics.iter().any(|d| d.code == CrossArchModel));
    // A big-endian node cannot add the profile's little-endian x86 arches: libseccomp refuses, runc init fails.
    let s390 = on(Arch::S390X);
    assert_eq!(s390.outcome, Outcome::StartFailed);
    let d = s390
        .diagnostics
        .iter()
        .find(|d| d.code == CompileFailed)
        .expect("compile-failed");
    assert!(d.message.contains("SCMP_ARCH_X86_64"), "{}", d.message);
}
