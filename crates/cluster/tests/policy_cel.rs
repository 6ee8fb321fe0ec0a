//! The generated policies' CEL, evaluated with cel-rust on allowed and
//! denied fixtures, after a round trip through the printed YAML (parsed back
//! into k8s-openapi types): what is judged is what `cluster policy` prints.
//!
//! `object` is bound as kube-apiserver binds it (the whole object, apiVersion
//! and kind included, as JSON), and `variables` as a map of the policy's
//! variables, each evaluated in order. Differences from kube-apiserver's
//! cel-go: variables are evaluated eagerly here (lazily there; the
//! generated ones never fail, so the results agree), and no cost limits.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use nodeproof_cluster::policy::{self, Mode};
use nodeproof_report::contract::Contract;
use serde::Deserialize;
use serde_json::{json, Value};

const STRICT: &str = "profiles/vllm-strict.json";
const INIT: &str = "profiles/vllm-init.json";
const OTHER: &str = "profiles/other.json";

fn contracts() -> Vec<Contract> {
    vec![
        Contract {
            class: "vllm".into(),
            profiles: vec![STRICT.into(), INIT.into()],
            requires: Default::default(),
        },
        Contract {
            class: "other".into(),
            profiles: vec![OTHER.into()],
            requires: Default::default(),
        },
    ]
}

/// The printed YAML, parsed back into typed policies and bindings.
fn printed(
    mode: Mode,
) -> (
    Vec<ValidatingAdmissionPolicy>,
    Vec<ValidatingAdmissionPolicyBinding>,
) {
    let text = policy::render(&contracts(), mode, None).expect("render");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("YAML");
    let mut policies = Vec::new();
    let mut bindings = Vec::new();
    for doc in docs {
        assert_eq!(
            doc["apiVersion"], "admissionregistration.k8s.io/v1",
            "{doc}"
        );
        match doc["kind"].as_str() {
            Some("ValidatingAdmissionPolicy") => {
                policies.push(ValidatingAdmissionPolicy::deserialize(&doc).expect("typed policy"))
            }
            Some("ValidatingAdmissionPolicyBinding") => bindings
                .push(ValidatingAdmissionPolicyBinding::deserialize(&doc).expect("typed binding")),
            other => panic!("unexpected document kind {other:?}"),
        }
    }
    (policies, bindings)
}

/// Whether the policy's matchConstraints select this request
/// (group, version v1, resource[/subresource], operation).
fn matches(p: &ValidatingAdmissionPolicy, group: &str, resource: &str, op: &str) -> bool {
    let rules = p.spec.as_ref().unwrap().match_constraints.as_ref().unwrap();
    rules.resource_rules.as_ref().unwrap().iter().any(|r| {
        let has = |l: &Option<Vec<String>>, v: &str| {
            l.as_ref()
                .is_some_and(|l| l.iter().any(|x| x == v || x == "*"))
        };
        has(&r.api_groups, group)
            && has(&r.api_versions, "v1")
            && has(&r.resources, resource)
            && has(&r.operations, op)
    })
}

/// The messages of the validations `object` fails.
fn failures(p: &ValidatingAdmissionPolicy, object: &Value) -> Vec<String> {
    let spec = p.spec.as_ref().unwrap();
    let mut ctx = cel::Context::default();
    ctx.add_variable("object", object.clone()).unwrap();
    ctx.add_variable_from_value("oldObject", cel::Value::Null);
    let mut vars: HashMap<cel::objects::Key, cel::Value> = HashMap::new();
    for v in spec.variables.as_ref().unwrap() {
        let program = cel::Program::compile(&v.expression)
            .unwrap_or_else(|e| panic!("variable {}: {e:?}", v.name));
        let value = program
            .execute(&ctx)
            .unwrap_or_else(|e| panic!("variable {} on {object}: {e:?}", v.name));
        vars.insert(cel::objects::Key::String(Arc::new(v.name.clone())), value);
        ctx.add_variable_from_value("variables", cel::Value::Map(vars.clone().into()));
    }
    spec.validations
        .as_ref()
        .unwrap()
        .iter()
        .filter_map(|v| {
            let program = cel::Program::compile(&v.expression).expect("validation compiles");
            match program.execute(&ctx) {
                Ok(cel::Value::Bool(true)) => None,
                Ok(cel::Value::Bool(false)) => Some(v.message.clone().unwrap()),
                other => panic!("validation {} on {object}: {other:?}", v.expression),
            }
        })
        .collect()
}

