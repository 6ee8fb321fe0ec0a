//! What judging the RuntimeClass contracts costs the agent per round: C
//! annotated classes listing P profiles each (distinct files, so each is
//! linted in both noNewPrivileges modes once), judged cold (every lint
//! runs) and warm (the pods' lint cache: each file read and compared, no
//! lint), as the watcher does on every round (API change, root lint, 10 s).
//!
//! `cargo run -p nodeproof --example contract_judge -- [CLASSES] [PROFILES] [ROUNDS]`

use std::collections::HashMap;
use std::time::Instant;

use k8s_openapi::api::node::v1::RuntimeClass;
use nodeproof::pods::contract::judge_all;
use nodeproof::pods::verdict::{Judge, NodeContext, RuntimeClassInfo};
use nodeproof_report::contract::ContractState;
use nodeproof_seccomp::lint::LintOptions;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number"))
        .collect();
    let classes = args.first().copied().unwrap_or(20);
    let profiles = args.get(1).copied().unwrap_or(300);
    let rounds = args.get(2).copied().unwrap_or(10);
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    std::fs::create_dir_all(root.join("profiles")).unwrap();
    let good = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../profiles/runtime-default-x86_64.json"
    ))
    .expect("the default profile");
    for i in 0..profiles {
        std::fs::write(root.join(format!("profiles/p{i}.json")), &good).unwrap();
    }
    let list: Vec<String> = (0..profiles)
        .map(|i| format!("profiles/p{i}.json"))
        .collect();
    let list = list.join(",");
    let infos: HashMap<String, RuntimeClassInfo> = (0..classes)
        .map(|c| {
            let rc: RuntimeClass = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("class-{c}"),
                    "annotations": {"nodeproof.dev/localhost-profiles": list}},
                "handler": "runc"
            }))
            .unwrap();
            (format!("class-{c}"), RuntimeClassInfo::from(&rc))
        })
        .collect();
    let node = NodeContext {
        seccomp_root: root.to_path_buf(),
        labels: Default::default(),
        taints: Vec::new(),
        handlers: Some(["runc".to_string()].into()),
        lint: LintOptions {
            check_listener: false,
            ..LintOptions::default()
        },
        gpu: Default::default(),
    };
    let mut judge = Judge::new(
        Default::default(),
        nodeproof::observe::profiles::read_reference,
    );
    let start = Instant::now();
    let verdicts = judge_all(&mut judge, &infos, &node);
    let cold = start.elapsed();
    let ready = verdicts
        .iter()
        .filter(|v| v.state == ContractState::Ready)
        .count();
    assert_eq!(ready, classes, "{verdicts:?}");
    let start = Instant::now();
    for _ in 0..rounds {
        judge_all(&mut judge, &infos, &node);
    }
    let warm = start.elapsed() / rounds.max(1) as u32;
    println!(
        "{classes} classes x {profiles} profiles ({} distinct files, 2 modes): cold round {:.1} ms ({:.2} ms per file and mode linted), warm round {:.2} ms ({:.1} us per class and file), {ready} ready",
        profiles,
        cold.as_secs_f64() * 1e3,
        cold.as_secs_f64() * 1e3 / (2 * profiles) as f64,
        warm.as_secs_f64() * 1e3,
        warm.as_secs_f64() * 1e6 / (classes * profiles) as f64,
    );
}
