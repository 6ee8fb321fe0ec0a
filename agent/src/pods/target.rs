//! What `nodeproof advise --pod NS/NAME [--container C]` points at: the
//! container (by name, or by a prefix of the runtime id that trace rows
//! carry) and the profile file it runs under. Pure: the Pod comes in.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;

use super::denials::container_ids;
use super::verdict::profile_path;
use nodeproof_report::refs::{pod_refs, ContainerRef, PodRefs, Profile};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("pod {pod} has no container {wanted:?} (containers: {containers})")]
    NoSuchContainer {
        pod: String,
        wanted: String,
        containers: String,
    },
    #[error("container {container} of pod {pod} has no container id yet (not started): its denials cannot be told from the others'")]
    NotStarted { pod: String, container: String },
    #[error("the containers of pod {pod} run under different seccomp profiles ({containers}); choose one with --container")]
    Ambiguous { pod: String, containers: String },
    #[error("container {container} of pod {pod} {what}: nothing on disk to patch")]
    NothingOnDisk {
        pod: String,
        container: String,
        what: String,
    },
}

/// What advise works on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The pod's UID, to select trace rows that carry no pod names.
    pub pod_uid: Option<String>,
    /// The selected container's name (None: the whole pod).
    pub container: Option<String>,
    /// Its full runtime id, to select trace rows.
    pub container_id: Option<String>,
    /// The profile file under the seccomp root (when one was asked for).
    pub profile: Option<PathBuf>,
    /// The container's effective noNewPrivileges (the pod's, when all agree).
    pub no_new_privileges: Option<bool>,
}

fn names(refs: &PodRefs) -> String {
    refs.containers
        .iter()
        .map(|c| c.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn profile_text(c: &ContainerRef) -> String {
    c.profile
        .as_ref()
        .map_or_else(|| "none set".to_string(), |(p, _)| p.display())
}

/// The container `wanted` names: a container name first (init, regular and
/// ephemeral), else a prefix of exactly one container's runtime id.
fn select<'a>(pod: &Pod, refs: &'a PodRefs, wanted: &str) -> Result<&'a ContainerRef, TargetError> {
    if let Some(c) = refs.containers.iter().find(|c| c.name == wanted) {
        return Ok(c);
    }
    let ids = container_ids(pod);
    let mut by_id = ids
        .iter()
        .filter(|(id, _)| !wanted.is_empty() && id.starts_with(wanted))
        .map(|(_, name)| name);
    let no_such = || TargetError::NoSuchContainer {
        pod: refs.key(),
        wanted: wanted.to_string(),
        containers: names(refs),
    };
    match (by_id.next(), by_id.next()) {
        (Some(name), None) => refs
            .containers
            .iter()
            .find(|c| &c.name == name)
            .ok_or_else(no_such),
        _ => Err(no_such()),
    }
}

/// The file a container's profile is, or why there is none to patch.
fn file_of(refs: &PodRefs, c: &ContainerRef, root: &Path) -> Result<PathBuf, TargetError> {
    let nothing = |what: String| TargetError::NothingOnDisk {
        pod: refs.key(),
        container: c.name.clone(),
        what,
    };
    match c.profile.as_ref().map(|(p, _)| p) {
        Some(Profile::Localhost(rel)) => profile_path(root, rel)
            .ok_or_else(|| nothing(format!("references localhost/{rel}, which leaves the seccomp root"))),
        Some(Profile::RuntimeDefault) => Err(nothing(
            "runs under runtime/default, the container runtime's built-in profile".into(),
        )),
        Some(Profile::Unconfined) => Err(nothing("runs unconfined (no seccomp filter)".into())),
        Some(Profile::Unknown(v)) => Err(nothing(format!(
            "references {v:?}, a seccomp profile the kubelet does not accept"
        ))),
        None => Err(nothing(
            "sets no seccomp profile (the runtime's default applies: unconfined unless the kubelet runs with --seccomp-default)".into(),
        )),
    }
}

