//! The operators' monitoring parts, held to what nodeproof really exports:
//!
//! - `deploy/prometheus/nodeproof.rules.yml` passes `promtool check rules`, and
//!   `promtool test rules nodeproof.tests.yml` makes every alert fire and stay
//!   silent where it should; every alert has a summary, a description and a
//!   runbook section in docs/runbooks.md.
//! - `deploy/grafana/nodeproof.json` has a per-node view (variable `node`) and
//!   a fleet view of the same metrics, and its PromQL parses (promtool).
//! - Every metric name in a PromQL expression of the dashboard or the rules is
//!   exported by a live agent (`nodeproof run` with the fake NVML, the fake
//!   kubelet and the test API server, so that the GPU and pod families exist)
//!   or a live gate controller, read from their `/metrics`; and every family
//!   they export is on the dashboard.
//!
//! The names come from a small PromQL tokenizer ([`metric_names`]): it skips
//! strings, label matchers, ranges, Grafana variables, numbers and durations,
//! functions and aggregations (an identifier followed by `(`), PromQL's
//! keywords and the label lists of `by`/`without`/`on`/`ignoring`/`group_*`.
//! A metric selected only as `{__name__="..."}` is not seen; none of ours is.

use crate::fake_nvml_support;
use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fake_nvml_support::Scenario;
use nodeproof_podresources::fake::{FakeKubelet, KubeletState};
use nodeproof_podresources::{ContainerAllocation, DeviceSet, PodAllocation};
use nodeproof_testkit::{require, Need};
use serde_json::{json, Value};
use support::agent::{free_port, get, seccomp_root, Agent};
use support::apiserver::{Identity, TestApiServer};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

const RULES: &str = "deploy/prometheus/nodeproof.rules.yml";
const RULE_TESTS: &str = "deploy/prometheus/nodeproof.tests.yml";
const DASHBOARD: &str = "deploy/grafana/nodeproof.json";
const RUNBOOKS: &str = "docs/runbooks.md";

/// Series Prometheus makes itself for every target, not exported by anyone.
const PROMETHEUS_SERIES: &[&str] = &["up"];

// ---------------------------------------------------------------- PromQL names

/// PromQL's keywords that are not metric names wherever they stand.
const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "atan2",
    "inf",
    "nan", // operators, modifiers, literals
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio", // aggregations
];
/// Keywords followed by a parenthesised list of label names.
const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The index just past the bracket closing the one at `open`, skipping
/// strings inside (a `}` in a label value does not close a matcher).
fn skip_bracketed(s: &[char], open: usize, close: char) -> usize {
    let mut i = open + 1;
    while i < s.len() && s[i] != close {
        i = if matches!(s[i], '"' | '\'' | '`') {
            skip_string(s, i)
        } else {
            i + 1
        };
    }
    i + 1
}

