//! The agent (`nodeproof run`, the real binary) with the pods watcher,
//! against the test API server: the pods' references folded into the one
//! `SeccompProfilesReady` condition, their Warning Events, and (root) real
//! denials traced by the agent's own tracer thread, resolved to the pod and
//! reported as one aggregated `SeccompDenied` Event.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use support::agent::{good_profile, reporting_config, seccomp_root, Agent};
use support::apiserver::{Fault, Identity, TestApiServer};
use support::cgroup::{deny_mkdir_in, traceable_kubepods};

const DEADLINE: Duration = Duration::from_secs(5);

/// Polls until `f` holds; returns how long it took.
fn within(what: &str, limit: Duration, agent: &Agent, f: impl Fn() -> bool) -> Duration {
    agent.within(what, limit, f)
}

/// A metric without labels, as `/metrics` says it now.
fn counter(agent: &Agent, name: &str) -> f64 {
    let (_, metrics) = agent.get("/metrics");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {metrics}"))
}

fn pod_events(server: &TestApiServer, reason: &str) -> Vec<Value> {
    server
        .events()
        .into_iter()
        .filter(|e| e["involvedObject"]["kind"] == "Pod" && e["reason"] == reason)
        .collect()
}

/// A node identity, its Node, a seccomp root with one good profile, and
/// the agent's config (report to the test server as node n1).
fn setup(dir: &Path) -> (TestApiServer, String) {
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node("n1", json!([]));
    let root = seccomp_root(dir, true);
    let kubeconfig = server.kubeconfig(dir, "node-n1");
    // One agent, not a fleet: no start spread (the daemon's default waits
    // 0..30 s before its first request), so the test's limits stay seconds.
    let config = reporting_config(&root, &kubeconfig);
    (server, config)
}

fn vllm_pod(uid: &str, container_id: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "vllm-0", "namespace": "ml", "uid": uid},
        "spec": {"nodeName": "n1", "containers": [{"name": "vllm", "securityContext": {"seccompProfile":
            {"type": "Localhost", "localhostProfile": "profiles/vllm-strict.json"}}}]},
        "status": {"containerStatuses": [{"name": "vllm", "containerID": format!("containerd://{container_id}"),
            "image": "vllm", "imageID": "", "ready": false, "restartCount": 0}]}})
}

