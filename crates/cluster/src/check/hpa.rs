//! HorizontalPodAutoscalers that cannot scale: an upgrade that breaks the
//! Metrics API, or an HPA's access to it, stops autoscaling without any
//! pod failing, so "the Metrics API answers" is not enough.
//!
//! The HPA controller (k8s.io/kubernetes pkg/controller/podautoscaler)
//! reports on `autoscaling/v2` status conditions:
//! - `AbleToScale=False`: it cannot read or update the scale subresource
//!   (`FailedGetScale`, `FailedUpdateScale`);
//! - `ScalingActive=False`: it cannot compute a replica count, most often
//!   because the metrics are unavailable (`FailedGetResourceMetric`,
//!   `FailedGetPodsMetric`, `FailedGetExternalMetric`, …), except
//!   `ScalingDisabled`, which it sets while the target is scaled to zero on
//!   purpose.
//!
//! Pure.

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use serde::{Deserialize, Serialize};

/// Why an HPA cannot scale: the condition that says so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HpaProblem {
    /// `AbleToScale` or `ScalingActive`.
    pub condition: String,
    pub reason: String,
    pub message: String,
}

/// The condition types judged, in order.
const JUDGED: [&str; 2] = ["AbleToScale", "ScalingActive"];

/// `None` when the HPA can scale (or has not reported yet).
pub fn problem(hpa: &HorizontalPodAutoscaler) -> Option<HpaProblem> {
    let conditions = hpa.status.as_ref()?.conditions.as_ref()?;
    JUDGED.iter().find_map(|judged| {
        let c = conditions.iter().find(|c| c.type_ == *judged)?;
        let reason = c.reason.clone().unwrap_or_default();
        if c.status != "False" || (c.type_ == "ScalingActive" && reason == "ScalingDisabled") {
            return None;
        }
        Some(HpaProblem {
            condition: c.type_.clone(),
            reason,
            message: c.message.clone().unwrap_or_default(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hpa(conditions: serde_json::Value) -> HorizontalPodAutoscaler {
        serde_json::from_value(json!({"metadata": {"name": "h", "namespace": "ml"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "d"}, "maxReplicas": 3},
            "status": {"desiredReplicas": 1, "conditions": conditions}}))
        .unwrap()
    }

    #[test]
    fn only_false_conditions_other_than_scaling_disabled_are_problems() {
        let ok = hpa(json!([
            {"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale"},
            {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound"}]));
        assert_eq!(problem(&ok), None);
        let disabled = hpa(json!([
            {"type": "ScalingActive", "status": "False", "reason": "ScalingDisabled"}]));
        assert_eq!(problem(&disabled), None);
        let no_metrics = hpa(json!([
            {"type": "AbleToScale", "status": "True", "reason": "SucceededGetScale"},
            {"type": "ScalingActive", "status": "False", "reason": "FailedGetResourceMetric",
             "message": "the HPA was unable to compute the replica count: unable to get metrics for resource cpu"}]));
        let p = problem(&no_metrics).unwrap();
        assert_eq!(
            (p.condition.as_str(), p.reason.as_str()),
            ("ScalingActive", "FailedGetResourceMetric")
        );
        let no_scale = hpa(json!([
            {"type": "AbleToScale", "status": "False", "reason": "FailedGetScale"},
            {"type": "ScalingActive", "status": "False", "reason": "FailedGetResourceMetric"}]));
        assert_eq!(problem(&no_scale).unwrap().reason, "FailedGetScale");
    }
}
