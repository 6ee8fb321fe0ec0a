//! The device taints' series on the gate controller's `/metrics`: whether
//! DeviceTaintRule is served, how many of ours exist, failed requests.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Which kind of request failed.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Request {
    Create,
    Delete,
    Watch,
}

impl Request {
    pub const ALL: [Request; 3] = [Request::Create, Request::Delete, Request::Watch];
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabel {
    pub request: Request,
}

#[derive(Debug, Default)]
pub struct DeviceTaintMetrics {
    served: Gauge,
    rules: Gauge,
    errors: Family<RequestLabel, Counter>,
}

impl DeviceTaintMetrics {
    /// The metrics, registered on the controller's registry.
    pub fn register(registry: &mut Registry) -> std::sync::Arc<DeviceTaintMetrics> {
        let m = std::sync::Arc::new(DeviceTaintMetrics::default());
        // Every series exists from the start, at 0 (see GateMetrics::new).
        for request in Request::ALL {
            drop(m.errors.get_or_create(&RequestLabel { request }));
        }
        registry.register(
            "nodeproof_gate_device_taint_rules_served",
            "1 when the API server serves DeviceTaintRule (resource.k8s.io/v1beta2), 0 when it does not",
            m.served.clone(),
        );
        registry.register(
            "nodeproof_gate_device_taint_rules",
            "DeviceTaintRules of nodeproof's for unhealthy GPUs, as last seen",
            m.rules.clone(),
        );
        registry.register(
            "nodeproof_gate_device_taint_errors",
            "Failed DeviceTaintRule requests",
            m.errors.clone(),
        );
        m
    }

    pub fn set_served(&self, served: bool) {
        self.served.set(i64::from(served));
    }

    pub fn set_rules(&self, n: usize) {
        self.rules.set(n as i64);
    }

    pub fn failed(&self, request: Request) {
        self.errors.get_or_create(&RequestLabel { request }).inc();
    }
}
