//! The agent (`nodeproof run`, its own tracer thread, real eBPF) names the
//! profile change a pod's denials followed: a container restarted after
//! its Localhost profile was edited, denied a call the version before
//! allowed, gets a `SeccompDenied` Event that says so, with the change as
//! typed annotations, and the after-change counter counts it; a container
//! that started before the edit gets the plain message; the versions
//! outlive a restart of the agent (its state directory). Root (or CAP_BPF +
//! CAP_PERFMON) and a writable cgroup2; without them it says why it skips.

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use nodeproof::judge::versions::{sha256_hex, ProfileVersions};
use nodeproof_report::conditions::rfc3339;
use nodeproof_report::denial_change::{DenialChange, PreviousVerdict};
use support::agent::{reporting_config, seccomp_root, Agent};
use support::apiserver::{Identity, TestApiServer};
use support::cgroup::{deny_in, traceable_kubepods};

/// Denies rmdir; mkdir runs.
const V1: &[u8] = br#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["rmdir"],"action":"SCMP_ACT_ERRNO"}]}"#;
/// Denies mkdir too.
const V2: &[u8] = br#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","rmdir"],"action":"SCMP_ACT_ERRNO"}]}"#;
const N: usize = 5;

fn denied(server: &TestApiServer, syscall: &str) -> Vec<Value> {
    server
        .events()
        .into_iter()
        .filter(|e| {
            e["involvedObject"]["kind"] == "Pod"
                && e["reason"] == "SeccompDenied"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with(&format!("denied {syscall} ")))
        })
        .collect()
}

fn annotations(e: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(e["metadata"]["annotations"].clone()).unwrap_or_default()
}

/// The pod's status with `status` as its one container's.
fn app_pod(uid: &str, status: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "app-0", "namespace": "ml", "uid": uid},
        "spec": {"nodeName": "n1", "containers": [{"name": "app", "securityContext": {"seccompProfile":
            {"type": "Localhost", "localhostProfile": "profiles/app.json"}}}]},
        "status": {"phase": "Running", "containerStatuses": [status]}})
}