#[test]
fn the_agent_folds_pod_references_into_one_condition() {
    let dir = tempfile::tempdir().unwrap();
    let (server, config) = setup(dir.path());
    let root = dir.path().join("seccomp");
    let mut agent = Agent::start(dir.path(), &config);
    let t = agent.wait_ready(Duration::from_secs(30));
    eprintln!("FIGURE agent ready: {t:?}");
    let cond = || server.condition("n1", "SeccompProfilesReady");
    within("True, pods listed", Duration::from_secs(10), &agent, || {
        cond().is_some_and(|c| c["status"] == "True")
            && agent.get("/healthz/pods").1.contains("pods 0 watched")
    });

    // A pod bound here references a file that is not on this node.
    server.put("pods", vllm_pod("uid-vllm-0", &"ab".repeat(32)));
    let t = within("ProfileMissing + one Event", DEADLINE, &agent, || {
        cond().is_some_and(|c| c["status"] == "False" && c["reason"] == "ProfileMissing")
            && pod_events(&server, "SeccompProfileMissing").len() == 1
    });
    eprintln!("FIGURE agent: pod bound → ProfileMissing + Event: {t:?}");
    let c = cond().unwrap();
    let msg = c["message"].as_str().unwrap();
    assert!(
        msg.contains(
            "ml/vllm-0 container vllm: profile localhost/profiles/vllm-strict.json not found"
        ),
        "{msg}"
    );
    let e = &pod_events(&server, "SeccompProfileMissing")[0];
    assert_eq!(e["type"], "Warning");
    assert_eq!(e["involvedObject"]["name"], "vllm-0");
    assert_eq!(e["involvedObject"]["uid"], "uid-vllm-0");
    // One condition, not one per check.
    let (_, metrics) = agent.get("/metrics");
    assert_eq!(
        metrics
            .lines()
            .filter(|l| l.starts_with("nodeproof_condition{condition=\"SeccompProfilesReady\""))
            .count(),
        3,
        "{metrics}"
    );
    assert!(
        metrics
            .contains("nodeproof_condition{condition=\"SeccompProfilesReady\",status=\"False\"} 1"),
        "{metrics}"
    );
    assert!(
        agent
            .get("/healthz/pods")
            .1
            .contains("pods 1 watched, 1 with unusable profiles"),
        "{}",
        agent.get("/healthz/pods").1
    );

    // The file appears (renamed in, as one edit): the profile lint wakes
    // the pods watcher, whose judge finds the lint's report of the file.
    let lints_before = counter(&agent, "nodeproof_profile_lints_total");
    let patches_before = server.count_ok("PATCH", "/nodes/n1/status");
    let rounds_before = counter(&agent, "nodeproof_profile_revalidations_total");
    let staged = dir.path().join("vllm-strict.json");
    std::fs::write(&staged, good_profile()).unwrap();
    std::fs::rename(&staged, root.join("profiles/vllm-strict.json")).unwrap();
    let t = within("True again", DEADLINE, &agent, || {
        cond().is_some_and(|c| c["status"] == "True")
            && counter(&agent, "nodeproof_profile_revalidations_total") > rounds_before
    });
    eprintln!("FIGURE agent: profile file created → True: {t:?}");
    // One edit, one lint: the profiles check and the pods' judge share it
    // (both judge the file in the node's default mode), and a later round
    // of either answers from the cache.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        counter(&agent, "nodeproof_profile_lints_total") - lints_before,
        1.0,
        "{}",
        agent.get("/metrics").1
    );
    assert_eq!(
        server.count_ok("PATCH", "/nodes/n1/status") - patches_before,
        1,
        "{}",
        agent.log_text()
    );

    // The node's own files are still judged: a broken one turns it False too.
    break_profile(&root);
    within("False from the files", DEADLINE, &agent, || {
        cond().is_some_and(|c| {
            c["status"] == "False" && c["message"].as_str().unwrap().contains("broken.json")
        })
    });
    std::fs::remove_file(root.join("broken.json")).unwrap();
    within("True once more", DEADLINE, &agent, || {
        cond().is_some_and(|c| c["status"] == "True")
    });

    // Said once: the problem's Event was not repeated by later rounds.
    assert_eq!(pod_events(&server, "SeccompProfileMissing").len(), 1);
    assert_eq!(pod_events(&server, "SeccompProfileMissing")[0]["count"], 1);
    // Every pod list/watch carried the node's field selector.
    assert!(server
        .log()
        .iter()
        .filter(|l| l.path == "/api/v1/pods")
        .all(|l| l.status == 200 && l.query.contains("fieldSelector=spec.nodeName")));
    assert!(agent.stop(), "{}", agent.log_text());
}

