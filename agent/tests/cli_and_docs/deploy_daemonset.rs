//! deploy/base/daemonset.yaml parsed back with k8s-openapi's types (as kubectl
//! would send it) and held to what the agent needs and no more: host PID,
//! no privileged container, exactly the capabilities nodeproof.service
//! grants (everything else dropped), every host path read-only, the
//! ServiceAccount deploy/base/rbac-agent.yaml binds, and a ConfigMap the agent's
//! own parser accepts, whose seccomp root is the one mounted.
//!
//! And deploy/'s kustomizations rendered by the real `kubectl kustomize`:
//! every object of every overlay parses as its type, every container runs
//! the one image the base names, and the RBAC granted is exactly the RBAC of
//! the manifests the request-log tests (rbac_agent.rs, cluster_check.rs,
//! gate_controller.rs) hold to what nodeproof really sends.

use std::path::Path;

use std::collections::BTreeMap;
use std::process::Command;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, PodSpec, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use nodeproof_testkit::{require, Need};
use serde_json::Value;

use nodeproof::config::Config;

fn manifest(name: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/base")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_saphyr::from_multiple(&text).expect("YAML")
}

fn one<T: serde::de::DeserializeOwned>(docs: &[Value], kind: &str) -> T {
    let mut of_kind = docs.iter().filter(|d| d["kind"] == kind);
    let doc = of_kind.next().unwrap_or_else(|| panic!("no {kind}"));
    assert!(of_kind.next().is_none(), "more than one {kind}");
    serde_json::from_value(doc.clone()).unwrap_or_else(|e| panic!("{kind}: {e}"))
}

struct Deployed {
    daemonset: DaemonSet,
    config: ConfigMap,
}

fn deployed() -> Deployed {
    let docs = manifest("daemonset.yaml");
    Deployed {
        daemonset: one(&docs, "DaemonSet"),
        config: one(&docs, "ConfigMap"),
    }
}

fn pod(d: &Deployed) -> &PodSpec {
    d.daemonset
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
}

fn agent(d: &Deployed) -> &Container {
    let pod = pod(d);
    assert_eq!(pod.containers.len(), 1, "one container: the agent");
    assert!(pod.init_containers.is_none(), "no init container");
    &pod.containers[0]
}

/// The capabilities nodeproof.service gives the agent (`AmbientCapabilities=`),
/// as Kubernetes names them (no `CAP_`).
fn unit_capabilities() -> Vec<String> {
    let unit = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd/nodeproof.service"),
    )
    .unwrap();
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("AmbientCapabilities="))
        .expect("AmbientCapabilities= in nodeproof.service");
    let mut caps: Vec<String> = line
        .split_whitespace()
        .map(|c| c.strip_prefix("CAP_").unwrap().to_owned())
        .collect();
    caps.sort();
    caps
}

#[test]
fn the_agent_has_host_pid_and_exactly_the_units_capabilities_without_privilege() {
    let d = deployed();
    assert_eq!(pod(&d).host_pid, Some(true));
    for unneeded in [pod(&d).host_network, pod(&d).host_ipc] {
        assert_ne!(unneeded, Some(true));
    }
    let sc = agent(&d)
        .security_context
        .as_ref()
        .expect("a securityContext");
    assert_ne!(sc.privileged, Some(true), "privileged: true");
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    let caps = sc.capabilities.as_ref().expect("capabilities listed");
    assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_owned()][..]));
    let mut added = caps.add.clone().expect("capabilities added");
    added.sort();
    assert_eq!(added, unit_capabilities());
    let seccomp = sc.seccomp_profile.as_ref().expect("a seccomp profile");
    assert_ne!(seccomp.type_, "Unconfined");
    if let Some(psc) = &pod(&d).security_context {
        assert!(psc
            .seccomp_profile
            .as_ref()
            .is_none_or(|p| p.type_ != "Unconfined"));
    }
}

