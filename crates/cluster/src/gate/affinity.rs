//! Whether a node's labels and name satisfy a pod's `nodeSelector` and
//! required node affinity, as k8s.io/component-helpers
//! `scheduling/corev1/nodeaffinity` (`GetRequiredNodeAffinity(pod).Match`)
//! decides. Pure.
//!
//! - `nodeSelector`: every pair equal;
//! - `requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`:
//!   terms ORed, the requirements of one term (matchExpressions and
//!   matchFields) ANDed; an empty term selects nothing, and a term with an
//!   invalid requirement selects nothing (the lazy-error selector drops it)
//!   while the others still match.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};

/// The only field `matchFields` may name (`ValidateNodeFieldSelectorRequirement`).
const FIELD_NAME: &str = "metadata.name";

/// `nodeSelector` and required node affinity together.
pub fn matches(
    selector: &BTreeMap<String, String>,
    required: Option<&NodeSelector>,
    labels: &BTreeMap<String, String>,
    name: &str,
) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
        && required.is_none_or(|ns| node_selector_matches(ns, labels, name))
}

/// `nodeaffinity.NodeSelector.Match`.
pub fn node_selector_matches(
    ns: &NodeSelector,
    labels: &BTreeMap<String, String>,
    name: &str,
) -> bool {
    ns.node_selector_terms
        .iter()
        .any(|t| term_matches(t, labels, name) == Some(true))
}

/// `None`: the term is invalid (never matches).
fn term_matches(
    t: &NodeSelectorTerm,
    labels: &BTreeMap<String, String>,
    name: &str,
) -> Option<bool> {
    let exprs = t.match_expressions.as_deref().unwrap_or_default();
    let fields = t.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return Some(false);
    }
    // Every requirement is checked for validity, even after one failed to
    // match: one invalid requirement makes the whole term an error,
    // whatever the others say.
    let mut all = true;
    for r in exprs {
        all &= label_requirement(r, labels)?;
    }
    for r in fields {
        all &= field_requirement(r, name)?;
    }
    Some(all)
}

/// One `matchExpressions` requirement (`nodeSelectorRequirementsAsSelector`
/// then labels.Requirement.Matches); `None` when it is invalid: `In`/`NotIn`
/// without values, `Exists`/`DoesNotExist` with values, `Gt`/`Lt` without
/// exactly one integer, an unknown operator.
fn label_requirement(
    r: &NodeSelectorRequirement,
    labels: &BTreeMap<String, String>,
) -> Option<bool> {
    let values = r.values.as_deref().unwrap_or_default();
    let got = labels.get(&r.key);
    match r.operator.as_str() {
        "In" if !values.is_empty() => Some(got.is_some_and(|v| values.contains(v))),
        "NotIn" if !values.is_empty() => Some(got.is_none_or(|v| !values.contains(v))),
        "Exists" if values.is_empty() => Some(got.is_some()),
        "DoesNotExist" if values.is_empty() => Some(got.is_none()),
        op @ ("Gt" | "Lt") if values.len() == 1 => {
            let bound: i64 = values[0].parse().ok()?;
            // A label that is missing or not an integer does not match.
            let Some(v) = got.and_then(|v| v.parse::<i64>().ok()) else {
                return Some(false);
            };
            Some(if op == "Gt" { v > bound } else { v < bound })
        }
        _ => None,
    }
}

