//! What a release is made of, as a user gets it:
//!
//! - the image `cargo xtask image` writes, under the name
//!   deploy/base/kustomization.yaml gives it, imported into the private
//!   containerd the oracles run (`ctr images import`) and found through CRI
//!   by exactly the strings the rendered manifests hold, as the kubelet
//!   asks for them; `nodeproof --version` and `nodeproof profile lint` run
//!   in it, as the image's non-root user, with only the libraries it holds;
//! - the DaemonSet's pod run as the kubelet runs it (its image, security
//!   context, host mounts, host PID namespace, environment and ServiceAccount
//!   credentials), reporting to the test API server and attributing a
//!   denial in another pod to that pod by name, container and profile;
//! - the archive `cargo xtask dist` writes, unpacked with tar and checked
//!   with `sha256sum -c`, the same bytes when made twice.
//!
//! The image tests share one image (built once per run of this binary) and
//! the binary's one containerd.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use nodeproof_e2e::cri::pod::{kubelet_cgroup_parent, test_pod_uid, Qos};
use nodeproof_e2e::cri::{api, image::BUSYBOX_IMAGE, ContainerdOracle, Stage};
use nodeproof_testapi::{Identity, TestApiServer};
use nodeproof_testkit::{require, Need};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn cargo(args: &[&str]) -> std::process::Output {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(args)
        .current_dir(workspace())
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// What the image tests need: the oracle's containerd and kubectl (to
/// render deploy/base as a user applies it).
fn image_needs() -> Vec<Need> {
    [nodeproof_e2e::cri::ORACLE, &[Need::Tool("kubectl")]].concat()
}

/// The image `cargo xtask image` wrote for the test build's binary, with no
/// `--name`: the name is the kustomization's.
struct Built {
    bin: PathBuf,
    tarball: PathBuf,
    reference: String,
    digest: String,
}

/// Built once per run of this binary, under the target directory (a fixed directory,
/// written over by the next run: a static is never dropped).
fn built_image() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        // The binary the test build made (the debug one: the image test is of
        // the image, and a release build would double the suite's build).
        cargo(&["build", "-q", "-p", "nodeproof", "--bin", "nodeproof"]);
        // Where cargo put it: this test binary's own profile directory
        // (`CARGO_TARGET_DIR` or a cargo config may move it off `target/`).
        let bin = nodeproof_testkit::profile_dir().join("nodeproof");
        let out = nodeproof_testkit::target_dir().join("release-test-image");
        let printed = cargo(&[
            "run",
            "-q",
            "-p",
            "xtask",
            "--",
            "image",
            "--bin",
            &bin.to_string_lossy(),
            "--out",
            &out.to_string_lossy(),
        ]);
        let printed = String::from_utf8_lossy(&printed.stdout);
        let (reference, digest) = printed
            .trim()
            .split_once(' ')
            .unwrap_or_else(|| panic!("`xtask image` printed {printed:?}"));
        assert!(digest.starts_with("sha256:"), "{digest}");
        Built {
            bin,
            tarball: out.join("nodeproof-image.tar"),
            reference: reference.to_string(),
            digest: digest.to_string(),
        }
    })
}

/// deploy/base rendered by `kubectl kustomize`, as `kubectl apply -k` sends it.
fn rendered_base() -> Vec<Value> {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(workspace().join("deploy/base"))
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl kustomize deploy/base: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_saphyr::from_multiple(&String::from_utf8_lossy(&out.stdout)).expect("YAML")
}

/// The pod template's spec of each workload (`<Kind>/<name>`).
fn pod_specs(docs: &[Value]) -> BTreeMap<String, Value> {
    docs.iter()
        .filter_map(|d| {
            let spec = match d["kind"].as_str()? {
                "DaemonSet" | "Deployment" => &d["spec"]["template"]["spec"],
                "CronJob" => &d["spec"]["jobTemplate"]["spec"]["template"]["spec"],
                _ => return None,
            };
            Some((
                format!(
                    "{}/{}",
                    d["kind"].as_str()?,
                    d["metadata"]["name"].as_str()?
                ),
                spec.clone(),
            ))
        })
        .collect()
}

