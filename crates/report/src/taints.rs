//! Whether tolerations tolerate a node's taints: Kubernetes' matching
//! (`Toleration.ToleratesTaint` of k8s.io/api core/v1, as the scheduler and
//! the taint manager use it), pure.
//!
//! - an empty effect matches every effect, else the effects must be equal;
//! - an empty key matches every key (the API allows it only with `Exists`);
//! - operator `Exists` matches any value, `Equal` (or empty) only the same
//!   value; anything else (`Lt`/`Gt`, alpha behind a feature gate that is
//!   off by default) matches nothing, as in a default scheduler.

use k8s_openapi::api::core::v1::Toleration as ApiToleration;

use crate::marks::Taint;

/// A toleration as written (absent fields are empty strings).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Toleration {
    pub key: String,
    pub operator: String,
    pub value: String,
    pub effect: String,
}

impl From<&ApiToleration> for Toleration {
    fn from(t: &ApiToleration) -> Self {
        Toleration {
            key: t.key.clone().unwrap_or_default(),
            operator: t.operator.clone().unwrap_or_default(),
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.clone().unwrap_or_default(),
        }
    }
}

pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if !t.effect.is_empty() && t.effect != taint.effect {
        return false;
    }
    if !t.key.is_empty() && t.key != taint.key {
        return false;
    }
    match t.operator.as_str() {
        "" | "Equal" => t.value == taint.value,
        "Exists" => true,
        _ => false,
    }
}

/// The taints that keep pods off the node (`NoSchedule`, `NoExecute`; a
/// `PreferNoSchedule` only discourages) and that no toleration tolerates.
pub fn untolerated<'a>(tolerations: &[Toleration], taints: &'a [Taint]) -> Vec<&'a Taint> {
    taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .filter(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
        .collect()
}

/// `key=value:Effect`, or `key:Effect` without a value, as kubectl prints taints.
pub fn display(t: &Taint) -> String {
    if t.value.is_empty() {
        format!("{}:{}", t.key, t.effect)
    } else {
        format!("{}={}:{}", t.key, t.value, t.effect)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect: effect.into(),
        }
    }

    fn tol(key: &str, operator: &str, value: &str, effect: &str) -> Toleration {
        Toleration {
            key: key.into(),
            operator: operator.into(),
            value: value.into(),
            effect: effect.into(),
        }
    }

    #[test]
    fn toleration_matching_table() {
        let gpu = taint("nvidia.com/gpu", "present", "NoSchedule");
        let cases = [
            // (toleration, tolerates `gpu`?)
            (
                tol("nvidia.com/gpu", "Equal", "present", "NoSchedule"),
                true,
            ),
            (tol("nvidia.com/gpu", "", "present", "NoSchedule"), true), // empty operator = Equal
            (
                tol("nvidia.com/gpu", "Equal", "absent", "NoSchedule"),
                false,
            ),
            (tol("nvidia.com/gpu", "Equal", "", "NoSchedule"), false),
            (tol("nvidia.com/gpu", "Exists", "", "NoSchedule"), true),
            (tol("nvidia.com/gpu", "Exists", "ignored", ""), true), // empty effect = all
            (tol("nvidia.com/gpu", "Equal", "present", ""), true),
            (tol("nvidia.com/gpu", "Exists", "", "NoExecute"), false), // other effect
            (
                tol("nvidia.com/gpu", "Exists", "", "PreferNoSchedule"),
                false,
            ),
            (tol("other", "Exists", "", ""), false), // other key
            (tol("", "Exists", "", ""), true),       // empty key + Exists: everything
            (tol("", "Exists", "", "NoSchedule"), true),
            (tol("", "Exists", "", "NoExecute"), false),
            // Empty key with Equal (refused by API validation): keys are not compared, values are.
            (tol("", "Equal", "present", ""), true),
            (tol("", "", "other", ""), false),
            // Alpha comparison operators and unknown ones match nothing by default.
            (tol("nvidia.com/gpu", "Gt", "1", ""), false),
            (tol("nvidia.com/gpu", "exists", "", ""), false), // case matters
            (tol("Nvidia.com/gpu", "Exists", "", ""), false),
        ];
        for (i, (t, want)) in cases.iter().enumerate() {
            assert_eq!(tolerates(t, &gpu), *want, "case {i}: {t:?}");
        }
        let valueless = taint("dedicated", "", "NoExecute");
        assert!(tolerates(&tol("dedicated", "Equal", "", ""), &valueless));
        assert!(tolerates(
            &tol("dedicated", "Exists", "", "NoExecute"),
            &valueless
        ));
    }

    #[test]
    fn only_scheduling_taints_need_tolerating() {
        let taints = [
            taint("nvidia.com/gpu", "present", "NoSchedule"),
            taint("dedicated", "infer", "NoExecute"),
            taint("soft", "", "PreferNoSchedule"),
        ];
        let gpu_only = [tol("nvidia.com/gpu", "Exists", "", "")];
        let left = untolerated(&gpu_only, &taints);
        assert_eq!(
            left.iter().map(|t| display(t)).collect::<Vec<_>>(),
            ["dedicated=infer:NoExecute"]
        );
        assert!(untolerated(&[tol("", "Exists", "", "")], &taints).is_empty());
        assert_eq!(untolerated(&[], &taints).len(), 2);
        assert_eq!(display(&taints[2]), "soft:PreferNoSchedule");
    }
}