#[derive(Clone, Copy)]
enum Profile {
    Localhost(&'static str),
    LocalhostWithoutPath,
    RuntimeDefault,
    Unconfined,
    /// A securityContext without seccompProfile.
    NoSeccomp,
}

fn security_context(p: Option<Profile>) -> Option<Value> {
    Some(match p? {
        Profile::Localhost(path) => {
            json!({"seccompProfile": {"type": "Localhost", "localhostProfile": path}})
        }
        Profile::LocalhostWithoutPath => json!({"seccompProfile": {"type": "Localhost"}}),
        Profile::RuntimeDefault => json!({"seccompProfile": {"type": "RuntimeDefault"}}),
        Profile::Unconfined => json!({"seccompProfile": {"type": "Unconfined"}}),
        Profile::NoSeccomp => json!({"runAsNonRoot": true}),
    })
}

#[derive(Clone, Copy)]
enum Kind {
    Container,
    Init,
    Ephemeral,
}

fn pod_spec(
    class: Option<&str>,
    pod: Option<Profile>,
    containers: &[(Kind, Option<Profile>)],
) -> Value {
    let mut spec = json!({});
    if let Some(c) = class {
        spec["runtimeClassName"] = json!(c);
    }
    if let Some(sc) = security_context(pod) {
        spec["securityContext"] = sc;
    }
    for (i, (kind, p)) in containers.iter().enumerate() {
        let field = match kind {
            Kind::Container => "containers",
            Kind::Init => "initContainers",
            Kind::Ephemeral => "ephemeralContainers",
        };
        let mut c = json!({"name": format!("c{i}"), "image": "vllm/vllm-openai:v0.6"});
        if let Some(sc) = security_context(*p) {
            c["securityContext"] = sc;
        }
        if spec.get(field).is_none() {
            spec[field] = json!([]);
        }
        spec[field].as_array_mut().unwrap().push(c);
    }
    spec
}

fn pod(spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "ml"}, "spec": spec})
}

/// The one printed policy that matches the request, and the request's failures.
fn judge(group: &str, resource: &str, op: &str, object: &Value) -> Vec<String> {
    let (policies, _) = printed(Mode::Deny);
    let matching: Vec<_> = policies
        .iter()
        .filter(|p| matches(p, group, resource, op))
        .collect();
    assert_eq!(
        matching.len(),
        1,
        "{resource} {op}: exactly one policy matches"
    );
    failures(matching[0], object)
}

fn judge_pod(spec: Value) -> Vec<String> {
    judge("", "pods", "CREATE", &pod(spec))
}

use Kind::*;
use Profile::*;

/// What a case is, its pod-level profile, its containers, whether it is allowed.
type Case<'a> = (
    &'a str,
    Option<Profile>,
    &'a [(Kind, Option<Profile>)],
    bool,
);