/// Imports the built image into `oracle`'s containerd; `ctr` must name it
/// by `reference`, as the README's path (c) shows.
fn import(oracle: &ContainerdOracle, built: &Built) {
    let printed = oracle.import(&built.tarball).expect("ctr images import");
    assert!(
        printed.contains(&format!("unpacking {} ({})", built.reference, built.digest)),
        "ctr printed {printed:?}"
    );
}

#[test]
fn the_manifests_images_are_found_by_the_cri_as_the_kubelet_asks_for_them() {
    let Some(_) = require(&image_needs()) else {
        return;
    };
    let built = built_image();
    let specs = pod_specs(&rendered_base());
    assert_eq!(
        specs.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "CronJob/nodeproof-cluster-check",
            "DaemonSet/nodeproof",
            "Deployment/nodeproof-gate-controller"
        ]
    );
    let oracle = ContainerdOracle::shared().expect("containerd oracle");
    import(&oracle, built);
    for (workload, spec) in &specs {
        for container in spec["containers"].as_array().expect("containers") {
            let image = container["image"].as_str().expect("an image");
            assert_eq!(image, built.reference, "{workload}: the archive's name");
            // The kubelet's EnsureImageExists: ImageStatus with the string as
            // written; not found, it pulls.
            let status = oracle
                .image_status(image)
                .expect("ImageStatus")
                .unwrap_or_else(|| {
                    panic!("{workload}: the CRI does not have {image}: the kubelet would pull it")
                });
            assert!(status.repo_tags.contains(&built.reference), "{status:?}");
            // RunPodSandbox and CreateContainer with the same string.
            let run = oracle
                .run_image(image, &["/usr/bin/nodeproof", "--version"])
                .expect("the version run");
            assert_eq!(
                (run.run.stage, run.run.exit_code),
                (Stage::Exited, Some(0)),
                "{workload}: {run:?}"
            );
        }
    }
}

#[test]
fn the_image_starts_in_containerd_as_its_user_and_lints_a_profile() {
    let Some(_) = require(&image_needs()) else {
        return;
    };
    let built = built_image();
    let oracle = ContainerdOracle::shared().expect("containerd oracle");
    import(&oracle, built);
    let reference = built.reference.as_str();

    let version = oracle
        .run_image(reference, &["/usr/bin/nodeproof", "--version"])
        .expect("the version run");
    assert_eq!(
        (version.run.stage, version.run.exit_code),
        (Stage::Exited, Some(0)),
        "{version:?}"
    );
    let own = String::from_utf8_lossy(
        &Command::new(&built.bin)
            .arg("--version")
            .output()
            .unwrap()
            .stdout,
    )
    .into_owned();
    assert_eq!(
        version.output, own,
        "the binary in the image is the one given"
    );
    assert_eq!(version.uid, Some(65532), "the image's non-root user");

    let lint = oracle
        .run_image(
            reference,
            &[
                "/usr/bin/nodeproof",
                "profile",
                "lint",
                "/usr/share/nodeproof/profiles/runtime-default-x86_64.json",
            ],
        )
        .expect("the lint run");
    assert_eq!(
        (lint.run.stage, lint.run.exit_code),
        (Stage::Exited, Some(0)),
        "{lint:?}"
    );
    assert!(
        lint.output.contains("runtime-default-x86_64.json"),
        "{}",
        lint.output
    );

    // No command: the image's entrypoint with its default arguments (--help).
    let help = oracle.run_image(reference, &[]).expect("the default run");
    assert_eq!(help.run.exit_code, Some(0), "{help:?}");
    assert!(help.output.contains("Usage: nodeproof"), "{}", help.output);
}

/// The Node the pods run on, as the test API server knows it.
const NODE: &str = "n1";
/// The workload's Localhost profile, relative to the seccomp root as a Pod names it.
const DENY_MKDIR: &str = "profiles/deny-mkdir.json";

/// The kubelet's CRI namespaces for a pod (pkg/kubelet/kuberuntime/helpers_linux.go,
/// namespacesForPod): its own PID namespace per container unless hostPID,
/// IPC shared in the pod. The network is the node's: see the test.
fn pod_namespaces(host_pid: bool) -> api::NamespaceOption {
    api::NamespaceOption {
        network: api::NamespaceMode::Node as i32,
        pid: if host_pid {
            api::NamespaceMode::Node
        } else {
            api::NamespaceMode::Container
        } as i32,
        ipc: api::NamespaceMode::Pod as i32,
        target_id: String::new(),
    }
}

