//! deploy/base/rbac-agent.yaml against what nodeproof really sends as a
//! ServiceAccount: the request log of end-to-end scenarios (`check
//! --report` with labels on the pods-and-profiles node state of
//! check_equals_run.rs, the agent itself watching it, and a repeated
//! transition Event) is mapped to (verb, apiGroup, resource, subresource)
//! as kube-apiserver's RequestInfoFactory does
//! (k8s.io/apiserver/pkg/endpoints/request/requestinfo.go), and every
//! request must be allowed by a rule of a ClusterRole bound to the
//! ServiceAccount, as RBAC's RuleAllows decides
//! (k8s.io/kubernetes/pkg/apis/rbac/v1/evaluation_helpers.go). Every verb
//! of the manifest must be used, so removing one fails, and so does adding
//! one nodeproof does not need.

use crate::fake_nvml_support;
use crate::support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::rbac::v1::PolicyRule;
use serde_json::json;

use nodeproof_apiclient::client::KubeReporter;
use nodeproof_report::conditions::{Hysteresis, Policy};
use nodeproof_report::driver::{LoopConfig, ReportLoop};
use support::agent::Agent;
use support::apiserver::{Identity, Logged, TestApiServer};
use support::rbac::{bound_rules, coverage, request_info, rule_allows, RequestInfo};

const MANIFEST: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../deploy/base/rbac-agent.yaml"
);

fn good_profile() -> Vec<u8> {
    std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../profiles/runtime-default-x86_64.json"
    ))
    .unwrap()
}

/// check_equals_run.rs's node state (a good and a refused profile, a pod
/// bound to n1 referencing a missing one), as the ServiceAccount, labels on,
/// and an annotated RuntimeClass (its contract label is a PATCH of the Node too).
fn node_state(server: &TestApiServer, dir: &Path) -> String {
    server.add_node("n1", json!([]));
    server.put(
        "runtimeclasses",
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
            "metadata": {"name": "runc", "annotations": {"nodeproof.dev/localhost-profiles": "profiles/good.json"}},
            "handler": "runc"}),
    );
    server.put(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "vllm-0", "namespace": "ml", "uid": "uid-vllm-0"},
            "spec": {"nodeName": "n1", "runtimeClassName": "runc", "containers": [{"name": "vllm", "securityContext": {"seccompProfile":
                {"type": "Localhost", "localhostProfile": "profiles/vllm-strict.json"}}}]}}),
    );
    let root = dir.join("seccomp");
    std::fs::create_dir_all(root.join("profiles")).unwrap();
    std::fs::write(root.join("profiles/good.json"), good_profile()).unwrap();
    std::fs::write(
        root.join("profiles/refused.json"),
        br#"{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_NOPE"}]}"#,
    )
    .unwrap();
    let kubeconfig = server.kubeconfig(dir, "sa-agent");
    format!(
        "[seccomp]\nroot = \"{}\"\n[report]\nkubeconfig = \"{}\"\nnode-name = \"n1\"\nlabels = true\n[gpu]\nnvml-library = \"/nonexistent/libnvidia-ml.so.1\"\n",
        root.display(),
        kubeconfig.display()
    )
}

fn sa_server() -> TestApiServer {
    let server = TestApiServer::start();
    server.add_token("sa-agent", Identity::AgentServiceAccount);
    server
}

/// `check --report` and the agent, as the ServiceAccount.
fn check_and_agent_requests() -> Vec<Logged> {
    let dir = tempfile::tempdir().unwrap();
    let server = sa_server();
    let config = node_state(&server, dir.path());
    let config_path = dir.path().join("check.toml");
    std::fs::write(&config_path, &config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .args(["check", "-o", "json", "--report", "--config"])
        .arg(&config_path)
        .env_remove("JOURNAL_STREAM")
        .env_remove("NODE_NAME")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the pod's profile is missing\n{stderr}"
    );
    assert!(stderr.contains("reported node n1"), "{stderr}");

    let agent_dir = tempfile::tempdir().unwrap();
    let agent_server = sa_server();
    let agent_config = node_state(&agent_server, agent_dir.path());
    let mut agent = Agent::start(agent_dir.path(), &agent_config);
    agent.wait_ready(Duration::from_secs(30));
    let watched = |log: &[Logged], path: &str| {
        log.iter()
            .any(|l| l.path == path && l.query.contains("watch=true"))
    };
    let start = Instant::now();
    let seen = |log: &[Logged]| {
        [
            "/api/v1/pods",
            "/api/v1/nodes",
            "/apis/node.k8s.io/v1/runtimeclasses",
        ]
        .iter()
        .all(|p| watched(log, p))
            && agent_server.count_ok("PATCH", "/nodes/n1/status") > 0
    };
    let mut log = agent_server.log();
    while !seen(&log) && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
        log = agent_server.log();
    }
    assert!(
        seen(&log),
        "the agent watched and reported\n{}",
        agent.log_text()
    );
    drop(agent);
    let mut all = server.log();
    all.extend(log);
    all
}