/// The index just past the string starting at `start` (`\` escapes in `"`
/// and `'` strings; none in backquoted ones).
fn skip_string(s: &[char], start: usize) -> usize {
    let quote = s[start];
    let mut i = start + 1;
    while i < s.len() && s[i] != quote {
        i += if s[i] == '\\' && quote != '`' { 2 } else { 1 };
    }
    i + 1
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The metric names a PromQL expression (Grafana variables allowed) selects.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let s: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let next_non_space = |mut j: usize| {
        while j < s.len() && s[j].is_whitespace() {
            j += 1;
        }
        j
    };
    while i < s.len() {
        let c = s[i];
        if matches!(c, '"' | '\'' | '`') {
            i = skip_string(&s, i);
        } else if c == '{' {
            i = skip_bracketed(&s, i, '}');
        } else if c == '[' {
            i = skip_bracketed(&s, i, ']');
        } else if c == '#' {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c == '$' {
            // $node, ${node}, ${node:regex}, $__rate_interval
            i += 1;
            if s.get(i) == Some(&'{') {
                i = skip_bracketed(&s, i, '}');
            } else {
                while i < s.len() && is_ident(s[i]) {
                    i += 1;
                }
            }
        } else if c.is_ascii_digit() || (c == '.' && s.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            // 95, 0.9, 1e3, 0x1f, 5m, 1h30m
            while i < s.len() && (is_ident(s[i]) || s[i] == '.') {
                i += 1;
            }
        } else if is_ident_start(c) {
            let start = i;
            while i < s.len() && is_ident(s[i]) {
                i += 1;
            }
            let word: String = s[start..i].iter().collect();
            let lower = word.to_ascii_lowercase();
            let after = next_non_space(i);
            if GROUPING.contains(&lower.as_str()) {
                if s.get(after) == Some(&'(') {
                    i = skip_bracketed(&s, after, ')');
                }
            } else if KEYWORDS.contains(&lower.as_str()) || s.get(after) == Some(&'(') {
                // a keyword, or a function call
            } else {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

/// A Grafana query variable's metric names: `label_values(selector, label)`
/// names its selector's; anything else is PromQL.
fn variable_metric_names(query: &str) -> BTreeSet<String> {
    match query
        .trim()
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'))
    {
        Some(args) => metric_names(args.rsplit_once(',').map_or(args, |(sel, _)| sel)),
        None => metric_names(query),
    }
}

/// Every sample name a `/metrics` exposition can have, from its `# TYPE`
/// lines: OpenMetrics counters are sampled as `_total`, histograms as
/// `_bucket`/`_sum`/`_count` (and `_created` where an encoder writes it).
fn exported_names(exposition: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for line in exposition.lines() {
        let Some((family, kind)) = line.strip_prefix("# TYPE ").and_then(|r| r.split_once(' '))
        else {
            continue;
        };
        let suffixes: &[&str] = match kind {
            "counter" => &["_total", "_created"],
            "histogram" | "gaugehistogram" => &["_bucket", "_sum", "_count", "_created"],
            "summary" => &["", "_sum", "_count", "_created"],
            "info" => &["_info"],
            _ => &[""],
        };
        for suffix in suffixes {
            names.insert(format!("{family}{suffix}"), family.to_string());
        }
    }
    names
}

/// The names in `used` that nothing exports, with where each is used.
fn unexported(
    used: &BTreeMap<String, Vec<String>>,
    exported: &BTreeMap<String, String>,
) -> Vec<String> {
    used.iter()
        .filter(|(name, _)| {
            !exported.contains_key(name.as_str()) && !PROMETHEUS_SERIES.contains(&name.as_str())
        })
        .map(|(name, places)| format!("{name} (in {})", places.join("; ")))
        .collect()
}

// ---------------------------------------------------------------- the files

fn dashboard() -> Value {
    serde_json::from_str(&std::fs::read_to_string(repo(DASHBOARD)).unwrap()).expect(DASHBOARD)
}

fn rules() -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(repo(RULES)).unwrap()).expect(RULES)
}

/// Every (place, PromQL) of the dashboard: panel targets, with the row they are in.
fn dashboard_exprs(d: &Value) -> Vec<(String, String, String)> {
    let mut row = String::new();
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        if p["type"] == "row" {
            row = p["title"].as_str().unwrap().to_string();
            assert!(
                p["panels"].as_array().is_none_or(|v| v.is_empty()),
                "collapsed rows are not read: {}",
                p["title"]
            );
            continue;
        }
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().expect("every target has an expr");
            out.push((
                row.clone(),
                format!("panel {:?} {}", p["title"].as_str().unwrap(), t["refId"]),
                expr.to_string(),
            ));
        }
    }
    out
}

/// Every metric name of the dashboard and the rules, with where it is used.
fn used_names(d: &Value, r: &Value) -> BTreeMap<String, Vec<String>> {
    let mut used: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (_, place, expr) in dashboard_exprs(d) {
        for n in metric_names(&expr) {
            used.entry(n)
                .or_default()
                .push(format!("{DASHBOARD} {place}"));
        }
    }
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        if v["type"] == "query" {
            for n in variable_metric_names(v["definition"].as_str().unwrap()) {
                used.entry(n)
                    .or_default()
                    .push(format!("{DASHBOARD} variable {}", v["name"]));
            }
        }
    }
    for rule in alert_rules(r) {
        for n in metric_names(rule["expr"].as_str().unwrap()) {
            used.entry(n)
                .or_default()
                .push(format!("{RULES} {}", rule["alert"].as_str().unwrap()));
        }
    }
    used
}