/// The sandbox config the kubelet sends for a pod (generatePodSandboxConfig):
/// its metadata, the cgroup parent of its QoS class, its namespaces; no
/// pod-level seccomp profile (the kubelet's --seccomp-default is off by
/// default), so the pause runs unconfined.
fn sandbox_config(
    name: &str,
    namespace: &str,
    uid: &str,
    qos: Qos,
    host_pid: bool,
) -> api::PodSandboxConfig {
    api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: namespace.into(),
            attempt: 0,
        }),
        hostname: String::new(),
        log_directory: String::new(),
        labels: Default::default(),
        annotations: Default::default(),
        linux: Some(api::LinuxPodSandboxConfig {
            cgroup_parent: kubelet_cgroup_parent(qos, uid),
            security_context: Some(api::LinuxSandboxSecurityContext {
                namespace_options: Some(pod_namespaces(host_pid)),
                privileged: false,
                seccomp: Some(api::SecurityProfile {
                    profile_type: api::security_profile::ProfileType::Unconfined as i32,
                    localhost_ref: String::new(),
                }),
            }),
        }),
    }
}

/// A container's `securityContext` as the kubelet hands it to the CRI
/// (pkg/kubelet/kuberuntime/security_context.go): capabilities as written
/// (containerd adds the `CAP_` prefix), runAsUser, the read-only root
/// filesystem, `no_new_privs` = !allowPrivilegeEscalation, the seccomp
/// profile (Localhost: the path under the kubelet's seccomp root).
fn security_context(
    sc: &Value,
    host_pid: bool,
    seccomp_root: &Path,
) -> api::LinuxContainerSecurityContext {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|s| s.as_str().expect("a capability name").to_string())
            .collect()
    };
    let profile = &sc["seccompProfile"];
    let seccomp = match profile["type"].as_str() {
        Some("RuntimeDefault") => api::SecurityProfile {
            profile_type: api::security_profile::ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        },
        Some("Localhost") => api::SecurityProfile {
            profile_type: api::security_profile::ProfileType::Localhost as i32,
            localhost_ref: seccomp_root
                .join(
                    profile["localhostProfile"]
                        .as_str()
                        .expect("localhostProfile"),
                )
                .to_string_lossy()
                .into_owned(),
        },
        other => panic!("seccomp profile type {other:?}: not played here"),
    };
    assert_ne!(
        sc["privileged"], true,
        "a privileged container is not played here"
    );
    api::LinuxContainerSecurityContext {
        capabilities: Some(api::Capability {
            add_capabilities: strings(&sc["capabilities"]["add"]),
            drop_capabilities: strings(&sc["capabilities"]["drop"]),
        }),
        privileged: false,
        namespace_options: Some(pod_namespaces(host_pid)),
        run_as_user: sc["runAsUser"]
            .as_i64()
            .map(|value| api::Int64Value { value }),
        readonly_rootfs: sc["readOnlyRootFilesystem"] == true,
        no_new_privs: sc["allowPrivilegeEscalation"] == false,
        seccomp: Some(seccomp),
        seccomp_profile_path: String::new(),
    }
}

/// The status code of `GET path` on 127.0.0.1:`port`, as the kubelet's
/// httpGet probe sends it (any 2xx or 3xx passes); `None` while nothing answers.
fn probe(port: u16, path: &str) -> Option<u16> {
    fetch(port, path).map(|(code, _)| code)
}

/// A GET on the agent's port: the status code and the body.
fn fetch(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    let code = answer.split_whitespace().nth(1)?.parse().ok()?;
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Some((code, body.to_string()))
}

