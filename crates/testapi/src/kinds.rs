//! Typed objects: every kind the server stores, as k8s-openapi (v1_33)
//! types, or, for the few it lacks in the version served, small serde
//! structs here (each says why). Objects are decoded when written and
//! encoded to JSON only at the HTTP edge, as kube-apiserver keeps typed
//! objects between its decoder and its encoder
//! (k8s.io/apiserver/pkg/endpoints/handlers/create.go, patch.go).
//!
//! Like any k8s-openapi decoder (and kube-apiserver's default
//! `fieldValidation=Warn`, which drops unknown fields), fields the type does
//! not know are dropped; a field of the wrong type refuses the object.

use k8s_openapi::api::admissionregistration::v1 as admission_v1;
use k8s_openapi::api::admissionregistration::v1alpha1 as admission_v1alpha1;
use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::autoscaling::v2 as autoscaling;
use k8s_openapi::api::batch::v1 as batch;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::resource::{v1alpha3, v1beta1, v1beta2};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A resource the generic list and watch serve: its collection path,
/// apiVersion and kind.
pub struct Listed {
    pub resource: &'static str,
    pub path: &'static str,
    pub api_version: &'static str,
    pub kind: &'static str,
}

const fn listed(
    resource: &'static str,
    path: &'static str,
    api_version: &'static str,
    kind: &'static str,
) -> Listed {
    Listed {
        resource,
        path,
        api_version,
        kind,
    }
}

/// The resources the generic list and watch serve. `cluster check` lists
/// the workloads, HPAs and admission objects across all namespaces.
pub const LISTED: &[Listed] = &[
    listed("pods", "api/v1/pods", "v1", "Pod"),
    listed("nodes", "api/v1/nodes", "v1", "Node"),
    listed(
        "runtimeclasses",
        "apis/node.k8s.io/v1/runtimeclasses",
        "node.k8s.io/v1",
        "RuntimeClass",
    ),
    listed(
        "deployments",
        "apis/apps/v1/deployments",
        "apps/v1",
        "Deployment",
    ),
    listed(
        "daemonsets",
        "apis/apps/v1/daemonsets",
        "apps/v1",
        "DaemonSet",
    ),
    listed(
        "statefulsets",
        "apis/apps/v1/statefulsets",
        "apps/v1",
        "StatefulSet",
    ),
    listed("jobs", "apis/batch/v1/jobs", "batch/v1", "Job"),
    listed("cronjobs", "apis/batch/v1/cronjobs", "batch/v1", "CronJob"),
    listed(
        "horizontalpodautoscalers",
        "apis/autoscaling/v2/horizontalpodautoscalers",
        "autoscaling/v2",
        "HorizontalPodAutoscaler",
    ),
    listed(
        "validatingwebhookconfigurations",
        "apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
    ),
    listed(
        "mutatingwebhookconfigurations",
        "apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        "admissionregistration.k8s.io/v1",
        "MutatingWebhookConfiguration",
    ),
    listed(
        "validatingadmissionpolicybindings",
        "apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicyBinding",
    ),
    // Served as v1 from Kubernetes 1.36 (shared/notes/kube-apiserver-1.36.md).
    listed(
        "mutatingadmissionpolicybindings",
        "apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings",
        "admissionregistration.k8s.io/v1",
        "MutatingAdmissionPolicyBinding",
    ),
];

/// The resource of a list/watch path.
pub fn listed_resource(path: &str) -> Option<&'static str> {
    match path.trim_matches('/') {
        p if p.starts_with("apis/resource.k8s.io/") && p.ends_with("/resourceslices") => {
            Some("resourceslices")
        }
        p if p.starts_with("apis/resource.k8s.io/") && p.ends_with("/devicetaintrules") => {
            Some("devicetaintrules")
        }
        p => LISTED.iter().find(|l| l.path == p).map(|l| l.resource),
    }
}

/// `kind`, `apiVersion` of one object of `resource`.
pub fn kind_of(resource: &str) -> (&'static str, &'static str) {
    match resource {
        "resourceslices" => ("ResourceSlice", "resource.k8s.io/v1"),
        "devicetaintrules" => ("DeviceTaintRule", "resource.k8s.io/v1beta2"),
        r => LISTED
            .iter()
            .find(|l| l.resource == r)
            .map(|l| (l.kind, l.api_version))
            .unwrap_or_else(|| panic!("{r} is not a listed resource")),
    }
}

/// `admissionregistration.k8s.io/v1` MutatingAdmissionPolicyBinding: v1
/// from Kubernetes 1.36, which k8s-openapi's v1_33 does not have; its spec
/// is v1alpha1's unchanged (policyName, paramRef, matchResources).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MutatingAdmissionPolicyBinding {
    #[serde(default = "admission_v1_version")]
    pub api_version: String,
    #[serde(default = "mapb_kind")]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<admission_v1alpha1::MutatingAdmissionPolicyBindingSpec>,
}