/// Resolves `--container` (if given) and, when `want_profile`, the profile
/// file: the selected container's, else the pod's when it has one
/// container or all its containers share one profile.
pub fn resolve(
    pod: &Pod,
    container: Option<&str>,
    want_profile: bool,
    root: &Path,
) -> Result<Target, TargetError> {
    let refs = pod_refs(pod);
    let ids = container_ids(pod);
    let id_of = |name: &str| {
        ids.iter()
            .find(|(_, n)| n.as_str() == name)
            .map(|(id, _)| id.clone())
    };
    if let Some(wanted) = container {
        let c = select(pod, &refs, wanted)?;
        let container_id = id_of(&c.name).ok_or_else(|| TargetError::NotStarted {
            pod: refs.key(),
            container: c.name.clone(),
        })?;
        let profile = want_profile.then(|| file_of(&refs, c, root)).transpose()?;
        return Ok(Target {
            pod_uid: Some(refs.uid.clone()),
            container: Some(c.name.clone()),
            container_id: Some(container_id),
            profile,
            no_new_privileges: Some(c.no_new_privileges),
        });
    }
    let first = refs
        .containers
        .first()
        .ok_or_else(|| TargetError::NoSuchContainer {
            pod: refs.key(),
            wanted: String::new(),
            containers: String::new(),
        })?;
    let same = refs.containers.iter().all(|c| c.profile == first.profile);
    if want_profile && !same {
        let listed: Vec<String> = refs
            .containers
            .iter()
            .map(|c| format!("{} {}", c.name, profile_text(c)))
            .collect();
        return Err(TargetError::Ambiguous {
            pod: refs.key(),
            containers: listed.join(", "),
        });
    }
    let profile = want_profile
        .then(|| file_of(&refs, first, root))
        .transpose()?;
    let nnp = refs
        .containers
        .iter()
        .all(|c| c.no_new_privileges == first.no_new_privileges)
        .then_some(first.no_new_privileges);
    Ok(Target {
        pod_uid: Some(refs.uid.clone()),
        container: None,
        container_id: None,
        profile,
        no_new_privileges: nnp,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(v).expect("pod JSON")
    }

    const VLLM_ID: &str = "aaaa1111bbbb2222cccc3333dddd4444eeee5555ffff6666aaaa7777bbbb8888";
    const SIDE_ID: &str = "aaaa9999bbbb2222cccc3333dddd4444eeee5555ffff6666aaaa7777bbbb8888";

    fn status(name: &str, id: &str) -> serde_json::Value {
        json!({"name": name, "containerID": format!("containerd://{id}"), "image": "i",
            "imageID": "", "ready": true, "restartCount": 0})
    }

    fn vllm() -> Pod {
        pod(json!({
            "metadata": {"name": "vllm-0", "namespace": "ml", "uid": "u1"},
            "spec": {
                "initContainers": [{"name": "fetch", "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}}],
                "containers": [
                    {"name": "vllm", "securityContext": {"allowPrivilegeEscalation": false,
                        "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/vllm-strict.json"}}},
                    {"name": "side"}
                ],
                "ephemeralContainers": [{"name": "debug"}]
            },
            "status": {
                "initContainerStatuses": [status("fetch", "1234567890ab1234567890ab")],
                "containerStatuses": [status("vllm", VLLM_ID), status("side", SIDE_ID)]
            }
        }))
    }

    #[test]
    fn a_container_by_name_or_id_prefix() {
        let root = Path::new("/var/lib/kubelet/seccomp");
        let by_name = resolve(&vllm(), Some("vllm"), true, root).unwrap();
        assert_eq!(
            by_name,
            Target {
                pod_uid: Some("u1".into()),
                container: Some("vllm".into()),
                container_id: Some(VLLM_ID.into()),
                profile: Some(root.join("profiles/vllm-strict.json")),
                no_new_privileges: Some(true),
            }
        );
        // A prefix of exactly one id, as trace rows print it.
        assert_eq!(resolve(&vllm(), Some("aaaa1111"), true, root), Ok(by_name));
        // A prefix two ids share selects neither.
        let err = resolve(&vllm(), Some("aaaa"), true, root).unwrap_err();
        assert_eq!(
            err.to_string(),
            "pod ml/vllm-0 has no container \"aaaa\" (containers: fetch, vllm, side, debug)"
        );
        // Without a profile wanted, a container with none still selects its rows.
        let side = resolve(&vllm(), Some("side"), false, root).unwrap();
        assert_eq!(side.container_id.as_deref(), Some(SIDE_ID));
        assert_eq!(side.profile, None);
    }

    #[test]
    fn nothing_on_disk_and_unstarted_containers_are_said() {
        let root = Path::new("/r");
        let cases = [
            ("fetch", "container fetch of pod ml/vllm-0 runs under runtime/default, the container runtime's built-in profile: nothing on disk to patch"),
            ("side", "container side of pod ml/vllm-0 sets no seccomp profile (the runtime's default applies: unconfined unless the kubelet runs with --seccomp-default): nothing on disk to patch"),
            ("debug", "container debug of pod ml/vllm-0 has no container id yet (not started): its denials cannot be told from the others'"),
        ];
        for (name, want) in cases {
            let err = resolve(&vllm(), Some(name), true, root).unwrap_err();
            assert_eq!(err.to_string(), want, "{name}");
        }
        let err = resolve(&vllm(), None, true, root).unwrap_err();
        assert!(
            matches!(&err, TargetError::Ambiguous { containers, .. }
                if containers == "fetch runtime/default, vllm localhost/profiles/vllm-strict.json, side none set, debug none set"),
            "{err}"
        );
        let unconfined = pod(json!({
            "metadata": {"name": "p", "namespace": "ml"},
            "spec": {"securityContext": {"seccompProfile": {"type": "Unconfined"}},
                "containers": [{"name": "a"}, {"name": "b"}]}
        }));
        assert_eq!(
            resolve(&unconfined, None, true, root).unwrap_err(),
            TargetError::NothingOnDisk {
                pod: "ml/p".into(),
                container: "a".into(),
                what: "runs unconfined (no seccomp filter)".into()
            }
        );
        let escaping = pod(json!({
            "metadata": {"name": "p", "namespace": "ml"},
            "spec": {"containers": [{"name": "a", "securityContext": {"seccompProfile":
                {"type": "Localhost", "localhostProfile": "../../etc/x.json"}}}]}
        }));
        assert!(resolve(&escaping, None, true, root)
            .unwrap_err()
            .to_string()
            .contains("leaves the seccomp root"));
    }

    #[test]
    fn a_pod_whose_containers_share_a_profile() {
        let p = pod(json!({
            "metadata": {"name": "p", "namespace": "ml"},
            "spec": {"securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "shared.json"}},
                "containers": [{"name": "a"}, {"name": "b", "securityContext": {"allowPrivilegeEscalation": false}}]}
        }));
        let t = resolve(&p, None, true, Path::new("/r")).unwrap();
        assert_eq!(t.profile, Some(PathBuf::from("/r/shared.json")));
        // The containers disagree on noNewPrivileges: left to the flag or the config.
        assert_eq!((t.container, t.no_new_privileges), (None, None));
    }
}
