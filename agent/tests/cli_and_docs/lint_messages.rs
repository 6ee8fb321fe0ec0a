//! What `nodeproof profile lint` says about profiles a user brings: the
//! bundled ones under `--strict`, syscalls newer than the runtime's
//! libseccomp, `--allow`, the summary line, minified profiles and a
//! security-profiles-operator object.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn nodeproof(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .args(args)
        .env("NODEPROOF_LOG", "off")
        .output()
        .expect("run nodeproof")
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

/// The runtime every expectation below is worded for.
const RUNC_1_1_5: [&str; 4] = ["--oci-runtime", "runc", "--runc-version", "1.1.5"];

fn lint(args: &[&str]) -> Output {
    let mut all = vec!["profile", "lint", "--runtime", "containerd"];
    all.extend(RUNC_1_1_5);
    all.extend(args);
    nodeproof(&all)
}

/// The profiles shipped in `profiles/`.
fn bundled() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    found.sort();
    assert!(!found.is_empty(), "no profiles under {}", dir.display());
    found
}

/// The bundled profiles pass their own `--strict`: the syscalls in them that
/// libseccomp 2.5.4 does not know are real ones, newer than its table, said
/// as notes with the Linux release that added each, not as misspellings.
#[test]
fn the_bundled_profiles_pass_strict_and_name_the_newer_syscalls() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles");
    let out = lint(&["--strict", &dir.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    for p in bundled() {
        let p = p.to_string_lossy().into_owned();
        let out = lint(&["--strict", &p]);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(0), "{t}");
        assert!(!t.contains("check the spelling"), "{t}");
        assert!(!t.contains("unknown-syscall"), "{t}");
        if t.contains("\"mseal\"") {
            assert!(
                t.contains("note[syscall-newer-than-libseccomp]: `mseal` is unknown to libseccomp 2.5.4, which runc 1.1.5 links (added in Linux 6.10)"),
                "{t}"
            );
        }
        // runc 1.1.15 links libseccomp 2.6.0, which knows them.
        let t = text(&nodeproof(&[
            "profile",
            "lint",
            "--runtime",
            "containerd",
            "--oci-runtime",
            "runc",
            "--runc-version",
            "1.1.15",
            &p,
        ]));
        assert!(!t.contains("`mseal` is unknown"), "{t}");
    }
}

#[test]
fn a_misspelt_syscall_gets_a_did_you_mean_and_a_dropped_denial_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "p.json",
        r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdirr","mseal"],"action":"SCMP_ACT_ERRNO"}]}"#,
    );
    let t = text(&lint(&[&p]));
    assert!(
        t.contains("warning[unknown-syscall]: libseccomp 2.5.4 does not know the syscall `mkdirr`"),
        "{t}"
    );
    assert!(
        t.contains("= help: did you mean `mkdir`? check the spelling"),
        "{t}"
    );
    // Dropping the rule lets mseal run in an allow-by-default profile.
    assert!(
        t.contains(
            "warning[syscall-newer-than-libseccomp]: `mseal` is unknown to libseccomp 2.5.4"
        ) && t.contains("calls run instead of getting SCMP_ACT_ERRNO(1)"),
        "{t}"
    );
}

/// `--allow CODE` leaves a code out as clippy's `allow` does: not printed,
/// not counted (so `--strict` passes), the number said; an unknown code is
/// a usage error.
#[test]
fn allow_leaves_a_code_out_and_says_how_many() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "p.json",
        r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ERRNO"}]}"#,
    );
    assert_eq!(lint(&["--strict", &p]).status.code(), Some(1));
    let out = lint(&["--strict", "--allow", "allow-by-default", &p]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(!t.contains("allow-by-default"), "{t}");
    assert!(t.contains("(0 errors, 0 warnings, 1 allowed, "), "{t}");
    let out = lint(&[
        "-o",
        "json",
        "--allow",
        "allow-by-default",
        "--allow",
        "shadowed-rule",
        &p,
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["profiles"][0]["allowed"], 1);
    assert_eq!(v["profiles"][0]["diagnostics"], serde_json::json!([]));
    let out = lint(&["--allow", "allow-by-defualt", &p]);
    assert_eq!(out.status.code(), Some(2));
    let out = lint(&["--allow", "by-default", &p]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("did you mean allow-by-default?"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `outcome ok` beside errors says what the errors mean for the container.
#[test]
fn the_summary_says_what_the_outcome_means() {
    let dir = tempfile::tempdir().unwrap();
    let typo = write(
        dir.path(),
        "typo.json",
        r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ERRNO","agrs":[]}]}"#,
    );
    let t = text(&lint(&[&typo]));
    assert!(
        t.contains(&format!("{typo}: outcome ok: runc 1.1.5 starts the container, but not as the profile says: see the error above (1 error, ")),
        "{t}"
    );
    let flags = write(
        dir.path(),
        "flags.json",
        r#"{"defaultAction":"SCMP_ACT_ALLOW","flags":["SECCOMP_FILTER_FLAG_LOG"]}"#,
    );
    let t = text(&lint(&[&flags]));
    assert!(
        t.contains(&format!("{flags}: outcome rejected: runc 1.1.5 refuses the profile, so the container is never created (1 error, ")),
        "{t}"
    );
}

/// A minified profile is one line (one seen in use: 334 KB, 9 warnings, 3 MB of
/// output): each diagnostic shows a window of it, so the output stays small
/// however long the line is.
#[test]
fn a_minified_profile_prints_a_window_per_diagnostic() {
    let dir = tempfile::tempdir().unwrap();
    let names = [
        "mkdirr",
        "opennat",
        "no_such_call",
        "getpidd",
        "closee",
        "readd",
        "writte",
        "mmapp",
    ];
    let src = format!(
        r#"{{"description":"{}","defaultAction":"SCMP_ACT_ALLOW","syscalls":[{{"names":[{}],"action":"SCMP_ACT_ERRNO"}}]}}"#,
        "x".repeat(334_000),
        names.map(|n| format!("\"{n}\"")).join(",")
    );
    assert!(
        src.len() > 334_000 && !src.contains('\n'),
        "{} bytes",
        src.len()
    );
    let p = write(dir.path(), "min.json", &src);
    let out = lint(&[&p]);
    let t = text(&out);
    // The unknown `description`, allow-by-default and the eight names.
    let diagnostics = t.matches("\n  --> ").count();
    assert_eq!(diagnostics, 10, "{}", &t[..t.len().min(4_000)]);
    assert!(t.contains("1 | …xxxx"), "{t}");
    let longest = t.lines().map(|l| l.chars().count()).max().unwrap();
    assert!(longest < 400, "a line of {longest} characters");
    assert!(t.len() < 10 * 1_000, "{} bytes for 10 diagnostics", t.len());
}

/// A security-profiles-operator SeccompProfile object is said to be one,
/// with where the profile the runtime reads is.
#[test]
fn a_security_profiles_operator_object_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "sp.yaml.json",
        "apiVersion: security-profiles-operator.x-k8s.io/v1beta1\nkind: SeccompProfile\nmetadata:\n  name: profile1\n  namespace: my-namespace\nspec:\n  defaultAction: SCMP_ACT_LOG\n",
    );
    let out = lint(&[&p]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1));
    let first = t.lines().next().unwrap();
    assert!(first.starts_with("error[spo-seccomp-profile]: this is a security-profiles-operator SeccompProfile object"), "{t}");
    assert!(
        t.contains("/var/lib/kubelet/seccomp/operator/my-namespace/profile1.json"),
        "{t}"
    );
    assert!(t.contains("error[json-syntax]"), "{t}");
}
