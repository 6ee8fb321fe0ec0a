//! `nodeproof trace` as a non-root user holding exactly CAP_BPF + CAP_PERFMON:
//! it must load, attach and count a confined process's denials exactly; with
//! neither capability (or only one) it must fail with a message naming the
//! missing ones. The test starts as root to switch users with `setpriv`;
//! without root or setpriv it skips (fails under NODEPROOF_REQUIRE=1).

use libseccomp::{ScmpAction, ScmpFilterContext, ScmpSyscall};
use nodeproof_testkit::{require, Cap, Need};
use nodeproof_trace::{bpf, loader};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// nobody/nogroup: no file of the test is theirs, no capability is theirs.
const NOBODY: &str = "65534";
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;
const DENIALS: usize = 7;
const COMM: &str = "np-capstest";

/// What every test here needs: the programs, the capabilities to switch to
/// nobody while keeping chosen ones (SETUID/SETGID/SETPCAP) and the two it
/// grants (BPF/PERFMON, which only a holder can pass on), and setpriv.
fn needs() -> [Need; 3] {
    [
        Need::EbpfPrograms {
            built: !bpf::is_stub(),
        },
        Need::Caps(&[
            Cap::Setgid,
            Cap::Setuid,
            Cap::Setpcap,
            Cap::Bpf,
            Cap::Perfmon,
        ]),
        Need::Tool("setpriv"),
    ]
}

/// A copy of the binary that `nobody` can execute whatever the checkout's permissions.
fn binary_for_nobody(dir: &Path) -> PathBuf {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.join("nodeproof");
    std::fs::copy(env!("CARGO_BIN_EXE_nodeproof"), &bin).expect("copy nodeproof");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// `nodeproof trace` as nobody with `caps` (e.g. "+bpf,+perfmon", or "" for none)
/// as its only inheritable and ambient capabilities, and an empty bounding set
/// apart from them: after exec the process holds exactly `caps`.
fn trace_as_nobody(bin: &Path, caps: &str, duration: &str, extra: &[&str]) -> Child {
    let mut cmd = Command::new("setpriv");
    cmd.args([
        &format!("--reuid={NOBODY}"),
        &format!("--regid={NOBODY}"),
        "--clear-groups",
    ]);
    if caps.is_empty() {
        cmd.args(["--inh-caps=-all", "--bounding-set=-all"]);
    } else {
        cmd.args([
            format!("--inh-caps=-all,{caps}"),
            format!("--ambient-caps={caps}"),
            format!("--bounding-set=-all,{caps}"),
        ]);
    }
    cmd.arg(bin)
        .args([
            "trace",
            "--duration",
            duration,
            "-o",
            "json",
            "--comm",
            COMM,
        ])
        .args(extra)
        // info: the "strategy loaded" line tells the test when the programs are attached.
        .env("NODEPROOF_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run setpriv")
}

fn cap_eff_of(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| loader::parse_cap_eff(&s))
}

/// Forks a child that names itself COMM, installs a filter denying mkdir with
/// EPERM and makes `n` denied calls. Returns its pid after it exited 0.
fn confined_child(n: usize) -> u32 {
    // SAFETY: the test is single-threaded here (the tracer runs in another
    // process), so the child may allocate; it leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let code = std::panic::catch_unwind(|| {
            let name = std::ffi::CString::new(COMM).unwrap();
            // SAFETY: PR_SET_NAME with a valid C string.
            unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
            let mut f = ScmpFilterContext::new(ScmpAction::Allow).unwrap();
            f.add_rule(
                ScmpAction::Errno(libc::EPERM),
                ScmpSyscall::from_name("mkdir").unwrap(),
            )
            .unwrap();
            f.load().unwrap();
            let p = std::ffi::CString::new("/nonexistent-nodeproof/x").unwrap();
            let mut bad = 0;
            for _ in 0..n {
                // SAFETY: mkdir on a valid C string.
                let rc = unsafe { libc::syscall(libc::SYS_mkdir, p.as_ptr(), 0o755) };
                let e = std::io::Error::last_os_error().raw_os_error();
                bad += i32::from(rc != -1 || e != Some(libc::EPERM));
            }
            bad
        })
        .unwrap_or(101);
        // SAFETY: leaving the forked child without running the harness's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "confined child: {status:#x}"
    );
    pid as u32
}

