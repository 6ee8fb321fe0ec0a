//! The agent's `[record]` section (root): `nodeproof run` records a selected
//! pod's container, found in a kubepods-shaped cgroup, writes its recording
//! under the state directory every `interval-s`, leaves a pod of another
//! namespace alone, and removes the file when the pod is deleted.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use nodeproof_seccomp::filter::Arch;
use nodeproof_seccomp::recording::Recording;
use support::agent::{reporting_config, seccomp_root, Agent};
use support::apiserver::{Identity, TestApiServer};
use support::cgroup::traceable_kubepods;

fn pod(namespace: &str, name: &str, uid: &str, id: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": {"app": "rec"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "app", "securityContext": {"seccompProfile":
            {"type": "RuntimeDefault"}}}]},
        "status": {"containerStatuses": [{"name": "app", "containerID": format!("containerd://{id}"),
            "image": "app", "imageID": "", "ready": true, "restartCount": 0}]}})
}

/// The recording at `path`, once it holds personality(8) on x86_64.
fn recorded_personality(path: &Path) -> Option<Recording> {
    let r = Recording::from_json(&std::fs::read(path).ok()?).ok()?;
    let has = r.containers.first()?.arches.iter().any(|a| {
        a.arch == Arch::X86_64
            && a.syscalls
                .iter()
                .any(|s| s.nr == 135 && s.args.first().is_some_and(|g| g.values.contains(&8)))
    });
    has.then_some(r)
}

#[test]
fn the_agent_keeps_a_selected_pods_recording_and_removes_it_with_the_pod() {
    let uid = "7c0ffee0-1234-4abc-9def-00000000ed01";
    let id = "fd".repeat(32);
    let Some(cg) = traceable_kubepods(uid, &id) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node("n1", json!([]));
    let root = seccomp_root(dir.path(), true);
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let state = dir.path().join("state");
    let config = format!(
        "{}[daemon]\nstate-dir = \"{}\"\n[record]\nenabled = true\nnamespaces = [\"ml\"]\nselector = \"app=rec\"\ninterval-s = 1\n",
        reporting_config(&root, &kubeconfig),
        state.display()
    );
    server.put("pods", pod("ml", "rec-0", uid, &id));
    // Another namespace: not selected, never written.
    server.put(
        "pods",
        pod(
            "other",
            "rec-9",
            "7c0ffee0-1234-4abc-9def-00000000ed09",
            &"fe".repeat(32),
        ),
    );
    let mut agent = Agent::start(dir.path(), &config);
    agent.wait_ready(Duration::from_secs(30));

    let path = state.join("recordings/ml/rec-0.json");
    let start = Instant::now();
    let r = loop {
        // SAFETY: the child joins the cgroup, makes one raw syscall and _exits.
        unsafe {
            let pid = libc::fork();
            if pid == 0 {
                let ok = std::fs::write(&cg.procs, "0").is_ok();
                libc::syscall(libc::SYS_personality, 8u64);
                libc::_exit(if ok { 0 } else { 3 });
            }
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
            assert_eq!(status, 0, "child status");
        }
        if let Some(r) = recorded_personality(&path) {
            break r;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no recording with personality(8) at {} within 20 s\n--- agent log ---\n{}",
            path.display(),
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    eprintln!(
        "FIGURE agent recording: first written with the call after {:?}",
        start.elapsed()
    );
    assert_eq!(r.subject(), "ml/rec-0");
    assert_eq!(r.node.as_deref(), Some("n1"));
    let c = &r.containers[0];
    assert_eq!(
        (c.name.as_str(), c.id.as_deref()),
        ("app", Some(id.as_str()))
    );
    assert_eq!(c.profile.as_deref(), Some("runtime/default"));
    assert!(!state.join("recordings/other").exists());

    server.delete("pods", "ml/rec-0");
    let start = Instant::now();
    while path.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the deleted pod's recording is still there\n--- agent log ---\n{}",
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(agent.stop(), "{}", agent.log_text());
    drop(cg);
}
