//! Every seccomp reference a pod makes, read from the Pod object alone (pure).
//!
//! Precedence is the kubelet's: a container's `securityContext.seccompProfile`,
//! then its deprecated `container.seccomp.security.alpha.kubernetes.io/<name>`
//! annotation, then the pod's `securityContext.seccompProfile`, then the pod
//! annotation `seccomp.security.alpha.kubernetes.io/pod`. The annotations are
//! still read because pods created before 1.25 (and static pods) carry only them.

use k8s_openapi::api::core::v1::{Pod, SeccompProfile, SecurityContext};

use crate::taints::Toleration;

pub const POD_ANNOTATION: &str = "seccomp.security.alpha.kubernetes.io/pod";
pub const CONTAINER_ANNOTATION_PREFIX: &str = "container.seccomp.security.alpha.kubernetes.io/";

/// What a container is confined by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Profile {
    /// A file relative to the kubelet seccomp root (`localhostProfile`).
    Localhost(String),
    RuntimeDefault,
    Unconfined,
    /// A type or annotation value the kubelet would refuse.
    Unknown(String),
}

impl Profile {
    /// The spelling users write in manifests, for messages.
    pub fn display(&self) -> String {
        match self {
            Profile::Localhost(p) => format!("localhost/{p}"),
            Profile::RuntimeDefault => "runtime/default".into(),
            Profile::Unconfined => "unconfined".into(),
            Profile::Unknown(s) => s.clone(),
        }
    }
}

/// Where the effective profile came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    ContainerField,
    ContainerAnnotation,
    PodField,
    PodAnnotation,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerKind {
    Init,
    Regular,
    Ephemeral,
}

/// One container's effective seccomp reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRef {
    pub name: String,
    pub kind: ContainerKind,
    /// `None`: nothing set anywhere, so the runtime's default applies
    /// (Unconfined unless the kubelet runs with `--seccomp-default`).
    pub profile: Option<(Profile, Source)>,
    /// What the runtime sets: `allowPrivilegeEscalation: false` and not privileged.
    pub no_new_privileges: bool,
    /// `securityContext.capabilities` and `privileged`: what the runtime
    /// builds the container's bounding set from.
    pub capabilities: CapabilityChange,
}

/// A container's `securityContext.capabilities` as the pod spells them
/// (`NET_ADMIN`, `ALL`), and whether it is privileged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapabilityChange {
    pub add: Vec<String>,
    pub drop: Vec<String>,
    pub privileged: bool,
}

fn capability_change(sc: Option<&SecurityContext>) -> CapabilityChange {
    let caps = sc.and_then(|sc| sc.capabilities.as_ref());
    CapabilityChange {
        add: caps.and_then(|c| c.add.clone()).unwrap_or_default(),
        drop: caps.and_then(|c| c.drop.clone()).unwrap_or_default(),
        privileged: sc.and_then(|sc| sc.privileged) == Some(true),
    }
}

/// Everything about one pod that the seccomp checks need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRefs {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node_name: Option<String>,
    pub runtime_class: Option<String>,
    /// `spec.tolerations` (after admission, a RuntimeClass's are among them).
    pub tolerations: Vec<Toleration>,
    pub containers: Vec<ContainerRef>,
    /// Phase Succeeded or Failed: no container of it starts again, so its
    /// references no longer matter to this node.
    pub finished: bool,
}

impl PodRefs {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

fn from_field(p: &SeccompProfile) -> Profile {
    match p.type_.as_str() {
        "Localhost" => match p.localhost_profile.as_deref() {
            Some(path) if !path.is_empty() => Profile::Localhost(path.to_string()),
            // The API server refuses this; a stale object may still carry it.
            _ => Profile::Unknown("Localhost without localhostProfile".into()),
        },
        "RuntimeDefault" => Profile::RuntimeDefault,
        "Unconfined" => Profile::Unconfined,
        other => Profile::Unknown(other.to_string()),
    }
}

/// The annotation grammar: `localhost/<path>`, `runtime/default`,
/// `docker/default` (an old alias of the runtime default), `unconfined`.
pub fn from_annotation(v: &str) -> Profile {
    match v {
        "runtime/default" | "docker/default" => Profile::RuntimeDefault,
        "unconfined" => Profile::Unconfined,
        _ => match v.strip_prefix("localhost/") {
            Some(p) if !p.is_empty() => Profile::Localhost(p.to_string()),
            _ => Profile::Unknown(v.to_string()),
        },
    }
}

fn nnp(sc: Option<&SecurityContext>) -> bool {
    // The kubelet's AddNoNewPrivs: only an explicit `false`, and never for privileged containers.
    sc.is_some_and(|sc| sc.allow_privilege_escalation == Some(false) && sc.privileged != Some(true))
}

/// Extracts every container's effective seccomp reference.
pub fn pod_refs(pod: &Pod) -> PodRefs {
    let meta = &pod.metadata;
    let annotations = meta.annotations.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let pod_level = spec
        .security_context
        .as_ref()
        .and_then(|sc| sc.seccomp_profile.as_ref())
        .map(|p| (from_field(p), Source::PodField))
        .or_else(|| {
            annotations
                .get(POD_ANNOTATION)
                .map(|v| (from_annotation(v), Source::PodAnnotation))
        });
    let effective = |name: &str, sc: Option<&SecurityContext>| {
        sc.and_then(|sc| sc.seccomp_profile.as_ref())
            .map(|p| (from_field(p), Source::ContainerField))
            .or_else(|| {
                annotations
                    .get(&format!("{CONTAINER_ANNOTATION_PREFIX}{name}"))
                    .map(|v| (from_annotation(v), Source::ContainerAnnotation))
            })
            .or_else(|| pod_level.clone())
    };
    let mut containers = Vec::new();
    let mut push = |name: &str, kind, sc: Option<&SecurityContext>| {
        containers.push(ContainerRef {
            name: name.to_string(),
            kind,
            profile: effective(name, sc),
            no_new_privileges: nnp(sc),
            capabilities: capability_change(sc),
        })
    };
    for c in spec.init_containers.iter().flatten() {
        push(&c.name, ContainerKind::Init, c.security_context.as_ref());
    }
    for c in &spec.containers {
        push(&c.name, ContainerKind::Regular, c.security_context.as_ref());
    }
    for c in spec.ephemeral_containers.iter().flatten() {
        push(
            &c.name,
            ContainerKind::Ephemeral,
            c.security_context.as_ref(),
        );
    }
    PodRefs {
        namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        node_name: spec.node_name.clone(),
        runtime_class: spec.runtime_class_name.clone(),
        tolerations: spec
            .tolerations
            .iter()
            .flatten()
            .map(Toleration::from)
            .collect(),
        containers,
        finished: pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod from JSON, as the API server would send it.
    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).expect("pod JSON")
    }