/// One profile edit walks each module once (docs/architecture.md): the
/// profiles check lints the file, the pods' judge finds that report (no
/// second lint), and the pods' judgement travels in the files' round, so
/// the reporter sees one round and writes one status PATCH, although both
/// halves change the condition (the file, then the pod that uses it).
#[test]
fn one_profile_edit_is_one_lint_one_round_and_one_patch() {
    let dir = tempfile::tempdir().unwrap();
    let (server, config) = setup(dir.path());
    let root = dir.path().join("seccomp");
    let staged = dir.path().join("vllm-strict.json");
    std::fs::write(root.join("profiles/vllm-strict.json"), good_profile()).unwrap();
    let mut agent = Agent::start(dir.path(), &config);
    agent.wait_ready(Duration::from_secs(30));
    server.put("pods", vllm_pod("uid-vllm-0", &"ab".repeat(32)));
    let cond = || server.condition("n1", "SeccompProfilesReady");
    within(
        "True with the pod judged",
        Duration::from_secs(10),
        &agent,
        || {
            cond().is_some_and(|c| c["status"] == "True")
                && agent.get("/healthz/pods").1.contains("pods 1 watched")
        },
    );
    // Settled: the start's rounds are written.
    std::thread::sleep(Duration::from_millis(1500));
    let lints_before = counter(&agent, "nodeproof_profile_lints_total");
    let patches_before = server.count_ok("PATCH", "/nodes/n1/status");

    std::fs::write(&staged, "{\"defaultAction\": \"SCMP_ACT_NOPE\"}").unwrap();
    std::fs::rename(&staged, root.join("profiles/vllm-strict.json")).unwrap();
    let t = within("False, naming the pod", DEADLINE, &agent, || {
        cond().is_some_and(|c| {
            c["status"] == "False" && c["message"].as_str().unwrap().contains("ml/vllm-0")
        })
    });
    eprintln!("FIGURE agent: referenced profile broken → False naming the pod: {t:?}");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        counter(&agent, "nodeproof_profile_lints_total") - lints_before,
        1.0,
        "{}",
        agent.get("/metrics").1
    );
    let patches: Vec<_> = server
        .log()
        .into_iter()
        .filter(|l| l.method == "PATCH" && l.path.ends_with("/nodes/n1/status") && l.status < 300)
        .skip(patches_before)
        .collect();
    assert_eq!(patches.len(), 1, "{patches:#?}\n{}", agent.log_text());
    assert_eq!(pod_events(&server, "SeccompProfileInvalid").len(), 1);
    assert!(agent.stop(), "{}", agent.log_text());
}

