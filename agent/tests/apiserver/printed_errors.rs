//! Every error the binary prints is a sentence a person
//! reads, naming the object and the remedy, never a Rust `Debug` dump
//! (kube-rs' text of an API error ends in `(Status { status: Some(Failure),
//! code: 401, … })`) and never one cause said three times (kube-rs' config
//! errors repeat their sources in their own text).

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

use support::apiserver::{Identity, TestApiServer};

/// `nodeproof ARGS` with no kubeconfig to be found by default.
fn nodeproof(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .args(args)
        .env("NODEPROOF_LOG", "off")
        .env("HOME", home)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("run nodeproof")
}

/// What a Debug dump leaves in a text.
const DUMP_MARKS: [&str; 3] = ["{ ", "Some(", "Status {"];

/// The printed error of a failed command: one line, no dump, no phrase said twice.
fn printed_error(what: &str, out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{what}: exit 0\n{stderr}");
    for mark in DUMP_MARKS {
        assert!(!stderr.contains(mark), "{what}: {mark:?} in\n{stderr}");
    }
    // A cause repeated: any ": "-separated part of 20 characters or more said twice.
    let parts: Vec<&str> = stderr
        .trim()
        .split(": ")
        .filter(|p| p.len() >= 20)
        .collect();
    for (i, p) in parts.iter().enumerate() {
        assert!(
            !parts[i + 1..].contains(p),
            "{what}: {p:?} twice in\n{stderr}"
        );
    }
    stderr
}

#[test]
fn the_cluster_check_without_credentials_says_where_it_looked_once() {
    let home = tempfile::tempdir().unwrap();
    let out = nodeproof(home.path(), &["cluster", "check"]);
    assert_eq!(out.status.code(), Some(2));
    let e = printed_error("cluster check, no kubeconfig", &out);
    assert!(e.contains("try --kubeconfig"), "{e}");
    assert!(e.contains(".kube/config"), "{e}");
}

#[test]
fn a_refused_credential_is_named_with_its_remedy() {
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node("n1", serde_json::json!([]));
    let dir = tempfile::tempdir().unwrap();
    // A token the API server does not know: 401 to every request.
    let bad = server.kubeconfig(dir.path(), "revoked");
    let bad = bad.to_str().unwrap();
    for args in [
        vec!["cluster", "check", "--kubeconfig", bad],
        vec!["cluster", "policy", "--kubeconfig", bad],
    ] {
        let out = nodeproof(dir.path(), &args);
        let e = printed_error(&args.join(" "), &out);
        assert!(
            e.contains("the API server refused the credentials (401 Unauthorized): check the kubeconfig's user"),
            "{args:?}: {e}"
        );
    }
}

#[test]
fn an_api_server_not_there_is_named_with_its_remedy() {
    let server = TestApiServer::start();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    // The same kubeconfig, pointing at a port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    let text = text.replace(&server.addr.port().to_string(), &port.to_string());
    std::fs::write(&kubeconfig, text).unwrap();
    let k = kubeconfig.to_str().unwrap();
    // Without waiting for it (`--api-wait` retries, one line each: the
    // cluster_check tests).
    let out = nodeproof(
        dir.path(),
        &["cluster", "check", "--api-wait", "0s", "--kubeconfig", k],
    );
    let e = printed_error("cluster check, nothing listening", &out);
    assert!(e.contains("cannot reach the API server"), "{e}");
    assert!(e.contains("check the kubeconfig's server address"), "{e}");
}

/// `-o json` on failure: the error on standard output as JSON, with the exit status.
#[test]
fn json_output_on_failure_is_an_error_object() {
    let home = tempfile::tempdir().unwrap();
    let nope = home.path().join("nope.kubeconfig");
    let nope = nope.to_str().unwrap();
    for args in [
        vec!["cluster", "check", "-o", "json"],
        vec![
            "pods",
            "--once",
            "--kubeconfig",
            nope,
            "--node-name",
            "n1",
            "-o",
            "json",
        ],
    ] {
        let out = nodeproof(home.path(), &args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let v: serde_json::Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: stdout {stdout:?}"));
        let code = out.status.code().unwrap();
        assert_eq!(v["error"]["exit_code"], code, "{args:?}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        // The same sentence as on standard error.
        let stderr = printed_error(&args.join(" "), &out);
        assert!(stderr.contains(message), "{args:?}: {message} / {stderr}");
    }
}
