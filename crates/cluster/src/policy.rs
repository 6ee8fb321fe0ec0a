//! `nodeproof cluster policy`: ValidatingAdmissionPolicies
//! (`admissionregistration.k8s.io/v1`, GA since Kubernetes 1.30) generated
//! from the annotated RuntimeClasses, so that a pod of class X that does not
//! use one of X's Localhost seccomp profiles in every container is refused
//! (or warned about) at admission, not left to fail on the node with
//! CreateContainerError.
//!
//! Design (see docs/cluster.md):
//! - paramKind-free: the contracts are written into the CEL as literals, one
//!   validation per class with a static message naming its profiles. Rerun
//!   `cluster policy` when a class's annotation changes (the output is
//!   deterministic, so `kubectl diff` shows what changed).
//! - Three policies, one per place the pod spec lives (Pod `spec`; the
//!   `spec.template.spec` of Deployment, StatefulSet, DaemonSet, ReplicaSet
//!   and Job; CronJob's `spec.jobTemplate.spec.template.spec`), so that every
//!   expression is well-typed against every kind its policy matches
//!   (kube-apiserver type-checks each against the matched kinds' schemas and
//!   reports mismatches in `status.typeChecking`).
//! - The effective profile of a container is its own
//!   `securityContext.seccompProfile` when set, else the pod's (the kubelet's
//!   rule: container-level wins, kuberuntime_sandbox / security_context.go);
//!   neither set is not Localhost, so it is refused.
//! - Only the common CEL subset: `has()`, `all`, `map`, `in`, `?:`, list `+`.
//!   No optional types (`?.`, `orValue`), no Kubernetes extension libraries
//!   (strings' `join`, `quantity`, ...): the tests evaluate the expressions
//!   with cel-rust, which has neither.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation, Variable,
};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use nodeproof_report::contract::{self, Contract, ContractError, ContractState};

/// What a policy's binding does with a pod that breaks a contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Refuse it.
    Deny,
    /// Admit it with a warning to the client and an audit annotation.
    Warn,
}

impl Mode {
    /// The binding's `validationActions`.
    pub fn validation_actions(self) -> Vec<String> {
        match self {
            Mode::Deny => vec!["Deny".into()],
            Mode::Warn => vec!["Warn".into(), "Audit".into()],
        }
    }
}

/// Where a kind keeps the pod spec its policy judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A Pod (and its `ephemeralcontainers` subresource): `object.spec`.
    Pod,
    /// Deployment, StatefulSet, DaemonSet, ReplicaSet, Job: `object.spec.template.spec`.
    Template,
    /// CronJob: `object.spec.jobTemplate.spec.template.spec`.
    CronJob,
}

impl Shape {
    pub const ALL: [Shape; 3] = [Shape::Pod, Shape::Template, Shape::CronJob];

    /// The policy's (and its binding's) name.
    pub fn policy_name(self) -> &'static str {
        match self {
            Shape::Pod => "nodeproof-seccomp-pods",
            Shape::Template => "nodeproof-seccomp-workloads",
            Shape::CronJob => "nodeproof-seccomp-cronjobs",
        }
    }

    /// The CEL expression of the pod spec in `object`.
    pub fn spec_expression(self) -> &'static str {
        match self {
            Shape::Pod => "object.spec",
            Shape::Template => "object.spec.template.spec",
            Shape::CronJob => "object.spec.jobTemplate.spec.template.spec",
        }
    }

    /// What the policy matches. A Pod is judged when created and when an
    /// ephemeral container is added (`kubectl debug` updates the
    /// `pods/ephemeralcontainers` subresource; the object is then the Pod);
    /// other pod updates cannot change a seccomp profile (the fields are
    /// immutable), and judging them would refuse label changes of pods that
    /// predate the policy. Workloads are judged on create and update: an
    /// update of the template rolls out new pods.
    fn rules(self) -> Vec<NamedRuleWithOperations> {
        let rule = |group: &str, resources: &[&str], operations: &[&str]| NamedRuleWithOperations {
            api_groups: Some(vec![group.into()]),
            api_versions: Some(vec!["v1".into()]),
            operations: Some(operations.iter().map(|o| o.to_string()).collect()),
            resources: Some(resources.iter().map(|r| r.to_string()).collect()),
            ..Default::default()
        };
        match self {
            Shape::Pod => vec![
                rule("", &["pods"], &["CREATE"]),
                rule("", &["pods/ephemeralcontainers"], &["UPDATE"]),
            ],
            Shape::Template => vec![
                rule(
                    "apps",
                    &["deployments", "statefulsets", "daemonsets", "replicasets"],
                    &["CREATE", "UPDATE"],
                ),
                rule("batch", &["jobs"], &["CREATE", "UPDATE"]),
            ],
            Shape::CronJob => vec![rule("batch", &["cronjobs"], &["CREATE", "UPDATE"])],
        }
    }
}