/// A real kube-apiserver 1.36 restarted under the agent left a new pod unnamed for 38 s:
/// here the API server is away 25 s under a running agent
/// (every new connection reset, as a stopped kube-apiserver's port; open
/// ones cut), and a pod referencing a missing profile is created as soon as
/// it is back. By then the pods watch's retry delay has grown to 12.8–25.6 s
/// (client-go's reflector schedule), and a write that failed in the outage
/// waits up to 30 s: waiting them out, the pod was named 38 s and 40 s after
/// a real kube-apiserver 1.36 restarted, 31 s after a 20 s outage. The watch
/// waits only until the server answers again (here `/readyz`, asked every
/// 2–3 s while a watch waits), then up to 4 s of jitter (a fleet's relists
/// spread), and its backoff starts over; the reporter's failed write goes
/// within 3 s of the same success. The outage starts while the agent's
/// first writes may still be under way, so one may fail in it.
#[test]
fn a_pod_created_after_an_api_server_restart_is_named_within_seconds() {
    const OUTAGE: Duration = Duration::from_secs(25);
    // Probe 2–3 s, resume jitter up to 4 s, then a list, a judgement and the writes.
    const NAMED_WITHIN: Duration = Duration::from_secs(10);
    let dir = tempfile::tempdir().unwrap();
    let (server, config) = setup(dir.path());
    let mut agent = Agent::start(dir.path(), &config);
    agent.wait_ready(Duration::from_secs(30));
    let cond = || server.condition("n1", "SeccompProfilesReady");
    within(
        "True and pods listed",
        Duration::from_secs(10),
        &agent,
        || {
            cond().is_some_and(|c| c["status"] == "True")
                && agent.get("/healthz/pods").1.contains("pods 0 watched")
        },
    );

    server.set_fault(Fault::Down);
    server.cut_connections();
    // A change the agent must write while the server is away: its write
    // fails and backs off (1 s doubling to 20 s, +0..50 %) through the outage.
    std::thread::sleep(Duration::from_secs(2));
    break_profile(&dir.path().join("seccomp"));
    std::thread::sleep(OUTAGE - Duration::from_secs(2));
    // The status write failed in the outage and is waiting out its backoff.
    let failed_writes = agent.log_text().matches("reporting failed").count();
    assert!(failed_writes >= 1, "{}", agent.log_text());
    // Each failure said once, in nodeproof's words: kube-rs's own lines for
    // the same connection errors (`ERROR kube_client::client::builder:
    // failed with error client error (Connect)`) are not in the log.
    let log = agent.log_text();
    assert!(!log.contains("kube_client"), "{log}");
    server.clear_fault();
    let back = std::time::SystemTime::now();
    server.put("pods", vllm_pod("uid-vllm-0", &"ab".repeat(32)));
    let t = within(
        "the pod named on the Node and in an Event after the restart",
        NAMED_WITHIN,
        &agent,
        || {
            cond().is_some_and(|c| {
                c["status"] == "False"
                    && c["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("ml/vllm-0"))
            }) && pod_events(&server, "SeccompProfileMissing").len() == 1
        },
    );
    eprintln!("FIGURE failed reporter flushes in the outage: {failed_writes}");
    let first_pods_request = server
        .log()
        .iter()
        .filter(|l| l.path == "/api/v1/pods" && l.at >= back)
        .map(|l| l.at.duration_since(back).unwrap_or_default())
        .min();
    eprintln!(
        "FIGURE API server back after {OUTAGE:?} down → pod named: {t:?} (first pods request {first_pods_request:?} after)"
    );
    assert!(agent.stop(), "{}", agent.log_text());
}

/// `/readyz` tells whether the agent can report: not ready while the API
/// server has never answered (a pod whose network does not reach the
/// Service yet, as on a real node), ready once it does, and not ready again
/// when every request has failed for `daemon.readiness-unreachable-s`,
/// saying why; `/healthz` (liveness) stays about the process throughout.
#[test]
fn readyz_fails_while_the_agent_cannot_report_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let (server, config) = setup(dir.path());
    let config = format!("{config}[daemon]\nreadiness-unreachable-s = 3\n");
    server.set_fault(Fault::Down);
    let agent = Agent::start(dir.path(), &config);
    // Once its first check cycle is done (a loaded machine may take seconds),
    // the agent is still not ready: nothing answered.
    within(
        "not ready, the API server not having answered",
        Duration::from_secs(15),
        &agent,
        || {
            let (code, body) = agent.get("/readyz");
            code == 503 && body.starts_with("cannot report: the API server has not answered yet")
        },
    );
    assert_eq!(
        agent.get("/healthz").0,
        200,
        "liveness is about the process"
    );

    server.clear_fault();
    let t = within(
        "ready once the API server answers",
        Duration::from_secs(10),
        &agent,
        || agent.get("/readyz") == (200, "ready: reporting\n".to_string()),
    );
    eprintln!("FIGURE API server up → /readyz 200: {t:?}");

    server.set_fault(Fault::Down);
    server.cut_connections();
    let down = Instant::now();
    let t = within(
        "unready after 3 s of failures",
        Duration::from_secs(15),
        &agent,
        || agent.get("/readyz").0 == 503,
    );
    assert!(
        down.elapsed() >= Duration::from_secs(3),
        "unready after {t:?}: too soon"
    );
    let (_, body) = agent.get("/readyz");
    assert!(
        body.starts_with("cannot report: every ")
            && body.contains("to the API server has failed for"),
        "{body}"
    );
    assert_eq!(
        agent.get("/healthz").0,
        200,
        "liveness is about the process"
    );
    server.clear_fault();
    within("ready again", Duration::from_secs(40), &agent, || {
        agent.get("/readyz").0 == 200
    });
    let mut agent = agent;
    assert!(agent.stop(), "{}", agent.log_text());
}

