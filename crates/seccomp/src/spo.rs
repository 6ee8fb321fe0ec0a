//! Files that are a security-profiles-operator `SeccompProfile` object (the
//! Kubernetes resource, YAML or JSON) rather than the seccomp profile the
//! runtime reads: the operator writes the profile from the object's `spec`
//! onto each node, under the kubelet's seccomp root, and pods reference that
//! file. Pure: the file's bytes in, what they are out.

use crate::diagnostic::{Code, Diagnostic};
use crate::json::{Node, Value};

/// The operator's API group (`security-profiles-operator.x-k8s.io/v1`, and
/// `v1beta1` before SPO 1.0).
pub const API_GROUP: &str = "security-profiles-operator.x-k8s.io";
pub const KIND: &str = "SeccompProfile";

/// What identifies the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpoSeccompProfile {
    /// `security-profiles-operator.x-k8s.io/v1beta1`.
    pub api_version: String,
    pub name: Option<String>,
    pub namespace: Option<String>,
}

fn is_spo(api_version: &str, kind: &str) -> bool {
    api_version
        .split_once('/')
        .is_some_and(|(group, _)| group == API_GROUP)
        && kind == KIND
}

/// A scalar as YAML writes it on one line: quotes and a trailing comment dropped.
fn scalar(text: &str) -> String {
    let text = text.trim();
    let text = match text.find(" #") {
        Some(i) if !text.starts_with(['"', '\'']) => &text[..i],
        _ => text,
    };
    text.trim()
        .trim_matches(|c| c == '"' || c == '\'')
        .to_string()
}

/// The object written as YAML (what `kubectl get -o yaml` and the operator's
/// docs give): its top-level `apiVersion` and `kind`, and `metadata`'s
/// `name` and `namespace`, read line by line in the first document that has them.
pub fn from_yaml(src: &[u8]) -> Option<SpoSeccompProfile> {
    let text = std::str::from_utf8(src).ok()?;
    let (mut api_version, mut kind, mut name, mut namespace) = (None, None, None, None);
    let mut in_metadata = false;
    for line in text.lines() {
        let body = line.trim_end();
        if body == "---" && api_version.is_some() && kind.is_some() {
            break;
        }
        if body.is_empty() || body.trim_start().starts_with('#') {
            continue;
        }
        let indented = body.starts_with([' ', '\t']);
        let Some((key, value)) = body.trim_start().split_once(':') else {
            continue;
        };
        if !indented {
            in_metadata = key == "metadata";
            match key {
                "apiVersion" => api_version = Some(scalar(value)),
                "kind" => kind = Some(scalar(value)),
                _ => {}
            }
        } else if in_metadata {
            match key {
                "name" if name.is_none() => name = Some(scalar(value)),
                "namespace" if namespace.is_none() => namespace = Some(scalar(value)),
                _ => {}
            }
        }
    }
    let (api_version, kind) = (api_version?, kind?);
    is_spo(&api_version, &kind).then_some(SpoSeccompProfile {
        api_version,
        name: name.filter(|n| !n.is_empty()),
        namespace: namespace.filter(|n| !n.is_empty()),
    })
}

fn member<'a>(object: &'a Node, key: &str) -> Option<&'a Node> {
    match &object.value {
        Value::Object(members) => members.iter().find(|m| m.key == key).map(|m| &m.value),
        _ => None,
    }
}

fn string(node: Option<&Node>) -> Option<String> {
    match node.map(|n| &n.value) {
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    }
}

/// The object written as JSON (`kubectl get -o json`), which the runtime's
/// decoder reads as a profile with only unknown fields.
pub fn from_json(root: &Node) -> Option<SpoSeccompProfile> {
    let api_version = string(member(root, "apiVersion"))?;
    let kind = string(member(root, "kind"))?;
    let metadata = member(root, "metadata");
    is_spo(&api_version, &kind).then(|| SpoSeccompProfile {
        api_version,
        name: string(metadata.and_then(|m| member(m, "name"))),
        namespace: string(metadata.and_then(|m| member(m, "namespace"))),
    })
}

impl SpoSeccompProfile {
    /// Says what the file is and where the profile the runtime reads is: a
    /// whole-document finding (1:1), said before what the runtime makes of the file.
    pub fn diagnostic(&self) -> Diagnostic {
        let name = self.name.as_deref().unwrap_or("<name>");
        let namespace = self.namespace.as_deref().unwrap_or("<namespace>");
        Diagnostic::error(
            Code::SpoSeccompProfile,
            "",
            format!(
                "this is a security-profiles-operator SeccompProfile object ({}), not a seccomp profile: the runtime reads the JSON profile the operator writes from it on each node",
                self.api_version
            ),
        )
        .with_help(format!(
            "lint that file: /var/lib/kubelet/seccomp/operator/{namespace}/{name}.json (operator/{name}.json in SPO releases that write profiles by name alone); `kubectl get seccompprofile {name} -n {namespace} -o jsonpath='{{.status.localhostProfile}}'` prints its path below the seccomp root, the `localhostProfile` pods name"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = "# from the operator's docs\napiVersion: security-profiles-operator.x-k8s.io/v1beta1\nkind: SeccompProfile\nmetadata:\n  name: profile1\n  namespace: my-namespace\nspec:\n  defaultAction: SCMP_ACT_LOG\n";

    #[test]
    fn the_yaml_object_is_recognised_with_its_name_and_namespace() {
        let p = from_yaml(YAML.as_bytes()).unwrap();
        assert_eq!(p.api_version, "security-profiles-operator.x-k8s.io/v1beta1");
        assert_eq!(p.name.as_deref(), Some("profile1"));
        assert_eq!(p.namespace.as_deref(), Some("my-namespace"));
        let help = p.diagnostic().help.unwrap();
        assert!(
            help.contains("/var/lib/kubelet/seccomp/operator/my-namespace/profile1.json"),
            "{help}"
        );
        assert!(
            help.contains("kubectl get seccompprofile profile1 -n my-namespace"),
            "{help}"
        );
    }

    #[test]
    fn other_objects_and_profiles_are_not_taken_for_it() {
        let other = YAML.replace("kind: SeccompProfile", "kind: ProfileBinding");
        assert_eq!(from_yaml(other.as_bytes()), None);
        let core = YAML.replace("security-profiles-operator.x-k8s.io/v1beta1", "v1");
        assert_eq!(from_yaml(core.as_bytes()), None);
        // A nested `kind:` is not the object's.
        let nested =
            "apiVersion: security-profiles-operator.x-k8s.io/v1\nspec:\n  kind: SeccompProfile\n";
        assert_eq!(from_yaml(nested.as_bytes()), None);
        assert_eq!(from_yaml(br#"{"defaultAction":"SCMP_ACT_ALLOW"}"#), None);
    }

    #[test]
    fn the_json_object_is_recognised() {
        let src = br#"{"apiVersion":"security-profiles-operator.x-k8s.io/v1","kind":"SeccompProfile","metadata":{"name":"p"},"spec":{"defaultAction":"SCMP_ACT_LOG"}}"#;
        let root = crate::json::parse(src).unwrap();
        let p = from_json(&root).unwrap();
        assert_eq!(
            (p.name.as_deref(), p.namespace.as_deref()),
            (Some("p"), None)
        );
        let root =
            crate::json::parse(br#"{"defaultAction":"SCMP_ACT_ALLOW","kind":"SeccompProfile"}"#)
                .unwrap();
        assert_eq!(from_json(&root), None);
    }
}