/// The variables every policy declares, in order (each may use the ones
/// before it): the pod spec, its class, the pod-level Localhost profile,
/// and the effective Localhost profile of every container, init and
/// ephemeral ones included ('' for one without). The three container lists
/// are mapped to strings before they are joined: Container and
/// EphemeralContainer are different schema types, and a list of strings
/// type-checks against every kind the policy matches.
fn variables(shape: Shape) -> Vec<Variable> {
    const SC: &str = "securityContext";
    let localhost_of = |holder: &str| {
        // `holder.securityContext.seccompProfile` is known to exist here.
        let p = format!("{holder}.{SC}.seccompProfile");
        format!("{p}.type == 'Localhost' && has({p}.localhostProfile) ? {p}.localhostProfile : ''")
    };
    let has_profile =
        |holder: &str| format!("has({holder}.{SC}) && has({holder}.{SC}.seccompProfile)");
    let effective = |field: &str| {
        format!(
            "(has(variables.spec.{field}) ? variables.spec.{field}.map(c, {} ? ({}) : variables.podProfile) : [])",
            has_profile("c"),
            localhost_of("c")
        )
    };
    let pairs = [
        ("spec", shape.spec_expression().to_string()),
        (
            "runtimeClass",
            "has(variables.spec.runtimeClassName) ? variables.spec.runtimeClassName : ''".into(),
        ),
        (
            "podProfile",
            format!(
                "{} ? ({}) : ''",
                has_profile("variables.spec"),
                localhost_of("variables.spec")
            ),
        ),
        (
            "profiles",
            format!(
                "{} + {} + {}",
                effective("containers"),
                effective("initContainers"),
                effective("ephemeralContainers")
            ),
        ),
    ];
    pairs
        .into_iter()
        .map(|(name, expression)| Variable {
            name: name.into(),
            expression,
        })
        .collect()
}

/// One validation per contract: pods of another class pass it.
fn validation(c: &Contract) -> Validation {
    let listed: Vec<String> = c.profiles.iter().map(|p| cel_string(p)).collect();
    Validation {
        expression: format!(
            "variables.runtimeClass != {} || variables.profiles.all(p, p in [{}])",
            cel_string(&c.class),
            listed.join(", ")
        ),
        message: Some(format!(
            "runtimeClassName {}: every container (init and ephemeral included) must use a Localhost seccomp profile, set on the pod or the container, from: {}",
            c.class,
            c.profiles.join(", ")
        )),
        reason: Some("Forbidden".into()),
        ..Default::default()
    }
}

/// A CEL single-quoted string literal of `s`.
fn cel_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// A policy and its binding.
#[derive(Debug, Clone)]
pub struct PolicyPair {
    pub shape: Shape,
    pub policy: ValidatingAdmissionPolicy,
    pub binding: ValidatingAdmissionPolicyBinding,
}

/// The policies for `contracts` (one validation per contract in each).
pub fn policies(contracts: &[Contract], mode: Mode) -> Vec<PolicyPair> {
    let labels = BTreeMap::from([(
        "app.kubernetes.io/managed-by".to_string(),
        "nodeproof".to_string(),
    )]);
    Shape::ALL
        .into_iter()
        .map(|shape| {
            let name = shape.policy_name().to_string();
            let meta = ObjectMeta {
                name: Some(name.clone()),
                labels: Some(labels.clone()),
                ..Default::default()
            };
            let policy = ValidatingAdmissionPolicy {
                metadata: meta.clone(),
                spec: Some(ValidatingAdmissionPolicySpec {
                    failure_policy: Some("Fail".into()),
                    match_constraints: Some(MatchResources {
                        resource_rules: Some(shape.rules()),
                        ..Default::default()
                    }),
                    variables: Some(variables(shape)),
                    validations: Some(contracts.iter().map(validation).collect()),
                    ..Default::default()
                }),
                status: None,
            };
            let binding = ValidatingAdmissionPolicyBinding {
                metadata: meta,
                spec: Some(ValidatingAdmissionPolicyBindingSpec {
                    policy_name: Some(name),
                    validation_actions: Some(mode.validation_actions()),
                    ..Default::default()
                }),
            };
            PolicyPair {
                shape,
                policy,
                binding,
            }
        })
        .collect()
}