#[test]
fn pods_are_judged_container_by_container_with_container_level_winning() {
    let vllm = Some("vllm");
    // (what, pod-level profile, containers, allowed)
    let table: &[Case] = &[
        (
            "pod-level listed profile",
            Some(Localhost(STRICT)),
            &[(Container, None)],
            true,
        ),
        (
            "no securityContext anywhere",
            None,
            &[(Container, None)],
            false,
        ),
        (
            "container-level listed profile",
            None,
            &[(Container, Some(Localhost(STRICT)))],
            true,
        ),
        (
            "container-level RuntimeDefault beats pod-level Localhost",
            Some(Localhost(STRICT)),
            &[(Container, Some(RuntimeDefault))],
            false,
        ),
        (
            "container-level Localhost beats pod-level RuntimeDefault",
            Some(RuntimeDefault),
            &[(Container, Some(Localhost(INIT)))],
            true,
        ),
        (
            "container securityContext without seccompProfile inherits the pod's",
            Some(Localhost(STRICT)),
            &[(Container, Some(NoSeccomp))],
            true,
        ),
        (
            "pod securityContext without seccompProfile",
            Some(NoSeccomp),
            &[(Container, None)],
            false,
        ),
        (
            "unlisted Localhost profile",
            Some(Localhost("profiles/mine.json")),
            &[(Container, None)],
            false,
        ),
        (
            "another class's profile",
            Some(Localhost(OTHER)),
            &[(Container, None)],
            false,
        ),
        (
            "Localhost without localhostProfile",
            Some(LocalhostWithoutPath),
            &[(Container, None)],
            false,
        ),
        ("Unconfined", Some(Unconfined), &[(Container, None)], false),
        (
            "init container without a profile, no pod-level",
            None,
            &[(Container, Some(Localhost(STRICT))), (Init, None)],
            false,
        ),
        (
            "init container with its own listed profile",
            None,
            &[
                (Container, Some(Localhost(STRICT))),
                (Init, Some(Localhost(INIT))),
            ],
            true,
        ),
        (
            "init container covered by the pod level",
            Some(Localhost(INIT)),
            &[(Container, Some(Localhost(STRICT))), (Init, None)],
            true,
        ),
        (
            "ephemeral container RuntimeDefault",
            Some(Localhost(STRICT)),
            &[(Container, None), (Ephemeral, Some(RuntimeDefault))],
            false,
        ),
        (
            "ephemeral container covered by the pod level",
            Some(Localhost(STRICT)),
            &[(Container, None), (Ephemeral, None)],
            true,
        ),
        (
            "ephemeral container without a profile, no pod-level",
            None,
            &[
                (Container, Some(Localhost(STRICT))),
                (Ephemeral, Some(NoSeccomp)),
            ],
            false,
        ),
        (
            "every kind listed at container level",
            Some(Unconfined),
            &[
                (Container, Some(Localhost(STRICT))),
                (Init, Some(Localhost(INIT))),
                (Ephemeral, Some(Localhost(STRICT))),
            ],
            true,
        ),
    ];
    for (what, pod_level, containers, allowed) in table {
        let got = judge_pod(pod_spec(vllm, *pod_level, containers));
        if *allowed {
            assert!(got.is_empty(), "{what}: allowed expected, got {got:?}");
        } else {
            assert_eq!(got.len(), 1, "{what}: one failure expected, got {got:?}");
            assert!(
                got[0].starts_with("runtimeClassName vllm: "),
                "{what}: {got:?}"
            );
            assert!(
                got[0].contains(STRICT) && got[0].contains(INIT),
                "{}",
                got[0]
            );
        }
    }
}

#[test]
fn other_classes_and_pods_without_a_class_are_left_alone() {
    let bare = [(Container, None)];
    assert!(judge_pod(pod_spec(None, None, &bare)).is_empty());
    assert!(judge_pod(pod_spec(Some("runc"), None, &bare)).is_empty());
    // Each class is held to its own list only.
    assert!(judge_pod(pod_spec(Some("other"), Some(Localhost(OTHER)), &bare)).is_empty());
    let got = judge_pod(pod_spec(Some("other"), Some(Localhost(STRICT)), &bare));
    assert_eq!(got.len(), 1);
    assert!(got[0].starts_with("runtimeClassName other: "), "{got:?}");
}

#[test]
fn ephemeral_containers_added_later_are_judged_on_the_subresource() {
    let spec = pod_spec(
        Some("vllm"),
        None,
        &[(Container, Some(Localhost(STRICT))), (Ephemeral, None)],
    );
    let got = judge("", "pods/ephemeralcontainers", "UPDATE", &pod(spec));
    assert_eq!(got.len(), 1, "{got:?}");
    // A plain pod update (labels) is not judged: the profiles are immutable.
    let (policies, _) = printed(Mode::Deny);
    assert!(!policies.iter().any(|p| matches(p, "", "pods", "UPDATE")));
}

