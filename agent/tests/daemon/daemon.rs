//! `nodeproof run` as systemd runs it: the test binds the notify socket,
//! reads READY=1/STATUS=/WATCHDOG=1/STOPPING=1, probes the HTTP endpoints,
//! changes a profile, reloads and stops the agent.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::agent as agent_support;
use agent_support::{free_port, get};

/// The status line and headers, and the body.
fn get_with_head(port: u16, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (head.to_string(), body.to_string())
}

fn config(dir: &Path, port: u16, gpu_interval: u32) -> std::path::PathBuf {
    let path = dir.join("config.toml");
    std::fs::write(
        &path,
        format!(
            "[seccomp]\nroot = \"{}\"\n[report]\nkubeconfig = \"/nonexistent\"\n[daemon]\nlisten = \"127.0.0.1:{port}\"\ngpu-interval-s = {gpu_interval}\n",
            dir.join("seccomp").display()
        ),
    )
    .unwrap();
    path
}

/// `nodeproof run --config CONFIG` as systemd starts it, notifying
/// `notify`, its standard error to `stderr`.
fn run_agent(config: &Path, notify: &Path, stderr: Stdio) -> Child {
    Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .args(["run", "--config"])
        .arg(config)
        .env("NOTIFY_SOCKET", notify)
        .env_remove("JOURNAL_STREAM")
        .env("NODE_NAME", "test-node")
        .stderr(stderr)
        .spawn()
        .unwrap()
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: a plain kill(2) on our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, sig) };
}

fn recv_until(sock: &UnixDatagram, want: &str, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        sock.set_read_timeout(Some(deadline - Instant::now()))
            .unwrap();
        let Ok(n) = sock.recv(&mut buf) else { break };
        let m = String::from_utf8_lossy(&buf[..n]).into_owned();
        let done = m.lines().any(|l| l == want);
        seen.push(m);
        if done {
            return seen;
        }
    }
    panic!("no {want} within {within:?}; got {seen:?}");
}

#[test]
fn a_bad_config_exits_64_naming_every_problem() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(
        &path,
        "[daemon]\ngpu-interval-s = 0\nprofile-resync-s = 0\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .args(["run", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "daemon.gpu-interval-s must be at least 1; daemon.profile-resync-s must be at least 1"
        ),
        "{stderr}"
    );
}

