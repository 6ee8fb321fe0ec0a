//! The role-label audit: which nodes carry which role label (`kubectl get
//! nodes -L node-role.kubernetes.io/control-plane`), and everything that
//! still depends on the old `node-role.kubernetes.io/master` name.
//!
//! kubeadm stopped labelling control-plane nodes `…/master` in 1.24 and
//! stopped tainting them with it in 1.25 (KEP-2067); a cluster upgraded
//! from before keeps whatever it had, and a workload whose nodeSelector,
//! node affinity or toleration names `master` silently stops matching the
//! nodes it meant. Found here, each with the object and the field path:
//!
//! - nodes labelled `…/master` without `…/control-plane`;
//! - pod templates (Deployments, DaemonSets, StatefulSets, Jobs, CronJobs)
//!   and bare pods (no controller owner: owned pods are reported through
//!   their template) whose nodeSelector, required or preferred node
//!   affinity, or tolerations name the key;
//! - webhooks and admission policy bindings whose `namespaceSelector` or
//!   `objectSelector` do.
//!
//! Pure.

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, MutatingWebhookConfiguration, ValidatingAdmissionPolicyBinding,
    ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Node, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::Serialize;

use super::Problem;

/// The old role label and taint key.
pub const MASTER_ROLE: &str = "node-role.kubernetes.io/master";
/// What replaced it.
pub const CONTROL_PLANE_ROLE: &str = "node-role.kubernetes.io/control-plane";

/// The kinds of object the audit reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ObjectKind {
    Pod,
    Deployment,
    DaemonSet,
    StatefulSet,
    Job,
    CronJob,
    ValidatingWebhookConfiguration,
    MutatingWebhookConfiguration,
    ValidatingAdmissionPolicyBinding,
    MutatingAdmissionPolicyBinding,
}

impl std::fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// An object, by kind, namespace (namespaced kinds) and name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ObjectRef {
    pub kind: ObjectKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectRef {
    fn of(kind: ObjectKind, meta: &ObjectMeta) -> ObjectRef {
        ObjectRef {
            kind,
            namespace: meta.namespace.clone(),
            name: meta.name.clone().unwrap_or_default(),
        }
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// How an object uses the role name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RoleUse {
    NodeSelector,
    NodeAffinity,
    Toleration,
    NamespaceSelector,
    ObjectSelector,
}

impl std::fmt::Display for RoleUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RoleUse::NodeSelector => "nodeSelector",
            RoleUse::NodeAffinity => "node affinity",
            RoleUse::Toleration => "toleration",
            RoleUse::NamespaceSelector => "namespaceSelector",
            RoleUse::ObjectSelector => "objectSelector",
        })
    }
}

/// The workloads and admission objects the audit reads, besides nodes and
/// pods.
#[derive(Debug, Clone, Default)]
pub struct RoleObjects {
    pub deployments: Vec<Deployment>,
    pub daemon_sets: Vec<DaemonSet>,
    pub stateful_sets: Vec<StatefulSet>,
    pub jobs: Vec<Job>,
    pub cron_jobs: Vec<CronJob>,
    pub validating_webhooks: Vec<ValidatingWebhookConfiguration>,
    pub mutating_webhooks: Vec<MutatingWebhookConfiguration>,
    pub validating_bindings: Vec<ValidatingAdmissionPolicyBinding>,
    /// MutatingAdmissionPolicyBindings (`admissionregistration.k8s.io/v1`
    /// from 1.36): the binding's name and `spec.matchResources`, the same
    /// type as a validating binding's.
    pub mutating_bindings: Vec<(String, MatchResources)>,
}