/// A Node that carries none of nodeproof's conditions (it just joined) gets
/// them at once, not after the start spread: the spread is for a fleet
/// restarted together whose Nodes already carry them. Measured on a real
/// node before: with both cores busy the first condition came 1.4–28.9 s
/// after start (the 30 s spread's draw). Here the spread is 600 s, so a
/// first write that waited for it would come within the limit below in one
/// start of forty.
#[test]
fn a_new_node_gets_its_first_conditions_without_the_start_spread() {
    let dir = tempfile::tempdir().unwrap();
    let (server, config) = setup(dir.path());
    let config = config.replace("start-spread-s = 0", "start-spread-s = 600");
    let t0 = Instant::now();
    let agent = Agent::start(dir.path(), &config);
    within(
        "the first condition on the new Node",
        Duration::from_secs(15),
        &agent,
        || server.condition("n1", "SeccompProfilesReady").is_some(),
    );
    eprintln!(
        "FIGURE start → first condition on a new Node: {:?}",
        t0.elapsed()
    );
    let mut agent = agent;
    assert!(agent.stop(), "{}", agent.log_text());
}

/// A file the linter refuses, in the node's seccomp root.
fn break_profile(root: &Path) {
    std::fs::write(
        root.join("broken.json"),
        "{\"defaultAction\": \"SCMP_ACT_NOPE\"}",
    )
    .unwrap();
}

/// The agent reporting to the test server with `hysteresis` for
/// `SeccompProfilesReady` and a resync every second, once it reported True.
fn reporting_true(dir: &Path, hysteresis: &str) -> (TestApiServer, Agent) {
    let (server, config) = setup(dir);
    let config = format!(
        "{config}[report.hysteresis.SeccompProfilesReady]\n{hysteresis}[daemon]\nprofile-resync-s = 1\n"
    );
    let mut agent = Agent::start(dir, &config);
    agent.wait_ready(Duration::from_secs(30));
    within("True", Duration::from_secs(10), &agent, || {
        server
            .condition("n1", "SeccompProfilesReady")
            .is_some_and(|c| c["status"] == "True")
    });
    (server, agent)
}

/// The reporter's hysteresis counts check results: a profile that stays
/// broken is re-judged by the next resync, and that second bad result (not
/// a change) is what turns the condition False with `to-bad = 2`.
#[test]
fn a_condition_that_stays_bad_crosses_the_hysteresis() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("seccomp");
    let (server, mut agent) = reporting_true(dir.path(), "to-bad = 2\nto-good = 2\n");
    let cond = || server.condition("n1", "SeccompProfilesReady");
    break_profile(&root);
    let t = within("False after two bad results", DEADLINE, &agent, || {
        cond().is_some_and(|c| c["status"] == "False")
    });
    eprintln!("FIGURE broken profile → False with to-bad = 2, resync 1 s: {t:?}");
    std::fs::remove_file(root.join("broken.json")).unwrap();
    within("True after two good results", DEADLINE, &agent, || {
        cond().is_some_and(|c| c["status"] == "True")
    });
    assert!(agent.stop(), "{}", agent.log_text());
}

/// SIGHUP applies a new reporter policy to the running reporter, state
/// kept: a profile broken under `to-bad = 1000` stays reported True, and
/// after a reload with `to-bad = 1` the next bad result turns it False.
#[test]
fn a_reload_changes_the_reporters_hysteresis() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("seccomp");
    let (server, mut agent) = reporting_true(dir.path(), "to-bad = 1000\n");
    let cond = || server.condition("n1", "SeccompProfilesReady");
    break_profile(&root);
    // Several bad results (inotify, then a resync a second) are held back.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(cond().unwrap()["status"], "True", "{}", agent.log_text());

    let path = dir.path().join("config.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("to-bad = 1000"), "{text}");
    std::fs::write(&path, text.replace("to-bad = 1000", "to-bad = 1")).unwrap();
    // SAFETY: a plain kill(2) on our own child.
    unsafe { libc::kill(agent.child.id() as libc::pid_t, libc::SIGHUP) };
    let t = within("False after the reload", DEADLINE, &agent, || {
        cond().is_some_and(|c| c["status"] == "False")
    });
    eprintln!("FIGURE SIGHUP with to-bad = 1 → False: {t:?}");
    assert!(agent.log_text().contains("reporter policy reloaded"));
    assert!(agent.stop(), "{}", agent.log_text());
}