#[test]
fn a_denial_after_a_profile_edit_names_the_change_and_survives_a_restart() {
    let uid = "7c0ffee0-1234-4abc-9def-0000000e5001";
    let (old_id, new_id) = ("e1".repeat(32), "e2".repeat(32));
    let Some(old_cg) = traceable_kubepods(uid, &old_id) else {
        return;
    };
    let new_cg = traceable_kubepods(uid, &new_id).expect("a second container cgroup");
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node("n1", json!([]));
    let root = seccomp_root(dir.path(), false);
    std::fs::write(root.join("profiles/app.json"), V1).unwrap();
    let state = dir.path().join("state");
    let config = format!(
        "{}[daemon]\nstate-dir = \"{}\"\n",
        reporting_config(&root, &server.kubeconfig(dir.path(), "node-n1")),
        state.display()
    );
    // The first container starts after v1 is on disk (its startedAt, in
    // whole seconds, after the file's mtime): v1 is its version, the oldest.
    let old_started = rfc3339(SystemTime::now() + Duration::from_secs(1));
    let running = |id: &str, started: &str| {
        json!({"name": "app", "containerID": format!("containerd://{id}"), "image": "app",
            "imageID": "", "ready": true, "restartCount": 0,
            "state": {"running": {"startedAt": started}}})
    };
    server.put("pods", app_pod(uid, running(&old_id, &old_started)));
    let mut agent = Agent::start(dir.path(), &config);
    agent.wait_ready(Duration::from_secs(30));
    agent.within("the pod is watched", Duration::from_secs(10), || {
        agent.get("/healthz/pods").1.contains("pods 1 watched")
    });

    // Before the edit: rmdir, denied by v1, is said plainly.
    deny_in(&old_cg, c"np-ver-old", &["rmdir"], "rmdir", N);
    agent.within("the rmdir Event", Duration::from_secs(15), || {
        !denied(&server, "rmdir").is_empty()
    });
    let e = &denied(&server, "rmdir")[0];
    assert_eq!(
        e["message"],
        format!("denied rmdir ×{N} (EPERM) in container app, profile localhost/profiles/app.json")
    );
    assert!(annotations(e).is_empty(), "{e}");

    // The edit; the agent sees it within a second (inotify).
    std::fs::write(root.join("profiles/app.json"), V2).unwrap();
    agent.within("the edit is seen", Duration::from_secs(10), || {
        agent.log_text().contains("profile changed")
    });
    // The container restarts onto v2: a new id, started after the edit.
    let mut restarted = running(
        &new_id,
        &rfc3339(SystemTime::now() + Duration::from_secs(2)),
    );
    restarted["restartCount"] = json!(1);
    restarted["lastState"] = json!({"terminated": {"containerID": format!("containerd://{old_id}"),
        "exitCode": 1, "startedAt": old_started, "finishedAt": rfc3339(SystemTime::now())}});
    server.put("pods", app_pod(uid, restarted));
    // The watch brings the status in milliseconds; the tracer's counters
    // are read every 5 s. Give the watch its time before the denials.
    std::thread::sleep(Duration::from_secs(2));
    deny_in(&new_cg, c"np-ver-new", &["mkdir", "rmdir"], "mkdir", N);
    agent.within("the mkdir Event", Duration::from_secs(15), || {
        !denied(&server, "mkdir").is_empty()
    });
    let (h1, h2) = (sha256_hex(V1), sha256_hex(V2));
    let e = denied(&server, "mkdir")[0].clone();
    let message = e["message"].as_str().unwrap().to_string();
    let prefix = format!(
        "denied mkdir ×{N} (EPERM) in container app, profile localhost/profiles/app.json as of "
    );
    assert!(message.starts_with(&prefix), "{message}");
    assert!(
        message.contains(&format!(
            "(sha256 {}…); the previous version (sha256 {}…, until ",
            &h2[..8],
            &h1[..8]
        )),
        "{message}"
    );
    assert!(message.ends_with(") allowed mkdir"), "{message}");
    let change =
        DenialChange::from_annotations(&annotations(&e)).expect("the change's annotations");
    assert_eq!(
        (change.profile.as_str(), change.syscall.as_str()),
        ("profiles/app.json", "mkdir")
    );
    assert_eq!((&change.version, &change.previous), (&h2, &h1));
    assert_eq!(change.previous_verdict, PreviousVerdict::Allowed);
    let (_, metrics) = agent.get("/metrics");
    assert!(
        metrics.contains(&format!(
            "nodeproof_pod_seccomp_denials_after_change_total{{previous=\"allowed\"}} {N}"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("nodeproof_pod_seccomp_denials_after_change_total{previous=\"denied\"} 0"),
        "{metrics}"
    );
    // The journal line carries the change.
    let log = agent.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("allowed mkdir") && l.contains("previous_verdict=")),
        "{log}"
    );
    assert!(agent.stop(), "{}", agent.log_text());

    // Kept in the state directory: both versions.
    let kept =
        ProfileVersions::decode(&std::fs::read(state.join("profile-versions.json")).unwrap())
            .unwrap();
    let kept: Vec<_> = kept
        .versions("profiles/app.json")
        .iter()
        .map(|v| v.sha256.clone())
        .collect();
    assert_eq!(kept, [h1.clone(), h2.clone()]);

    // Restarted, the agent still knows v1 (no longer on disk): new denials
    // in the restarted container name the same change.
    let mut agent = Agent::start(dir.path(), &config);
    agent.wait_ready(Duration::from_secs(30));
    agent.within("the pod is watched again", Duration::from_secs(10), || {
        agent.get("/healthz/pods").1.contains("pods 1 watched")
    });
    deny_in(&new_cg, c"np-ver-again", &["mkdir", "rmdir"], "mkdir", N);
    agent.within("a second mkdir Event", Duration::from_secs(15), || {
        denied(&server, "mkdir").len() == 2
    });
    for e in denied(&server, "mkdir") {
        let c = DenialChange::from_annotations(&annotations(&e)).expect("annotations");
        assert_eq!(
            (&c.previous, c.previous_verdict),
            (&h1, PreviousVerdict::Allowed),
            "{e}"
        );
    }
    assert!(agent.stop(), "{}", agent.log_text());
    drop((old_cg, new_cg));
}