/// The audit's findings, appended to `out`.
pub(super) fn audit(nodes: &[Node], pods: &[Pod], objects: &RoleObjects, out: &mut Vec<Problem>) {
    for node in nodes {
        let labels = node.metadata.labels.as_ref();
        let has = |key: &str| labels.is_some_and(|l| l.contains_key(key));
        if has(MASTER_ROLE) && !has(CONTROL_PLANE_ROLE) {
            out.push(Problem::MasterRoleWithoutControlPlane {
                node: node.metadata.name.clone().unwrap_or_default(),
            });
        }
    }
    let mut refs = Vec::new();
    for pod in pods.iter().filter(|p| !has_controller(&p.metadata)) {
        if let Some(spec) = &pod.spec {
            pod_spec(spec, "spec", &mut refs);
        }
        flush(
            ObjectRef::of(ObjectKind::Pod, &pod.metadata),
            &mut refs,
            out,
        );
    }
    let template = "spec.template.spec";
    macro_rules! templates {
        ($list:expr, $kind:expr, $prefix:expr, |$o:ident| $spec:expr) => {
            for $o in &$list {
                if let Some(spec) = $spec {
                    pod_spec(spec, $prefix, &mut refs);
                }
                flush(ObjectRef::of($kind, &$o.metadata), &mut refs, out);
            }
        };
    }
    templates!(objects.deployments, ObjectKind::Deployment, template, |o| o
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref()));
    templates!(objects.daemon_sets, ObjectKind::DaemonSet, template, |o| o
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref()));
    templates!(
        objects.stateful_sets,
        ObjectKind::StatefulSet,
        template,
        |o| o.spec.as_ref().and_then(|s| s.template.spec.as_ref())
    );
    // A Job a CronJob created is reported through the CronJob.
    let jobs: Vec<&Job> = objects
        .jobs
        .iter()
        .filter(|j| !has_controller(&j.metadata))
        .collect();
    templates!(jobs, ObjectKind::Job, template, |o| o
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref()));
    templates!(
        objects.cron_jobs,
        ObjectKind::CronJob,
        "spec.jobTemplate.spec.template.spec",
        |o| o
            .spec
            .as_ref()
            .and_then(|s| s.job_template.spec.as_ref())
            .and_then(|j| j.template.spec.as_ref())
    );
    for config in &objects.validating_webhooks {
        for (i, w) in config.webhooks.iter().flatten().enumerate() {
            webhook_selectors(
                i,
                w.namespace_selector.as_ref(),
                w.object_selector.as_ref(),
                &mut refs,
            );
        }
        let object = ObjectRef::of(ObjectKind::ValidatingWebhookConfiguration, &config.metadata);
        flush(object, &mut refs, out);
    }
    for config in &objects.mutating_webhooks {
        for (i, w) in config.webhooks.iter().flatten().enumerate() {
            webhook_selectors(
                i,
                w.namespace_selector.as_ref(),
                w.object_selector.as_ref(),
                &mut refs,
            );
        }
        let object = ObjectRef::of(ObjectKind::MutatingWebhookConfiguration, &config.metadata);
        flush(object, &mut refs, out);
    }
    for binding in &objects.validating_bindings {
        if let Some(m) = binding
            .spec
            .as_ref()
            .and_then(|s| s.match_resources.as_ref())
        {
            match_resources(m, &mut refs);
        }
        let object = ObjectRef::of(
            ObjectKind::ValidatingAdmissionPolicyBinding,
            &binding.metadata,
        );
        flush(object, &mut refs, out);
    }
    for (name, m) in &objects.mutating_bindings {
        match_resources(m, &mut refs);
        let object = ObjectRef {
            kind: ObjectKind::MutatingAdmissionPolicyBinding,
            namespace: None,
            name: name.clone(),
        };
        flush(object, &mut refs, out);
    }
}

/// Owned by a controller (`ownerReferences[].controller`).
fn has_controller(meta: &ObjectMeta) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true))
}

/// One finding per reference found in `object`.
fn flush(object: ObjectRef, refs: &mut Vec<(String, RoleUse)>, out: &mut Vec<Problem>) {
    for (field, usage) in refs.drain(..) {
        out.push(Problem::MasterRoleReference {
            object: object.clone(),
            field,
            usage,
        });
    }
}

fn pod_spec(spec: &PodSpec, prefix: &str, refs: &mut Vec<(String, RoleUse)>) {
    if spec
        .node_selector
        .as_ref()
        .is_some_and(|s| s.contains_key(MASTER_ROLE))
    {
        refs.push((
            format!("{prefix}.nodeSelector[\"{MASTER_ROLE}\"]"),
            RoleUse::NodeSelector,
        ));
    }
    let affinity = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref());
    if let Some(required) = affinity.and_then(|a| {
        a.required_during_scheduling_ignored_during_execution
            .as_ref()
    }) {
        for (i, term) in required.node_selector_terms.iter().enumerate() {
            for (j, e) in term.match_expressions.iter().flatten().enumerate() {
                if e.key == MASTER_ROLE {
                    refs.push((
                        format!("{prefix}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}].matchExpressions[{j}].key"),
                        RoleUse::NodeAffinity,
                    ));
                }
            }
        }
    }
    for (i, term) in affinity
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .into_iter()
        .flatten()
        .enumerate()
    {
        for (j, e) in term
            .preference
            .match_expressions
            .iter()
            .flatten()
            .enumerate()
        {
            if e.key == MASTER_ROLE {
                refs.push((
                    format!("{prefix}.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference.matchExpressions[{j}].key"),
                    RoleUse::NodeAffinity,
                ));
            }
        }
    }
    for (i, t) in spec.tolerations.iter().flatten().enumerate() {
        if t.key.as_deref() == Some(MASTER_ROLE) {
            refs.push((
                format!("{prefix}.tolerations[{i}].key"),
                RoleUse::Toleration,
            ));
        }
    }
}