#[test]
fn non_root_with_only_cap_bpf_and_cap_perfmon_counts_exactly() {
    let Some(_) = require(&needs()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let bin = binary_for_nobody(dir.path());
    let mut child = trace_as_nobody(&bin, "+bpf,+perfmon", "3s", &[]);

    // Wait for the attach, keeping what was said for the failure message.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut loaded = false;
    while Instant::now() < deadline {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        said.push_str(&line);
        if line.contains("seccomp tracing strategy loaded") {
            loaded = true;
            break;
        }
    }
    assert!(loaded, "nodeproof did not attach as nobody:\n{said}");
    // The tracer really runs as nobody with exactly the two capabilities.
    let tracer_pid = child.id();
    let status = std::fs::read_to_string(format!("/proc/{tracer_pid}/status")).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(
        uid_line.split_whitespace().skip(1).all(|u| u == NOBODY),
        "{uid_line}"
    );
    assert_eq!(
        cap_eff_of(tracer_pid),
        Some((1 << CAP_BPF) | (1 << CAP_PERFMON))
    );

    let pid = confined_child(DENIALS);
    let out = child.wait_with_output().expect("wait for nodeproof");
    let mut rest = String::new();
    let _ = stderr.read_to_string(&mut rest);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{:?}\n{said}{rest}\n{stdout}",
        out.status
    );
    let last: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let rows: Vec<&serde_json::Value> = last["summary"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["pid"] == pid)
        .collect();
    assert_eq!(rows.len(), 1, "{last}");
    assert_eq!(rows[0]["syscall"], "mkdir");
    assert_eq!(rows[0]["errno"], libc::EPERM);
    assert_eq!(rows[0]["action"], "errno");
    assert_eq!(rows[0]["count"], DENIALS as u64, "{last}");
    // Every denial was sampled too (far below the rate limit).
    let samples = stdout
        .lines()
        .filter(|l| !l.starts_with("{\"summary\"") && l.contains(&format!("\"pid\":{pid},")))
        .count();
    assert_eq!(samples, DENIALS, "{stdout}");
}

#[test]
fn without_the_capabilities_it_fails_naming_them() {
    let Some(_) = require(&needs()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let bin = binary_for_nobody(dir.path());
    // (capabilities held, capabilities the message must name as missing)
    let cases: [(&str, &[&str]); 3] = [
        ("", &["CAP_BPF and CAP_PERFMON"]),
        ("+bpf", &["missing CAP_PERFMON"]),
        ("+perfmon", &["missing CAP_BPF"]),
    ];
    for (caps, named) in cases {
        let out = trace_as_nobody(&bin, caps, "1s", &[])
            .wait_with_output()
            .expect("wait for nodeproof");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "caps {caps:?}: {stderr}");
        assert_eq!(out.status.code(), Some(2), "caps {caps:?}: {stderr}");
        for n in named {
            assert!(stderr.contains(n), "caps {caps:?}: {stderr}");
        }
        assert!(
            stderr.contains("grant CAP_BPF and CAP_PERFMON, or run as root"),
            "caps {caps:?}: {stderr}"
        );
        // `-o json` on failure: the error as one JSON object, which a script can parse.
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("caps {caps:?}: stdout is not JSON ({e}): {:?}", out.stdout)
        });
        assert_eq!(json["error"]["exit_code"], 2, "caps {caps:?}: {json}");
        assert!(
            json["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("grant CAP_BPF and CAP_PERFMON")),
            "caps {caps:?}: {json}"
        );
    }
}

/// With the capabilities but forced onto classic tracepoints: tracefs (where
/// their ids live) is root-only, and the refusal says so instead of aya's
/// "tracefs not found".
#[test]
fn forced_tracepoint_as_non_root_names_tracefs() {
    let Some(_) = require(&[needs().as_slice(), &[Need::TracefsRootOnly]].concat()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let bin = binary_for_nobody(dir.path());
    let out = trace_as_nobody(&bin, "+bpf,+perfmon", "1s", &["--strategy", "tracepoint"])
        .wait_with_output()
        .expect("wait for nodeproof");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("tracepoint: BPFPermissionDenied")
            && stderr.contains("tracing/events is not readable"),
        "{stderr}"
    );
}
