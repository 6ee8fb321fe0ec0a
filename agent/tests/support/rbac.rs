//! RBAC as kube-apiserver decides it, for checking a deploy/ manifest
//! against a test's request log: a request path mapped to (verb, apiGroup,
//! resource, subresource, namespace, name) as the RequestInfoFactory does
//! (k8s.io/apiserver/pkg/endpoints/request/requestinfo.go), and RBAC's
//! RuleAllows (k8s.io/kubernetes/pkg/apis/rbac/v1/evaluation_helpers.go).
//! Used by rbac_agent.rs, cluster_check.rs and gate_controller.rs.

#![allow(dead_code)]

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule};
use serde_json::Value;

/// What kube-apiserver's RequestInfo says a resource request is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RequestInfo {
    pub verb: String,
    pub api_group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

pub fn query_value(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| v.replace("%3D", "=").replace("%3d", "="))
    })
}

/// requestinfo.go's NewRequestInfo for `/api/v1/...` and `/apis/<group>/<version>/...`.
pub fn request_info(method: &str, path: &str, query: &str) -> RequestInfo {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (api_group, mut rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => (String::new(), rest.to_vec()),
        ["apis", group, _version, rest @ ..] => (group.to_string(), rest.to_vec()),
        _ => panic!("not a resource request: {method} {path}"),
    };
    let mut namespace = String::new();
    // `namespaces/<ns>/<resource>...` is a namespaced request; `namespaces/<ns>` alone is the Namespace.
    if rest.first() == Some(&"namespaces") && rest.len() > 2 {
        namespace = rest[1].to_string();
        rest = rest[2..].to_vec();
    }
    let at = |i: usize| rest.get(i).map_or(String::new(), |s| s.to_string());
    let (resource, mut name, subresource) = (at(0), at(1), at(2));
    let watch = matches!(query_value(query, "watch").as_deref(), Some("true" | "1"));
    let verb = match (method, name.is_empty()) {
        ("GET", false) => "get",
        ("GET", true) if watch => "watch",
        ("GET", true) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", false) => "delete",
        ("DELETE", true) => "deletecollection",
        _ => panic!("unexpected method {method} {path}"),
    };
    // A list or watch with fieldSelector=metadata.name=<n> is about that name.
    if let ("list" | "watch", Some(sel)) = (verb, query_value(query, "fieldSelector")) {
        if let Some(n) = sel.strip_prefix("metadata.name=") {
            name = n.to_string();
        }
    }
    RequestInfo {
        verb: verb.into(),
        api_group,
        resource,
        subresource,
        namespace,
        name,
    }
}

/// RBAC's RuleAllows for one verb of `rule` (`verb` given apart, so a
/// rule's verbs can be checked one by one).
pub fn rule_allows(rule: &PolicyRule, verb: &str, r: &RequestInfo) -> bool {
    let has = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
    let groups = rule.api_groups.as_deref().unwrap_or_default();
    let resources = rule.resources.as_deref().unwrap_or_default();
    let combined = if r.subresource.is_empty() {
        r.resource.clone()
    } else {
        format!("{}/{}", r.resource, r.subresource)
    };
    let resource_ok = resources.iter().any(|x| {
        x == "*"
            || *x == combined
            || (!r.subresource.is_empty() && *x == format!("*/{}", r.subresource))
    });
    let names = rule.resource_names.as_deref().unwrap_or_default();
    (verb == "*" || verb == r.verb)
        && has(groups, &r.api_group)
        && resource_ok
        && (names.is_empty() || names.contains(&r.name))
}

/// The rules of the ClusterRoles that the manifest binds to its ServiceAccount.
pub fn bound_rules(manifest: &str) -> (ServiceAccount, Vec<(String, PolicyRule)>) {
    let docs: Vec<Value> = serde_saphyr::from_multiple(manifest).expect("YAML");
    let of_kind = |kind: &'static str| docs.iter().filter(move |d| d["kind"] == kind).cloned();
    let sa: ServiceAccount =
        serde_json::from_value(of_kind("ServiceAccount").next().expect("a ServiceAccount"))
            .unwrap();
    let roles: Vec<ClusterRole> = of_kind("ClusterRole")
        .map(|d| serde_json::from_value(d).unwrap())
        .collect();
    let bindings: Vec<ClusterRoleBinding> = of_kind("ClusterRoleBinding")
        .map(|d| serde_json::from_value(d).unwrap())
        .collect();
    let mut rules = Vec::new();
    for b in &bindings {
        let binds_sa = b.subjects.iter().flatten().any(|s| {
            s.kind == "ServiceAccount"
                && Some(&s.name) == sa.metadata.name.as_ref()
                && s.namespace == sa.metadata.namespace
        });
        assert!(
            binds_sa,
            "binding {:?} binds another subject",
            b.metadata.name
        );
        assert_eq!(b.role_ref.kind, "ClusterRole");
        let role = roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(&b.role_ref.name))
            .unwrap_or_else(|| panic!("binding to a missing ClusterRole {}", b.role_ref.name));
        for rule in role.rules.iter().flatten() {
            rules.push((b.role_ref.name.clone(), rule.clone()));
        }
    }
    (sa, rules)
}

/// Requests no rule allows, and the (role, rule, verb) no request used.
pub fn coverage(
    rules: &[(String, PolicyRule)],
    requests: &BTreeSet<RequestInfo>,
) -> (Vec<RequestInfo>, Vec<String>) {
    let uncovered = requests
        .iter()
        .filter(|r| {
            !rules
                .iter()
                .any(|(_, rule)| rule.verbs.iter().any(|v| rule_allows(rule, v, r)))
        })
        .cloned()
        .collect();
    let mut unused = Vec::new();
    for (i, (role, rule)) in rules.iter().enumerate() {
        for verb in &rule.verbs {
            if !requests.iter().any(|r| rule_allows(rule, verb, r)) {
                unused.push(format!(
                    "{role} rule {i} verb {verb} ({:?})",
                    rule.resources
                ));
            }
        }
    }
    (uncovered, unused)
}