#[test]
fn the_agent_without_credentials_watches_no_pods() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("seccomp");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("default.json"), good_profile()).unwrap();
    let config = format!(
        "[seccomp]\nroot = \"{}\"\n[report]\nnode-name = \"n1\"\nkubeconfig = \"/nonexistent\"\n[gpu]\nnvml-library = \"/nonexistent/libnvidia-ml.so.1\"\n",
        root.display()
    );
    let mut agent = Agent::start(dir.path(), &config);
    agent.wait_ready(Duration::from_secs(30));
    let (code, body) = agent.get("/healthz/profiles");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("SeccompProfilesReady=True"), "{body}");
    assert_eq!(agent.get("/healthz/pods").0, 404);
    assert!(agent.stop(), "{}", agent.log_text());
}

const N: usize = 7;

#[test]
fn the_agents_tracer_reports_real_denials_on_the_pod() {
    let uid = "7c0ffee0-1234-4abc-9def-0000000da3e0";
    let id = "d3".repeat(32);
    let Some(cg) = traceable_kubepods(uid, &id) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (server, config) = setup(dir.path());
    server.put("pods", vllm_pod(uid, &id));
    let mut agent = Agent::start(dir.path(), &config);
    agent.wait_ready(Duration::from_secs(30));
    let (_, tracing) = agent.get("/healthz/tracing");
    assert!(tracing.contains("ok: tracing "), "{tracing}");
    within(
        "the pod is watched",
        Duration::from_secs(10),
        &agent,
        || agent.get("/healthz/pods").1.contains("pods 1 watched"),
    );

    // A process in the pod's container cgroup, under a real filter.
    deny_mkdir_in(&cg, c"np-agent-e2e", N);
    let t = within(
        "a SeccompDenied Event",
        Duration::from_secs(15),
        &agent,
        || !pod_events(&server, "SeccompDenied").is_empty(),
    );
    eprintln!("FIGURE agent: {N} real denials → SeccompDenied Event: {t:?}");
    // Two more reads of the counters (every 5 s) bring nothing new: still one Event.
    std::thread::sleep(Duration::from_secs(11));
    let events = pod_events(&server, "SeccompDenied");
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(e["type"], "Warning");
    assert_eq!(e["count"], 1);
    assert_eq!(e["involvedObject"]["namespace"], "ml");
    assert_eq!(e["involvedObject"]["name"], "vllm-0");
    assert_eq!(e["involvedObject"]["uid"], uid);
    assert_eq!(
        e["message"],
        format!("denied mkdir ×{N} (EPERM) in container vllm, profile localhost/profiles/vllm-strict.json")
    );
    let (_, metrics) = agent.get("/metrics");
    assert!(
        metrics.contains(&format!("nodeproof_pod_seccomp_denials_total{{namespace=\"ml\",pod=\"vllm-0\",container=\"vllm\",syscall=\"mkdir\",action=\"errno\"}} {N}")),
        "{metrics}"
    );
    // An OpenMetrics counter family: described without `_total`.
    assert!(
        metrics.contains("# TYPE nodeproof_pod_seccomp_denials counter\n"),
        "{metrics}"
    );
    assert!(agent.stop(), "{}", agent.log_text());
    drop(cg);
}