/// One `matchFields` requirement (`nodeSelectorRequirementsAsFieldSelector`):
/// `metadata.name` with `In` or `NotIn` and exactly one value.
fn field_requirement(r: &NodeSelectorRequirement, name: &str) -> Option<bool> {
    let values = r.values.as_deref().unwrap_or_default();
    if r.key != FIELD_NAME || values.len() != 1 {
        return None;
    }
    match r.operator.as_str() {
        "In" => Some(values[0] == name),
        "NotIn" => Some(values[0] != name),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn ns(v: serde_json::Value) -> NodeSelector {
        serde_json::from_value(json!({ "nodeSelectorTerms": v })).unwrap()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> serde_json::Value {
        json!({"matchExpressions": [{"key": key, "operator": op, "values": values}]})
    }

    #[test]
    fn operator_table() {
        let node = labels(&[("zone", "a"), ("gpus", "8"), ("mem", "lots")]);
        let cases = [
            // (term, matches `node`)
            (expr("zone", "In", &["a", "b"]), true),
            (expr("zone", "In", &["b"]), false),
            (expr("missing", "In", &["a"]), false),
            (expr("zone", "NotIn", &["b"]), true),
            (expr("zone", "NotIn", &["a"]), false),
            (expr("missing", "NotIn", &["a"]), true), // absent label: NotIn holds
            (expr("zone", "Exists", &[]), true),
            (expr("missing", "Exists", &[]), false),
            (expr("missing", "DoesNotExist", &[]), true),
            (expr("zone", "DoesNotExist", &[]), false),
            (expr("gpus", "Gt", &["4"]), true),
            (expr("gpus", "Gt", &["8"]), false),
            (expr("gpus", "Lt", &["9"]), true),
            (expr("gpus", "Lt", &["8"]), false),
            (expr("mem", "Gt", &["1"]), false), // label not an integer
            (expr("missing", "Lt", &["1"]), false),
            // Invalid requirements select nothing, whatever they would say.
            (expr("zone", "In", &[]), false),
            (expr("zone", "Exists", &["a"]), false),
            (expr("gpus", "Gt", &["x"]), false),
            (expr("gpus", "Gt", &["1", "2"]), false),
            (expr("zone", "Equals", &["a"]), false),
            (json!({}), false), // an empty term selects nothing
            // matchFields: metadata.name only, In/NotIn with one value.
            (
                json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}),
                true,
            ),
            (
                json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}),
                false,
            ),
            (
                json!({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n2"]}]}),
                true,
            ),
            (
                json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1", "n2"]}]}),
                false,
            ),
            (
                json!({"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["n1"]}]}),
                false,
            ),
            (
                json!({"matchFields": [{"key": "metadata.name", "operator": "Exists"}]}),
                false,
            ),
            // Expressions and fields of one term are ANDed.
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                                         {"key": "gpus", "operator": "Gt", "values": ["4"]}],
                    "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                                         {"key": "gpus", "operator": "Gt", "values": ["9"]}]}),
                false,
            ),
            // An invalid requirement spoils its term even when another fails first.
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                                         {"key": "zone", "operator": "In", "values": []}]}),
                false,
            ),
        ];
        for (i, (term, want)) in cases.into_iter().enumerate() {
            let sel = ns(json!([term]));
            assert_eq!(
                node_selector_matches(&sel, &node, "n1"),
                want,
                "case {i}: {term}"
            );
        }
    }

    #[test]
    fn terms_are_ored_and_invalid_terms_do_not_spoil_the_others() {
        let node = labels(&[("zone", "a")]);
        let sel = ns(json!([
            expr("zone", "In", &["b"]),
            expr("zone", "In", &["a"])
        ]));
        assert!(node_selector_matches(&sel, &node, "n"));
        let sel = ns(json!([
            expr("zone", "Gt", &["x"]),
            expr("zone", "Exists", &[])
        ]));
        assert!(node_selector_matches(&sel, &node, "n"));
        assert!(
            !node_selector_matches(&ns(json!([])), &node, "n"),
            "no term selects nothing"
        );
    }

    #[test]
    fn node_selector_and_affinity_are_both_required() {
        let node = labels(&[("zone", "a"), ("pool", "gpu")]);
        let sel = labels(&[("pool", "gpu")]);
        let aff = ns(json!([expr("zone", "In", &["a"])]));
        assert!(matches(&sel, Some(&aff), &node, "n"));
        assert!(matches(&sel, None, &node, "n"));
        assert!(!matches(
            &labels(&[("pool", "cpu")]),
            Some(&aff),
            &node,
            "n"
        ));
        assert!(!matches(
            &sel,
            Some(&ns(json!([expr("zone", "In", &["b"])]))),
            &node,
            "n"
        ));
        assert!(matches(&BTreeMap::new(), None, &node, "n"));
    }
}
