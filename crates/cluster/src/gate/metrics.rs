//! The controller's `/metrics` (prometheus-client): gated pods by gate,
//! time from a pod's creation to each gate's release, releases, errors,
//! and whether this replica leads.

use std::fmt;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GateLabel {
    pub gate: String,
}

/// Which kind of API request failed.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Failure {
    /// A gate removal other than a lost race (a failed `test` op is a race, not an error).
    Release,
    Event,
    Watch,
    /// A Node's readiness labels (`steer.rs`).
    Label,
    /// The pod condition written through `pods/status` at release.
    PodCondition,
}

impl Failure {
    pub const ALL: [Failure; 5] = [
        Failure::Release,
        Failure::Event,
        Failure::Watch,
        Failure::Label,
        Failure::PodCondition,
    ];
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabel {
    pub request: Failure,
}

#[derive(Debug)]
pub struct GateMetrics {
    gated: Family<GateLabel, Gauge>,
    release_seconds: Family<GateLabel, Histogram, fn() -> Histogram>,
    releases: Family<GateLabel, Counter>,
    errors: Family<FailureLabel, Counter>,
    leader: Gauge,
}

fn release_histogram() -> Histogram {
    // 1 s .. ~9 h: a gate may wait for a driver install or a node pool.
    Histogram::new(exponential_buckets(1.0, 2.0, 16))
}

impl GateMetrics {
    /// The metrics, and a registry that encodes them.
    pub fn new() -> (std::sync::Arc<GateMetrics>, Registry) {
        let m = std::sync::Arc::new(GateMetrics {
            gated: Family::default(),
            release_seconds: Family::new_with_constructor(release_histogram),
            releases: Family::default(),
            errors: Family::default(),
            leader: Gauge::default(),
        });
        // Every series a counter can have exists from the start, at 0: one
        // born at its first increment is invisible to PromQL's increase()
        // and rate(), which need a sample before the increment.
        for request in Failure::ALL {
            drop(m.errors.get_or_create(&FailureLabel { request }));
        }
        let mut r = Registry::default();
        r.register(
            "nodeproof_gate_gated_pods",
            "Pods waiting on each configured scheduling gate",
            m.gated.clone(),
        );
        r.register(
            "nodeproof_gate_release_seconds",
            "Time from a pod's creation to the removal of a gate",
            m.release_seconds.clone(),
        );
        r.register(
            "nodeproof_gate_releases",
            "Scheduling gates removed",
            m.releases.clone(),
        );
        r.register(
            "nodeproof_gate_errors",
            "Failed API requests of the gate controller",
            m.errors.clone(),
        );
        r.register(
            "nodeproof_gate_leader",
            "1 while this replica holds the Lease",
            m.leader.clone(),
        );
        (m, r)
    }

    /// The gate's waiting pods; a configured gate's release series start
    /// here, at 0 (see [`GateMetrics::new`]).
    pub fn set_gated(&self, gate: &str, pods: usize) {
        let label = GateLabel { gate: gate.into() };
        drop(self.releases.get_or_create(&label));
        drop(self.release_seconds.get_or_create(&label));
        self.gated.get_or_create(&label).set(pods as i64);
    }

    pub fn released(&self, gate: &str, since_creation: Option<Duration>) {
        let label = GateLabel { gate: gate.into() };
        self.releases.get_or_create(&label).inc();
        if let Some(d) = since_creation {
            self.release_seconds
                .get_or_create(&label)
                .observe(d.as_secs_f64());
        }
    }

    pub fn failed(&self, request: Failure) {
        self.errors.get_or_create(&FailureLabel { request }).inc();
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }
}

/// What prometheus-client's text encoder writes (it ends with `# EOF`).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The whole exposition.
pub fn render(registry: &Registry) -> Result<String, fmt::Error> {
    let mut body = String::new();
    prometheus_client::encoding::text::encode(&mut body, registry)?;
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_exist_at_zero_before_their_first_increment() {
        let (m, r) = GateMetrics::new();
        m.set_gated("nodeproof.dev/gpu-driver-ready", 2);
        let text = render(&r).unwrap();
        for want in [
            "nodeproof_gate_releases_total{gate=\"nodeproof.dev/gpu-driver-ready\"} 0\n",
            "nodeproof_gate_release_seconds_count{gate=\"nodeproof.dev/gpu-driver-ready\"} 0\n",
            "nodeproof_gate_errors_total{request=\"Release\"} 0\n",
            "nodeproof_gate_errors_total{request=\"Event\"} 0\n",
            "nodeproof_gate_errors_total{request=\"Watch\"} 0\n",
            "nodeproof_gate_errors_total{request=\"Label\"} 0\n",
            "nodeproof_gate_errors_total{request=\"PodCondition\"} 0\n",
        ] {
            assert!(text.contains(want), "{want} in\n{text}");
        }
    }

    #[test]
    fn families_render() {
        let (m, r) = GateMetrics::new();
        m.set_gated("nodeproof.dev/gpu-driver-ready", 3);
        m.released(
            "nodeproof.dev/gpu-driver-ready",
            Some(Duration::from_secs(5)),
        );
        m.failed(Failure::Event);
        m.set_leader(true);
        let text = render(&r).unwrap();
        for want in [
            "nodeproof_gate_gated_pods{gate=\"nodeproof.dev/gpu-driver-ready\"} 3",
            "nodeproof_gate_releases_total{gate=\"nodeproof.dev/gpu-driver-ready\"} 1",
            "nodeproof_gate_release_seconds_bucket{le=\"8.0\",gate=\"nodeproof.dev/gpu-driver-ready\"} 1",
            "nodeproof_gate_errors_total{request=\"Event\"} 1",
            "nodeproof_gate_leader 1",
            "# EOF",
        ] {
            assert!(text.contains(want), "{want} in\n{text}");
        }
    }
}