fn admission_v1_version() -> String {
    "admissionregistration.k8s.io/v1".into()
}
fn mapb_kind() -> String {
    "MutatingAdmissionPolicyBinding".into()
}

/// `resource.k8s.io/v1` ResourceSlice: v1 is Kubernetes 1.34's, beyond
/// k8s-openapi's v1_33; it took v1beta2's schema unchanged (KEP-4381), so the
/// spec is v1beta2's type.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSliceV1 {
    #[serde(default = "resource_v1_version")]
    pub api_version: String,
    #[serde(default = "slice_kind")]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: v1beta2::ResourceSliceSpec,
}

/// `resource.k8s.io/v1` ResourceClaim: as [`ResourceSliceV1`], v1beta2's
/// spec and status under v1's apiVersion.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceClaimV1 {
    #[serde(default = "resource_v1_version")]
    pub api_version: String,
    #[serde(default = "claim_kind")]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: v1beta2::ResourceClaimSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<v1beta2::ResourceClaimStatus>,
}

fn resource_v1_version() -> String {
    "resource.k8s.io/v1".into()
}
fn slice_kind() -> String {
    "ResourceSlice".into()
}
fn claim_kind() -> String {
    "ResourceClaim".into()
}

/// A DeviceTaintRule, in whichever `resource.k8s.io` version it is served
/// (`v1beta2` on 1.36 with DRADeviceTaints): k8s-openapi's v1_33 has it
/// only as v1alpha3, whose spec (deviceSelector, taint) is a superset of
/// v1beta2's. Its status (v1beta2's conditions) is dropped on create, as the
/// registry's PrepareForCreate does, so it has none here.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceTaintRule {
    #[serde(default)]
    pub api_version: String,
    #[serde(default = "dtr_kind")]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: v1alpha3::DeviceTaintRuleSpec,
}

fn dtr_kind() -> String {
    "DeviceTaintRule".into()
}

macro_rules! objects {
    ($($variant:ident($ty:ty)),* $(,)?) => {
        /// One stored object, typed by its kind (and, for `resource.k8s.io`,
        /// the version it was written in: each version is its own schema).
        #[derive(Clone, Debug, PartialEq)]
        pub enum Object {
            $($variant(Box<$ty>),)*
        }

        impl Object {
            pub fn metadata(&self) -> &ObjectMeta {
                match self {
                    $(Object::$variant(o) => &o.metadata,)*
                }
            }

            pub fn metadata_mut(&mut self) -> &mut ObjectMeta {
                match self {
                    $(Object::$variant(o) => &mut o.metadata,)*
                }
            }

            /// The object as the API serves it.
            pub fn to_json(&self) -> Value {
                match self {
                    $(Object::$variant(o) => serde_json::to_value(&**o),)*
                }
                .expect("a typed object encodes")
            }
        }
    };
}

objects! {
    Node(Node),
    Pod(Pod),
    RuntimeClass(RuntimeClass),
    Deployment(apps::Deployment),
    DaemonSet(apps::DaemonSet),
    StatefulSet(apps::StatefulSet),
    Job(batch::Job),
    CronJob(batch::CronJob),
    HorizontalPodAutoscaler(autoscaling::HorizontalPodAutoscaler),
    ValidatingWebhookConfiguration(admission_v1::ValidatingWebhookConfiguration),
    MutatingWebhookConfiguration(admission_v1::MutatingWebhookConfiguration),
    ValidatingAdmissionPolicyBinding(admission_v1::ValidatingAdmissionPolicyBinding),
    MutatingAdmissionPolicyBinding(MutatingAdmissionPolicyBinding),
    ResourceSliceV1beta1(v1beta1::ResourceSlice),
    ResourceSliceV1beta2(v1beta2::ResourceSlice),
    ResourceSlice(ResourceSliceV1),
    ResourceClaimV1beta1(v1beta1::ResourceClaim),
    ResourceClaimV1beta2(v1beta2::ResourceClaim),
    ResourceClaim(ResourceClaimV1),
    DeviceTaintRule(DeviceTaintRule),
}

fn typed<T: serde::de::DeserializeOwned>(
    v: Value,
    wrap: impl FnOnce(Box<T>) -> Object,
) -> Result<Object, String> {
    serde_json::from_value::<T>(v)
        .map(|o| wrap(Box::new(o)))
        .map_err(|e| e.to_string())
}