/// The API version of MutatingAdmissionPolicy the cluster serves: alpha
/// `v1alpha1` in Kubernetes 1.32 and 1.33, beta `v1beta1` from 1.34, both
/// behind the `MutatingAdmissionPolicy` feature gate (off by default) and
/// `--runtime-config=admissionregistration.k8s.io/<version>=true`; `v1`
/// (GA) from 1.36. The three have the same fields for what is generated here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MutatingVersion {
    V1alpha1,
    V1beta1,
    V1,
}

impl MutatingVersion {
    pub fn api_version(self) -> &'static str {
        match self {
            MutatingVersion::V1alpha1 => "admissionregistration.k8s.io/v1alpha1",
            MutatingVersion::V1beta1 => "admissionregistration.k8s.io/v1beta1",
            MutatingVersion::V1 => "admissionregistration.k8s.io/v1",
        }
    }
}

/// The optional MutatingAdmissionPolicy: a scheduling gate added, at
/// creation (the only time a gate can be added), to every pod in the
/// opted-in namespaces that requests `nvidia.com/gpu`, for the gate
/// controller to remove once a node that could host it is GPU-ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuGate {
    /// The opted-in namespaces.
    pub namespaces: Vec<String>,
    /// The gate, e.g. `nodeproof.dev/gpu-driver-ready`.
    pub gate: String,
    pub version: MutatingVersion,
}

/// The extended resource the GPU gate looks for.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// The name of the GPU gate's policy and binding.
pub const GPU_GATE_POLICY: &str = "nodeproof-gpu-gate";

/// The GPU gate's matchConditions: the pod asks for a GPU in a container or
/// init container (limits, or requests: an extended resource's request
/// defaults to its limit), and does not carry the gate yet (so a reinvoked
/// or re-applied policy adds nothing twice).
fn gpu_gate_conditions(gate: &str) -> Vec<(&'static str, String)> {
    let gpu = cel_string(GPU_RESOURCE);
    let asks = |field: &str| {
        format!(
            "(has(object.spec.{field}) && object.spec.{field}.exists(c, has(c.resources) && ((has(c.resources.limits) && {gpu} in c.resources.limits) || (has(c.resources.requests) && {gpu} in c.resources.requests))))"
        )
    };
    vec![
        (
            "requests-gpu",
            format!("{} || {}", asks("containers"), asks("initContainers")),
        ),
        (
            "not-gated-yet",
            format!(
                "!has(object.spec.schedulingGates) || !object.spec.schedulingGates.exists(g, g.name == {})",
                cel_string(gate)
            ),
        ),
    ]
}