    fn profiles(r: &PodRefs) -> Vec<(String, Option<String>, bool)> {
        r.containers
            .iter()
            .map(|c| {
                (
                    c.name.clone(),
                    c.profile.as_ref().map(|(p, _)| p.display()),
                    c.no_new_privileges,
                )
            })
            .collect()
    }

    #[test]
    fn container_field_beats_annotation_beats_pod_level() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "vllm", "namespace": "ml", "uid": "u1", "annotations": {
                "seccomp.security.alpha.kubernetes.io/pod": "runtime/default",
                "container.seccomp.security.alpha.kubernetes.io/side": "localhost/profiles/side.json",
                "container.seccomp.security.alpha.kubernetes.io/vllm": "unconfined"
            }},
            "spec": {
                "nodeName": "n1",
                "securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/pod.json"}},
                "initContainers": [{"name": "init"}],
                "containers": [
                    {"name": "vllm", "securityContext": {"allowPrivilegeEscalation": false,
                        "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/vllm-strict.json"}}},
                    {"name": "side", "securityContext": {"allowPrivilegeEscalation": false, "privileged": true}},
                    {"name": "plain"}
                ],
                "ephemeralContainers": [{"name": "debug", "securityContext": {"seccompProfile": {"type": "Unconfined"}}}]
            }
        }));
        let r = pod_refs(&p);
        assert_eq!(r.key(), "ml/vllm");
        assert_eq!(r.node_name.as_deref(), Some("n1"));
        assert_eq!(
            profiles(&r),
            vec![
                (
                    "init".into(),
                    Some("localhost/profiles/pod.json".into()),
                    false
                ),
                (
                    "vllm".into(),
                    Some("localhost/profiles/vllm-strict.json".into()),
                    true
                ),
                // privileged wins over allowPrivilegeEscalation: false
                (
                    "side".into(),
                    Some("localhost/profiles/side.json".into()),
                    false
                ),
                (
                    "plain".into(),
                    Some("localhost/profiles/pod.json".into()),
                    false
                ),
                ("debug".into(), Some("unconfined".into()), false),
            ]
        );
        assert_eq!(r.containers[0].kind, ContainerKind::Init);
        assert_eq!(r.containers[4].kind, ContainerKind::Ephemeral);
        assert_eq!(
            r.containers[2].profile.as_ref().unwrap().1,
            Source::ContainerAnnotation
        );
    }

    #[test]
    fn pod_annotation_applies_when_no_field_is_set() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "a", "uid": "u", "annotations": {
                "seccomp.security.alpha.kubernetes.io/pod": "localhost/x.json"}},
            "spec": {"containers": [{"name": "c"}], "runtimeClassName": "gvisor"}
        }));
        let r = pod_refs(&p);
        assert_eq!(r.namespace, "default");
        assert_eq!(r.runtime_class.as_deref(), Some("gvisor"));
        assert_eq!(
            r.containers[0].profile,
            Some((Profile::Localhost("x.json".into()), Source::PodAnnotation))
        );
    }

    #[test]
    fn annotation_grammar() {
        for (v, want) in [
            ("runtime/default", Profile::RuntimeDefault),
            ("docker/default", Profile::RuntimeDefault),
            ("unconfined", Profile::Unconfined),
            ("localhost/a/b.json", Profile::Localhost("a/b.json".into())),
            ("localhost/", Profile::Unknown("localhost/".into())),
            ("bogus", Profile::Unknown("bogus".into())),
        ] {
            assert_eq!(from_annotation(v), want, "{v}");
        }
    }

    #[test]
    fn nothing_set_means_no_reference() {
        let r = pod_refs(&pod(serde_json::json!({
            "metadata": {"name": "a"}, "spec": {"containers": [{"name": "c"}]}
        })));
        assert_eq!(r.containers[0].profile, None);
    }
}