impl Object {
    /// Decodes `v` as an object of `resource` (the version from its
    /// `apiVersion` where the group serves several). The error is the
    /// decoder's, which kube-apiserver answers with 400 on a create or
    /// update and 422 on a patch (see [`decode_refused`]).
    pub fn decode(resource: &str, v: Value) -> Result<Object, String> {
        let version = v["apiVersion"].as_str().unwrap_or("").to_string();
        match resource {
            "nodes" => typed(v, Object::Node),
            "pods" => typed(v, Object::Pod),
            "runtimeclasses" => typed(v, Object::RuntimeClass),
            "deployments" => typed(v, Object::Deployment),
            "daemonsets" => typed(v, Object::DaemonSet),
            "statefulsets" => typed(v, Object::StatefulSet),
            "jobs" => typed(v, Object::Job),
            "cronjobs" => typed(v, Object::CronJob),
            "horizontalpodautoscalers" => typed(v, Object::HorizontalPodAutoscaler),
            "validatingwebhookconfigurations" => typed(v, Object::ValidatingWebhookConfiguration),
            "mutatingwebhookconfigurations" => typed(v, Object::MutatingWebhookConfiguration),
            "validatingadmissionpolicybindings" => {
                typed(v, Object::ValidatingAdmissionPolicyBinding)
            }
            "mutatingadmissionpolicybindings" => typed(v, Object::MutatingAdmissionPolicyBinding),
            "resourceslices" => match version.as_str() {
                "resource.k8s.io/v1beta1" => typed(v, Object::ResourceSliceV1beta1),
                "resource.k8s.io/v1beta2" => typed(v, Object::ResourceSliceV1beta2),
                _ => typed(v, Object::ResourceSlice),
            },
            "resourceclaims" => match version.as_str() {
                "resource.k8s.io/v1beta1" => typed(v, Object::ResourceClaimV1beta1),
                "resource.k8s.io/v1beta2" => typed(v, Object::ResourceClaimV1beta2),
                _ => typed(v, Object::ResourceClaim),
            },
            "devicetaintrules" => typed(v, Object::DeviceTaintRule),
            r => Err(format!("{r} is not a resource this server stores")),
        }
    }

    /// `ns/name`, or `name` for a cluster-scoped object: the order etcd keeps them in.
    pub fn key(&self) -> String {
        let m = self.metadata();
        let name = m.name.as_deref().unwrap_or("");
        match &m.namespace {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_string(),
        }
    }

    pub fn resource_version(&self) -> Option<&str> {
        self.metadata().resource_version.as_deref()
    }

    /// `spec.nodeName`, for the field selector of pods and ResourceSlices.
    pub fn spec_node_name(&self) -> Option<&str> {
        match self {
            Object::Pod(p) => p.spec.as_ref()?.node_name.as_deref(),
            Object::ResourceSliceV1beta1(s) => s.spec.node_name.as_deref(),
            Object::ResourceSliceV1beta2(s) => s.spec.node_name.as_deref(),
            Object::ResourceSlice(s) => s.spec.node_name.as_deref(),
            _ => None,
        }
    }

    pub fn as_pod(&self) -> Option<&Pod> {
        match self {
            Object::Pod(p) => Some(p),
            _ => None,
        }
    }

    pub fn as_node(&self) -> Option<&Node> {
        match self {
            Object::Node(n) => Some(n),
            _ => None,
        }
    }
}

/// A write whose body does not decode as its kind: kube-apiserver's create
/// and update handlers answer the decoder's error as 400 BadRequest
/// (k8s.io/apiserver/pkg/endpoints/handlers/create.go, update.go:
/// `transformDecodeError`).
pub fn decode_refused(err: &str) -> crate::status::Answer {
    crate::status::status(400, "BadRequest", err)
}

/// A patch whose result does not decode as its kind: 422 Invalid on the
/// field `patch`, the error the decoder gave
/// (k8s.io/apiserver/pkg/endpoints/handlers/patch.go, `applyPatchToObject`
/// and `jsonPatcher.applyPatchToCurrentObject`: `errors.NewInvalid(
/// schema.GroupKind{}, "", field.ErrorList{field.Invalid(field.NewPath("patch"), ...)})`).
pub fn patch_refused(patched: &Value, err: &str) -> crate::status::Answer {
    crate::status::status(
        422,
        "Invalid",
        &format!(" \"\" is invalid: patch: Invalid value: \"{patched}\": {err}"),
    )
}

/// Decodes a typed value from JSON the server built itself (a test's
/// object, a helper's): a failure is the caller's mistake.
pub fn decode_own<T: serde::de::DeserializeOwned>(what: &str, v: Value) -> T {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("{what} does not decode: {e}"))
}

/// A typed value as JSON.
pub fn encode<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("a typed object encodes")
}
