//! Faults and soak against the real binary: nodeproof.service under systemd
//! as PID 1 in systemd-nspawn (support/nspawn.rs), reporting to the test API
//! server run as a process of its own (examples/apiserver.rs) in the
//! container's network namespace, with the fake NVML as its GPU.
//!
//! `faults_each_once` (CI, a few minutes) runs every fault once and checks
//! after each: no crash loop (NRestarts, ActiveState), no lost transition
//! (every "condition transition" in the agent's journal reached the API
//! server unless it was unreachable then, and every change the server saw is
//! in the journal), and the conditions back to where they were within 30 s
//! of the fault's end. It prints a table: fault, result, time to recover.
//!
//! `soak` (ignored; `scripts/soak.sh [MINUTES]`) runs denials, profile churn
//! and GPU flaps for NODEPROOF_SOAK_MINUTES (30) and samples the agent's RSS
//! and open fds every 10 s: figures, not a threshold.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nodeproof_findings::ConditionType;
use nodeproof_testkit::{require, Need};
use serde_json::Value;

use nodeproof_testapi as apiserver;
#[path = "support/fake_nvml.rs"]
mod fake_nvml_support;
#[path = "support/nspawn.rs"]
mod nspawn;

use nspawn::{repo, rootfs, show, Machine, BOOT};

const NODE: &str = "soak-node";
const TOKEN: &str = "soak-node-token";
const LISTEN: &str = "127.0.0.1:6443";
const ROOT: &str = "/var/lib/kubelet/seccomp";
const UNIT: &str = "nodeproof.service";
/// The invariant: conditions correct within this long after a fault ends.
const RECOVERY: Duration = Duration::from_secs(30);

const GPU_GOOD: &str = "gpus 1\n";
/// An uncorrectable volatile ECC error: GPUHealthy=False (the default
/// `ecc-volatile-uncorrected-max = 0`), gone when the line is.
const GPU_BAD: &str = "gpus 1\necc 0 1 1\n";
const BAD_PROFILE: &str = r#"{"defaultAction": "SCMP_ACT_BOGUS"}"#;

/// The agent's config: every check fast, hysteresis off (one result moves a
/// condition, so each flap is a transition), no start or change spread.
const CONFIG: &str = r#"[seccomp]
root = "/var/lib/kubelet/seccomp"
[gpu]
nvml-library = "/opt/np/gpu/libnvidia-ml.so.1"
sysfs-root = "/opt/np/gpu/sys"
clear-after-clean-intervals = 1
[report]
kubeconfig = "/etc/nodeproof/kubeconfig"
node-name = "soak-node"
start-spread-s = 0
change-spread-s = 0
to-bad = 1
to-good = 1
heartbeat-s = 60
qps = 5.0
burst = 20
[daemon]
gpu-interval-s = 1
"#;

/// The shipped unit and its files, as systemd_nspawn.rs installs them.
const INSTALL: &str = r#"set -e
install -m 755 /opt/np/nodeproof /usr/bin/nodeproof
install -D -m 644 /opt/np/systemd/nodeproof.service /usr/lib/systemd/system/nodeproof.service
install -D -m 644 /opt/np/systemd/nodeproof.sysusers.conf /usr/lib/sysusers.d/nodeproof.conf
install -D -m 644 /opt/np/systemd/nodeproof.tmpfiles.conf /usr/lib/tmpfiles.d/nodeproof.conf
install -D -m 644 /opt/np/profiles/runtime-default-x86_64.json /var/lib/kubelet/seccomp/default.json
systemd-sysusers nodeproof.conf
systemd-tmpfiles --create nodeproof.conf
mkdir -p /etc/nodeproof
"#;

