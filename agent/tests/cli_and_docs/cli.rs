//! The `nodeproof` binary as a user runs it: exit codes, JSON shape, text output.

use std::path::Path;
use std::process::{Command, Output};

use nodeproof_testkit::{require, Need, TRACING};

fn nodeproof(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .args(args)
        .env("NODEPROOF_LOG", "off")
        .output()
        .expect("run nodeproof");
    no_dump_printed(args, &out);
    out
}

/// The rule over every command these tests run (a person reads it, so it names the
/// object and the remedy): what the binary
/// says in its own name (`nodeproof: …`, `nodeproof cluster check: …`) is a
/// sentence, never a Rust `Debug` dump. (A lint diagnostic's echoed source
/// line is the profile's text, not the binary's, so only those lines.)
fn no_dump_printed(args: &[&str], out: &Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    for line in stderr.lines().filter(|l| l.starts_with("nodeproof")) {
        for mark in ["{ ", "Some(", "Status {"] {
            assert!(!line.contains(mark), "{args:?}: {mark:?} in {line:?}");
        }
    }
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

const ALLOW_MKDIR_DENIED: &str = r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ERRNO"}]}"#;

#[test]
fn lint_exit_codes_and_json_shape() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(dir.path(), "good.json", ALLOW_MKDIR_DENIED);
    let bad = write(dir.path(), "bad.json", "{\n  \"defaultAction\": \"SCMP_ACT_ALLOW\",\n  \"flags\": [\"SECCOMP_FILTER_FLAG_LOG\"]\n}\n");

    // Warnings only: exit 0, but 1 with --strict.
    assert_eq!(
        nodeproof(&["profile", "lint", &good]).status.code(),
        Some(0)
    );
    assert_eq!(
        nodeproof(&["profile", "lint", "--strict", &good])
            .status
            .code(),
        Some(1)
    );

    let out = nodeproof(&["profile", "lint", "-o", "json", &good, &bad]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let profiles = v["profiles"].as_array().unwrap();
    assert_eq!(profiles.len(), 2);
    assert_eq!(profiles[0]["path"], good.as_str());
    assert_eq!(profiles[0]["dialect"], "oci");
    assert_eq!(profiles[0]["outcome"], "ok");
    assert_eq!(profiles[1]["outcome"], "rejected");
    let d = &profiles[1]["diagnostics"][0];
    assert_eq!(d["code"], "flags-unsupported");
    assert_eq!(d["severity"], "error");
    assert_eq!(d["pointer"], "/flags");
    assert_eq!(
        (d["line"].as_u64(), d["column"].as_u64()),
        (Some(3), Some(3))
    );
    assert!(d["message"].as_str().unwrap().contains("flags"));
}

#[test]
fn lint_text_reads_like_rustc() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "typo.json",
        "{\n  \"defaultAction\": \"SCMP_ACT_ALLOW\",\n  \"syscalls\": [{\"names\": [\"mkdir\"], \"action\": \"SCMP_ACT_ERRNO\", \"agrs\": []}]\n}\n",
    );
    let out = nodeproof(&["profile", "lint", &p]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "an error diagnostic fails the lint"
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("error[misspelled-field]: `agrs` is not a field of LinuxSyscall"),
        "{text}"
    );
    assert!(text.contains(&format!("  --> {p}:3:")), "{text}");
    assert!(text.contains("= help: did you mean `args`?"), "{text}");
    assert!(
        text.contains("outcome ok: ")
            && text.contains(" starts the container, but not as the profile says: see the error above (1 error, "),
        "{text}"
    );
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(
        nodeproof(&["profile", "lint", "--runtime", "docker"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        nodeproof(&["profile", "lint", "--arch", "vax", "x.json"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(nodeproof(&["frobnicate"]).status.code(), Some(2));
    for (bad, why) in [
        ("10x", "unknown time unit \"x\""),
        ("10", "time unit needed"),
        ("", "value was empty"),
    ] {
        let out = nodeproof(&["trace", "--duration", bad]);
        assert_eq!(out.status.code(), Some(2), "--duration {bad:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "invalid duration {bad:?} (try 10s, 2m, 500ms): {why}"
            )),
            "{stderr}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "c.toml", "[seccomp]\nroot = 3\n");
    let out = nodeproof(&["--config", &cfg, "check"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid config"));
}

/// `--no-new-privileges[=B]`: alone it means true, and only `=` attaches a
/// value, so a profile named right after the flag is linted as a path.
#[test]
fn no_new_privileges_takes_a_value_only_with_equals() {
    let dir = tempfile::tempdir().unwrap();
    // runc loads the filter before dropping capabilities when NNP is false:
    // a denied capset fails the start then, and not with NNP.
    let capset = write(
        dir.path(),
        "capset.json",
        r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["capset"],"action":"SCMP_ACT_ERRNO"}]}"#,
    );
    let lint = |args: &[&str]| {
        let mut all = vec!["profile", "lint", "-o", "json", "--runtime", "containerd"];
        all.extend(args);
        all.extend(["--oci-runtime", "runc"]);
        let out = nodeproof(&all);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {stderr}"));
        let profiles: Vec<(String, String)> = v["profiles"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let name = p["path"].as_str().unwrap().rsplit('/').next().unwrap();
                (name.to_string(), p["outcome"].as_str().unwrap().to_string())
            })
            .collect();
        (out.status.code(), profiles)
    };
    let one = |outcome: &str| vec![("capset.json".to_string(), outcome.to_string())];
    assert_eq!(
        lint(&["--no-new-privileges", &capset]),
        (Some(0), one("ok"))
    );
    assert_eq!(
        lint(&["--no-new-privileges=true", &capset]),
        (Some(0), one("ok"))
    );
    assert_eq!(
        lint(&["--no-new-privileges=false", &capset]),
        (Some(1), one("start-failed"))
    );
    assert_eq!(lint(&[&capset]), (Some(1), one("start-failed")));
    // A word after the flag is a path, never the flag's value.
    let (code, profiles) = lint(&["--no-new-privileges", "false", &capset]);
    assert_eq!(code, Some(1));
    assert_eq!(
        profiles,
        vec![
            ("false".to_string(), "rejected".to_string()),
            ("capset.json".to_string(), "ok".to_string())
        ]
    );
    // `profile test PATH --no-new-privileges -- CMD` still parses.
    let out = nodeproof(&[
        "profile",
        "test",
        &capset,
        "--no-new-privileges",
        "--",
        "/bin/true",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `nodeproof ARGS` with `input` on its standard input.
fn nodeproof_with_stdin(args: &[&str], input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .args(args)
        .env("NODEPROOF_LOG", "off")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run nodeproof");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // Written from a thread: a large input must not block on a full pipe.
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().expect("wait for nodeproof");
    let _ = writer.join();
    no_dump_printed(args, &out);
    out
}

/// `profile lint -` lints the profile on standard input, named `<stdin>`.
#[test]
fn lint_reads_standard_input_for_dash() {
    let out = nodeproof_with_stdin(
        &["profile", "lint", "-o", "json", "-"],
        ALLOW_MKDIR_DENIED.as_bytes(),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["profiles"][0]["path"], "<stdin>", "{v}");
    assert_eq!(v["profiles"][0]["outcome"], "ok", "{v}");
    assert_eq!(v["profiles"].as_array().unwrap().len(), 1, "{v}");

    // The text output points into the input as into a file, beside files named with it.
    let dir = tempfile::tempdir().unwrap();
    let good = write(dir.path(), "good.json", ALLOW_MKDIR_DENIED);
    let typo = "{\n  \"defaultAction\": \"SCMP_ACT_ALLOW\",\n  \"syscalls\": [{\"names\": [\"mkdir\"], \"action\": \"SCMP_ACT_ERRNO\", \"agrs\": []}]\n}\n";
    let out = nodeproof_with_stdin(&["profile", "lint", &good, "-"], typo.as_bytes());
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("  --> <stdin>:3:"), "{text}");
    assert!(
        text.contains("\"agrs\": []"),
        "the source line is echoed: {text}"
    );
    assert!(text.contains("<stdin>: outcome ok"), "{text}");
    assert!(
        text.find(&format!("{good}: outcome ok")) < text.find("<stdin>: outcome"),
        "{text}"
    );

    // Empty input is a profile containerd refuses, not nothing linted.
    let out = nodeproof_with_stdin(&["profile", "lint", "-o", "json", "-"], b"");
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["profiles"][0]["path"], "<stdin>", "{v}");
    assert_eq!(v["profiles"][0]["outcome"], "rejected", "{v}");

    let out = nodeproof_with_stdin(&["profile", "lint", "-", "-"], b"{}");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("named more than once"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// --help says what each argument is, and shows a global flag only where it means something.
#[test]
fn help_describes_every_argument_shown() {
    let help = |args: &[&str]| {
        let out = nodeproof(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let pods = help(&["pods", "--help"]);
    assert!(
        pods.contains("--once") && pods.contains("Judge the pods once"),
        "{pods}"
    );
    let compile = help(&["profile", "compile", "--help"]);
    assert!(compile.contains("The profile file"), "{compile}");
    for args in [["completions", "--help"], ["gate-controller", "--help"]] {
        let text = help(&args);
        assert!(!text.contains("--seccomp-root"), "{args:?}: {text}");
    }
    assert!(help(&["check", "--help"]).contains("--seccomp-root <DIR>"));
    assert!(!help(&["completions", "--help"]).contains("--config"));

    let out = nodeproof(&["gate-controller", "--seccomp-root", "/x"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "`nodeproof gate-controller` reads no seccomp profiles from the kubelet's root"
        ),
        "{stderr}"
    );
}

#[test]
fn logs_to_a_pipe_carry_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    // Credentials that cannot be read: `check` logs (warn) that the pods are not judged.
    let cfg = write(
        dir.path(),
        "c.toml",
        "[seccomp]\nroot = \"/nonexistent\"\n[report]\nkubeconfig = \"/nonexistent/kubeconfig\"\n[gpu]\nnvml-library = \"/nonexistent/libnvidia-ml.so.1\"\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .args(["--config", &cfg, "check"])
        .env("NODEPROOF_LOG", "info")
        .env_remove("NO_COLOR")
        .env_remove("JOURNAL_STREAM")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("pods could not be judged"), "{stderr}");
    assert!(
        !stderr.contains('\x1b'),
        "ANSI escapes on a pipe: {stderr:?}"
    );
}

#[test]
fn check_reports_the_condition() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "ok.json", ALLOW_MKDIR_DENIED);
    let root = dir.path().to_string_lossy().into_owned();
    let out = nodeproof(&["--seccomp-root", &root, "check", "-o", "json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["conditions"][0]["type"], "SeccompProfilesReady");
    assert_eq!(v["conditions"][0]["status"], "True");
    assert_eq!(v["findings"][0]["check"], "seccomp-profile");
    // The tracer's finding: one sentence in the table, what each refused
    // strategy said (a verifier's log) in `-o json`'s `detail` only. Here
    // fexit is refused (lockdown) or, without root, every strategy is; where
    // the first strategy loads there is no detail.
    let tracing = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "seccomp-tracing")
        .expect("the tracer's finding");
    if let Some(detail) = tracing["detail"].as_str() {
        assert!(detail.starts_with("Refused: "), "{detail}");
    }
    let message = tracing["message"].as_str().unwrap();
    assert!(
        !message.contains("Refused") && !message.contains("Verifier"),
        "{message}"
    );
    let text = nodeproof(&["--seccomp-root", &root, "check"]).stdout;
    let text = String::from_utf8(text).unwrap();
    assert!(
        !text.contains("Verifier output") && !text.contains("Refused:"),
        "{text}"
    );

    write(dir.path(), "broken.json", "{\"defaultAction\":");
    let out = nodeproof(&["--seccomp-root", &root, "check"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("SeccompProfilesReady=False (ProfileRejected)"),
        "{text}"
    );
    assert!(text.contains("broken.json (rejected)"), "{text}");
}

/// `check` says in one line what it did not judge: an explicit kubeconfig
/// that cannot be used fails the command (exit 3); a node with no
/// credentials at all is an offline node, said and not failed.
#[test]
fn check_says_the_pods_were_not_judged_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("seccomp");
    std::fs::create_dir(&root).unwrap();
    write(&root, "ok.json", ALLOW_MKDIR_DENIED);
    // The kubelet's places and in-cluster looked for below an empty host root.
    let host = dir.path().join("host");
    std::fs::create_dir(&host).unwrap();
    let cfg = write(
        dir.path(),
        "c.toml",
        &format!(
            "[seccomp]\nroot = {root:?}\n[report]\nhost-root = {host:?}\n[gpu]\nnvml-library = \"/nonexistent/libnvidia-ml.so.1\"\n"
        ),
    );
    let check = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_nodeproof"))
            .args(["--config", &cfg, "check"])
            .args(args)
            .env("NODEPROOF_LOG", "off")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .unwrap()
    };
    let nope = dir.path().join("nope");
    let nope = nope.to_str().unwrap();
    let out = check(&["--kubeconfig", nope]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{text}");
    let line = format!("pods: not judged (cannot use kubeconfig {nope}: No such file or directory");
    assert!(
        text.lines().any(|l| l.starts_with(&line)
            && l.ends_with("give a readable kubeconfig with --kubeconfig)")),
        "{text}"
    );
    let out = check(&["--kubeconfig", nope, "-o", "json"]);
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let n = &v["not_judged"][0];
    assert_eq!(
        (&n["check"], &n["subject"], &n["cause"], &n["fails"]),
        (
            &"pod-profile".into(),
            &"pods".into(),
            &"credentials-unusable".into(),
            &true.into()
        ),
        "{v}"
    );

    // No credentials anywhere: said, in text and JSON, and not a failure of its own.
    let out = check(&["-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let n = &v["not_judged"][0];
    assert_eq!(
        (&n["cause"], &n["fails"]),
        (&"no-credentials".into(), &false.into()),
        "{v}"
    );
    let all_true = v["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["status"] == "True");
    assert_eq!(out.status.code(), Some(if all_true { 0 } else { 1 }), "{v}");
    let text = String::from_utf8_lossy(&check(&[]).stdout).into_owned();
    assert!(
        text.contains("pods: not judged (no API credentials found: looked at /etc/kubernetes/kubelet.conf (kubeadm)"),
        "{text}"
    );
}

/// A directory is judged file by file, whatever the names (the kubelet
/// loads a Localhost profile by any name); a file that is clearly no
/// profile is said to be none; a directory with no profile is an error.
/// `check` (the agent's scan) judges the same files.
#[test]
fn lint_judges_every_file_and_an_empty_directory_fails() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let empty = empty.to_str().unwrap();
    let out = nodeproof(&["profile", "lint", "-o", "json", empty]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &v["profiles"][0];
    assert_eq!(
        (&p["path"], &p["outcome"]),
        (&empty.into(), &"unknown".into()),
        "{v}"
    );
    assert_eq!(p["diagnostics"][0]["code"], "no-profiles");
    let text = String::from_utf8(nodeproof(&["profile", "lint", empty]).stdout).unwrap();
    assert!(
        text.contains(&format!(
            "error[no-profiles]: {empty} holds no files: no profile to judge"
        )),
        "{text}"
    );

    let root = dir.path().join("seccomp");
    std::fs::create_dir_all(root.join("profiles")).unwrap();
    write(
        &root,
        "profiles/vllm-strict",
        "{\"defaultAction\": \"SCMP_ACT_NOPE\"}",
    );
    write(&root, "README.md", "# profiles for the vllm pods\n");
    let root_s = root.to_str().unwrap();
    let out = nodeproof(&["profile", "lint", "-o", "json", root_s]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let got: Vec<(String, String, String)> = v["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let path = p["path"]
                .as_str()
                .unwrap()
                .strip_prefix(root_s)
                .unwrap()
                .to_string();
            let code = p["diagnostics"][0]["code"]
                .as_str()
                .unwrap_or("")
                .to_string();
            (path, p["outcome"].as_str().unwrap().to_string(), code)
        })
        .collect();
    let row = |p: &str, o: &str, c: &str| (p.to_string(), o.to_string(), c.to_string());
    assert_eq!(
        got,
        [
            row("/README.md", "not-a-profile", "not-a-profile"),
            row("/profiles/vllm-strict", "rejected", "unknown-action"),
        ],
        "{v}"
    );
    // Only files that are no profile: said per file, and the directory fails.
    std::fs::remove_file(root.join("profiles/vllm-strict")).unwrap();
    let text = String::from_utf8(nodeproof(&["profile", "lint", root_s]).stdout).unwrap();
    assert!(
        text.contains("note[not-a-profile]: ")
            && text.contains("README.md is not JSON (it begins with `#`)"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "error[no-profiles]: {root_s} holds no profile: 1 file, none a seccomp profile"
        )),
        "{text}"
    );
    write(
        &root,
        "profiles/vllm-strict",
        "{\"defaultAction\": \"SCMP_ACT_NOPE\"}",
    );

    // check judges the same files: the profile without `.json` fails the
    // node, the README is skipped, saying why.
    let out = nodeproof(&["--seccomp-root", root_s, "check", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let findings: Vec<(String, String)> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == "seccomp-profile")
        .map(|f| {
            (
                f["subject"]
                    .as_str()
                    .unwrap()
                    .strip_prefix(root_s)
                    .unwrap()
                    .to_string(),
                f["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        findings,
        [
            ("/README.md".to_string(), "skipped".to_string()),
            ("/profiles/vllm-strict".to_string(), "failed".to_string())
        ],
        "{v}"
    );
    let seccomp = &v["conditions"][0];
    assert_eq!(
        (&seccomp["status"], &seccomp["reason"]),
        (&"False".into(), &"ProfileRejected".into()),
        "{v}"
    );
    assert!(
        seccomp["message"]
            .as_str()
            .unwrap()
            .starts_with("1 of 1 profile fails"),
        "{v}"
    );
}

#[test]
fn compile_prints_bpf_and_pfc() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "p.json", ALLOW_MKDIR_DENIED);
    let out = nodeproof(&[
        "profile", "compile", &p, "--arch", "x86_64", "--format", "pfc",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("mkdir"), "{text}");
    let out = nodeproof(&[
        "profile", "compile", &p, "--arch", "aarch64", "--format", "bpf",
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .contains("instructions (kernel limit 4096)"));
}

#[test]
fn profile_test_reports_the_denied_syscall() {
    let dir = tempfile::tempdir().unwrap();
    let kill = write(
        dir.path(),
        "kill.json",
        r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_KILL_PROCESS"}]}"#,
    );
    let target = dir.path().join("made");
    let target = target.to_string_lossy();
    let out = nodeproof(&[
        "profile",
        "test",
        &kill,
        "--no-new-privileges",
        "--",
        "/bin/mkdir",
        &target,
    ]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("killed by signal 31 (SIGSYS)"), "{text}");
    assert!(
        text.contains("`mkdir` (nr 83) with SCMP_ACT_KILL_PROCESS"),
        "{text}"
    );

    let errno = write(dir.path(), "errno.json", ALLOW_MKDIR_DENIED);
    let out = nodeproof(&["profile", "test", &errno, "--", "/bin/mkdir", &target]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .contains("exited with status 1"));

    let allow = write(
        dir.path(),
        "allow.json",
        r#"{"defaultAction":"SCMP_ACT_ALLOW"}"#,
    );
    let out = nodeproof(&["profile", "test", &allow, "--", "/bin/true"]);
    assert_eq!(out.status.code(), Some(0));

    // A profile that never yields a filter is refused with its cause.
    let broken = write(dir.path(), "broken.json", "[]");
    let out = nodeproof(&["profile", "test", &broken, "--", "/bin/true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("json-type"));
}

/// A path containerd cannot read whoever reads it fails CreateContainer, so
/// `profile lint` (and the daemon's check, which lints the same way) says
/// `rejected`, as containerd through CRI does (tests/tests/lint_vs_runtime.rs
/// in nodeproof-e2e judges the same cases): a missing file, a dangling
/// symlink, a symlink loop, an empty or blank file, given as arguments or
/// found in a directory. CRI-O's reading is not modelled: `unknown` there.
#[test]
fn lint_predicts_what_containerd_does_with_a_path() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = write(d, "good.json", ALLOW_MKDIR_DENIED);
    let empty = write(d, "empty.json", "");
    let blank = write(d, "blank.json", " \n");
    std::os::unix::fs::symlink("none.json", d.join("dangling.json")).unwrap();
    std::os::unix::fs::symlink("loop2.json", d.join("loop1.json")).unwrap();
    std::os::unix::fs::symlink("loop1.json", d.join("loop2.json")).unwrap();
    std::os::unix::fs::symlink("good.json", d.join("link.json")).unwrap();
    let path = |n: &str| d.join(n).to_string_lossy().into_owned();
    let lint = |runtime: &str, paths: &[String]| {
        let mut args = vec!["profile", "lint", "-o", "json", "--runtime", runtime];
        args.extend(paths.iter().map(String::as_str));
        let out = nodeproof(&args);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let outcomes: Vec<(String, String)> = v["profiles"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let name = p["path"].as_str().unwrap().rsplit('/').next().unwrap();
                (name.to_string(), p["outcome"].as_str().unwrap().to_string())
            })
            .collect();
        (out.status.code(), outcomes, v)
    };
    let named = [
        path("missing.json"),
        path("dangling.json"),
        path("loop1.json"),
        empty.clone(),
        blank.clone(),
        path("link.json"),
        good.clone(),
    ];
    let (code, outcomes, v) = lint("containerd", &named);
    assert_eq!(code, Some(1));
    let expected = [
        ("missing.json", "rejected"),
        ("dangling.json", "rejected"),
        ("loop1.json", "rejected"),
        ("empty.json", "rejected"),
        ("blank.json", "rejected"),
        ("link.json", "ok"),
        ("good.json", "ok"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(n, o)| (n.to_string(), o.to_string()))
        .collect();
    assert_eq!(outcomes, expected, "{v}");
    let said = v["profiles"][1]["diagnostics"][0]["message"]
        .as_str()
        .unwrap();
    assert!(
        said.contains("is a symlink to nothing") && said.contains("CreateContainer fails"),
        "{said}"
    );

    // The same files found in the directory (the seccomp root, as the daemon walks it).
    let (_, walked, v) = lint("containerd", &[d.to_string_lossy().into_owned()]);
    for (name, outcome) in [
        ("dangling.json", "rejected"),
        ("loop1.json", "rejected"),
        ("empty.json", "rejected"),
        ("good.json", "ok"),
    ] {
        assert!(
            walked.contains(&(name.to_string(), outcome.to_string())),
            "{name}: {v}"
        );
    }

    // CRI-O's reading of a path is not modelled: what cannot be read is not judged.
    let (_, crio, v) = lint("crio", &[path("missing.json"), path("dangling.json")]);
    assert!(crio.iter().all(|(_, o)| o == "unknown"), "{v}");
}

/// Unreadable files (EACCES for a non-root reader) are an `unknown` outcome with the cause, not a crash.
#[test]
fn unreadable_profile_as_unprivileged_user() {
    // Root to become another user (with setpriv), who then cannot read the file.
    let Some(_) = require(&[Need::Root, Need::Tool("setpriv")]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let secret = write(dir.path(), "secret.json", ALLOW_MKDIR_DENIED);
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            env!("CARGO_BIN_EXE_nodeproof"),
        ])
        .args(["profile", "lint", "-o", "json", &secret])
        .env("NODEPROOF_LOG", "off")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &v["profiles"][0];
    assert_eq!(p["outcome"], "unknown");
    assert_eq!(p["diagnostics"][0]["code"], "io-error");
    assert!(
        p["diagnostics"][0]["message"]
            .as_str()
            .unwrap()
            .contains("Permission denied"),
        "{p}"
    );
}

#[test]
fn ten_thousand_profiles() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..10_000 {
        let body = if i % 1000 == 7 {
            "{\"defaultAction\":"
        } else {
            ALLOW_MKDIR_DENIED
        };
        std::fs::write(dir.path().join(format!("p{i:05}.json")), body).unwrap();
    }
    let root = dir.path().to_string_lossy().into_owned();
    let out = nodeproof(&["profile", "lint", "-o", "json", &root]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let profiles = v["profiles"].as_array().unwrap();
    assert_eq!(profiles.len(), 10_000);
    let rejected = profiles
        .iter()
        .filter(|p| p["outcome"] == "rejected")
        .count();
    assert_eq!(rejected, 10);
}

#[test]
fn advise_from_a_saved_trace_prints_patch_and_patched_profile() {
    let dir = tempfile::tempdir().unwrap();
    let profile = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../profiles/runtime-default-x86_64.json"
    );
    let before = std::fs::read(profile).unwrap();
    let trace = write(
        dir.path(),
        "trace.json",
        concat!(
            r#"{"summary":[{"pid":7,"comm":"vllm","syscall":"mount","nr":165,"arch":"x86_64","action":"errno","errno":1,"count":12,"cgroup_id":5,"container_id":"abc123abc123","pod_uid":"u1","pod":{"namespace":"ml","name":"vllm-0"}},"#,
            r#"{"pid":8,"comm":"x","syscall":"ptrace","nr":101,"arch":"x86_64","action":"errno","errno":1,"count":1,"cgroup_id":6,"container_id":null,"pod_uid":null}],"#,
            r#""dropped":0,"lost_counts":0,"samples":0,"strategy":"tp_btf"}"#,
            "\n"
        ),
    );
    let out = nodeproof(&[
        "advise",
        "--pod",
        "ml/vllm-0",
        "--profile",
        profile,
        "--from",
        &trace,
        "-o",
        "json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Only the pod's denial: mount, not the other process's ptrace.
    assert_eq!(v["allowed"], serde_json::json!(["mount"]));
    assert_eq!(v["outcome"], "ok");
    assert_eq!(v["patch"][0]["op"], "add");
    assert!(v["warnings"][0]
        .as_str()
        .unwrap()
        .starts_with("allowing mount is dangerous"));
    // Never writes the profile.
    assert_eq!(std::fs::read(profile).unwrap(), before);

    let text = nodeproof(&["advise", "--profile", profile, "--from", &trace]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("# JSON Patch (RFC 6902) allowing mount, ptrace"),
        "{text}"
    );
    assert!(
        text.contains("# patched profile (lint outcome: ok)"),
        "{text}"
    );
}

#[test]
fn advise_names_the_file_line_and_place_of_a_bad_trace_row() {
    let dir = tempfile::tempdir().unwrap();
    let profile = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../profiles/runtime-default-x86_64.json"
    );
    // A hand-edited count: the second line, the first row's `count`.
    let trace = write(
        dir.path(),
        "trace.json",
        concat!(
            "\n",
            r#"{"summary":[{"pid":7,"comm":"vllm","syscall":"mount","nr":165,"arch":"x86_64","action":"errno","errno":1,"count":-3,"cgroup_id":5,"container_id":null,"pod_uid":null}],"#,
            r#""dropped":0,"lost_counts":0,"samples":0,"strategy":"tp_btf"}"#,
            "\n"
        ),
    );
    let out = nodeproof(&["advise", "--profile", profile, "--from", &trace]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "{trace}:2: summary[0].count: not as `nodeproof trace -o json` writes it: invalid value: integer `-3`, expected u64"
        )),
        "{err}"
    );
}

/// `trace` until Ctrl-C: SIGINT ends the trace cleanly (exit 0, the summary
/// printed), as SIGTERM does. Needs the eBPF tracer (root or CAP_BPF +
/// CAP_PERFMON).
#[test]
fn trace_stops_cleanly_on_sigint() {
    use std::time::{Duration, Instant};
    let Some(_) = require(&[
        TRACING,
        Need::EbpfPrograms {
            built: !nodeproof_trace::bpf::is_stub(),
        },
    ]) else {
        return;
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .args(["trace", "--duration", "60s", "-o", "json"])
        .env("NODEPROOF_LOG", "off")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The handlers are installed before the tracer loads, milliseconds
    // after the start; a tracer that cannot load ends the command first.
    std::thread::sleep(Duration::from_secs(2));
    if let Some(status) = child.try_wait().unwrap() {
        let out = child.wait_with_output().unwrap();
        panic!(
            "trace exited {status} before the signal: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Both pipes drained meanwhile: denials elsewhere on the machine (any
    // process: the tracer is host-wide) stream to stdout one line each, and
    // with the suite's stress tests beside this one they filled the pipe,
    // the trace blocked writing, and never got to exit.
    let drain = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut all = Vec::new();
            let _ = r.read_to_end(&mut all);
            all
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    // SAFETY: a plain kill(2) on our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let sent = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if sent.elapsed() > Duration::from_secs(15) {
            let _ = child.kill();
            panic!("trace still running 15 s after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = child.wait().unwrap();
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    assert_eq!(
        status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&stderr)
    );
    // The summary is the last line.
    let stdout = String::from_utf8_lossy(&stdout);
    let last = stdout.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
    let v: serde_json::Value = serde_json::from_str(last).expect("the summary");
    assert!(v["summary"].is_array(), "{v}");
}

/// An empty trace is said as such, never as an empty patch that reads as
/// "the profile already allows everything" and would be applied as such.
#[test]
fn advise_with_no_denial_observed_says_so_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let profile = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../profiles/runtime-default-x86_64.json"
    );
    let trace = write(
        dir.path(),
        "trace.json",
        "{\"summary\":[],\"dropped\":0,\"lost_counts\":0,\"samples\":0,\"strategy\":\"tp_btf\"}\n",
    );
    let out = nodeproof(&["advise", "--profile", profile, "--from", &trace]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("# no denial observed: nothing to advise, the profile is unchanged"),
        "{text}"
    );
    assert!(!text.contains("JSON Patch"), "{text}");
    let out = nodeproof(&[
        "advise",
        "--profile",
        profile,
        "--from",
        &trace,
        "-o",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["denials"], 0);
    assert_eq!(v["patch"], serde_json::json!([]));
    // The help says what happens without a saved trace.
    let help = nodeproof(&["advise", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("default without --from: 10s"), "{help}");
}

/// `trace --namespace` on a node without the kubelet's pod log directories
/// could match nothing: it says so and fails, instead of an empty table
/// that reads as "no denials" while nothing could have matched.
#[test]
fn trace_by_namespace_without_pod_names_says_why_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("pods");
    let out = nodeproof(&[
        "trace",
        "--namespace",
        "ml",
        "--pod",
        "vllm-0",
        "--pod-logs-dir",
        missing.to_str().unwrap(),
        "--duration",
        "1s",
    ]);
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "--pod and --namespace need the pods' names, and {} (the kubelet's pod log directories) is not on this node",
            missing.display()
        )),
        "{err}"
    );
    assert!(
        err.contains("or filter by --pod UID or --container ID"),
        "{err}"
    );
}

/// `-o yaml` wherever `-o json` exists: the same document, and on failure
/// the same error object (a script reads either the same way).
#[test]
fn yaml_is_the_json_document_for_every_structured_command() {
    let dir = tempfile::tempdir().unwrap();
    let profiles = concat!(env!("CARGO_MANIFEST_DIR"), "/../profiles");
    let profile = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../profiles/runtime-default-x86_64.json"
    );
    let trace = write(
        dir.path(),
        "trace.json",
        "{\"summary\":[{\"pid\":7,\"comm\":\"vllm\",\"syscall\":\"mount\",\"nr\":165,\"arch\":\"x86_64\",\"action\":\"errno\",\"errno\":1,\"count\":12,\"cgroup_id\":5,\"container_id\":null,\"pod_uid\":null}],\"dropped\":0,\"lost_counts\":0,\"samples\":0,\"strategy\":\"tp_btf\"}\n",
    );
    let missing = dir.path().join("nope.json");
    let missing = missing.to_str().unwrap();
    let narrower = std::fs::read_to_string(profile)
        .unwrap()
        .replacen("\"openat\",", "", 1);
    let narrower = write(dir.path(), "narrower.json", &narrower);
    for args in [
        vec!["profile", "lint", profiles],
        vec!["advise", "--profile", profile, "--from", &trace],
        vec!["profile", "lint", missing],
        vec!["profile", "diff", "--arch", "x86_64", profile, &narrower],
    ] {
        let json = nodeproof(&[args.as_slice(), &["-o", "json"]].concat());
        let yaml = nodeproof(&[args.as_slice(), &["-o", "yaml"]].concat());
        assert_eq!(yaml.status.code(), json.status.code(), "{args:?}");
        let from_json: serde_json::Value =
            serde_json::from_slice(&json.stdout).unwrap_or_else(|e| {
                panic!(
                    "{args:?}: JSON ({e}): {}",
                    String::from_utf8_lossy(&json.stdout)
                )
            });
        let from_yaml: serde_json::Value =
            serde_saphyr::from_str(&String::from_utf8_lossy(&yaml.stdout)).unwrap_or_else(|e| {
                panic!(
                    "{args:?}: YAML ({e}): {}",
                    String::from_utf8_lossy(&yaml.stdout)
                )
            });
        assert_eq!(from_yaml, from_json, "{args:?}");
    }
}

const DIFF_OLD: &str = r#"{"defaultAction":"SCMP_ACT_ERRNO","architectures":["SCMP_ARCH_X86_64"],"syscalls":[
  {"names":["read","write","openat","close","exit_group"],"action":"SCMP_ACT_ALLOW"},
  {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":0,"op":"SCMP_CMP_EQ"}]},
  {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":131080,"op":"SCMP_CMP_EQ"}]}]}"#;

#[test]
fn profile_diff_exit_codes_and_json_shape() {
    let dir = tempfile::tempdir().unwrap();
    let old = write(dir.path(), "old.json", DIFF_OLD);
    // The same filter written otherwise: names reordered and split, a rule duplicated.
    let same = write(
        dir.path(),
        "same.json",
        r#"{"defaultAction":"SCMP_ACT_ERRNO","architectures":["SCMP_ARCH_X86_64"],"syscalls":[
  {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":131080,"op":"SCMP_CMP_EQ"}]},
  {"names":["close","exit_group"],"action":"SCMP_ACT_ALLOW"},
  {"names":["openat","write","read"],"action":"SCMP_ACT_ALLOW"},
  {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":0,"op":"SCMP_CMP_EQ"}]},
  {"names":["read"],"action":"SCMP_ACT_ALLOW"}]}"#,
    );
    let narrowed = write(
        dir.path(),
        "narrowed.json",
        &DIFF_OLD.replace(
            r#",
  {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":131080,"op":"SCMP_CMP_EQ"}]}"#,
            "",
        ),
    );
    let wider = write(
        dir.path(),
        "wider.json",
        &DIFF_OLD.replace("\"close\",", "\"close\",\"getpid\","),
    );
    let broken = write(
        dir.path(),
        "broken.json",
        r#"{"defaultAction":"SCMP_ACT_NOPE"}"#,
    );
    let diff = |a: &str, b: &str, json: bool| {
        let mut args = vec!["profile", "diff", "--arch", "x86_64", a, b];
        if json {
            args.extend(["-o", "json"]);
        }
        nodeproof(&args)
    };

    let out = diff(&old, &same, false);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text,
        format!("{same} decides as {old} does for every syscall and argument (runc 1.1.5 on SCMP_ARCH_X86_64)\n")
    );
    assert_eq!(text.lines().count(), 1, "{text}");

    // A value of an argument no longer allowed: exit 1, that value named.
    let out = diff(&old, &narrowed, false);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("SCMP_ARCH_X86_64:\n  personality (135) arg0 == 0x20008: SCMP_ACT_ALLOW -> SCMP_ACT_ERRNO(1) (harsher)\n"), "{text}");
    let out = diff(&old, &narrowed, true);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["harsher"], true);
    assert_eq!(v["old"], old.as_str());
    assert_eq!(v["mode"]["oci_runtime"], "runc 1.1.5");
    let changes = v["diffs"][0]["changes"].as_array().expect("changes");
    assert_eq!(v["diffs"][0]["arch"], "SCMP_ARCH_X86_64");
    assert_eq!(
        changes[0],
        serde_json::json!({
            "syscall": {"kind": "named", "name": "personality", "nr": 135},
            "args": [{"index": 0, "kind": "range", "first": 0x20008, "last": 0x20008}],
            "old": "SCMP_ACT_ALLOW",
            "new": "SCMP_ACT_ERRNO(1)",
            "harsher": true
        })
    );

    // Only more allowed: listed, exit 0.
    let out = diff(&old, &wider, true);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["harsher"], false);
    let changes = v["diffs"][0]["changes"].as_array().expect("changes");
    assert!(
        changes
            .iter()
            .any(|c| c["syscall"]["name"] == "getpid" && c["new"] == "SCMP_ACT_ALLOW"),
        "{v}"
    );

    // A profile that builds no filter: exit 2 with lint's own report.
    let out = diff(&old, &broken, false);
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("error[unknown-action]"), "{text}");
    assert!(text.contains("outcome rejected"), "{text}");
    let lint = nodeproof(&["profile", "lint", "--arch", "x86_64", &broken]);
    assert_eq!(text, String::from_utf8_lossy(&lint.stdout));
    let out = diff(&broken, &old, true);
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["profiles"][0]["outcome"], "rejected");
}

/// A recording of one pod's container, as `nodeproof record` writes it.
fn recording_json(pod: &str, personality: &[u64], lost: u64) -> String {
    serde_json::json!({
        "format": "nodeproof.recording/v1",
        "pod": {"namespace": "ml", "name": pod},
        "started": "2026-12-06T01:00:00Z",
        "ended": "2026-12-06T01:10:00Z",
        "containers": [{
            "name": "app",
            "arches": [{"arch": "SCMP_ARCH_X86_64", "syscalls": [
                {"nr": 0, "name": "read"},
                {"nr": 135, "name": "personality", "args": [{"index": 0, "values": personality}]}
            ]}],
            "lost": lost
        }]
    })
    .to_string()
}

/// `profile diff --against`: the recorded calls NEW stops, with their pods;
/// exit 1 only when one is stopped, whatever else NEW denies.
#[test]
fn profile_diff_against_recordings_names_the_calls_new_stops() {
    let dir = tempfile::tempdir().unwrap();
    let old = write(dir.path(), "old.json", DIFF_OLD);
    // NEW no longer allows personality(0x20008).
    let narrowed = write(
        dir.path(),
        "narrowed.json",
        &DIFF_OLD.replace(
            r#",
  {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":131080,"op":"SCMP_CMP_EQ"}]}"#,
            "",
        ),
    );
    let uses = write(
        dir.path(),
        "uses.json",
        &recording_json("vllm-0", &[0, 0x20008], 0),
    );
    let spares = write(
        dir.path(),
        "spares.json",
        &recording_json("vllm-1", &[0], 2),
    );
    let diff = |recs: &[&str], json: bool| {
        let mut args = vec![
            "profile",
            "diff",
            "--arch",
            "x86_64",
            &old,
            &narrowed,
            "--against",
        ];
        args.extend(recs);
        if json {
            args.extend(["-o", "json"]);
        }
        nodeproof(&args)
    };

    // The pod that calls personality(0x20008) is named; the other is not.
    let out = diff(&[&uses, &spares], false);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("  ml/vllm-0 container app: personality (135) arg0=0x20008: SCMP_ACT_ALLOW -> SCMP_ACT_ERRNO(1)\n"),
        "{text}"
    );
    assert!(
        !text.contains("ml/vllm-1 container app: personality"),
        "{text}"
    );
    assert!(
        text.ends_with(&format!(
            "{narrowed} stops 1 recorded call made by ml/vllm-0: those pods fail once they restart with it\n"
        )),
        "{text}"
    );
    assert!(
        text.contains("ml/vllm-1 container app: the recording is incomplete (2 calls"),
        "{text}"
    );
    assert!(
        text.contains("against 2 recordings (ml/vllm-0, ml/vllm-1):\n"),
        "{text}"
    );

    // Harsher, but not for what the recorded pod calls: exit 0.
    let out = diff(&[&spares], true);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["harsher"], true);
    assert_eq!(v["against"]["broken"], serde_json::json!([]));
    assert_eq!(v["against"]["incomplete"][0]["lost"], 2);

    let out = diff(&[&uses], true);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["against"]["broken"][0]["subject"], "ml/vllm-0");
    assert_eq!(
        v["against"]["broken"][0]["args"],
        serde_json::json!([[0, 0x20008]])
    );
    assert_eq!(v["against"]["broken"][0]["certainty"]["kind"], "recorded");

    // A file that is not a recording: exit 2, one line naming it.
    let out = diff(&[&old], false);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "{old} is not a recording as `nodeproof record` writes it"
        )),
        "{err}"
    );
}