#[test]
fn every_workload_kinds_pod_template_is_judged() {
    let good = pod_spec(
        Some("vllm"),
        Some(Localhost(STRICT)),
        &[(Container, None), (Init, None)],
    );
    let bad = pod_spec(
        Some("vllm"),
        Some(Localhost(STRICT)),
        &[(Container, None), (Init, Some(RuntimeDefault))],
    );
    let template = |spec: &Value| json!({"metadata": {"labels": {"app": "x"}}, "spec": spec});
    let workload = |api: &str, kind: &str, spec: &Value| {
        let body = if kind == "CronJob" {
            json!({"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template(spec)}}})
        } else {
            json!({"selector": {"matchLabels": {"app": "x"}}, "template": template(spec)})
        };
        json!({"apiVersion": api, "kind": kind, "metadata": {"name": "w", "namespace": "ml"}, "spec": body})
    };
    let kinds = [
        ("apps", "apps/v1", "Deployment", "deployments"),
        ("apps", "apps/v1", "StatefulSet", "statefulsets"),
        ("apps", "apps/v1", "DaemonSet", "daemonsets"),
        ("apps", "apps/v1", "ReplicaSet", "replicasets"),
        ("batch", "batch/v1", "Job", "jobs"),
        ("batch", "batch/v1", "CronJob", "cronjobs"),
    ];
    for (group, api, kind, resource) in kinds {
        for op in ["CREATE", "UPDATE"] {
            let ok = judge(group, resource, op, &workload(api, kind, &good));
            assert!(ok.is_empty(), "{kind} {op} good: {ok:?}");
            let denied = judge(group, resource, op, &workload(api, kind, &bad));
            assert_eq!(denied.len(), 1, "{kind} {op} bad: {denied:?}");
        }
    }
}

#[test]
fn bindings_name_their_policy_with_the_modes_actions() {
    for (mode, actions) in [
        (Mode::Deny, vec!["Deny"]),
        (Mode::Warn, vec!["Warn", "Audit"]),
    ] {
        let (policies, bindings) = printed(mode);
        assert_eq!(policies.len(), 3);
        let names: BTreeMap<_, _> = policies
            .iter()
            .map(|p| (p.metadata.name.clone().unwrap(), p))
            .collect();
        assert_eq!(bindings.len(), 3);
        for b in &bindings {
            let spec = b.spec.as_ref().unwrap();
            let target = spec.policy_name.clone().unwrap();
            assert!(names.contains_key(&target), "binding to {target}");
            assert_eq!(spec.validation_actions.as_deref().unwrap(), actions);
            assert!(spec.param_ref.is_none(), "paramKind-free");
        }
        for p in &policies {
            let spec = p.spec.as_ref().unwrap();
            assert!(spec.param_kind.is_none());
            assert_eq!(spec.validations.as_ref().unwrap().len(), 2, "one per class");
            assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
        }
    }
}

#[test]
fn the_output_says_which_node_selector_each_class_needs() {
    let text = policy::render(&contracts(), Mode::Deny, None).unwrap();
    assert!(
        text.contains("#   vllm:\n#     scheduling:\n#       nodeSelector:\n#         runtimeclass.nodeproof.dev/vllm: ready\n"),
        "{text}"
    );
    // The snippet is a comment: the whole output still applies as it is.
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    assert!(docs.iter().all(|d| d["kind"] != "RuntimeClass"));
}

// The optional GPU gate (MutatingAdmissionPolicy). Its matchConditions are
// evaluated like the validations; its mutation builds Kubernetes' typed
// `Object{...}` apply configuration, which cel-rust parses but cannot
// evaluate (it has no Kubernetes object types), so only its parse is checked.

use k8s_openapi::api::admissionregistration::v1alpha1::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding,
};
use nodeproof_cluster::policy::{GpuGate, MutatingVersion};

const GATE: &str = "nodeproof.dev/gpu-driver-ready";

fn gpu_gate(version: MutatingVersion) -> GpuGate {
    GpuGate {
        namespaces: vec!["ml".into(), "inference".into()],
        gate: GATE.into(),
        version,
    }
}

/// The GPU gate's documents as printed (after the contracts' ones).
fn printed_gate(version: MutatingVersion) -> Vec<Value> {
    let text = policy::render(&contracts(), Mode::Deny, Some(&gpu_gate(version))).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("YAML");
    docs.into_iter()
        .filter(|d| {
            d["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("Mutating"))
        })
        .collect()
}

fn eval_bool(expression: &str, object: &Value) -> bool {
    let mut ctx = cel::Context::default();
    ctx.add_variable("object", object.clone()).unwrap();
    match cel::Program::compile(expression)
        .expect("compiles")
        .execute(&ctx)
    {
        Ok(cel::Value::Bool(b)) => b,
        other => panic!("{expression} on {object}: {other:?}"),
    }
}

#[test]
fn the_gpu_gate_matches_pods_asking_for_a_gpu_that_are_not_gated_yet() {
    let docs = printed_gate(MutatingVersion::V1alpha1);
    assert_eq!(docs.len(), 2);
    let policy = MutatingAdmissionPolicy::deserialize(&docs[0]).expect("typed policy");
    let binding = MutatingAdmissionPolicyBinding::deserialize(&docs[1]).expect("typed binding");
    let spec = policy.spec.unwrap();
    let conditions = spec.match_conditions.unwrap();
    let matches = |pod_spec: Value| {
        let pod = pod(pod_spec);
        conditions.iter().all(|c| eval_bool(&c.expression, &pod))
    };
    let gpu = json!({"limits": {"nvidia.com/gpu": 2}});
    let table = [
        (
            "GPU in a container's limits",
            json!({"containers": [{"name": "a", "resources": gpu}]}),
            true,
        ),
        (
            "GPU in an init container's requests",
            json!({"containers": [{"name": "a"}],
                   "initContainers": [{"name": "i", "resources": {"requests": {"nvidia.com/gpu": 1}}}]}),
            true,
        ),
        (
            "no GPU",
            json!({"containers": [{"name": "a", "resources": {"limits": {"cpu": "2"}}}]}),
            false,
        ),
        (
            "no resources at all",
            json!({"containers": [{"name": "a"}]}),
            false,
        ),
        (
            "already gated",
            json!({"containers": [{"name": "a", "resources": gpu}], "schedulingGates": [{"name": GATE}]}),
            false,
        ),
        (
            "another controller's gate only",
            json!({"containers": [{"name": "a", "resources": gpu}], "schedulingGates": [{"name": "example.com/quota"}]}),
            true,
        ),
    ];
    for (what, spec, want) in table {
        assert_eq!(matches(spec), want, "{what}");
    }
    let rules = spec.match_constraints.unwrap().resource_rules.unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0].operations.as_deref().unwrap(),
        ["CREATE"],
        "gates can only be added at creation"
    );
    let mutation = &spec.mutations.unwrap()[0];
    assert_eq!(mutation.patch_type, "ApplyConfiguration");
    let expression = mutation
        .apply_configuration
        .as_ref()
        .unwrap()
        .expression
        .as_ref()
        .unwrap();
    assert!(expression.contains(&format!("'{GATE}'")), "{expression}");
    cel::Program::compile(expression).expect("the mutation parses");
    let selector = binding
        .spec
        .unwrap()
        .match_resources
        .unwrap()
        .namespace_selector
        .unwrap();
    let req = &selector.match_expressions.unwrap()[0];
    assert_eq!(
        (
            req.key.as_str(),
            req.operator.as_str(),
            req.values.as_deref().unwrap()
        ),
        (
            "kubernetes.io/metadata.name",
            "In",
            &["ml".to_string(), "inference".to_string()][..]
        )
    );
}

#[test]
fn the_gpu_gate_is_printed_in_the_clusters_version() {
    let alpha = printed_gate(MutatingVersion::V1alpha1);
    for (version, api) in [
        (
            MutatingVersion::V1beta1,
            "admissionregistration.k8s.io/v1beta1",
        ),
        (MutatingVersion::V1, "admissionregistration.k8s.io/v1"),
    ] {
        let docs = printed_gate(version);
        for (doc, a) in docs.iter().zip(&alpha) {
            assert_eq!(doc["apiVersion"], api);
            let mut same = doc.clone();
            same["apiVersion"] = a["apiVersion"].clone();
            assert_eq!(&same, a, "only the apiVersion differs");
        }
    }
    // Without --gate-gpu nothing mutating is printed.
    let text = policy::render(&contracts(), Mode::Deny, None).unwrap();
    assert!(!text.contains("Mutating"));
}