/// SIGHUP with another seccomp root in the config: the agent's pods watcher
/// starts over with it, and what it already said is not said again.
#[test]
fn a_reload_restarts_the_pods_watcher_with_the_new_root() {
    let dir = tempfile::tempdir().unwrap();
    let (server, config) = setup(dir.path());
    let root_a = dir.path().join("seccomp");
    std::fs::write(root_a.join("profiles/vllm-strict.json"), good_profile()).unwrap();
    let root_b = dir.path().join("seccomp-b");
    std::fs::create_dir_all(root_b.join("profiles")).unwrap();
    std::fs::write(root_b.join("profiles/good.json"), good_profile()).unwrap();
    server.put("pods", vllm_pod("uid-vllm-0", &"ab".repeat(32)));
    // A pod whose file is on neither root: its Event is said once, before the reload.
    server.put(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "other", "namespace": "ml", "uid": "uid-other"},
            "spec": {"nodeName": "n1", "containers": [{"name": "app", "securityContext": {"seccompProfile":
                {"type": "Localhost", "localhostProfile": "profiles/nope.json"}}}]}}),
    );
    let mut agent = Agent::start(dir.path(), &config);
    agent.wait_ready(Duration::from_secs(30));
    let cond = || server.condition("n1", "SeccompProfilesReady");
    within(
        "other's file missing",
        Duration::from_secs(10),
        &agent,
        || {
            cond().is_some_and(|c| c["reason"] == "ProfileMissing")
                && pod_events(&server, "SeccompProfileMissing").len() == 1
        },
    );
    let c = cond().unwrap();
    let msg = c["message"].as_str().unwrap();
    assert!(!msg.contains("vllm-0"), "{msg}");

    // The config now names root B, where vllm-0's file is not.
    let path = dir.path().join("config.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let a = format!("root = \"{}\"", root_a.display());
    assert!(text.contains(&a), "{text}");
    let b = text.replace(&a, &format!("root = \"{}\"", root_b.display()));
    // SAFETY: a plain kill(2) on our own child.
    let sighup = || unsafe { libc::kill(agent.child.id() as libc::pid_t, libc::SIGHUP) };

    // First root B with credentials that do not exist: said, and the running watcher kept.
    let kubeconfig = dir.path().join("node-n1.kubeconfig");
    let k = format!("kubeconfig = \"{}\"", kubeconfig.display());
    assert!(b.contains(&k), "{b}");
    std::fs::write(
        &path,
        b.replace(&k, "kubeconfig = \"/nonexistent/kubeconfig\""),
    )
    .unwrap();
    sighup();
    within("the unusable reload said", DEADLINE, &agent, || {
        agent
            .log_text()
            .contains("the reloaded settings cannot be used for pods; the watcher keeps the ones it runs with")
    });
    assert!(!agent.log_text().contains("watching the pods again"));
    assert!(!cond().unwrap()["message"]
        .as_str()
        .unwrap()
        .contains("vllm-0"));

    std::fs::write(&path, &b).unwrap();
    let hup = Instant::now();
    sighup();
    within("vllm-0 judged against root B", DEADLINE, &agent, || {
        pod_events(&server, "SeccompProfileMissing")
            .iter()
            .any(|e| e["involvedObject"]["name"] == "vllm-0")
            && cond().is_some_and(|c| c["message"].as_str().unwrap().contains("ml/vllm-0"))
    });
    eprintln!(
        "FIGURE agent: SIGHUP with another seccomp root → its pod judged against it: {:?}",
        hup.elapsed()
    );
    assert!(
        agent
            .log_text()
            .contains("settings changed by a reload; watching the pods again with them"),
        "{}",
        agent.log_text()
    );
    // A later round (a valid pod bound) still has nothing new to say about them.
    let mut late = vllm_pod("uid-late", &"cd".repeat(32));
    late["metadata"]["name"] = json!("late");
    late["spec"]["containers"][0]["securityContext"]["seccompProfile"]["localhostProfile"] =
        json!("profiles/good.json");
    server.put("pods", late);
    within("a round after the restart", DEADLINE, &agent, || {
        agent
            .get("/healthz/pods")
            .1
            .contains("pods 3 watched, 2 with unusable profiles")
    });
    let events = pod_events(&server, "SeccompProfileMissing");
    let other: Vec<_> = events
        .iter()
        .filter(|e| e["involvedObject"]["name"] == "other")
        .collect();
    assert_eq!(other.len(), 1, "{events:?}");
    assert_eq!(
        other[0]["count"], 1,
        "said again after the reload: {events:?}"
    );
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(
        server.count_ok(
            "PATCH",
            &format!("/events/{}", other[0]["metadata"]["name"].as_str().unwrap())
        ),
        0
    );
    assert!(agent.stop(), "{}", agent.log_text());
}