/// `advise --from RECORDING`: an allow-list profile on standard output, lint
/// clean, with the recorded argument values kept and the runtime's own calls
/// added; what went into it on standard error.
#[test]
fn advise_from_a_recording_writes_an_allowlist_that_lints_clean() {
    let dir = tempfile::tempdir().unwrap();
    let rec = write(
        dir.path(),
        "rec.json",
        &recording_json("vllm-0", &[0, 8], 0),
    );
    let out = nodeproof(&["advise", "--from", &rec, "--arch", "x86_64"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let profile: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a profile");
    assert_eq!(profile["defaultAction"], "SCMP_ACT_ERRNO");
    let rules = profile["syscalls"].as_array().unwrap();
    let outright = rules[0]["names"].as_array().unwrap();
    assert!(outright.contains(&"read".into()), "{profile}");
    // runc init's own calls after the filter is loaded are in it, though not recorded.
    assert!(outright.contains(&"execve".into()), "{profile}");
    let personality: Vec<&serde_json::Value> = rules
        .iter()
        .filter(|r| r["names"][0] == "personality")
        .map(|r| &r["args"][0]["value"])
        .collect();
    assert_eq!(personality, [&serde_json::json!(0), &serde_json::json!(8)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("allow-list for ml/vllm-0 container app recorded 2026-12-06T01:00:00Z"),
        "{err}"
    );
    assert!(err.trim_end().ends_with("profile lint: ok"), "{err}");
    // What it writes lints clean as a file.
    let written = write(
        dir.path(),
        "allow.json",
        &String::from_utf8_lossy(&out.stdout),
    );
    let lint = nodeproof(&["profile", "lint", "--arch", "x86_64", &written]);
    assert_eq!(lint.status.code(), Some(0));

    let out = nodeproof(&["advise", "--from", &rec, "--arch", "x86_64", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["report"]["outcome"], "ok");
    assert!(v["added_for_runtime"]
        .as_array()
        .unwrap()
        .contains(&"execve".into()));

    // An incomplete recording: the profile, and exit 1.
    let lossy = write(dir.path(), "lossy.json", &recording_json("vllm-0", &[0], 4));
    let out = nodeproof(&["advise", "--from", &lossy, "--arch", "x86_64"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the recording is incomplete"));

    for (args, said) in [
        (
            vec!["--container", "nope"],
            "the recording has no container named nope",
        ),
        (
            vec!["--profile", &rec],
            "a recording makes a new profile: drop --profile and --pod",
        ),
    ] {
        let mut all = vec!["advise", "--from", &rec];
        all.extend(args);
        let out = nodeproof(&all);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(said), "{err}");
    }
}