fn alert_rules(r: &Value) -> Vec<&Value> {
    r["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules"))
        .collect()
}

// ---------------------------------------------------------------- extractor tests

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn the_extractor_names_metrics_and_skips_functions_keywords_labels_and_strings() {
    assert_eq!(
        metric_names(
            r#"sum by (instance, namespace) (rate(foo_total{a="b",c=~"x|y}"}[5m])) / on (instance) group_left (node) bar
               > 0.5 and baz offset 1h30m unless absent(qux{job="nodeproof"}) or
               histogram_quantile(0.9, sum without(pod) (rate(h_bucket{x='\'}'}[$__rate_interval]))) * 100 < 1e3
               or label_replace(up, "a", "$1", "b", "(.*)") or max_over_time(m:rec[10m:1m]) > bool Inf
               or sum(x{instance=~"$node"}) by (le) or count_values("v", y) or z @ 1700000000"#
        ),
        set(&[
            "foo_total",
            "bar",
            "baz",
            "qux",
            "h_bucket",
            "up",
            "m:rec",
            "x",
            "y",
            "z"
        ])
    );
    // Grafana's variables: the selector of label_values, not its label.
    assert_eq!(
        variable_metric_names("label_values(nodeproof_build_info{job=\"a,b\"}, instance)"),
        set(&["nodeproof_build_info"])
    );
    assert_eq!(
        variable_metric_names("label_values(instance)"),
        set(&["instance"]),
        "one argument is a label name; Grafana asks every series for it (our dashboard does not)"
    );
    assert_eq!(metric_names("time() - ${node:regex}"), set(&[]));
}

#[test]
fn a_name_nothing_exports_is_reported_and_suffixes_follow_the_family_type() {
    let exposition = "# HELP a_requests Requests.\n# TYPE a_requests counter\na_requests_total 1\n\
                      # HELP a_seconds Latency.\n# TYPE a_seconds histogram\n\
                      # HELP a_ready Ready.\n# TYPE a_ready gauge\na_ready 1\n# EOF\n";
    let exported = exported_names(exposition);
    let dashboard = json!({"panels": [
        {"type": "row", "title": "Node", "panels": []},
        {"type": "timeseries", "title": "p", "targets": [
            {"refId": "A", "expr": "rate(a_requests_total[5m]) / a_ready"},
            {"refId": "B", "expr": "histogram_quantile(0.5, rate(a_seconds_bucket[5m])) + a_seconds_sum / a_seconds_count"},
            {"refId": "C", "expr": "a_requests + a_ready_total + a_temperature + up"}]}],
        "templating": {"list": [{"type": "query", "name": "node", "definition": "label_values(a_gone, instance)"}]}});
    let used = used_names(&dashboard, &json!({"groups": []}));
    assert_eq!(
        unexported(&used, &exported),
        [
            "a_gone (in deploy/grafana/nodeproof.json variable \"node\")",
            "a_ready_total (in deploy/grafana/nodeproof.json panel \"p\" \"C\")",
            "a_requests (in deploy/grafana/nodeproof.json panel \"p\" \"C\")",
            "a_temperature (in deploy/grafana/nodeproof.json panel \"p\" \"C\")",
        ]
    );
}

