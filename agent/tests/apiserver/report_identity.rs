//! Credentials and identity, end to end through `nodeproof check`: which
//! credentials it used (or where it looked), the node name taken from the
//! kubelet's client certificate, a configured name that is another node's,
//! and the 403 that Kubernetes 1.32+ answers to a node reading another Node.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{json, Value};

use support::apiserver::{Identity, TestApiServer};

/// `nodeproof check` on an empty seccomp root with no GPU, the config
/// given, no NODE_NAME and no in-cluster environment from the caller.
fn check(dir: &Path, report: &str, args: &[&str]) -> Output {
    let root = dir.join("seccomp");
    std::fs::create_dir_all(&root).unwrap();
    let config = dir.join("check.toml");
    std::fs::write(
        &config,
        format!(
            "[seccomp]\nroot = \"{}\"\n[gpu]\nnvml-library = \"/nonexistent/libnvidia-ml.so.1\"\n[report]\n{report}",
            root.display()
        ),
    )
    .unwrap();
    Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .args(["check", "--config"])
        .arg(&config)
        .args(args)
        .env_remove("NODE_NAME")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("JOURNAL_STREAM")
        .output()
        .unwrap()
}

fn two_nodes() -> TestApiServer {
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node("n1", json!([]));
    server.add_node("n2", json!([]));
    server
}

#[test]
fn a_token_of_node_n1_reporting_as_n2_is_told_so_not_just_forbidden() {
    let dir = tempfile::tempdir().unwrap();
    let server = two_nodes();
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let out = check(
        dir.path(),
        &format!(
            "kubeconfig = \"{}\"\nnode-name = \"n2\"\n",
            kubeconfig.display()
        ),
        &["--report"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("this credential is node n1; the Node n2 cannot be read with it"),
        "{stderr}"
    );
    // The pods' read of the Node says it too (the pods part runs first).
    assert!(
        !stderr.contains("cannot read the Node for node n2"),
        "{stderr}"
    );
    // The Node authorizer's 403 was asked about, and nothing was written to n2.
    assert!(server.count_ok("POST", "/selfsubjectreviews") >= 1);
    assert_eq!(server.count_ok("PATCH", "/nodes/n2/status"), 0);
    assert!(server.condition("n2", "SeccompProfilesReady").is_none());
}

#[test]
fn the_node_authorizer_refuses_another_nodes_get_with_kubernetes_message() {
    let dir = tempfile::tempdir().unwrap();
    let server = two_nodes();
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
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
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
        assert!(nodes.get("n1").await.is_ok());
        let Err(kube::Error::Api(status)) = nodes.get("n2").await else {
            panic!("another Node's GET must be refused");
        };
        assert_eq!(status.code, 403);
        assert_eq!(
            status.message,
            "nodes \"n2\" is forbidden: User \"system:node:n1\" cannot get resource \"nodes\" in API group \"\" at the cluster scope: node 'n1' cannot read 'n2', only its own Node object"
        );
        assert_eq!(
            nodeproof_apiclient::identity::who_am_i(&client).await.unwrap(),
            "system:node:n1"
        );
    });
}

#[test]
fn a_client_certificate_of_n1_with_node_name_n2_fails_before_any_request() {
    let dir = tempfile::tempdir().unwrap();
    let server = two_nodes();
    let kubeconfig = server.kubeconfig_with_client_cert(dir.path(), "node-n1", "system:node:n1");
    let out = check(
        dir.path(),
        &format!("kubeconfig = \"{}\"\n", kubeconfig.display()),
        &["--report", "--node-name", "n2"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("this credential is node n1; configured node name is n2"),
        "{stderr}"
    );
    assert!(server.log().is_empty(), "{:?}", server.log());
}

#[test]
fn without_a_configured_name_the_certificates_node_is_reported() {
    // The hostname of this machine is not "n1": the credential's name wins.
    let dir = tempfile::tempdir().unwrap();
    let server = two_nodes();
    let kubeconfig = server.kubeconfig_with_client_cert(dir.path(), "node-n1", "system:node:n1");
    let out = check(
        dir.path(),
        &format!("kubeconfig = \"{}\"\n", kubeconfig.display()),
        &["--report"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("reported node n1 with"), "{stderr}");
    assert!(server.condition("n1", "SeccompProfilesReady").is_some());
}

#[test]
fn check_says_which_kubelet_kubeconfig_it_used() {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host");
    let server = two_nodes();
    // k3s's place below a host root that stands for `/`.
    let place = host.join("var/lib/rancher/k3s/agent");
    std::fs::create_dir_all(&place).unwrap();
    let kubeconfig = server.kubeconfig_with_client_cert(&place, "node-n1", "system:node:n1");
    std::fs::rename(kubeconfig, place.join("kubelet.kubeconfig")).unwrap();
    let out = check(
        dir.path(),
        &format!("host-root = \"{}\"\n", host.display()),
        &["-o", "json", "--report"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("credentials: the kubelet's kubeconfig /var/lib/rancher/k3s/agent/kubelet.kubeconfig (k3s's place)"),
        "{stderr}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = &v["credentials"];
    assert_eq!(c["source"], "kubelet", "{c}");
    assert_eq!(c["found"], "well-known", "{c}");
    assert_eq!(c["distribution"], "k3s", "{c}");
    assert_eq!(c["path"], "/var/lib/rancher/k3s/agent/kubelet.kubeconfig");
    // The name came from the certificate, and the report went through.
    assert!(server.condition("n1", "SeccompProfilesReady").is_some());
}

#[test]
fn check_says_where_it_looked_when_it_found_none() {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("empty-host");
    std::fs::create_dir_all(&host).unwrap();
    let out = check(
        dir.path(),
        &format!("host-root = \"{}\"\nnode-name = \"n1\"\n", host.display()),
        &["-o", "json"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("credentials: no credentials (log only); looked at /etc/kubernetes/kubelet.conf (kubeadm), /var/lib/kubelet/kubeconfig (GKE/EKS), /var/lib/rancher/k3s/agent/kubelet.kubeconfig (k3s), /var/lib/rancher/rke2/agent/kubelet.kubeconfig (RKE2), in-cluster"),
        "{stderr}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["credentials"]["source"], "none");
    assert_eq!(v["credentials"]["looked"].as_array().unwrap().len(), 5);
}

#[test]
fn the_agent_with_another_nodes_certificate_says_so_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = two_nodes();
    let kubeconfig = server.kubeconfig_with_client_cert(dir.path(), "node-n1", "system:node:n1");
    let root = dir.path().join("seccomp");
    std::fs::create_dir_all(&root).unwrap();
    let config = format!(
        "[seccomp]\nroot = \"{}\"\n[gpu]\nnvml-library = \"/nonexistent/libnvidia-ml.so.1\"\n[report]\nkubeconfig = \"{}\"\nnode-name = \"n2\"\n",
        root.display(),
        kubeconfig.display()
    );
    let mut agent = support::agent::Agent::start(dir.path(), &config);
    agent.wait_ready(std::time::Duration::from_secs(30));
    let (_, body) = agent.get("/healthz/reporter");
    assert!(
        body.contains("not reporting (the credential is another node's)"),
        "{body}\n{}",
        agent.log_text()
    );
    assert!(
        agent
            .log_text()
            .contains("this credential is node n1; configured node name is n2"),
        "{}",
        agent.log_text()
    );
    assert_eq!(server.count_ok("PATCH", "/nodes/n2/status"), 0);
}