/// The GPU gate's policy and binding, as YAML-ready JSON (the k8s-openapi
/// types of v1alpha1, with the chosen version's apiVersion).
pub fn gpu_gate_documents(g: &GpuGate) -> Vec<serde_json::Value> {
    use k8s_openapi::api::admissionregistration::v1alpha1 as map;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
    let meta = ObjectMeta {
        name: Some(GPU_GATE_POLICY.into()),
        labels: Some(BTreeMap::from([(
            "app.kubernetes.io/managed-by".to_string(),
            "nodeproof".to_string(),
        )])),
        ..Default::default()
    };
    let policy = map::MutatingAdmissionPolicy {
        metadata: meta.clone(),
        spec: Some(map::MutatingAdmissionPolicySpec {
            // A failing mutation admits the pod ungated (as without the
            // policy) rather than blocking every GPU workload.
            failure_policy: Some("Ignore".into()),
            reinvocation_policy: Some("Never".into()),
            match_constraints: Some(map::MatchResources {
                resource_rules: Some(vec![map::NamedRuleWithOperations {
                    api_groups: Some(vec!["".into()]),
                    api_versions: Some(vec!["v1".into()]),
                    operations: Some(vec!["CREATE".into()]),
                    resources: Some(vec!["pods".into()]),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            match_conditions: Some(
                gpu_gate_conditions(&g.gate)
                    .into_iter()
                    .map(|(name, expression)| map::MatchCondition {
                        name: name.into(),
                        expression,
                    })
                    .collect(),
            ),
            // Server-side apply merge: `schedulingGates` is a list map keyed
            // by name (+listType=map, +listMapKey=name in core/v1 types.go),
            // so the gate is added next to any others.
            mutations: Some(vec![map::Mutation {
                patch_type: "ApplyConfiguration".into(),
                apply_configuration: Some(map::ApplyConfiguration {
                    expression: Some(format!(
                        "Object{{spec: Object.spec{{schedulingGates: [Object.spec.schedulingGates{{name: {}}}]}}}}",
                        cel_string(&g.gate)
                    )),
                }),
                json_patch: None,
            }]),
            ..Default::default()
        }),
    };
    let binding = map::MutatingAdmissionPolicyBinding {
        metadata: meta,
        spec: Some(map::MutatingAdmissionPolicyBindingSpec {
            policy_name: Some(GPU_GATE_POLICY.into()),
            match_resources: Some(map::MatchResources {
                // Set on every Namespace by kube-apiserver since 1.22.
                namespace_selector: Some(LabelSelector {
                    match_expressions: Some(vec![LabelSelectorRequirement {
                        key: "kubernetes.io/metadata.name".into(),
                        operator: "In".into(),
                        values: Some(g.namespaces.clone()),
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
    };
    [
        serde_json::to_value(&policy),
        serde_json::to_value(&binding),
    ]
    .into_iter()
    .map(|v| {
        let mut v = v.expect("k8s-openapi objects serialize");
        v["apiVersion"] = serde_json::json!(g.version.api_version());
        v
    })
    .collect()
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("{source_name}: not YAML of RuntimeClasses")]
    Yaml {
        source_name: String,
        #[source]
        source: Box<serde_saphyr::Error>,
    },
    #[error("{source_name}: document {index} is a {kind}, not a RuntimeClass or a list of them")]
    NotRuntimeClass {
        source_name: String,
        index: usize,
        kind: String,
    },
    #[error("{source_name}: document {index} is not a valid RuntimeClass")]
    BadRuntimeClass {
        source_name: String,
        index: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "no RuntimeClass carries a usable {} annotation: there is nothing to enforce",
        contract::ANNOTATION_PROFILES
    )]
    NoContracts,
    #[error("cannot print the policies as YAML")]
    Render(#[source] Box<serde_saphyr::SerializeError>),
}

/// RuntimeClasses from YAML: documents that are RuntimeClasses, or lists
/// of them (`kubectl get runtimeclass -o yaml` prints a `List`).
pub fn runtime_classes_from_yaml(
    source_name: &str,
    text: &str,
) -> Result<Vec<RuntimeClass>, PolicyError> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(text).map_err(|source| PolicyError::Yaml {
            source_name: source_name.into(),
            source: Box::new(source),
        })?;
    let mut classes = Vec::new();
    for (index, doc) in docs.into_iter().enumerate() {
        if doc.is_null() {
            continue; // an empty document (a trailing `---`)
        }
        let kind = doc["kind"].as_str().unwrap_or("").to_string();
        let items = match kind.as_str() {
            "RuntimeClass" => vec![doc],
            "List" | "RuntimeClassList" => doc["items"].as_array().cloned().unwrap_or_default(),
            _ => {
                return Err(PolicyError::NotRuntimeClass {
                    source_name: source_name.into(),
                    index,
                    kind: if kind.is_empty() {
                        "document without kind".into()
                    } else {
                        kind
                    },
                })
            }
        };
        for item in items {
            let class = RuntimeClass::deserialize(&item).map_err(|source| {
                PolicyError::BadRuntimeClass {
                    source_name: source_name.into(),
                    index,
                    source,
                }
            })?;
            classes.push(class);
        }
    }
    Ok(classes)
}

/// Every RuntimeClass in the cluster.
pub async fn runtime_classes(
    client: &nodeproof_apiclient::Client,
) -> Result<Vec<RuntimeClass>, nodeproof_apiclient::Error> {
    nodeproof_apiclient::read::runtime_classes(client).await
}

/// The contracts the classes declare, by class name, and the annotations
/// that cannot be one (said, and left out of the policies).
pub fn contracts(classes: &[RuntimeClass]) -> (Vec<Contract>, Vec<ContractError>) {
    let mut good = Vec::new();
    let mut bad = Vec::new();
    for rc in classes {
        let name = rc.metadata.name.as_deref().unwrap_or("");
        let annotations = rc.metadata.annotations.clone().unwrap_or_default();
        match contract::contract_of(name, &annotations) {
            Some(Ok(c)) => good.push(c),
            Some(Err(e)) => bad.push(e),
            None => {}
        }
    }
    good.sort_by(|a, b| a.class.cmp(&b.class));
    (good, bad)
}

/// The printed output: a comment with what the platform team adds to each
/// RuntimeClass (its `scheduling.nodeSelector`, so the scheduler only picks
/// nodes that meet the contract), then the policies and their bindings as
/// YAML documents ready for `kubectl apply -f -`.
pub fn render(
    contracts: &[Contract],
    mode: Mode,
    gpu_gate: Option<&GpuGate>,
) -> Result<String, PolicyError> {
    if contracts.is_empty() {
        return Err(PolicyError::NoContracts);
    }
    let mut out = String::new();
    out.push_str("# Generated by `nodeproof cluster policy` from the RuntimeClasses' nodeproof.dev/localhost-profiles.\n");
    out.push_str(&format!(
        "# Mode: {} (validationActions {}). Contracts: {}.\n#\n",
        match mode {
            Mode::Deny => "deny",
            Mode::Warn => "warn",
        },
        mode.validation_actions().join(", "),
        contracts
            .iter()
            .map(|c| c.class.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    out.push_str(
        "# Add to each RuntimeClass, so the scheduler only picks nodes that meet its contract:\n",
    );
    for c in contracts {
        out.push_str(&format!(
            "#   {}:\n#     scheduling:\n#       nodeSelector:\n#         {}: {}\n",
            c.class,
            c.label_key(),
            ContractState::Ready
        ));
    }
    for pair in policies(contracts, mode) {
        for doc in [
            serde_saphyr::to_string(&pair.policy),
            serde_saphyr::to_string(&pair.binding),
        ] {
            out.push_str("---\n");
            let doc = doc.map_err(|e| PolicyError::Render(Box::new(e)))?;
            out.push_str(&doc);
            if !doc.ends_with('\n') {
                out.push('\n');
            }
        }
    }
    if let Some(g) = gpu_gate {
        out.push_str(&format!(
            "---\n# Optional: the scheduling gate {} on pods requesting {GPU_RESOURCE} in {}.\n# Needs MutatingAdmissionPolicy served as {} (see docs/cluster.md).\n",
            g.gate,
            g.namespaces.join(", "),
            g.version.api_version()
        ));
        let docs = gpu_gate_documents(g);
        for (i, doc) in docs.iter().enumerate() {
            if i > 0 {
                out.push_str("---\n");
            }
            let doc = serde_saphyr::to_string(doc).map_err(|e| PolicyError::Render(Box::new(e)))?;
            out.push_str(&doc);
            if !doc.ends_with('\n') {
                out.push('\n');
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cel_strings_escape_quotes_and_backslashes() {
        assert_eq!(cel_string("a'b\\c"), r"'a\'b\\c'");
        assert_eq!(cel_string("profiles/x.json"), "'profiles/x.json'");
    }

    #[test]
    fn modes_map_to_validation_actions() {
        assert_eq!(Mode::Deny.validation_actions(), ["Deny"]);
        assert_eq!(Mode::Warn.validation_actions(), ["Warn", "Audit"]);
    }

    #[test]
    fn yaml_lists_and_documents_are_read_and_other_kinds_refused() {
        let text = "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: a}\nhandler: runc\n---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: node.k8s.io/v1\n  kind: RuntimeClass\n  metadata: {name: b}\n  handler: runc\n---\n";
        let got = runtime_classes_from_yaml("f", text).unwrap();
        let names: Vec<_> = got
            .iter()
            .map(|c| c.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["a", "b"]);
        let err = runtime_classes_from_yaml("f", "kind: Pod\nmetadata: {name: p}\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "f: document 0 is a Pod, not a RuntimeClass or a list of them"
        );
        assert!(matches!(
            render(&[], Mode::Deny, None),
            Err(PolicyError::NoContracts)
        ));
    }
}