// ---------------------------------------------------------------- rules and runbooks

/// GitHub's heading anchor for our headings (alert names: letters and digits).
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn every_alert_has_a_summary_a_description_a_runbook_section_and_unit_tests() {
    let r = rules();
    let runbooks = std::fs::read_to_string(repo(RUNBOOKS)).unwrap();
    let sections: BTreeSet<String> = runbooks
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .map(str::to_string)
        .collect();
    let tests: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(repo(RULE_TESTS)).unwrap()).unwrap();
    let tested: BTreeSet<&str> = tests["tests"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().unwrap())
        .map(|c| c["alertname"].as_str().unwrap())
        .collect();
    let mut alerts = BTreeSet::new();
    for rule in alert_rules(&r) {
        let name = rule["alert"].as_str().expect("only alerting rules");
        assert!(alerts.insert(name.to_string()), "{name} twice");
        let a = &rule["annotations"];
        for key in ["summary", "description"] {
            assert!(
                a[key].as_str().is_some_and(|s| s.len() > 10),
                "{name}: no {key}"
            );
        }
        assert!(
            ["critical", "warning", "info"].contains(&rule["labels"]["severity"].as_str().unwrap()),
            "{name}: severity"
        );
        assert_eq!(
            a["runbook_url"].as_str(),
            Some(format!("{RUNBOOKS}#{}", anchor(name)).as_str()),
            "{name}"
        );
        assert!(
            sections.contains(name),
            "{name}: no `### {name}` in {RUNBOOKS}"
        );
        // Firing and silent cases: at least one check with and one without alerts.
        let checks: Vec<&Value> = tests["tests"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|t| t["alert_rule_test"].as_array().unwrap())
            .filter(|c| c["alertname"] == name)
            .collect();
        assert!(
            checks
                .iter()
                .any(|c| c["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()))
                && checks
                    .iter()
                    .any(|c| c["exp_alerts"].as_array().is_none_or(|a| a.is_empty())),
            "{name}: {RULE_TESTS} needs a case where it fires and one where it stays silent"
        );
    }
    assert_eq!(tested, alerts.iter().map(String::as_str).collect());
    // No runbook for an alert that does not exist (sections other than alerts are `##`).
    assert_eq!(sections, alerts, "### sections of {RUNBOOKS}");
}

fn promtool(args: &[&str], dir: &Path) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

#[test]
fn promtool_checks_the_rules_and_their_unit_tests_pass() {
    let Some(_) = require(&[Need::Tool("promtool")]) else {
        return;
    };
    let dir = repo("deploy/prometheus");
    let checked = promtool(&["check", "rules", "nodeproof.rules.yml"], &dir);
    let alerts = alert_rules(&rules()).len();
    assert!(
        checked.contains(&format!("SUCCESS: {alerts} rules found")),
        "{checked}"
    );
    let tested = promtool(&["test", "rules", "nodeproof.tests.yml"], &dir);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

/// Grafana's variables as a query would see them, so promtool can parse it.
fn as_prometheus_sees_it(expr: &str) -> String {
    expr.replace("$__rate_interval", "5m")
        .replace("$__range", "1h")
        .replace("$node", ".*")
}

#[test]
fn the_dashboards_promql_parses_and_each_view_shows_the_same_metrics() {
    let d = dashboard();
    assert_eq!(d["uid"], "nodeproof");
    // Grafana keys panels by id: one each.
    let ids: Vec<u64> = d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_u64().expect("a panel id"))
        .collect();
    assert_eq!(
        ids.iter().collect::<BTreeSet<_>>().len(),
        ids.len(),
        "{ids:?}"
    );
    let node_var = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "node")
        .expect("a template variable `node`");
    assert_eq!(node_var["type"], "query");
    let exprs = dashboard_exprs(&d);
    let names_in = |row: &str| -> BTreeSet<String> {
        exprs
            .iter()
            .filter(|(r, _, _)| r.starts_with(row))
            .flat_map(|(_, _, e)| metric_names(e))
            .collect()
    };
    let node = names_in("Node");
    let fleet = names_in("Fleet");
    // Every per-node query is about the chosen node(s).
    for (row, place, expr) in exprs.iter().filter(|(r, _, _)| r.starts_with("Node")) {
        assert!(
            expr.contains("instance=~\"$node\""),
            "{row} {place}: {expr}"
        );
    }
    // The fleet shows every per-node metric; the per-node view every
    // fleet metric but the gate controller's (cluster-wide) and `up`.
    assert_eq!(
        node.difference(&fleet).collect::<Vec<_>>(),
        Vec::<&String>::new()
    );
    let fleet_only: Vec<&String> = fleet
        .difference(&node)
        .filter(|n| !n.starts_with("nodeproof_gate_") && !PROMETHEUS_SERIES.contains(&n.as_str()))
        .collect();
    assert_eq!(fleet_only, Vec::<&String>::new());

    let Some(_) = require(&[Need::Tool("promtool")]) else {
        return;
    };
    // Each expression as a recording rule: `promtool check rules` parses it.
    let dir = tempfile::tempdir().unwrap();
    let rules: Vec<Value> = exprs
        .iter()
        .enumerate()
        .map(|(i, (_, _, e))| json!({"record": format!("dashboard:expr_{i}"), "expr": as_prometheus_sees_it(e)}))
        .collect();
    let file = json!({"groups": [{"name": "dashboard", "rules": rules}]});
    // JSON is YAML.
    std::fs::write(dir.path().join("dashboard.rules.yml"), file.to_string()).unwrap();
    let checked = promtool(&["check", "rules", "dashboard.rules.yml"], dir.path());
    assert!(
        checked.contains(&format!("SUCCESS: {} rules found", exprs.len())),
        "{checked}"
    );
}