fn webhook_selectors(
    i: usize,
    namespace: Option<&LabelSelector>,
    object: Option<&LabelSelector>,
    refs: &mut Vec<(String, RoleUse)>,
) {
    if let Some(s) = namespace {
        label_selector(
            s,
            &format!("webhooks[{i}].namespaceSelector"),
            RoleUse::NamespaceSelector,
            refs,
        );
    }
    if let Some(s) = object {
        label_selector(
            s,
            &format!("webhooks[{i}].objectSelector"),
            RoleUse::ObjectSelector,
            refs,
        );
    }
}

fn match_resources(m: &MatchResources, refs: &mut Vec<(String, RoleUse)>) {
    if let Some(s) = &m.namespace_selector {
        label_selector(
            s,
            "spec.matchResources.namespaceSelector",
            RoleUse::NamespaceSelector,
            refs,
        );
    }
    if let Some(s) = &m.object_selector {
        label_selector(
            s,
            "spec.matchResources.objectSelector",
            RoleUse::ObjectSelector,
            refs,
        );
    }
}

fn label_selector(
    s: &LabelSelector,
    prefix: &str,
    usage: RoleUse,
    refs: &mut Vec<(String, RoleUse)>,
) {
    if s.match_labels
        .as_ref()
        .is_some_and(|l| l.contains_key(MASTER_ROLE))
    {
        refs.push((format!("{prefix}.matchLabels[\"{MASTER_ROLE}\"]"), usage));
    }
    for (j, e) in s.match_expressions.iter().flatten().enumerate() {
        if e.key == MASTER_ROLE {
            refs.push((format!("{prefix}.matchExpressions[{j}].key"), usage));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).expect("fixture")
    }

    fn fields(out: &[Problem]) -> Vec<(String, String)> {
        out.iter()
            .filter_map(|f| match f {
                Problem::MasterRoleReference { object, field, .. } => {
                    Some((object.to_string(), field.clone()))
                }
                _ => None,
            })
            .collect()
    }

    fn template(spec: Value) -> Value {
        json!({"selector": {}, "template": {"spec": spec}})
    }

    #[test]
    fn each_kind_of_reference_is_found_with_its_field_path() {
        let master_spec = json!({"containers": [],
            "nodeSelector": {MASTER_ROLE: ""},
            "tolerations": [{"key": CONTROL_PLANE_ROLE, "effect": "NoSchedule"},
                            {"key": MASTER_ROLE, "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "Exists"},
                                          {"key": MASTER_ROLE, "operator": "Exists"}]}]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [{"key": MASTER_ROLE, "operator": "DoesNotExist"}]}}]}}});
        let nodes: Vec<Node> = vec![
            typed(json!({"metadata": {"name": "old", "labels": {MASTER_ROLE: ""}}})),
            typed(
                json!({"metadata": {"name": "both", "labels": {MASTER_ROLE: "", CONTROL_PLANE_ROLE: ""}}}),
            ),
            typed(json!({"metadata": {"name": "new", "labels": {CONTROL_PLANE_ROLE: ""}}})),
        ];
        let pods: Vec<Pod> = vec![
            typed(json!({"metadata": {"name": "bare", "namespace": "ops"},
                         "spec": {"containers": [], "nodeSelector": {MASTER_ROLE: "true"}}})),
            // Owned by a DaemonSet: reported through the template only.
            typed(json!({"metadata": {"name": "agent-x", "namespace": "ops",
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
                                         "uid": "u", "controller": true}]},
                         "spec": {"containers": [], "nodeSelector": {MASTER_ROLE: ""}}})),
        ];
        let objects = RoleObjects {
            deployments: vec![typed(json!({"metadata": {"name": "d", "namespace": "ops"},
                "spec": template(json!({"containers": [], "nodeSelector": {"zone": "a"}}))}))],
            daemon_sets: vec![typed(
                json!({"metadata": {"name": "agent", "namespace": "ops"},
                "spec": template(master_spec.clone())}),
            )],
            stateful_sets: vec![typed(json!({"metadata": {"name": "s", "namespace": "db"},
                "spec": {"serviceName": "s", "selector": {}, "template": {"spec": {"containers": [],
                    "tolerations": [{"key": MASTER_ROLE, "operator": "Exists"}]}}}}))],
            jobs: vec![
                typed(json!({"metadata": {"name": "j", "namespace": "ops"},
                    "spec": {"template": {"spec": {"containers": [], "nodeSelector": {MASTER_ROLE: ""}}}}})),
                typed(json!({"metadata": {"name": "c-123", "namespace": "ops",
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "c",
                                             "uid": "u", "controller": true}]},
                    "spec": {"template": {"spec": {"containers": [], "nodeSelector": {MASTER_ROLE: ""}}}}})),
            ],
            cron_jobs: vec![typed(json!({"metadata": {"name": "c", "namespace": "ops"},
                "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec":
                    {"containers": [], "nodeSelector": {MASTER_ROLE: ""}}}}}}}))],
            validating_webhooks: vec![typed(json!({"metadata": {"name": "vw"},
                "webhooks": [
                    {"name": "a.example.com", "clientConfig": {}, "sideEffects": "None", "admissionReviewVersions": ["v1"]},
                    {"name": "b.example.com", "clientConfig": {}, "sideEffects": "None", "admissionReviewVersions": ["v1"],
                     "objectSelector": {"matchExpressions": [{"key": MASTER_ROLE, "operator": "DoesNotExist"}]}}]}))],
            mutating_webhooks: vec![typed(json!({"metadata": {"name": "mw"},
                "webhooks": [{"name": "a.example.com", "clientConfig": {}, "sideEffects": "None",
                    "admissionReviewVersions": ["v1"], "namespaceSelector": {"matchLabels": {MASTER_ROLE: ""}}}]}))],
            validating_bindings: vec![typed(json!({"metadata": {"name": "vb"},
                "spec": {"policyName": "p", "validationActions": ["Deny"],
                         "matchResources": {"objectSelector": {"matchLabels": {MASTER_ROLE: ""}}}}}))],
            mutating_bindings: vec![(
                "mb".into(),
                typed(
                    json!({"namespaceSelector": {"matchExpressions": [{"key": MASTER_ROLE, "operator": "Exists"}]}}),
                ),
            )],
        };
        let mut out = Vec::new();
        audit(&nodes, &pods, &objects, &mut out);
        assert_eq!(
            out[0],
            Problem::MasterRoleWithoutControlPlane { node: "old".into() }
        );
        assert_eq!(
            out.iter()
                .filter(|f| matches!(f, Problem::MasterRoleWithoutControlPlane { .. }))
                .count(),
            1
        );
        let p = "spec.template.spec";
        let expected: Vec<(String, String)> = [
            ("Pod ops/bare", format!("spec.nodeSelector[\"{MASTER_ROLE}\"]")),
            ("DaemonSet ops/agent", format!("{p}.nodeSelector[\"{MASTER_ROLE}\"]")),
            ("DaemonSet ops/agent", format!("{p}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[1].key")),
            ("DaemonSet ops/agent", format!("{p}.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0].key")),
            ("DaemonSet ops/agent", format!("{p}.tolerations[1].key")),
            ("StatefulSet db/s", format!("{p}.tolerations[0].key")),
            ("Job ops/j", format!("{p}.nodeSelector[\"{MASTER_ROLE}\"]")),
            ("CronJob ops/c", format!("spec.jobTemplate.spec.template.spec.nodeSelector[\"{MASTER_ROLE}\"]")),
            ("ValidatingWebhookConfiguration vw", "webhooks[1].objectSelector.matchExpressions[0].key".into()),
            ("MutatingWebhookConfiguration mw", format!("webhooks[0].namespaceSelector.matchLabels[\"{MASTER_ROLE}\"]")),
            ("ValidatingAdmissionPolicyBinding vb", format!("spec.matchResources.objectSelector.matchLabels[\"{MASTER_ROLE}\"]")),
            ("MutatingAdmissionPolicyBinding mb", "spec.matchResources.namespaceSelector.matchExpressions[0].key".into()),
        ]
        .into_iter()
        .map(|(o, f)| (o.to_string(), f))
        .collect();
        assert_eq!(fields(&out), expected);
    }

    #[test]
    fn control_plane_only_references_are_not_findings() {
        let spec = json!({"containers": [], "nodeSelector": {CONTROL_PLANE_ROLE: ""},
            "tolerations": [{"operator": "Exists"}, {"key": CONTROL_PLANE_ROLE, "operator": "Exists"}]});
        let objects = RoleObjects {
            daemon_sets: vec![typed(
                json!({"metadata": {"name": "ok", "namespace": "ops"}, "spec": template(spec)}),
            )],
            ..Default::default()
        };
        let mut out = Vec::new();
        audit(&[], &[], &objects, &mut out);
        assert_eq!(out, vec![]);
    }
}
