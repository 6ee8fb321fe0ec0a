//! The test API server (crates/testapi) as a process of
//! its own, for the fault and soak harness (agent/tests/soak.rs,
//! scripts/soak.sh): the agent under systemd in a container reports to it,
//! and the harness kills it, starts it again (its objects and serving
//! certificate kept in `--dir`, as etcd and the PKI outlive kube-apiserver),
//! or starts it with a certificate no client trusts (`--wrong-cert`).
//!
//! ```text
//! apiserver --dir DIR --listen 127.0.0.1:6443 --node NAME --token TOKEN [--wrong-cert]
//! ```
//!
//! Writes `DIR/ca.pem` (what clients must trust), keeps `DIR/etcd.json` and
//! `DIR/requests.jsonl` (every answered request), and answers one-line
//! commands on the unix socket `DIR/control`:
//! `ping`, `fault none|down|500|429 SECS`, `cut` (close every connection).

use nodeproof_testapi as apiserver;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;

use apiserver::{Fault, Identity, ServingCert, TestApiServer};
use serde_json::json;

struct Args {
    dir: PathBuf,
    listen: String,
    node: String,
    token: String,
    wrong_cert: bool,
}

fn args() -> Result<Args, String> {
    let mut dir = None;
    let mut listen = "127.0.0.1:6443".to_string();
    let mut node = None;
    let mut token = None;
    let mut wrong_cert = false;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--dir" => dir = Some(PathBuf::from(value()?)),
            "--listen" => listen = value()?,
            "--node" => node = Some(value()?),
            "--token" => token = Some(value()?),
            "--wrong-cert" => wrong_cert = true,
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    Ok(Args {
        dir: dir.ok_or("--dir is required")?,
        listen,
        node: node.ok_or("--node is required")?,
        token: token.ok_or("--token is required")?,
        wrong_cert,
    })
}

/// One control command; the answer line.
fn command(server: &TestApiServer, line: &str) -> String {
    let words: Vec<&str> = line.split_whitespace().collect();
    let fault = match words.as_slice() {
        ["ping"] => return "ok".into(),
        ["cut"] => {
            server.cut_connections();
            return "ok".into();
        }
        ["fault", "none"] => None,
        ["fault", "down"] => Some(Fault::Down),
        ["fault", "500"] => Some(Fault::Error500),
        ["fault", "429", secs] => match secs.parse() {
            Ok(retry_after_secs) => Some(Fault::TooManyRequests { retry_after_secs }),
            Err(_) => return format!("error: bad seconds {secs}"),
        },
        _ => return format!("error: unknown command {line:?}"),
    };
    match fault {
        Some(f) => server.set_fault(f),
        None => server.clear_fault(),
    }
    "ok".into()
}

fn main() {
    let args = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("apiserver: {e}");
            std::process::exit(64);
        }
    };
    std::fs::create_dir_all(&args.dir).expect("create --dir");
    let trusted = ServingCert::kept_in(&args.dir);
    std::fs::write(args.dir.join("ca.pem"), &trusted.cert_pem).expect("write ca.pem");
    // A certificate of its own: clients that trust ca.pem refuse the handshake.
    let serving = if args.wrong_cert {
        ServingCert::generate()
    } else {
        trusted
    };
    let listener = std::net::TcpListener::bind(&args.listen).expect("bind --listen");
    let server = TestApiServer::start_stored(listener, &serving, &args.dir);
    server.add_token(&args.token, Identity::Node(args.node.clone()));
    if !server.has_node(&args.node) {
        server.add_node(
            &args.node,
            json!([{"type": "Ready", "status": "True", "reason": "KubeletReady",
                    "message": "kubelet is posting ready status"}]),
        );
        server.flush();
    }
    let control = args.dir.join("control");
    let _ = std::fs::remove_file(&control);
    let listener = UnixListener::bind(&control).expect("bind the control socket");
    eprintln!(
        "apiserver: serving https://{} (control {})",
        server.addr,
        control.display()
    );
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let mut line = String::new();
        if BufReader::new(&conn).read_line(&mut line).is_err() {
            continue;
        }
        let answer = command(&server, line.trim());
        let _ = writeln!(&conn, "{answer}");
    }
}