// ---------------------------------------------------------------- live /metrics

fn uuid(i: u32) -> String {
    format!("GPU-fa4e0000-0000-4000-8000-{i:012}")
}

fn until(what: &str, within: Duration, log: &dyn Fn() -> String, f: &mut dyn FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < within,
            "not within {within:?}: {what}\n--- log ---\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The agent with every family it can export here: the fake NVML (GPU
/// families; XID 79 on GPU 2, held by a running pod: `nodeproof_gpu_faults`),
/// the fake kubelet, the test API server (the pods watcher, hence the pod
/// families); and the gate controller against the same API server.
#[test]
fn every_metric_the_dashboard_and_the_rules_name_is_exported_by_a_live_agent_or_gate_controller() {
    let Some(_) = require(&[Need::Tool("cc")]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_token("sa-gate", Identity::GateControllerServiceAccount);
    server.add_node("n1", json!([]));
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let root = seccomp_root(dir.path(), true);
    let s = Scenario::new("gpus 4\n", 4);
    let socket = s.dir.path().join("kubelet.sock");
    let _kubelet = FakeKubelet::start(
        &socket,
        KubeletState {
            allocatable: vec![DeviceSet {
                resource: "nvidia.com/gpu".into(),
                ids: (0..4).map(uuid).collect(),
            }],
            pods: vec![PodAllocation {
                namespace: "ml".into(),
                name: "vllm-0".into(),
                containers: vec![ContainerAllocation {
                    name: "main".into(),
                    devices: vec![DeviceSet {
                        resource: "nvidia.com/gpu".into(),
                        ids: vec![uuid(2)],
                    }],
                    claims: Vec::new(),
                }],
            }],
            ..KubeletState::default()
        },
    )
    .unwrap();
    server.put(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "vllm-0", "namespace": "ml", "uid": "u-vllm"},
            "spec": {"nodeName": "n1", "containers": [{"name": "main"}]},
            "status": {"phase": "Running"}}),
    );
    let config = format!(
        "[seccomp]\nroot = \"{}\"\n[report]\nkubeconfig = \"{}\"\nnode-name = \"n1\"\nstart-spread-s = 0\n\
         [gpu]\nnvml-library = \"{}\"\nsysfs-root = \"{}\"\npod-resources-socket = \"{}\"\n\
         [daemon]\ngpu-interval-s = 1\n",
        root.display(),
        kubeconfig.display(),
        s.library().display(),
        s.sysfs().display(),
        socket.display()
    );
    let mut agent = Agent::start(dir.path(), &config);
    agent.wait_ready(Duration::from_secs(30));
    let log = || agent.log_text();
    until("pods watched", Duration::from_secs(15), &log, &mut || {
        agent.get("/healthz/pods").1.contains("pods 1 watched")
    });
    s.set("gpus 4\nxid 1 2 79\n");
    let mut metrics = String::new();
    until(
        "the GPU fault on vllm-0 in /metrics",
        Duration::from_secs(15),
        &log,
        &mut || {
            metrics = agent.get("/metrics").1;
            metrics.contains("nodeproof_gpu_faults_total{namespace=\"ml\",pod=\"vllm-0\"")
        },
    );
    // The heartbeat is a sample, and recent.
    let beat: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("nodeproof_heartbeat_timestamp_seconds "))
        .expect("a heartbeat sample")
        .parse()
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!((now - beat).abs() < 10.0, "heartbeat {beat}, now {now}");

    // The gate controller's families, from its own /metrics.
    let gate_config = dir.path().join("gate.toml");
    std::fs::write(
        &gate_config,
        "[gate.gates.\"nodeproof.dev/gpu-driver-ready\"]\nconditions = [\"GPUDriverReady\"]\n",
    )
    .unwrap();
    let port = free_port();
    let gate_log = dir.path().join("gate.log");
    let mut gate = Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .arg("gate-controller")
        .arg("--config")
        .arg(&gate_config)
        .arg("--kubeconfig")
        .arg(server.kubeconfig(dir.path(), "sa-gate"))
        .args(["--namespace", "nodeproof", "--identity", "a"])
        .arg(format!("--listen=127.0.0.1:{port}"))
        .env_remove("JOURNAL_STREAM")
        .env_remove("POD_NAME")
        .env_remove("POD_NAMESPACE")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&gate_log).unwrap())
        .spawn()
        .unwrap();
    let gate_text = || std::fs::read_to_string(&gate_log).unwrap_or_default();
    let mut gate_metrics = String::new();
    until(
        "the gate controller leads",
        Duration::from_secs(20),
        &gate_text,
        &mut || {
            gate_metrics = get(port, "/metrics").1;
            // The sample, not the HELP line (`# HELP nodeproof_gate_leader 1
            // while ...` holds the same words before the replica leads).
            gate_metrics.lines().any(|l| l == "nodeproof_gate_leader 1")
        },
    );
    let _ = gate.kill();
    let _ = gate.wait();
    assert!(agent.stop(), "{}", agent.log_text());

    let mut exported = exported_names(&metrics);
    exported.extend(exported_names(&gate_metrics));
    let used = used_names(&dashboard(), &rules());
    assert_eq!(
        unexported(&used, &exported),
        Vec::<String>::new(),
        "named but not exported; the agent exports:\n{metrics}\nthe gate controller:\n{gate_metrics}"
    );
    // And the dashboard shows every family exported.
    let on_dashboard: BTreeSet<&String> = used_names(&dashboard(), &json!({"groups": []}))
        .into_keys()
        .filter_map(|n| exported.get(&n))
        .collect();
    let families: BTreeSet<&String> = exported.values().collect();
    assert_eq!(
        families.difference(&on_dashboard).collect::<Vec<_>>(),
        Vec::<&&String>::new(),
        "exported but not on {DASHBOARD}"
    );
}
