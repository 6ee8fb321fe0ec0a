//! Extended resources a pod requests, as the scheduler computes requests,
//! and Kubernetes quantities. Pure.
//!
//! Only extended resources (`nvidia.com/gpu`, ...) are compared with a
//! node's allocatable: CPU, memory, ephemeral storage and hugepages fit
//! depends on what is already running there, which is the scheduler's
//! decision, not the gate's (docs/gate-controller.md).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Amounts in thousandths (a quantity's milli-units), so `500m` and `2` compare.
pub type Milli = i128;

/// `IsExtendedResourceName` of k8s.io/kubernetes pkg/apis/core/helper: a
/// name with a domain (`/`) outside `kubernetes.io`, not a quota's
/// `requests.` name. `cpu`, `memory`, `hugepages-2Mi` have no domain.
pub fn is_extended(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

/// A quantity in milli-units: a decimal number with an optional SI (`m`,
/// `k`, `M`, `G`, `T`, `P`, `E`) or binary (`Ki` … `Ei`) suffix or a
/// decimal exponent (`1e3`), as resource.ParseQuantity reads it. `None`
/// when it is none of those.
pub fn parse_quantity(q: &str) -> Option<Milli> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let (mantissa_milli, _) = decimal_milli(number)?;
    let scale: Milli = match suffix {
        "" => 1,
        "m" => return mantissa_milli.checked_div(1000),
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "P" => 1_000_000_000_000_000,
        "E" => 1_000_000_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        "Ei" => 1 << 60,
        exp if exp.starts_with(['e', 'E']) => {
            let e: u32 = exp[1..].parse().ok()?;
            10i128.checked_pow(e)?
        }
        _ => return None,
    };
    mantissa_milli.checked_mul(scale)
}

/// `number` × 1000, rounded up (the API server rounds a quantity up to its
/// precision), and whether it had a fraction.
fn decimal_milli(number: &str) -> Option<(Milli, bool)> {
    let (neg, digits) = match number.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, number.strip_prefix('+').unwrap_or(number)),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    if !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit()) {
        return None;
    }
    let int: Milli = if int.is_empty() { 0 } else { int.parse().ok()? };
    let mut milli = int.checked_mul(1000)?;
    let mut scale = 100;
    let mut rest = false;
    for c in frac.chars() {
        let d = Milli::from(c.to_digit(10)?);
        if scale == 0 {
            rest |= d != 0;
        } else {
            milli += d * scale;
            scale /= 10;
        }
    }
    if rest {
        milli += 1;
    }
    Some((if neg { -milli } else { milli }, !frac.is_empty()))
}

/// The extended resources `spec` requests, as the scheduler's
/// `computePodResourceRequest` (resourcehelper.PodRequests of
/// k8s.io/component-helpers) adds them up: the sum of the containers, plus
/// the restartable init containers (sidecars, which keep running), against
/// the largest of the init containers (each counted with the sidecars
/// started before it), whichever is larger; plus the pod's overhead.
pub fn pod_extended_requests(spec: &PodSpec) -> BTreeMap<String, Milli> {
    let mut reqs = BTreeMap::new();
    for c in &spec.containers {
        add(&mut reqs, &container_requests(c));
    }
    let mut sidecars = BTreeMap::new();
    let mut init_max = BTreeMap::new();
    for c in spec.init_containers.iter().flatten() {
        let own = container_requests(c);
        let counted = if c.restart_policy.as_deref() == Some("Always") {
            add(&mut reqs, &own);
            add(&mut sidecars, &own);
            sidecars.clone()
        } else {
            let mut with = own;
            add(&mut with, &sidecars);
            with
        };
        max_into(&mut init_max, &counted);
    }
    max_into(&mut reqs, &init_max);
    if let Some(overhead) = &spec.overhead {
        add(&mut reqs, &extended_of(overhead));
    }
    reqs.retain(|_, v| *v > 0);
    reqs
}