fn epoch_s(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// The test API server process, in the container's network namespace (its
/// files on the host: storage, request log, control socket).
struct ApiServer {
    bin: PathBuf,
    dir: PathBuf,
    leader: u32,
    child: Option<Child>,
}

impl ApiServer {
    fn start(&mut self, wrong_cert: bool) {
        assert!(self.child.is_none());
        let mut cmd = Command::new("nsenter");
        cmd.args(["-t", &self.leader.to_string(), "-n", "--"])
            .arg(&self.bin)
            .arg("--dir")
            .arg(&self.dir)
            .args(["--listen", LISTEN, "--node", NODE, "--token", TOKEN]);
        if wrong_cert {
            cmd.arg("--wrong-cert");
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("apiserver.log"))
            .unwrap();
        // nsenter execs the server: the child is the server itself.
        self.child = Some(
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap(),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.control("ping").as_deref() != Some("ok") {
            assert!(Instant::now() < deadline, "the API server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL, as the OOM killer or a node reboot ends kube-apiserver.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn control(&self, command: &str) -> Option<String> {
        let mut s = std::os::unix::net::UnixStream::connect(self.dir.join("control")).ok()?;
        writeln!(s, "{command}").ok()?;
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).ok()?;
        Some(line.trim().to_string())
    }

    /// nodeproof's conditions on the stored Node: type → (status, reason, message).
    fn conditions(&self) -> BTreeMap<String, (String, String, String)> {
        let node = apiserver::stored_node(&self.dir, NODE).unwrap_or(Value::Null);
        node["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| ConditionType::parse(c["type"].as_str().unwrap_or("")).is_some())
            .map(|c| {
                let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
                (s("type"), (s("status"), s("reason"), s("message")))
            })
            .collect()
    }

    /// Every successful PATCH of the Node's status, as the server logged it.
    fn status_patches(&self) -> impl Iterator<Item = apiserver::Logged> {
        let path = format!("/api/v1/nodes/{NODE}/status");
        apiserver::stored_requests(&self.dir)
            .into_iter()
            .filter(move |l| l.method == "PATCH" && l.path == path && l.status < 300)
    }

    /// Every successful status PATCH: (when, type → status).
    fn status_writes(&self) -> Vec<(SystemTime, BTreeMap<String, String>)> {
        self.status_patches()
            .map(|l| {
                let conds = l.body["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| {
                        Some((
                            c["type"].as_str()?.to_string(),
                            c["status"].as_str()?.to_string(),
                        ))
                    })
                    .collect();
                (l.at, conds)
            })
            .collect()
    }

    fn answered(&self, status: u16, since: SystemTime) -> usize {
        apiserver::stored_requests(&self.dir)
            .iter()
            .filter(|l| l.status == status && l.at >= since)
            .count()
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A "condition transition" journal entry of the agent.
#[derive(Debug, Clone)]
struct Transition {
    at: SystemTime,
    condition: String,
    to: String,
}

/// One row of the table.
struct Row {
    fault: &'static str,
    problems: Vec<String>,
    recovered: Option<Duration>,
    restarts: u64,
    transitions: usize,
    note: String,
}

/// What a fault reports back: when the API server was unreachable, what it saw.
#[derive(Default)]
struct Outcome {
    outages: Vec<(SystemTime, SystemTime)>,
    notes: Vec<String>,
    problems: Vec<String>,
}

struct Soak {
    m: Machine,
    api: ApiServer,
    share: tempfile::TempDir,
    _ctl: tempfile::TempDir,
    /// The container's / as the host reaches it.
    croot: PathBuf,
    baseline: BTreeMap<String, (String, String)>,
    rows: Vec<Row>,
}

fn build_apiserver() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "-q", "-p", "nodeproof", "--example", "apiserver"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo build --example apiserver: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = Path::new(env!("CARGO_BIN_EXE_nodeproof"))
        .parent()
        .unwrap()
        .join("examples/apiserver");
    assert!(bin.is_file(), "no {}", bin.display());
    bin
}

impl Soak {
    fn setup() -> Soak {
        let apiserver_bin = build_apiserver();
        let share = tempfile::tempdir().unwrap();
        std::fs::copy(
            env!("CARGO_BIN_EXE_nodeproof"),
            share.path().join("nodeproof"),
        )
        .unwrap();
        let gpu = fake_nvml_support::Scenario::new(GPU_GOOD, 1);
        for (from, to) in [
            (repo().join("systemd"), "systemd"),
            (repo().join("profiles"), "profiles"),
            (gpu.dir.path().to_path_buf(), "gpu"),
        ] {
            let status = Command::new("cp")
                .arg("-r")
                .arg(&from)
                .arg(share.path().join(to))
                .status()
                .unwrap();
            assert!(status.success());
        }
        let status = Command::new("chmod")
            .args(["-R", "a+rX"])
            .arg(share.path())
            .status()
            .unwrap();
        assert!(status.success());
        let m = Machine::boot(&rootfs(), share.path());
        let ctl = tempfile::tempdir().unwrap();
        let mut api = ApiServer {
            bin: apiserver_bin,
            dir: ctl.path().to_path_buf(),
            leader: m.leader,
            child: None,
        };
        api.start(false);
        let croot = PathBuf::from(format!("/proc/{}/root", m.leader));
        let out = m.sh(INSTALL);
        assert!(!out.contains("rror"), "{out}");
        let etc = croot.join("etc/nodeproof");
        std::fs::copy(ctl.path().join("ca.pem"), etc.join("ca.pem")).unwrap();
        std::fs::write(
            etc.join("kubeconfig"),
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: soak\n  cluster:\n    server: https://{LISTEN}\n    certificate-authority: /etc/nodeproof/ca.pem\ncontexts:\n- name: soak\n  context: {{cluster: soak, user: node}}\ncurrent-context: soak\nusers:\n- name: node\n  user: {{token: {TOKEN}}}\n"
            ),
        )
        .unwrap();
        std::fs::write(etc.join("config.toml"), CONFIG).unwrap();
        std::fs::write(
            etc.join("config.bad"),
            "[daemon]\ngpu-interval-s = \"often\"\n",
        )
        .unwrap();
        let out = m.sh(
            "chgrp nodeproof /etc/nodeproof/* && chmod 640 /etc/nodeproof/* && systemctl daemon-reload \
             && systemctl start nodeproof.service && systemctl is-active nodeproof.service",
        );
        assert_eq!(
            out.trim(),
            "active",
            "{}",
            m.sh("journalctl -u nodeproof --no-pager | tail -30")
        );
        let mut soak = Soak {
            m,
            api,
            share,
            _ctl: ctl,
            croot,
            baseline: BTreeMap::new(),
            rows: Vec::new(),
        };
        // Every condition healthy: one good profile, the tracer, one good GPU.
        let deadline = Instant::now() + RECOVERY;
        loop {
            let now = soak.conditions();
            if ConditionType::ALL
                .iter()
                .all(|t| now.get(t.as_str()).is_some_and(|(s, _)| s == "True"))
            {
                soak.baseline = now;
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the agent's conditions did not reach the API server healthy: {now:?}\n{}",
                soak.m.sh("journalctl -u nodeproof --no-pager | tail -30")
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        eprintln!("baseline: {:?}", soak.baseline);
        soak
    }

    /// type → (status, reason) on the server.
    fn conditions(&self) -> BTreeMap<String, (String, String)> {
        self.api
            .conditions()
            .into_iter()
            .map(|(t, (s, r, _))| (t, (s, r)))
            .collect()
    }

    fn condition(&self, kind: ConditionType) -> String {
        match self.api.conditions().get(kind.as_str()) {
            Some((s, r, m)) => format!("{s} {r}: {}", m.chars().take(90).collect::<String>()),
            None => "absent".into(),
        }
    }

    /// Waits up to `within` for `kind` on the server to have `status`; how long it took.
    fn wait_status(&self, kind: ConditionType, status: &str, within: Duration) -> Option<Duration> {
        let start = Instant::now();
        loop {
            if self
                .api
                .conditions()
                .get(kind.as_str())
                .is_some_and(|(s, _, _)| s == status)
            {
                return Some(start.elapsed());
            }
            if start.elapsed() > within {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn gpu(&self, scenario: &str) {
        let dir = self.share.path().join("gpu");
        std::fs::write(dir.join("scenario.tmp"), scenario).unwrap();
        std::fs::rename(dir.join("scenario.tmp"), dir.join("scenario")).unwrap();
    }

    fn main_pid(&self) -> String {
        show(&self.m, UNIT, "MainPID")
    }

    fn restarts(&self) -> u64 {
        show(&self.m, UNIT, "NRestarts").parse().unwrap_or(0)
    }

    fn transitions(&self, since: SystemTime) -> Vec<Transition> {
        let out = self.m.sh(&format!(
            "journalctl -u {UNIT} -o json --no-pager --since @{}",
            epoch_s(since) as u64 - 1
        ));
        out.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["MESSAGE"] == "condition transition")
            .filter_map(|e| {
                let us: u64 = e["__REALTIME_TIMESTAMP"].as_str()?.parse().ok()?;
                Some(Transition {
                    at: UNIX_EPOCH + Duration::from_micros(us),
                    condition: e["CONDITION"].as_str()?.to_string(),
                    to: e["TO"].as_str()?.to_string(),
                })
            })
            .filter(|t| t.at >= since)
            .collect()
    }

    /// Runs one fault: `fault` applies it and undoes it; then the unit must be
    /// active with the baseline conditions on the server within [`RECOVERY`],
    /// with at most `restarts` automatic restarts, and no transition lost.
    fn fault(
        &mut self,
        name: &'static str,
        restarts: u64,
        fault: impl FnOnce(&mut Soak) -> Outcome,
    ) {
        // NODEPROOF_FAULTS=a,b runs only those (scripts/soak.sh faults a,b).
        if let Some(only) = std::env::var("NODEPROOF_FAULTS")
            .ok()
            .filter(|v| !v.is_empty())
        {
            if !only.split(',').any(|f| f.trim() == name) {
                return;
            }
        }
        eprintln!("fault {name}: start");
        let t0 = SystemTime::now();
        let before = self.restarts();
        let outcome = fault(self);
        let ended = Instant::now();
        let mut problems = outcome.problems;
        let recovered = loop {
            let active = show(&self.m, UNIT, "ActiveState") == "active";
            if active && self.conditions() == self.baseline {
                break Some(ended.elapsed());
            }
            if ended.elapsed() > RECOVERY {
                problems.push(format!(
                    "not recovered within {RECOVERY:?}: {} {:?}",
                    show(&self.m, UNIT, "ActiveState"),
                    self.conditions()
                ));
                break None;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        // Writes of the last transitions may still be on their way.
        std::thread::sleep(Duration::from_secs(1));
        let restarted = self.restarts().saturating_sub(before);
        if restarted > restarts {
            problems.push(format!(
                "{restarted} automatic restarts (at most {restarts} expected)"
            ));
        }
        let transitions = self.transitions(t0);
        problems.extend(self.lost(&transitions, &outcome.outages, t0));
        eprintln!("fault {name}: {problems:?}");
        if !problems.is_empty() {
            eprintln!(
                "{}",
                self.m.sh(&format!(
                    "journalctl -u {UNIT} --no-pager --since @{} | grep -v 'profile ok' | tail -40",
                    epoch_s(t0) as u64
                ))
            );
        }
        self.rows.push(Row {
            fault: name,
            problems,
            recovered,
            restarts: restarted,
            transitions: transitions.len(),
            note: outcome.notes.join("; "),
        });
    }

    /// The no-lost-transition invariant over the transitions since `t0`:
    /// each reached the API server (the server's status of that condition
    /// was the new one at some time between the transition and the next one
    /// of the same condition), unless the server was unreachable then (the
    /// journal has it); and each change of a condition the server saw is a
    /// transition in the journal.
    fn lost(
        &self,
        transitions: &[Transition],
        outages: &[(SystemTime, SystemTime)],
        t0: SystemTime,
    ) -> Vec<String> {
        let writes = self.api.status_writes();
        let slack = Duration::from_secs(2);
        let mut problems = Vec::new();
        // The server's status of `kind` after each write: (when, status).
        let timeline = |kind: &str| -> Vec<(SystemTime, String)> {
            writes
                .iter()
                .filter_map(|(at, c)| Some((*at, c.get(kind)?.clone())))
                .collect()
        };
        for (i, t) in transitions.iter().enumerate() {
            let in_outage = outages
                .iter()
                .any(|(a, b)| t.at + slack >= *a && t.at <= *b);
            if in_outage {
                continue;
            }
            let next = transitions[i + 1..]
                .iter()
                .find(|n| n.condition == t.condition)
                .map_or(SystemTime::now(), |n| n.at + slack);
            let line = timeline(&t.condition);
            let held_before = line
                .iter()
                .rev()
                .find(|(at, _)| *at <= t.at)
                .is_some_and(|(_, s)| *s == t.to);
            let written = line
                .iter()
                .any(|(at, s)| *at + slack >= t.at && *at <= next && *s == t.to);
            if !held_before && !written {
                problems.push(format!(
                    "lost: {} → {} at {:.1} never reached the API server",
                    t.condition,
                    t.to,
                    epoch_s(t.at)
                ));
            }
        }
        let all = self.transitions(t0 - Duration::from_secs(3600));
        for kind in ConditionType::ALL {
            let line = timeline(kind.as_str());
            for w in line.windows(2) {
                let ((prev_at, prev), (at, now)) = (&w[0], &w[1]);
                if prev == now || *at < t0 {
                    continue;
                }
                let journaled = all.iter().any(|t| {
                    t.condition == kind.as_str()
                        && t.to == *now
                        && t.at + slack >= *prev_at
                        && t.at <= *at + slack
                });
                if !journaled {
                    problems.push(format!(
                        "the server saw {kind} {prev} → {now} at {:.1}, the journal has no such transition",
                        epoch_s(*at)
                    ));
                }
            }
        }
        problems
    }

    fn table(&self) -> String {
        let mut out = format!(
            "{:<26} {:<8} {:>10} {:>8} {:>11}  {}\n",
            "FAULT", "RESULT", "RECOVERED", "RESTARTS", "TRANSITIONS", "NOTES"
        );
        for r in &self.rows {
            let result = if r.problems.is_empty() {
                "ok"
            } else {
                "FAILED"
            };
            let recovered = r
                .recovered
                .map_or("-".into(), |d| format!("{:.1} s", d.as_secs_f64()));
            let notes = [r.note.clone(), r.problems.join("; ")]
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join("; ");
            out.push_str(&format!(
                "{:<26} {:<8} {:>10} {:>8} {:>11}  {}\n",
                r.fault, result, recovered, r.restarts, r.transitions, notes
            ));
        }
        out
    }

    fn failed(&self) -> bool {
        self.rows.iter().any(|r| !r.problems.is_empty())
    }

    /// The agent's process as the host sees it (for its memory cgroup).
    fn host_pid(&self) -> Option<u32> {
        let inner: u32 = self.main_pid().parse().ok()?;
        let ns = std::fs::read_link(format!("/proc/{}/ns/pid", self.m.leader)).ok()?;
        std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            if std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()? != ns {
                return None;
            }
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let nspid = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
            (nspid.split_whitespace().last()?.parse::<u32>().ok()? == inner).then_some(pid)
        })
    }

    /// (RSS kB, open fds) of the agent.
    fn sample(&self) -> Option<(u64, u64)> {
        let pid = self.main_pid();
        let out = self.m.sh(&format!(
            "grep VmRSS /proc/{pid}/status | tr -dc 0-9; echo; ls /proc/{pid}/fd | wc -l"
        ));
        let mut lines = out.lines();
        Some((
            lines.next()?.trim().parse().ok()?,
            lines.next()?.trim().parse().ok()?,
        ))
    }

    fn metric(&self, name: &str) -> f64 {
        self.m
            .sh("curl -sf http://127.0.0.1:9810/metrics")
            .lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

// ---------------------------------------------------------------------------
// The faults. Each applies its fault, notes what the server showed during it,
// and undoes it; `Soak::fault` checks the invariants after.
// ---------------------------------------------------------------------------

/// The API server is unreachable while the GPU goes bad; once it is back the
/// agent's current state must reach it within 30 s, then the GPU recovers.
fn outage_with_a_transition(
    s: &mut Soak,
    o: &mut Outcome,
    begin: impl FnOnce(&mut Soak),
    end: impl FnOnce(&mut Soak),
    hold: Duration,
) {
    let start = SystemTime::now();
    begin(s);
    std::thread::sleep(Duration::from_secs(2));
    s.gpu(GPU_BAD);
    std::thread::sleep(hold);
    end(s);
    o.outages.push((start, SystemTime::now()));
    match s.wait_status(ConditionType::GPUHealthy, "False", RECOVERY) {
        Some(d) => o.notes.push(format!(
            "GPUHealthy=False (changed during the outage) on the server {:.1} s after it",
            d.as_secs_f64()
        )),
        None => o.problems.push(format!(
            "the GPU change made during the outage did not reach the server within {RECOVERY:?}"
        )),
    }
    s.gpu(GPU_GOOD);
    let failed = s.m.sh(&format!(
        "journalctl -u {UNIT} --no-pager --since @{} | grep -c 'reporting failed' || true",
        epoch_s(start) as u64
    ));
    o.notes
        .push(format!("{} \"reporting failed\" lines", failed.trim()));
}

fn apiserver_killed(s: &mut Soak) -> Outcome {
    let mut o = Outcome::default();
    outage_with_a_transition(
        s,
        &mut o,
        |s| s.api.kill(),
        |s| s.api.start(false),
        Duration::from_secs(8),
    );
    o
}

fn storm_429(s: &mut Soak) -> Outcome {
    let mut o = Outcome::default();
    let since = SystemTime::now();
    outage_with_a_transition(
        s,
        &mut o,
        |s| assert_eq!(s.api.control("fault 429 1").as_deref(), Some("ok")),
        |s| assert_eq!(s.api.control("fault none").as_deref(), Some("ok")),
        Duration::from_secs(12),
    );
    o.notes
        .push(format!("{} answered 429", s.api.answered(429, since)));
    o
}

fn tls_wrong_ca(s: &mut Soak) -> Outcome {
    let mut o = Outcome::default();
    let since = SystemTime::now();
    outage_with_a_transition(
        s,
        &mut o,
        |s| {
            s.api.kill();
            s.api.start(true);
        },
        |s| {
            s.api.kill();
            s.api.start(false);
        },
        Duration::from_secs(8),
    );
    let journal = s.m.sh(&format!(
        "journalctl -u {UNIT} --no-pager --since @{} | grep -i -m1 -o 'certificate[^;]*' || true",
        epoch_s(since) as u64
    ));
    o.notes.push(format!("journal: {}", journal.trim()));
    o
}

fn root_renamed(s: &mut Soak) -> Outcome {
    let mut o = Outcome::default();
    s.m.sh(&format!("mv {ROOT} {ROOT}.moved"));
    std::thread::sleep(Duration::from_secs(3));
    o.notes.push(format!(
        "during: {}",
        s.condition(ConditionType::SeccompProfilesReady)
    ));
    s.m.sh(&format!("mv {ROOT}.moved {ROOT}"));
    o
}

fn root_symlink(s: &mut Soak) -> Outcome {
    let mut o = Outcome::default();
    s.m.sh(&format!(
        "mv {ROOT} {ROOT}.real && ln -s seccomp.real {ROOT}"
    ));
    std::thread::sleep(Duration::from_secs(3));
    let during = s.condition(ConditionType::SeccompProfilesReady);
    // The kubelet and containerd follow the link: the profile is as usable as before.
    if !during.starts_with("True") {
        o.problems
            .push(format!("a symlinked root is judged: {during}"));
    }
    o.notes.push(format!("during: {during}"));
    s.m.sh(&format!("rm {ROOT} && mv {ROOT}.real {ROOT}"));
    o
}

fn root_mounted_over(s: &mut Soak) -> Outcome {
    let mut o = Outcome::default();
    s.m.sh(&format!(
        "mkdir -p /tmp/over && echo '{BAD_PROFILE}' > /tmp/over/bad.json && mount --bind /tmp/over {ROOT}"
    ));
    match s.wait_status(
        ConditionType::SeccompProfilesReady,
        "False",
        Duration::from_secs(10),
    ) {
        Some(d) => o.notes.push(format!(
            "the covering directory's bad profile seen in {:.1} s",
            d.as_secs_f64()
        )),
        None => o.problems.push(format!(
            "the covering directory's bad profile not seen within 10 s: {}",
            s.condition(ConditionType::SeccompProfilesReady)
        )),
    }
    s.m.sh(&format!("umount {ROOT}"));
    o
}

fn root_unreadable(s: &mut Soak) -> Outcome {
    let mut o = Outcome::default();
    s.m.sh(&format!("chmod 000 {ROOT}"));
    match s.wait_status(
        ConditionType::SeccompProfilesReady,
        "False",
        Duration::from_secs(10),
    ) {
        Some(_) => o.notes.push(format!(
            "during: {}",
            s.condition(ConditionType::SeccompProfilesReady)
        )),
        None => o.problems.push(format!(
            "an unreadable root not reported within 10 s: {}",
            s.condition(ConditionType::SeccompProfilesReady)
        )),
    }
    s.m.sh(&format!("chmod 755 {ROOT}"));
    o
}

fn root_filled_and_emptied(s: &mut Soak) -> Outcome {
    let mut o = Outcome::default();
    let root = s.croot.join(ROOT.trim_start_matches('/'));
    let profile = std::fs::read(root.join("default.json")).unwrap();
    let start = Instant::now();
    for i in 0..10_000 {
        std::fs::write(root.join(format!("p{i:05}.json")), &profile).unwrap();
    }
    let written = start.elapsed();
    let deadline = Instant::now() + Duration::from_secs(300);
    let seen = loop {
        let (_, _, message) = s
            .api
            .conditions()
            .get("SeccompProfilesReady")
            .cloned()
            .unwrap_or_default();
        if message.starts_with("10001 profiles") {
            break Some(start.elapsed());
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    match seen {
        Some(d) => o.notes.push(format!(
            "10,000 written in {:.1} s, all judged on the server {:.1} s after the first",
            written.as_secs_f64(),
            d.as_secs_f64()
        )),
        None => o.problems.push(format!(
            "10,001 profiles not judged within 300 s: {}",
            s.condition(ConditionType::SeccompProfilesReady)
        )),
    }
    if let Some((rss, fds)) = s.sample() {
        o.notes
            .push(format!("RSS {} MiB, {fds} fds when full", rss / 1024));
    }
    let start = Instant::now();
    for i in 0..10_000 {
        std::fs::remove_file(root.join(format!("p{i:05}.json"))).unwrap();
    }
    // A change re-lints the whole root: the lint that was running when the
    // files went may have to end first.
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let (_, _, message) = s
            .api
            .conditions()
            .get("SeccompProfilesReady")
            .cloned()
            .unwrap_or_default();
        if message.starts_with("1 profile ") {
            o.notes.push(format!(
                "emptied: seen in {:.1} s",
                start.elapsed().as_secs_f64()
            ));
            break;
        }
        if Instant::now() > deadline {
            o.problems
                .push(format!("emptied root not seen within 300 s: {message}"));
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    o
}

fn gpu_flapping(s: &mut Soak) -> Outcome {
    let mut o = Outcome::default();
    // Each state held for two probe intervals (gpu-interval-s = 1).
    for _ in 0..6 {
        s.gpu(GPU_BAD);
        std::thread::sleep(Duration::from_secs(2));
        s.gpu(GPU_GOOD);
        std::thread::sleep(Duration::from_secs(2));
    }
    o.notes.push("6 bad/good flaps, 2 s each".into());
    o
}

fn sighup_storm(s: &mut Soak) -> Outcome {
    let mut o = Outcome::default();
    let since = SystemTime::now();
    let reloads = s.metric("nodeproof_config_reloads_total");
    // 100 reloads in 10 s; every tenth with a config that does not parse.
    let out = s.m.sh(
        "P=$(systemctl show -p MainPID --value nodeproof.service); cd /etc/nodeproof; cp -p config.toml config.good; \
         for i in $(seq 1 100); do \
           if [ $((i % 10)) = 0 ]; then cp config.bad config.toml; kill -HUP $P; sleep 0.05; cp config.good config.toml; \
           else kill -HUP $P; fi; sleep 0.1; done; echo sent",
    );
    if !out.contains("sent") {
        o.problems.push(format!("the storm did not run: {out}"));
    }
    std::thread::sleep(Duration::from_secs(2));
    let journal = s.m.sh(&format!(
        "journalctl -u {UNIT} --no-pager --since @{}",
        epoch_s(since) as u64
    ));
    let refused = journal.matches("reload refused").count();
    let accepted = s.metric("nodeproof_config_reloads_total") - reloads;
    o.notes.push(format!(
        "100 SIGHUPs: {accepted} reloads, {refused} refused "
    ));
    if refused == 0 {
        o.problems.push("no bad config was refused".into());
    }
    o
}

fn sigstop_watchdog(s: &mut Soak) -> Outcome {
    let mut o = Outcome::default();
    let pid = s.main_pid();
    let since = SystemTime::now();
    s.m.sh(&format!("kill -STOP {pid}"));
    let start = Instant::now();
    loop {
        let now = s.main_pid();
        if now != pid && now != "0" && show(&s.m, UNIT, "ActiveState") == "active" {
            break;
        }
        if start.elapsed() > Duration::from_secs(60) {
            o.problems.push("no watchdog restart within 60 s".into());
            s.m.sh(&format!("kill -CONT {pid}"));
            return o;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let journal = s.m.sh(&format!(
        "journalctl -u {UNIT} --no-pager --since @{}",
        epoch_s(since) as u64
    ));
    if !journal.contains("Watchdog timeout") {
        o.problems.push("restarted, but not by the watchdog".into());
    }
    o.notes.push(format!(
        "restarted by the watchdog {:.1} s after SIGSTOP (WatchdogSec=10)",
        start.elapsed().as_secs_f64()
    ));
    o
}

/// `MemoryMax=` through the container's systemd; where the host's memory
/// controller is cgroup v1 (read-only in the container, so the property is
/// not enforced), the same limit as a v1 memory cgroup the host puts the
/// agent in. Profile churn runs under it.
fn memory_tight(s: &mut Soak) -> Outcome {
    let mut o = Outcome::default();
    let Some((rss, _)) = s.sample() else {
        o.problems.push("no RSS sample".into());
        return o;
    };
    // Tight: 8 MiB above what it uses now.
    let limit = (rss + 8 * 1024) * 1024;
    s.m.sh(&format!(
        "systemctl set-property --runtime {UNIT} MemoryMax={limit}"
    ));
    let enforced =
        s.m.sh("cat /sys/fs/cgroup/system.slice/nodeproof.service/memory.max 2>/dev/null");
    let mut v1 = None;
    if enforced.trim().is_empty() {
        let v1root = Path::new("/sys/fs/cgroup/memory");
        if let (Some(pid), true) = (s.host_pid(), v1root.join("cgroup.procs").exists()) {
            let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .unwrap_or_default()
                .lines()
                .find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_string()))
                .unwrap_or_else(|| "/".into());
            let cg = v1root.join(format!("nodeproof-soak-{pid}"));
            std::fs::create_dir_all(&cg).unwrap();
            // v1 charges what the agent allocates from the move on (its
            // older pages stay with the old cgroup; move_charge_at_immigrate
            // is refused by this kernel): 8 MiB more is all it gets.
            std::fs::write(cg.join("cgroup.procs"), pid.to_string()).unwrap();
            let used: u64 = std::fs::read_to_string(cg.join("memory.usage_in_bytes"))
                .unwrap_or_default()
                .trim()
                .parse()
                .unwrap_or(0);
            std::fs::write(
                cg.join("memory.limit_in_bytes"),
                (used + (8 << 20)).to_string(),
            )
            .unwrap();
            v1 = Some((pid, cg, v1root.join(own.trim_start_matches('/'))));
            o.notes.push(format!(
                "MemoryMax={} MiB set; enforced as a host cgroup v1 limit of 8 MiB more than charged at the move (v1 host: read-only in the container)",
                limit >> 20
            ));
        } else {
            o.notes
                .push("MemoryMax= set; not enforced here (no writable memory controller)".into());
        }
    } else {
        o.notes
            .push(format!("MemoryMax={} MiB (RSS + 8 MiB)", limit >> 20));
    }
    let root = s.croot.join(ROOT.trim_start_matches('/'));
    let profile = std::fs::read(root.join("default.json")).unwrap();
    for round in 0..5 {
        for i in 0..300 {
            std::fs::write(root.join(format!("m{round}-{i:03}.json")), &profile).unwrap();
        }
        std::thread::sleep(Duration::from_secs(2));
        for i in 0..300 {
            let _ = std::fs::remove_file(root.join(format!("m{round}-{i:03}.json")));
        }
    }
    if let Some((pid, cg, own)) = v1 {
        let read = |f: &str| std::fs::read_to_string(cg.join(f)).unwrap_or_default();
        o.notes.push(format!(
            "limit hit {} times, peak {} MiB",
            read("memory.failcnt").trim(),
            read("memory.max_usage_in_bytes")
                .trim()
                .parse::<u64>()
                .unwrap_or(0)
                >> 20
        ));
        let _ = std::fs::write(own.join("cgroup.procs"), pid.to_string());
        let _ = std::fs::write(cg.join("memory.limit_in_bytes"), "-1");
        let _ = std::fs::remove_dir(&cg);
    }
    s.m.sh(&format!(
        "systemctl set-property --runtime {UNIT} MemoryMax=infinity"
    ));
    o
}

fn state_dir_full(s: &mut Soak) -> Outcome {
    let mut o = Outcome::default();
    let out = s.m.sh(
        "mount -t tmpfs -o size=64k,mode=0750 tmpfs /var/lib/nodeproof && chown nodeproof:nodeproof /var/lib/nodeproof \
         && (dd if=/dev/zero of=/var/lib/nodeproof/fill bs=4k 2>&1 | tail -1; true) && df -k /var/lib/nodeproof | tail -1 \
         && systemctl restart nodeproof.service && systemctl is-active nodeproof.service",
    );
    if !out.trim_end().ends_with("active") {
        o.problems
            .push(format!("not active on a full state directory: {out}"));
    }
    o.notes
        .push("restarted with the state directory a full 64 KiB tmpfs".into());
    std::thread::sleep(Duration::from_secs(3));
    s.m.sh("umount /var/lib/nodeproof");
    o
}

/// Debian's libfaketime for threaded programs (package `libfaketime`,
/// pulled in by `faketime`).
const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
/// The agent's clock offset, read by libfaketime on every call.
const FAKETIME_FILE: &str = "/etc/nodeproof/faketime";

/// `lastHeartbeatTime` of every successful status PATCH since `since`:
/// (when the server took it, the heartbeat the agent stamped).
fn heartbeats(s: &Soak, since: SystemTime) -> Vec<(SystemTime, SystemTime)> {
    s.api
        .status_patches()
        .filter(|l| l.at >= since)
        .filter_map(|l| {
            let hb = l.body["status"]["conditions"][0]["lastHeartbeatTime"].as_str()?;
            Some((l.at, humantime::parse_rfc3339_weak(hb).ok()?))
        })
        .collect()
}

/// The first status write after `since` stamped `offset_s` away from the
/// real time (± 5 min), within `within`.
fn stamped(s: &Soak, since: SystemTime, offset_s: i64, within: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < within {
        let hit = heartbeats(s, since).into_iter().any(|(at, hb)| {
            let skew = epoch_s(hb) - epoch_s(at) - offset_s as f64;
            skew.abs() < 300.0
        });
        if hit {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    None
}

/// The agent's wall clock stepped, as an NTP step or a VM restored from a
/// snapshot steps it. CLOCK_REALTIME is not namespaced (time namespaces
/// cover MONOTONIC and BOOTTIME only), so the agent's own `clock_gettime`
/// goes through libfaketime (LD_PRELOAD in a drop-in; the offset re-read
/// on every call; the monotonic clock untouched). An hour forward, then two
/// back: after each step the heartbeat is written at once with the new time,
/// and a GPU fault made then reaches the server; then the clock is set right.
fn clock_jumps(s: &mut Soak) -> Outcome {
    let mut o = Outcome::default();
    let lib = s.croot.join(FAKETIME_LIB.trim_start_matches('/'));
    std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
    std::fs::copy(FAKETIME_LIB, &lib).unwrap();
    let offset = |s: &Soak, v: &str| {
        s.m.sh(&format!("echo '{v}' > {FAKETIME_FILE}.new && chmod 644 {FAKETIME_FILE}.new && mv {FAKETIME_FILE}.new {FAKETIME_FILE}"));
    };
    offset(s, "+0");
    let out = s.m.sh(&format!(
        "mkdir -p /etc/systemd/system/{UNIT}.d && printf '[Service]\nEnvironment=LD_PRELOAD={FAKETIME_LIB} FAKETIME_TIMESTAMP_FILE={FAKETIME_FILE} FAKETIME_NO_CACHE=1 FAKETIME_DONT_FAKE_MONOTONIC=1\n' \
         > /etc/systemd/system/{UNIT}.d/faketime.conf && systemctl daemon-reload && systemctl restart {UNIT} && systemctl is-active {UNIT}"
    ));
    if out.trim() != "active" {
        o.problems
            .push(format!("not active under libfaketime: {out}"));
    }
    let deadline = Instant::now() + RECOVERY;
    while s.conditions() != s.baseline && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    for (step, offset_s) in [("an hour forward", 3600i64), ("two hours back", -3600)] {
        let since = SystemTime::now();
        offset(s, &format!("{offset_s:+}"));
        // No condition changes: only the heartbeat can write now.
        match stamped(s, since, offset_s, Duration::from_secs(10)) {
            Some(d) => o.notes.push(format!(
                "{step}: heartbeat with the new time {:.1} s after the step",
                d.as_secs_f64()
            )),
            None => o.problems.push(format!(
                "{step}: no heartbeat stamped with the new time within 10 s (heartbeat-s = 60)"
            )),
        }
        let bad = SystemTime::now();
        s.gpu(GPU_BAD);
        match s.wait_status(ConditionType::GPUHealthy, "False", RECOVERY) {
            Some(d) => o.notes.push(format!(
                "{step}: a GPU fault on the server {:.1} s after it",
                d.as_secs_f64()
            )),
            None => o
                .problems
                .push(format!("{step}: a GPU fault did not reach the server")),
        }
        s.gpu(GPU_GOOD);
        if s.wait_status(ConditionType::GPUHealthy, "True", RECOVERY)
            .is_none()
        {
            o.problems.push(format!(
                "{step}: the GPU's recovery did not reach the server"
            ));
        }
        if heartbeats(s, bad).is_empty() {
            o.problems
                .push(format!("{step}: no status write after the step"));
        }
    }
    offset(s, "+0");
    s.m.sh(&format!(
        "rm /etc/systemd/system/{UNIT}.d/faketime.conf {FAKETIME_FILE} && systemctl daemon-reload && systemctl restart {UNIT}"
    ));
    o
}

#[test]
fn faults_each_once() {
    // libfaketime for the clock jumps: `faketime` depends on it.
    let needs: Vec<Need> = BOOT
        .iter()
        .copied()
        .chain([Need::Tool("faketime")])
        .collect();
    let Some(_) = require(&needs) else {
        return;
    };
    let mut s = Soak::setup();
    s.fault("apiserver-killed", 0, apiserver_killed);
    s.fault("apiserver-429-storm", 0, storm_429);
    s.fault("apiserver-wrong-ca", 0, tls_wrong_ca);
    s.fault("root-renamed", 0, root_renamed);
    s.fault("root-symlink", 0, root_symlink);
    s.fault("root-mounted-over", 0, root_mounted_over);
    s.fault("root-unreadable", 0, root_unreadable);
    s.fault("root-10000-profiles", 0, root_filled_and_emptied);
    s.fault("gpu-flapping", 0, gpu_flapping);
    s.fault("sighup-storm", 0, sighup_storm);
    s.fault("sigstop-watchdog", 1, sigstop_watchdog);
    // An OOM kill is one restart, never a loop.
    s.fault("memory-max-tight", 1, memory_tight);
    s.fault("state-dir-full", 0, state_dir_full);
    s.fault("clock-jumps", 0, clock_jumps);
    let table = s.table();
    eprintln!("\n{table}");
    assert!(!s.failed(), "{table}");
}

/// A process in the container denied `uname` by a seccomp filter (systemd's
/// SystemCallFilter=, loaded by the kernel like any profile) twice a second.
const DENIER: &str =
    "systemd-run --unit=np-denier -p SystemCallFilter=~uname -p SystemCallErrorNumber=EPERM \
     /bin/sh -c 'while :; do uname >/dev/null 2>&1; sleep 0.5; done'";

/// Least-squares slope of (seconds, value), per hour.
fn per_hour(samples: &[(f64, f64)]) -> f64 {
    let n = samples.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let mx = samples.iter().map(|s| s.0).sum::<f64>() / n;
    let my = samples.iter().map(|s| s.1).sum::<f64>() / n;
    let sxy: f64 = samples.iter().map(|s| (s.0 - mx) * (s.1 - my)).sum();
    let sxx: f64 = samples.iter().map(|s| (s.0 - mx).powi(2)).sum();
    if sxx == 0.0 {
        0.0
    } else {
        sxy / sxx * 3600.0
    }
}

#[test]
#[ignore = "minutes long: scripts/soak.sh runs it"]
fn soak() {
    let Some(_) = require(BOOT) else {
        return;
    };
    let minutes: u64 = std::env::var("NODEPROOF_SOAK_MINUTES")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(30);
    let s = Soak::setup();
    let out = s.m.sh(&format!("{DENIER} 2>&1"));
    eprintln!("denier: {}", out.trim());
    let denials_start = s.metric("nodeproof_seccomp_denials_total");
    let t0 = SystemTime::now();
    let before = s.restarts();
    let start = Instant::now();
    let root = s.croot.join(ROOT.trim_start_matches('/'));
    let profile = std::fs::read(root.join("default.json")).unwrap();
    let (mut rss, mut fds) = (Vec::new(), Vec::new());
    let mut tick = 0u64;
    while start.elapsed() < Duration::from_secs(minutes * 60) {
        // Sampled first: every 10 s on the dot, whatever the churn takes.
        if let Some((r, f)) = s.sample() {
            let t = start.elapsed().as_secs_f64();
            rss.push((t, r as f64));
            fds.push((t, f as f64));
        }
        // Profile churn: one profile flips good/bad, 50 come and go.
        let churn = root.join("churn.json");
        if tick.is_multiple_of(2) {
            std::fs::write(&churn, BAD_PROFILE).unwrap();
            for i in 0..50 {
                std::fs::write(root.join(format!("c{i:02}.json")), &profile).unwrap();
            }
        } else {
            std::fs::write(&churn, &profile).unwrap();
            for i in 0..50 {
                let _ = std::fs::remove_file(root.join(format!("c{i:02}.json")));
            }
        }
        // GPU flaps: bad for 5 s of every 30.
        if tick.is_multiple_of(3) {
            s.gpu(GPU_BAD);
            std::thread::sleep(Duration::from_secs(5));
            s.gpu(GPU_GOOD);
        }
        tick += 1;
        let next = Duration::from_secs(10 * tick);
        if let Some(wait) = next.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    std::fs::write(root.join("churn.json"), &profile).unwrap();
    for i in 0..50 {
        let _ = std::fs::remove_file(root.join(format!("c{i:02}.json")));
    }
    let _ = std::fs::remove_file(root.join("churn.json"));
    s.gpu(GPU_GOOD);
    let denials = s.metric("nodeproof_seccomp_denials_total") - denials_start;
    // The invariants over the whole run.
    let mut problems = Vec::new();
    let deadline = Instant::now() + RECOVERY;
    while s.conditions() != s.baseline {
        if Instant::now() > deadline {
            problems.push(format!("not back to the baseline: {:?}", s.conditions()));
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    std::thread::sleep(Duration::from_secs(1));
    let restarts = s.restarts() - before;
    if restarts > 0 {
        problems.push(format!("{restarts} automatic restarts"));
    }
    let transitions = s.transitions(t0);
    problems.extend(s.lost(&transitions, &[], t0));
    let figures = |name: &str, unit: &str, v: &[(f64, f64)]| {
        let max = v.iter().map(|s| s.1).fold(0.0, f64::max);
        format!(
            "{name}: start {:.0} {unit}, max {max:.0} {unit}, end {:.0} {unit}, growth {:+.1} {unit}/h (least squares over {} samples)",
            v.first().map_or(0.0, |s| s.1),
            v.last().map_or(0.0, |s| s.1),
            per_hour(v),
            v.len()
        )
    };
    eprintln!(
        "\nsoak: {minutes} min, {} transitions, {denials} denials traced, {restarts} restarts\n{}\n{}",
        transitions.len(),
        figures("RSS", "kB", &rss),
        figures("open fds", "fds", &fds)
    );
    eprintln!("samples (s, RSS kB, fds):");
    for ((t, r), (_, f)) in rss.iter().zip(&fds) {
        eprintln!("{t:.0} {r:.0} {f:.0}");
    }
    assert!(problems.is_empty(), "{problems:#?}");
}