#[test]
fn every_host_path_is_mounted_read_only_but_the_agents_own_state() {
    let d = deployed();
    let volumes = pod(&d).volumes.as_ref().unwrap();
    let mounts = agent(&d).volume_mounts.as_ref().unwrap();
    let mut host_paths = 0;
    for v in volumes {
        let Some(hp) = &v.host_path else { continue };
        host_paths += 1;
        assert!(
            !["/", "/proc", "/sys", "/var/lib/kubelet", "/etc"].contains(&hp.path.as_str()),
            "{} mounts the whole of {}",
            v.name,
            hp.path
        );
        let m: Vec<_> = mounts.iter().filter(|m| m.name == v.name).collect();
        assert!(!m.is_empty(), "host path {} is not mounted", v.name);
        // The one writable place: the agent's own state (profile versions,
        // recordings), where StateDirectory= puts nodeproof.service's.
        if hp.path == "/var/lib/nodeproof" {
            assert!(m
                .iter()
                .all(|m| m.mount_path == "/var/lib/nodeproof" && m.read_only != Some(true)));
            continue;
        }
        for m in m {
            assert_eq!(
                m.read_only,
                Some(true),
                "{} is mounted writable",
                m.mount_path
            );
        }
    }
    assert!(host_paths > 0);
    for m in mounts {
        assert!(
            volumes.iter().any(|v| v.name == m.name),
            "mount {} has no volume",
            m.name
        );
    }
}

#[test]
fn it_runs_as_rbac_agents_serviceaccount_with_its_node_name() {
    let d = deployed();
    let rbac = manifest("rbac-agent.yaml");
    let sa: ServiceAccount = one(&rbac, "ServiceAccount");
    assert_eq!(
        pod(&d).service_account_name,
        sa.metadata.name,
        "not rbac-agent.yaml's ServiceAccount"
    );
    assert_eq!(d.daemonset.metadata.namespace, sa.metadata.namespace);
    assert_ne!(pod(&d).automount_service_account_token, Some(false));
    let env = agent(&d).env.as_ref().unwrap();
    let node_name = env
        .iter()
        .find(|e| e.name == "NODE_NAME")
        .expect("NODE_NAME");
    let field = node_name
        .value_from
        .as_ref()
        .and_then(|v| v.field_ref.as_ref())
        .expect("NODE_NAME from the downward API");
    assert_eq!(field.field_path, "spec.nodeName");
}

#[test]
fn the_config_map_is_a_config_the_agent_accepts_and_its_root_is_mounted() {
    let d = deployed();
    let text = d
        .config
        .data
        .as_ref()
        .and_then(|data| data.get("config.toml"))
        .expect("config.toml in the ConfigMap");
    let config =
        Config::parse(text, Path::new("config.toml")).expect("the agent's parser accepts it");
    assert!(
        !config.daemon.listen.ip().is_loopback(),
        "the probes reach the pod's address, not its loopback"
    );
    let c = agent(&d);
    let mounts = c.volume_mounts.as_ref().unwrap();
    let config_mount = mounts
        .iter()
        .find(|m| {
            pod(&d).volumes.as_ref().unwrap().iter().any(|v| {
                v.name == m.name
                    && v.config_map.as_ref().map(|cm| cm.name.as_str())
                        == d.config.metadata.name.as_deref()
            })
        })
        .expect("the ConfigMap is mounted");
    assert_eq!(
        c.args.as_deref().unwrap(),
        [
            "run".to_owned(),
            "--config".to_owned(),
            format!("{}/config.toml", config_mount.mount_path)
        ]
    );
    let root = config.seccomp.root.to_str().unwrap();
    let seccomp_mount = mounts
        .iter()
        .find(|m| m.mount_path == root)
        .unwrap_or_else(|| panic!("the seccomp root {root} is not mounted"));
    let volume = pod(&d)
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == seccomp_mount.name)
        .unwrap();
    assert_eq!(
        volume.host_path.as_ref().map(|h| h.path.as_str()),
        Some("/var/lib/kubelet/seccomp"),
        "the host's kubelet seccomp root"
    );
    // The probes are the agent's endpoints on the configured port.
    let port = config.daemon.listen.port();
    let ports = c.ports.as_ref().unwrap();
    assert!(ports.iter().any(|p| p.container_port == i32::from(port)));
    for (probe, path) in [
        (&c.liveness_probe, "/healthz"),
        (&c.readiness_probe, "/readyz"),
    ] {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .expect("an HTTP probe");
        assert_eq!(get.path.as_deref(), Some(path));
    }
}