/// The agent on a GPU node (the fake NVML) of a cluster serving DRA: it
/// lists this node's ResourceSlices and gets the claim its pod references.
fn dra_requests() -> Vec<Logged> {
    let dir = tempfile::tempdir().unwrap();
    let server = sa_server();
    let config = node_state(&server, dir.path());
    server.serve_dra(&["v1"]);
    server.put(
        "resourceslices",
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "n1-gpu"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1", "pool": {"name": "n1"},
                "devices": [{"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-0"}}}]}}),
    );
    server.put(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "train-0", "namespace": "ml", "uid": "uid-train-0"},
            "spec": {"nodeName": "n1", "resourceClaims": [{"name": "gpu", "resourceClaimName": "train-gpu"}],
                "containers": [{"name": "train", "resources": {"claims": [{"name": "gpu"}]}}]},
            "status": {"phase": "Running"}}),
    );
    let nvml = fake_nvml_support::Scenario::new("gpus 1\n", 1);
    let config = config.replace(
        "nvml-library = \"/nonexistent/libnvidia-ml.so.1\"\n",
        &format!(
            "nvml-library = \"{}\"\nsysfs-root = \"{}\"\n",
            nvml.library().display(),
            nvml.sysfs().display()
        ),
    );
    let mut agent = Agent::start(dir.path(), &config);
    agent.wait_ready(Duration::from_secs(30));
    let start = Instant::now();
    let read = |log: &[Logged]| {
        log.iter()
            .any(|l| l.path.ends_with("/resourceclaims/train-gpu"))
    };
    while !read(&server.log()) && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        read(&server.log()),
        "the claim was read\n{}",
        agent.log_text()
    );
    drop(agent);
    server.log()
}

/// A transition Event repeated (False, True, False): the repeat is a PATCH.
fn repeated_event_requests() -> Vec<Logged> {
    let dir = tempfile::tempdir().unwrap();
    let server = sa_server();
    server.add_node("n1", json!([]));
    let kubeconfig = server.kubeconfig(dir.path(), "sa-agent");
    let source = nodeproof_report::credentials::Source::Kubeconfig(kubeconfig);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = nodeproof_apiclient::client::connect(&source)
            .await
            .unwrap()
            .unwrap();
        let config = LoopConfig {
            policy: Policy {
                hysteresis: Hysteresis::IMMEDIATE,
                ..Policy::default()
            },
            ..LoopConfig::default()
        };
        let mut lp = ReportLoop::new(KubeReporter::new(client, "n1"), config, 7);
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        for (i, ok) in [true, false, true, false].into_iter().enumerate() {
            let now = t0 + Duration::from_secs(30 * i as u64);
            let condition = support::conditions::seccomp(ok, "m");
            lp.observe(now, &[condition]);
            lp.flush(now).await.unwrap();
        }
    });
    assert!(
        server
            .log()
            .iter()
            .any(|l| l.method == "PATCH" && l.path.contains("/events/")),
        "{:#?}",
        server.log()
    );
    server.log()
}

#[test]
fn the_agent_service_account_may_do_exactly_what_nodeproof_does() {
    let manifest = std::fs::read_to_string(MANIFEST).unwrap();
    let (sa, rules) = bound_rules(&manifest);
    assert_eq!(sa.metadata.name.as_deref(), Some("nodeproof"));
    let mut log = check_and_agent_requests();
    log.extend(repeated_event_requests());
    log.extend(dra_requests());
    let requests: BTreeSet<RequestInfo> = log
        .iter()
        .map(|l| request_info(&l.method, &l.path, &l.query))
        .collect();
    let summary: Vec<String> = requests
        .iter()
        .map(|r| {
            format!(
                "{} {}/{} {}",
                r.verb, r.api_group, r.resource, r.subresource
            )
        })
        .collect();
    eprintln!("requests as RequestInfo: {summary:#?}");
    let (uncovered, unused) = coverage(&rules, &requests);
    assert!(
        uncovered.is_empty(),
        "not allowed by {MANIFEST}: {uncovered:#?}"
    );
    assert!(unused.is_empty(), "more than nodeproof needs: {unused:#?}");

    // Each verb removed in turn leaves a request nodeproof makes refused.
    for (i, (_, rule)) in rules.iter().enumerate() {
        for v in 0..rule.verbs.len() {
            let mut fewer = rules.clone();
            fewer[i].1.verbs.remove(v);
            let (uncovered, _) = coverage(&fewer, &requests);
            assert!(
                !uncovered.is_empty(),
                "removing {} from rule {i} refuses nothing",
                rule.verbs[v]
            );
        }
    }
}

#[test]
fn request_info_as_kube_apiserver_reads_it() {
    let r = request_info("PATCH", "/api/v1/nodes/n1/status", "fieldManager=nodeproof");
    assert_eq!(
        (
            r.verb.as_str(),
            r.resource.as_str(),
            r.subresource.as_str(),
            r.name.as_str()
        ),
        ("patch", "nodes", "status", "n1")
    );
    let r = request_info(
        "GET",
        "/api/v1/nodes",
        "fieldSelector=metadata.name%3Dn1&watch=true",
    );
    assert_eq!((r.verb.as_str(), r.name.as_str()), ("watch", "n1"));
    let r = request_info("POST", "/api/v1/namespaces/default/events", "");
    assert_eq!(
        (r.verb.as_str(), r.namespace.as_str(), r.resource.as_str()),
        ("create", "default", "events")
    );
    let r = request_info("GET", "/apis/node.k8s.io/v1/runtimeclasses", "limit=500");
    assert_eq!(
        (r.verb.as_str(), r.api_group.as_str()),
        ("list", "node.k8s.io")
    );
    // A rule for nodes does not cover nodes/status, nor another group.
    let rule = PolicyRule {
        api_groups: Some(vec!["".into()]),
        resources: Some(vec!["nodes".into()]),
        verbs: vec!["patch".into()],
        ..PolicyRule::default()
    };
    let status = request_info("PATCH", "/api/v1/nodes/n1/status", "");
    assert!(!rule_allows(&rule, "patch", &status));
    assert!(rule_allows(
        &rule,
        "patch",
        &request_info("PATCH", "/api/v1/nodes/n1", "")
    ));
}