/// Polls `f` every 200 ms until it gives a value or `within` passes.
fn wait_for<T>(within: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// deploy/base's DaemonSet pod, run through containerd's CRI as the kubelet
/// runs it, against the test API server as the cluster. The one deviation
/// from a node: both pods use the node's network namespace (the oracle's
/// containerd has no CNI), so the agent reaches the test API server on
/// 127.0.0.1, where it listens, and serves its probes on a free loopback
/// port instead of the pod's own 0.0.0.0:9810. What the kubelet adds that no
/// check reads (/etc/hosts, resolv.conf, the termination log, resource
/// limits) is left out.
#[test]
fn the_daemonset_pod_as_the_kubelet_runs_it_reports_and_names_a_denied_pod() {
    let mut needs = image_needs();
    needs.extend([
        Need::Btf,
        Need::EbpfPrograms {
            built: !nodeproof_trace::bpf::is_stub(),
        },
    ]);
    let Some(_) = require(&needs) else {
        return;
    };
    let built = built_image();
    let started = Instant::now();
    let docs = rendered_base();
    let ds = &pod_specs(&docs)["DaemonSet/nodeproof"];
    let config_map = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "nodeproof-config")
        .expect("the agent's ConfigMap");
    let oracle = ContainerdOracle::shared().expect("containerd oracle");
    import(&oracle, built);

    // The cluster: the Node, the ServiceAccount's token.
    let server = TestApiServer::start();
    server.add_token("agent-sa-token", Identity::AgentServiceAccount);
    server.add_node(NODE, json!([]));

    // What the kubelet puts on the host for the pod: the ConfigMap's files,
    // the ServiceAccount's projected token, CA and namespace, and the seccomp
    // root (a directory of the test's in place of /var/lib/kubelet/seccomp).
    let host = tempfile::tempdir().expect("a temporary directory");
    let seccomp_root = host.path().join("seccomp");
    std::fs::create_dir_all(seccomp_root.join("profiles")).unwrap();
    std::fs::write(
        seccomp_root.join(DENY_MKDIR),
        r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO"}]}"#,
    )
    .unwrap();
    let config_dir = host.path().join("configmap");
    std::fs::create_dir_all(&config_dir).unwrap();
    let state_dir = host.path().join("state");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let probe_port = listener.local_addr().unwrap().port();
    drop(listener);
    for (file, text) in config_map["data"].as_object().expect("data") {
        let text = text.as_str().unwrap();
        // The deviation: the node's network, so a free loopback port; and one
        // agent, so no start spread before its first write.
        let ours = text.replace(
            "listen = \"0.0.0.0:9810\"",
            &format!("listen = \"127.0.0.1:{probe_port}\""),
        );
        assert_ne!(
            ours, text,
            "the ConfigMap no longer sets listen = \"0.0.0.0:9810\""
        );
        std::fs::write(
            config_dir.join(file),
            format!("{ours}\n[report]\nstart-spread-s = 0\n"),
        )
        .unwrap();
    }
    let sa_dir = host.path().join("serviceaccount");
    std::fs::create_dir_all(&sa_dir).unwrap();
    std::fs::write(sa_dir.join("token"), "agent-sa-token").unwrap();
    std::fs::write(sa_dir.join("ca.crt"), server.ca_pem()).unwrap();
    std::fs::write(sa_dir.join("namespace"), "kube-system").unwrap();

    let volumes: BTreeMap<&str, &Value> = ds["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .map(|v| (v["name"].as_str().unwrap(), v))
        .collect();
    let container = &ds["containers"][0];
    let host_pid = ds["hostPID"] == true;
    let mut mounts: Vec<api::Mount> = container["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .map(|m| {
            let volume = volumes[m["name"].as_str().unwrap()];
            let host_path = if volume["configMap"]["name"] == config_map["metadata"]["name"] {
                config_dir.clone()
            } else if let Some(p) = volume["hostPath"]["path"].as_str() {
                if p == "/var/lib/kubelet/seccomp" {
                    seccomp_root.clone()
                } else if p == "/var/lib/nodeproof" {
                    // DirectoryOrCreate, as the kubelet makes it.
                    std::fs::create_dir_all(&state_dir).unwrap();
                    state_dir.clone()
                } else {
                    PathBuf::from(p)
                }
            } else {
                panic!("volume {volume}: not played here")
            };
            api::Mount {
                container_path: m["mountPath"].as_str().unwrap().into(),
                host_path: host_path.to_string_lossy().into_owned(),
                readonly: m["readOnly"] == true,
            }
        })
        .collect();
    // The ServiceAccount admission plugin's volume, where the kubelet mounts it.
    mounts.push(api::Mount {
        container_path: "/var/run/secrets/kubernetes.io/serviceaccount".into(),
        host_path: sa_dir.to_string_lossy().into_owned(),
        readonly: true,
    });
    let mut envs: Vec<api::KeyValue> = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let value = match (
                &e["value"],
                e["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
            ) {
                (Value::String(v), _) => v.clone(),
                (_, Some("spec.nodeName")) => NODE.into(),
                _ => panic!("env {e}: not played here"),
            };
            api::KeyValue {
                key: e["name"].as_str().unwrap().into(),
                value,
            }
        })
        .collect();
    // The kubelet's service environment for the default/kubernetes Service.
    envs.push(api::KeyValue {
        key: "KUBERNETES_SERVICE_HOST".into(),
        value: "127.0.0.1".into(),
    });
    envs.push(api::KeyValue {
        key: "KUBERNETES_SERVICE_PORT".into(),
        value: server.addr.port().to_string(),
    });
    let agent_name = container["name"].as_str().unwrap().to_string();
    let agent_config = api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: agent_name.clone(),
            attempt: 0,
        }),
        image: Some(api::ImageSpec {
            image: container["image"].as_str().unwrap().into(),
        }),
        // The kubelet: `command` replaces the entrypoint, `args` its arguments.
        command: container["command"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| s.as_str().unwrap().into())
            .collect(),
        args: container["args"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| s.as_str().unwrap().into())
            .collect(),
        envs,
        mounts,
        linux: Some(api::LinuxContainerConfig {
            security_context: Some(security_context(
                &container["securityContext"],
                host_pid,
                &seccomp_root,
            )),
        }),
        ..Default::default()
    };

    // The agent's pod: burstable (requests below its memory limit).
    let agent_uid = test_pod_uid(&oracle);
    let agent_pod = oracle
        .run_pod(sandbox_config(
            "nodeproof-x1",
            "kube-system",
            &agent_uid,
            Qos::Burstable,
            host_pid,
        ))
        .expect("RunPodSandbox for the agent");
    let agent = agent_pod
        .create(agent_config)
        .expect("CreateContainer for the agent");
    agent_pod
        .start(&agent)
        .expect("StartContainer for the agent");
    let agent_started = Instant::now();
    let agent_log = || agent_pod.log(&agent_name);
    // The agent's own Pod, as the kubelet reports it: the threads it starts
    // are then denials in a pod it watches, under containerd's RuntimeDefault.
    let mut agent_spec = ds.clone();
    agent_spec["nodeName"] = json!(NODE);
    server.put(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "nodeproof-x1", "namespace": "kube-system", "uid": agent_uid},
            "spec": agent_spec,
            "status": {"phase": "Running", "containerStatuses": [{"name": agent_name,
                "containerID": format!("containerd://{agent}"), "image": built.reference,
                "imageID": "", "ready": true, "restartCount": 0, "started": true}]}}),
    );

    // It starts and reports its conditions on the Node.
    let tracing = wait_for(Duration::from_secs(60), || {
        let profiles = server.condition(NODE, "SeccompProfilesReady")?;
        let tracing = server.condition(NODE, "SeccompTracingReady")?;
        Some((profiles, tracing))
    })
    .unwrap_or_else(|| {
        panic!(
            "no conditions on Node {NODE} after 60 s; {:?}\nthe agent's log:\n{}",
            agent_pod.status(&agent),
            agent_log()
        )
    });
    // The kubelet's probes, at the paths the manifest gives.
    for probe_kind in ["readinessProbe", "livenessProbe"] {
        let path = container[probe_kind]["httpGet"]["path"]
            .as_str()
            .unwrap_or_else(|| panic!("the container's {probe_kind} is an httpGet"));
        let code = wait_for(Duration::from_secs(10), || {
            probe(probe_port, path).filter(|c| (200..400).contains(c))
        });
        assert!(
            code.is_some(),
            "{probe_kind} {path} failed: {:?}\n{}",
            probe(probe_port, path),
            agent_log()
        );
    }
    assert_eq!(tracing.0["status"], "True", "{tracing:?}\n{}", agent_log());
    assert_eq!(tracing.1["status"], "True", "{tracing:?}\n{}", agent_log());
    let reported = agent_started.elapsed();

    // A workload in another pod, under the kubelet's cgroup layout, whose
    // Localhost profile denies mkdir; the Pod object as the kubelet reports
    // it once the container exists (its containerID in the status).
    let uid = test_pod_uid(&oracle);
    let workload = oracle
        .run_pod(sandbox_config(
            "denied",
            "default",
            &uid,
            Qos::BestEffort,
            false,
        ))
        .expect("RunPodSandbox for the workload");
    let pod_spec = json!({"nodeName": NODE, "containers": [{"name": "work", "image": BUSYBOX_IMAGE,
        "securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": DENY_MKDIR}}}]});
    let work = workload
        .create(api::ContainerConfig {
            metadata: Some(api::ContainerMetadata {
                name: "work".into(),
                attempt: 0,
            }),
            image: Some(api::ImageSpec {
                image: BUSYBOX_IMAGE.into(),
            }),
            command: [
                "/bin/busybox",
                "sh",
                "-c",
                "trap 'exit 0' TERM; while :; do /bin/busybox mkdir /tmp/d; sleep 1; done",
            ]
            .map(String::from)
            .to_vec(),
            linux: Some(api::LinuxContainerConfig {
                security_context: Some(security_context(
                    &pod_spec["containers"][0]["securityContext"],
                    false,
                    &seccomp_root,
                )),
            }),
            ..Default::default()
        })
        .expect("CreateContainer for the workload");
    server.put(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "denied", "namespace": "default", "uid": uid},
            "spec": pod_spec,
            "status": {"phase": "Running", "containerStatuses": [{"name": "work",
                "containerID": format!("containerd://{work}"), "image": BUSYBOX_IMAGE,
                "imageID": "", "ready": true, "restartCount": 0, "started": true}]}}),
    );
    workload
        .start(&work)
        .expect("StartContainer for the workload");

    let event = wait_for(Duration::from_secs(45), || {
        server.events().into_iter().find(|e| {
            e["reason"] == "SeccompDenied"
                && e["involvedObject"]["kind"] == "Pod"
                && e["involvedObject"]["name"] == "denied"
        })
    })
    .unwrap_or_else(|| {
        panic!(
            "no SeccompDenied Event on pod default/denied after 45 s; events: {:?}\nthe workload: {}\nthe agent's log:\n{}",
            server.events(),
            workload.log("work"),
            agent_log()
        )
    });
    assert_eq!(event["type"], "Warning", "{event}");
    assert_eq!(event["involvedObject"]["namespace"], "default", "{event}");
    assert_eq!(event["involvedObject"]["uid"], uid.as_str(), "{event}");
    let message = event["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("denied mkdir")
            && message.ends_with(&format!(
                "(EPERM) in container work, profile localhost/{DENY_MKDIR}"
            )),
        "{message}"
    );
    // The agent's own thread under RuntimeDefault, as on a real node: a new
    // profile file is linted on a blocking thread, which tokio starts anew
    // once its last one idled for 10 s (`thread_keep_alive`'s default), and
    // glibc starts it with `clone3`, which containerd's RuntimeDefault answers
    // with ENOSYS on purpose (glibc falls back to `clone`). Counted as
    // intended, never a Warning on the agent's pod: a real node showed
    // `denied clone3 ×1 (ENOSYS) in container nodeproof, profile runtime/default`.
    std::thread::sleep(Duration::from_secs(11));
    std::fs::write(
        seccomp_root.join("profiles/later.json"),
        r#"{"defaultAction": "SCMP_ACT_ALLOW"}"#,
    )
    .unwrap();
    let intended = wait_for(Duration::from_secs(20), || {
        let (_, metrics) = fetch(probe_port, "/metrics")?;
        metrics
            .lines()
            .find(|l| {
                l.starts_with("nodeproof_seccomp_denials_total{")
                    && l.contains("syscall=\"clone3\"")
                    && l.contains("outcome=\"intended-fallback\"")
                    && l.contains(agent_uid.as_str())
            })
            .map(str::to_string)
    })
    .unwrap_or_else(|| {
        panic!(
            "the agent's own clone3 not counted as intended; /metrics: {:?}\n{}",
            fetch(probe_port, "/metrics").map(|(_, m)| m
                .lines()
                .filter(|l| l.starts_with("nodeproof_seccomp_denials_total"))
                .collect::<Vec<_>>()
                .join("\n")),
            agent_log()
        )
    });
    // Past the aggregator's interval: an Event would have been written.
    std::thread::sleep(Duration::from_secs(6));
    let own: Vec<Value> = server
        .events()
        .into_iter()
        .filter(|e| e["reason"] == "SeccompDenied" && e["involvedObject"]["name"] == "nodeproof-x1")
        .collect();
    assert!(
        own.is_empty(),
        "a Warning for RuntimeDefault's intended ENOSYS: {own:?} ({intended})"
    );
    // The profiles' versions are kept where the DaemonSet's state volume
    // puts them, outside the container's read-only root.
    let versions = std::fs::read_to_string(state_dir.join("profile-versions.json"))
        .unwrap_or_else(|e| panic!("no versions in the state volume: {e}\n{}", agent_log()));
    assert!(versions.contains("deny-mkdir.json"), "{versions}");
    // The agent kept running the whole time.
    assert_eq!(
        agent_pod.status(&agent).expect("ContainerStatus").state(),
        api::ContainerState::ContainerRunning,
        "{}",
        agent_log()
    );
    eprintln!(
        "FIGURE kubelet node: conditions on the Node {:.1} s after StartContainer, the denial's Event {:.1} s after; {:.1} s in all once the image was built: {message}",
        reported.as_secs_f64(),
        agent_started.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

fn tar_list(archive: &Path) -> Vec<String> {
    let out = Command::new("tar")
        .arg("-tzf")
        .arg(archive)
        .output()
        .expect("tar runs");
    assert!(out.status.success(), "tar -tzf {}", archive.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_release_archive_unpacks_checks_and_runs_and_is_reproducible() {
    cargo(&["build", "-q", "-p", "nodeproof", "--bin", "nodeproof"]);
    // Where cargo put it (see `built_image`).
    let bin = nodeproof_testkit::profile_dir().join("nodeproof");
    let version = env!("CARGO_PKG_VERSION");
    let dist = |out: &Path| {
        cargo(&[
            "run",
            "-q",
            "-p",
            "xtask",
            "--",
            "dist",
            "--no-deb",
            "--bin",
            &bin.to_string_lossy(),
            "--out",
            &out.to_string_lossy(),
        ]);
        let name = format!("nodeproof-{version}-x86_64-linux.tar.gz");
        let archive = out.join(&name);
        assert!(archive.is_file(), "{}", archive.display());
        // SHA256SUMS beside it names it.
        let check = Command::new("sha256sum")
            .args(["-c", "SHA256SUMS"])
            .current_dir(out)
            .output()
            .unwrap();
        assert!(check.status.success(), "{check:?}");
        std::fs::read(archive).unwrap()
    };
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = dist(a.path());
    assert_eq!(
        first,
        dist(b.path()),
        "the same binary and epoch, the same archive"
    );

    let dir = format!("nodeproof-{version}-x86_64-linux");
    let archive = a.path().join(format!("{dir}.tar.gz"));
    let listed = tar_list(&archive);
    for f in [
        "usr/bin/nodeproof",
        "usr/lib/systemd/system/nodeproof.service",
        "usr/lib/systemd/system/kubelet.service.d/10-nodeproof.conf",
        "usr/lib/sysusers.d/nodeproof.conf",
        "usr/lib/tmpfiles.d/nodeproof.conf",
        "etc/nodeproof/config.toml",
        "usr/share/nodeproof/profiles/runtime-default-x86_64.json",
        "usr/share/man/man8/nodeproof.8.gz",
        "usr/share/bash-completion/completions/nodeproof",
        "deploy/base/daemonset.yaml",
        "README.md",
        "CHANGELOG.md",
        "SHA256SUMS",
    ] {
        assert!(
            listed.contains(&format!("{dir}/{f}")),
            "{f} is not in the archive: {listed:?}"
        );
    }
    let unpacked = tempfile::tempdir().unwrap();
    let untar = Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(unpacked.path())
        .status()
        .unwrap();
    assert!(untar.success());
    let root = unpacked.path().join(&dir);
    let check = Command::new("sha256sum")
        .args(["--quiet", "-c", "SHA256SUMS"])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
    // Path (a) of the quick start: lint a profile from the unpacked archive.
    let lint = Command::new(root.join("usr/bin/nodeproof"))
        .args(["profile", "lint"])
        .arg(root.join("usr/share/nodeproof/profiles/runtime-default-x86_64.json"))
        .output()
        .unwrap();
    assert!(lint.status.success(), "{lint:?}");
    let changelog = std::fs::read_to_string(root.join("CHANGELOG.md")).unwrap();
    assert!(
        changelog.contains(&format!("## {version}")),
        "CHANGELOG.md has no entry for {version}"
    );
}