#[test]
fn notifies_serves_revalidates_reloads_and_stops() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("seccomp");
    std::fs::create_dir(&root).unwrap();
    let profiles = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles");
    std::fs::copy(
        profiles.join("runtime-default-x86_64.json"),
        root.join("default.json"),
    )
    .unwrap();
    let port = free_port();
    let config = config(dir.path(), port, 10);
    let notify_path = dir.path().join("notify");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    let log = dir.path().join("stderr.log");
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .args(["run", "--config"])
        .arg(&config)
        .env("NOTIFY_SOCKET", &notify_path)
        .env("WATCHDOG_USEC", "1000000")
        .env_remove("JOURNAL_STREAM")
        .env("NODE_NAME", "test-node")
        .env("NODEPROOF_LOG_FORMAT", "json")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let seen = recv_until(&notify, "READY=1", Duration::from_secs(20));
    eprintln!("READY=1 after {:?} (debug build)", started.elapsed());
    let ready = seen.iter().find(|m| m.starts_with("READY=1")).unwrap();
    assert!(ready.contains("STATUS=profiles 1 ok"), "{ready}");
    assert!(ready.contains("not reporting"), "{ready}");
    // Pings keep coming from the main loop.
    recv_until(&notify, "WATCHDOG=1", Duration::from_secs(2));

    assert_eq!(get(port, "/healthz").0, 200);
    assert_eq!(get(port, "/readyz").0, 200);
    let (code, body) = get(port, "/healthz/profiles");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("SeccompProfilesReady=True"), "{body}");
    assert_eq!(get(port, "/healthz/nothing").0, 404);
    let (head, metrics) = get_with_head(port, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    // prometheus-client's OpenMetrics text, whole: `# EOF` ends it. (hyper
    // writes header names in lower case; they are case-insensitive.)
    assert!(
        head.to_ascii_lowercase().contains(
            "\r\ncontent-type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\n"
        ),
        "{head}"
    );
    assert!(metrics.ends_with("\n# EOF\n"), "{metrics}");
    assert!(
        metrics.contains("nodeproof_profile_verdicts{outcome=\"ok\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("# TYPE nodeproof_config_reloads counter\n"),
        "{metrics}"
    );

    // A broken profile is seen within a second (inotify), not at the resync.
    let changed = Instant::now();
    std::fs::write(
        root.join("broken.json"),
        "{\"defaultAction\": \"SCMP_ACT_NOPE\"}",
    )
    .unwrap();
    loop {
        let (_, body) = get(port, "/healthz/profiles");
        if body.contains("SeccompProfilesReady=False") {
            break;
        }
        assert!(
            changed.elapsed() < Duration::from_secs(1),
            "not re-validated within 1 s: {body}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("re-validated after {:?}", changed.elapsed());

    // SIGHUP: a bad config is refused (the agent keeps running), a good one taken.
    std::fs::write(&config, "[daemon]\nnope = 1\n").unwrap();
    signal(&child, libc::SIGHUP);
    recv_until(&notify, "READY=1", Duration::from_secs(5));
    assert!(get(port, "/metrics")
        .1
        .contains("nodeproof_config_reloads_total 0"));
    let _ = self::config(dir.path(), port, 20);
    signal(&child, libc::SIGHUP);
    recv_until(&notify, "READY=1", Duration::from_secs(5));
    assert!(get(port, "/metrics")
        .1
        .contains("nodeproof_config_reloads_total 1"));
    // State survived the reload: the failing profile is still known.
    assert!(get(port, "/healthz/profiles")
        .1
        .contains("SeccompProfilesReady=False"));

    signal(&child, libc::SIGTERM);
    recv_until(&notify, "STOPPING=1", Duration::from_secs(5));
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    // The start-up breakdown, for the record (a figure, not an assertion):
    // when each check first finished, and the eBPF load's parts.
    for line in std::fs::read_to_string(&log).unwrap().lines() {
        if line.contains("ready_ms") || line.contains("load_ms") {
            eprintln!("{line}");
        }
    }
}

/// The exit status, or a panic (after killing it) if it has not exited within `within`.
fn exits_within(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running {within:?} later: hung on the way out");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn one_profile_config(dir: &Path) -> std::path::PathBuf {
    std::fs::create_dir(dir.join("seccomp")).unwrap();
    config(dir, free_port(), 10)
}

#[test]
fn a_stderr_nobody_reads_does_not_stop_a_clean_exit() {
    let dir = tempfile::tempdir().unwrap();
    let config = one_profile_config(dir.path());
    let notify_path = dir.path().join("notify");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    let mut child = run_agent(&config, &notify_path, Stdio::piped());
    // The reader goes away: every later log line meets EPIPE.
    drop(child.stderr.take());
    recv_until(&notify, "READY=1", Duration::from_secs(20));
    signal(&child, libc::SIGTERM);
    let status = exits_within(&mut child, Duration::from_secs(10));
    assert!(status.success(), "{status}");
}

#[test]
fn a_refused_ready_notification_exits_1_instead_of_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let config = one_profile_config(dir.path());
    // Nobody listens there: READY=1 cannot be sent.
    let mut child = run_agent(&config, &dir.path().join("absent"), Stdio::piped());
    let status = exits_within(&mut child, Duration::from_secs(20));
    assert_eq!(status.code(), Some(1));
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(
        stderr.contains("cannot tell systemd the agent is ready"),
        "{stderr}"
    );
}

/// A check the registry schedules (the kubelet's seccompDefault) is run by
/// the daemon's check runner with no line of its own in the daemon:
/// READY=1 waits for it, `STATUS=`, `/healthz/<name>` and
/// `nodeproof_check_findings` say it, and a reload runs it again at once.
#[test]
fn a_scheduled_check_is_run_served_and_run_again_on_reload() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("seccomp")).unwrap();
    // The host the kubelet runs on: kubeadm's unit, its config without seccompDefault.
    let host = dir.path().join("host");
    let units = host.join("usr/lib/systemd/system");
    std::fs::create_dir_all(units.join("kubelet.service.d")).unwrap();
    std::fs::write(
        units.join("kubelet.service"),
        "[Service]\nExecStart=/usr/bin/kubelet\n",
    )
    .unwrap();
    std::fs::write(
        units.join("kubelet.service.d/10-kubeadm.conf"),
        "[Service]\nEnvironment=\"KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml\"\nExecStart=\nExecStart=/usr/bin/kubelet $KUBELET_CONFIG_ARGS\n",
    )
    .unwrap();
    let kubelet_config = host.join("var/lib/kubelet/config.yaml");
    std::fs::create_dir_all(kubelet_config.parent().unwrap()).unwrap();
    std::fs::write(&kubelet_config, "kind: KubeletConfiguration\n").unwrap();
    let port = free_port();
    let config = config(dir.path(), port, 10);
    let with_host = std::fs::read_to_string(&config).unwrap().replace(
        "[report]\n",
        &format!("[report]\nhost-root = \"{}\"\n", host.display()),
    );
    std::fs::write(&config, with_host).unwrap();
    let notify_path = dir.path().join("notify");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    let mut child = run_agent(&config, &notify_path, Stdio::null());
    let seen = recv_until(&notify, "READY=1", Duration::from_secs(20));
    let ready = seen.iter().find(|m| m.starts_with("READY=1")).unwrap();
    assert!(ready.contains("seccomp-default warning"), "{ready}");
    let (code, body) = get(port, "/healthz/seccomp-default");
    assert_eq!(code, 200, "{body}");
    // What it found, in its own sentence, with the line to add.
    assert!(
        body.contains("kubelet.service warning (SeccompDefaultDisabled): seccompDefault is not set (the kubelet's default is false): containers that name no seccomp profile run Unconfined; set seccompDefault: true in /var/lib/kubelet/config.yaml and restart the kubelet"),
        "{body}"
    );
    let metrics = get(port, "/metrics").1;
    assert!(
        metrics
            .contains("nodeproof_check_findings{check=\"seccomp-default\",status=\"warning\"} 1"),
        "{metrics}"
    );
    // Turned on, and the agent reloaded: judged again now, not in 300 s.
    std::fs::write(
        &kubelet_config,
        "kind: KubeletConfiguration\nseccompDefault: true\n",
    )
    .unwrap();
    signal(&child, libc::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let metrics = get(port, "/metrics").1;
        if metrics.contains("nodeproof_check_findings{check=\"seccomp-default\",status=\"ok\"} 1") {
            assert!(
                metrics.contains(
                    "nodeproof_check_findings{check=\"seccomp-default\",status=\"warning\"} 0"
                ),
                "{metrics}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not judged again after the reload: {metrics}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    signal(&child, libc::SIGTERM);
    assert!(exits_within(&mut child, Duration::from_secs(10)).success());
}