/// A container's requests; a resource with a limit and no request requests
/// its limit (the API server's defaulting, `SetDefaults_Pod`).
fn container_requests(c: &Container) -> BTreeMap<String, Milli> {
    let Some(ResourceRequirements {
        requests, limits, ..
    }) = &c.resources
    else {
        return BTreeMap::new();
    };
    let mut out = requests.as_ref().map(extended_of).unwrap_or_default();
    for (k, v) in limits.as_ref().map(extended_of).unwrap_or_default() {
        out.entry(k).or_insert(v);
    }
    out
}

/// The extended resources of a resource list; an amount that does not
/// parse counts as more than any node has.
pub fn extended_of(list: &BTreeMap<String, Quantity>) -> BTreeMap<String, Milli> {
    list.iter()
        .filter(|(k, _)| is_extended(k))
        .map(|(k, q)| (k.clone(), parse_quantity(&q.0).unwrap_or(Milli::MAX)))
        .collect()
}

fn add(into: &mut BTreeMap<String, Milli>, more: &BTreeMap<String, Milli>) {
    for (k, v) in more {
        let e = into.entry(k.clone()).or_insert(0);
        *e = e.saturating_add(*v);
    }
}

fn max_into(into: &mut BTreeMap<String, Milli>, other: &BTreeMap<String, Milli>) {
    for (k, v) in other {
        let e = into.entry(k.clone()).or_insert(0);
        *e = (*e).max(*v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities() {
        let cases = [
            ("2", Some(2000)),
            ("500m", Some(500)),
            ("1.5", Some(1500)),
            ("1k", Some(1_000_000)),
            ("1Ki", Some(1_024_000)),
            ("1e3", Some(1_000_000)),
            ("0.0001", Some(1)), // rounded up
            ("", None),
            ("two", None),
            ("1X", None),
        ];
        for (q, want) in cases {
            assert_eq!(parse_quantity(q), want, "{q}");
        }
    }

    #[test]
    fn extended_names() {
        assert!(is_extended("nvidia.com/gpu"));
        for native in [
            "cpu",
            "memory",
            "hugepages-2Mi",
            "kubernetes.io/x",
            "requests.nvidia.com/gpu",
        ] {
            assert!(!is_extended(native), "{native}");
        }
    }

    fn spec(v: serde_json::Value) -> PodSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn requests_are_added_up_as_the_scheduler_does() {
        let gpu = |n: &str| json!({"requests": {"nvidia.com/gpu": n, "cpu": "1"}});
        let cases = [
            // (spec, nvidia.com/gpu requested)
            (
                json!({"containers": [{"name": "a", "resources": gpu("1")}, {"name": "b", "resources": gpu("2")}]}),
                Some(3000),
            ),
            // An init container larger than the containers' sum wins.
            (
                json!({"initContainers": [{"name": "i", "resources": gpu("4")}],
                    "containers": [{"name": "a", "resources": gpu("1")}]}),
                Some(4000),
            ),
            // A sidecar adds to the containers and to the init containers after it.
            (
                json!({"initContainers": [{"name": "s", "restartPolicy": "Always", "resources": gpu("1")},
                                       {"name": "i", "resources": gpu("2")}],
                    "containers": [{"name": "a", "resources": gpu("1")}]}),
                Some(3000),
            ),
            (
                json!({"initContainers": [{"name": "s", "restartPolicy": "Always", "resources": gpu("2")}],
                    "containers": [{"name": "a", "resources": gpu("2")}]}),
                Some(4000),
            ),
            // A limit without a request is the request (API defaulting).
            (
                json!({"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}),
                Some(2000),
            ),
            (
                json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}),
                None,
            ),
            (
                json!({"containers": [{"name": "a"}], "overhead": {"example.com/x": "1"}}),
                None,
            ),
        ];
        for (i, (s, want)) in cases.into_iter().enumerate() {
            let got = pod_extended_requests(&spec(s));
            assert_eq!(
                got.get("nvidia.com/gpu").copied(),
                want,
                "case {i}: {got:?}"
            );
            assert!(!got.contains_key("cpu"));
        }
    }
}