fn deploy_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// deploy/`dir` rendered by `kubectl kustomize`, one JSON value per object.
fn kustomize(dir: &str) -> Vec<Value> {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(deploy_dir().join(dir))
        .output()
        .expect("kubectl runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kubectl kustomize {dir}: {stderr}");
    assert!(
        !stderr.contains("Error"),
        "kubectl kustomize {dir}: {stderr}"
    );
    serde_saphyr::from_multiple(&String::from_utf8_lossy(&out.stdout)).expect("YAML")
}

/// The base's `images:` entry: the one image every container runs.
fn the_image() -> String {
    let text = std::fs::read_to_string(deploy_dir().join("base/kustomization.yaml")).unwrap();
    let k: Value = serde_saphyr::from_str(&text).unwrap();
    let images = k["images"].as_array().expect("base names the image");
    assert_eq!(images.len(), 1, "one image, named once");
    format!(
        "{}:{}",
        images[0]["newName"].as_str().unwrap(),
        images[0]["newTag"].as_str().unwrap()
    )
}

fn parse<T: serde::de::DeserializeOwned>(doc: &Value) -> T {
    serde_json::from_value(doc.clone())
        .unwrap_or_else(|e| panic!("{} {}: {e}", doc["kind"], doc["metadata"]["name"]))
}

/// (kind, namespace, name) → rules of every ClusterRole and Role in `docs`.
fn roles(docs: &[Value]) -> BTreeMap<(String, String, String), Vec<PolicyRule>> {
    let mut out = BTreeMap::new();
    for d in docs {
        let key = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            (
                d["kind"].as_str().unwrap().to_string(),
                m.namespace.clone().unwrap_or_default(),
                m.name.clone().unwrap_or_default(),
            )
        };
        match d["kind"].as_str() {
            Some("ClusterRole") => {
                let r: ClusterRole = parse(d);
                out.insert(key(&r.metadata), r.rules.unwrap_or_default());
            }
            Some("Role") => {
                let r: Role = parse(d);
                out.insert(key(&r.metadata), r.rules.unwrap_or_default());
            }
            _ => {}
        }
    }
    out
}

#[test]
fn every_overlay_renders_parses_and_runs_the_one_image_with_the_tested_rbac() {
    let Some(_) = require(&[Need::Tool("kubectl")]) else {
        return;
    };
    let image = the_image();
    // The manifests name the image without a tag: the base's kustomization
    // alone sets it, so an image that is not `image` was not rendered.
    for f in [
        "daemonset.yaml",
        "gate-controller.yaml",
        "cluster-check.yaml",
    ] {
        let text = std::fs::read_to_string(deploy_dir().join("base").join(f)).unwrap();
        let named: Vec<&str> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("image: "))
            .collect();
        assert_eq!(named, ["nodeproof"], "{f}");
    }
    // The RBAC the request-log tests check, from the manifests they read.
    let tested: Vec<Value> = [
        "rbac-agent.yaml",
        "gate-controller.yaml",
        "rbac-cluster-check.yaml",
    ]
    .iter()
    .flat_map(|f| manifest(f))
    .collect();
    let tested = roles(&tested);
    assert!(tested.len() >= 4, "{tested:?}");
    let rules_file: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(deploy_dir().join("prometheus/nodeproof.rules.yml")).unwrap(),
    )
    .unwrap();
    let dashboard = std::fs::read_to_string(deploy_dir().join("grafana/nodeproof.json")).unwrap();
    for dir in ["base", "overlays/monitoring", "overlays/gpu"] {
        let docs = kustomize(dir);
        let mut kinds = Vec::new();
        let mut service_accounts = Vec::new();
        let mut pods: Vec<(String, PodSpec)> = Vec::new();
        for d in &docs {
            let kind = d["kind"].as_str().unwrap_or_default().to_string();
            match kind.as_str() {
                "DaemonSet" => {
                    let o: DaemonSet = parse(d);
                    pods.push((kind.clone(), o.spec.unwrap().template.spec.unwrap()));
                }
                "Deployment" => {
                    let o: Deployment = parse(d);
                    pods.push((kind.clone(), o.spec.unwrap().template.spec.unwrap()));
                }
                "CronJob" => {
                    let o: CronJob = parse(d);
                    let job = o.spec.unwrap().job_template.spec.unwrap();
                    pods.push((kind.clone(), job.template.spec.unwrap()));
                }
                "ServiceAccount" => {
                    let o: ServiceAccount = parse(d);
                    service_accounts
                        .push((o.metadata.namespace.unwrap(), o.metadata.name.unwrap()));
                }
                "ConfigMap" => drop(parse::<ConfigMap>(d)),
                "Namespace" => drop(parse::<Namespace>(d)),
                "ClusterRole" => drop(parse::<ClusterRole>(d)),
                "Role" => drop(parse::<Role>(d)),
                "ClusterRoleBinding" => {
                    let o: ClusterRoleBinding = parse(d);
                    for s in o.subjects.unwrap_or_default() {
                        assert!(
                            service_accounts.is_empty()
                                || docs.iter().any(|x| x["kind"] == "ServiceAccount"
                                    && x["metadata"]["name"] == s.name.as_str()),
                            "{dir}: {} binds a ServiceAccount {} the overlay lacks",
                            o.metadata.name.as_deref().unwrap_or(""),
                            s.name
                        );
                    }
                }
                "RoleBinding" => drop(parse::<RoleBinding>(d)),
                "PrometheusRule" => {
                    assert_eq!(d["apiVersion"], "monitoring.coreos.com/v1");
                    assert_eq!(
                        d["spec"]["groups"], rules_file["groups"],
                        "prometheusrule.yaml's groups are not nodeproof.rules.yml's"
                    );
                }
                other => panic!("{dir}: an object of kind {other} no test knows"),
            }
            kinds.push(kind);
        }
        for k in ["DaemonSet", "Deployment", "CronJob"] {
            assert!(kinds.iter().any(|x| x == k), "{dir} has no {k}");
        }
        // Every container of every workload runs the image named in the base.
        for (kind, pod) in &pods {
            for c in pod
                .containers
                .iter()
                .chain(pod.init_containers.iter().flatten())
            {
                assert_eq!(
                    c.image.as_deref(),
                    Some(image.as_str()),
                    "{dir}: {kind} {}",
                    c.name
                );
            }
            // ... as a ServiceAccount the overlay creates.
            let sa = pod.service_account_name.clone().unwrap_or_default();
            assert!(
                service_accounts.iter().any(|(_, n)| *n == sa),
                "{dir}: {kind} runs as {sa}, which the overlay does not create"
            );
        }
        // Exactly the RBAC the request-log tests check: no role more, none less, no rule changed.
        assert_eq!(roles(&docs), tested, "{dir}");
        let runtime_class = pods
            .iter()
            .find(|(k, _)| k == "DaemonSet")
            .and_then(|(_, p)| p.runtime_class_name.clone());
        assert_eq!(
            runtime_class.is_some(),
            dir == "overlays/gpu",
            "{dir}: {runtime_class:?}"
        );
        let monitored = dir != "base";
        assert_eq!(
            kinds.iter().any(|k| k == "PrometheusRule"),
            monitored,
            "{dir}"
        );
        let board = docs
            .iter()
            .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "nodeproof-dashboard");
        assert_eq!(board.is_some(), monitored, "{dir}");
        if let Some(b) = board {
            assert_eq!(b["data"]["nodeproof.json"], dashboard.as_str());
            assert_eq!(b["metadata"]["labels"]["grafana_dashboard"], "1");
        }
    }
}
