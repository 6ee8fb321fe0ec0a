//! The Metrics API, judged as four separate things, because each can fail
//! without the others, and an upgrade can break any of them:
//!
//! 1. **registered**: an APIService of `metrics.k8s.io` exists, `v1` (the
//!    stable version, where a cluster serves it) preferred over `v1beta1`
//!    (what metrics-server registers today);
//! 2. **Available**: kube-aggregator's availability controller says it
//!    reaches the backend (`Available=True`);
//! 3. **serving**: `GET /apis/metrics.k8s.io/<version>/nodes` (and `/pods`)
//!    answers: an Available APIService can still fail its requests, and the
//!    notes on kube-apiserver 1.36 show discovery listing the group while
//!    the list fails;
//! 4. **fresh**: every Ready node, and every Running pod old enough to have
//!    been scraped, has metrics newer than the window (metrics-server
//!    leaves out a node whose kubelet it cannot scrape).
//!
//! And how fast: the NodeMetrics list is requested a bounded number of
//! times and its latency given as p50/p99. Pure: the requests are made in
//! `read`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use serde::{Deserialize, Serialize};

use nodeproof_findings::ConditionStatus;

use super::{age, name_of, node_ready, time, Options, Problem};
use strum::IntoStaticStr;

/// A version of `metrics.k8s.io`, in the order they are preferred.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, IntoStaticStr,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum MetricsVersion {
    V1,
    V1beta1,
}

impl MetricsVersion {
    /// Preferred first: `v1` where served.
    pub const PREFERENCE: [MetricsVersion; 2] = [MetricsVersion::V1, MetricsVersion::V1beta1];

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The APIService that registers this version with the aggregator
    /// (`<version>.<group>`, as kube-aggregator names them).
    pub fn api_service(self) -> &'static str {
        match self {
            MetricsVersion::V1 => "v1.metrics.k8s.io",
            MetricsVersion::V1beta1 => "v1beta1.metrics.k8s.io",
        }
    }
}

impl std::fmt::Display for MetricsVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "metrics.k8s.io/{}", self.as_str())
    }
}

/// Which Metrics resource: `NodeMetrics` (`nodes`) or `PodMetrics` (`pods`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricsResource {
    Nodes,
    Pods,
}

impl MetricsResource {
    pub fn plural(self) -> &'static str {
        match self {
            MetricsResource::Nodes => "nodes",
            MetricsResource::Pods => "pods",
        }
    }

    pub fn kind(self) -> &'static str {
        match self {
            MetricsResource::Nodes => "NodeMetrics",
            MetricsResource::Pods => "PodMetrics",
        }
    }
}

/// One NodeMetrics or PodMetrics object as served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsSample {
    /// `None` for NodeMetrics (cluster-scoped).
    pub namespace: Option<String>,
    pub name: String,
    /// When the metrics were scraped (`timestamp`).
    pub timestamp: Option<SystemTime>,
}

/// What a list of NodeMetrics or PodMetrics answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetricsList {
    Served(Vec<MetricsSample>),
    /// An error status: 404 when nothing serves the group, 503 when the
    /// aggregator cannot reach the backend.
    NotServed {
        code: u16,
        message: String,
    },
    /// Not requested: no version is registered.
    NotRead,
}

/// What `read` learnt of the Metrics API.
#[derive(Debug, Clone)]
pub struct MetricsApiRead {
    /// The registered APIServices of `metrics.k8s.io`, in preference order.
    pub services: Vec<(MetricsVersion, APIService)>,
    /// The version read ([`choose`]); `None` when none is registered.
    pub version: Option<MetricsVersion>,
    pub nodes: MetricsList,
    pub pods: MetricsList,
    /// How long each NodeMetrics list took, the first (whose answer is
    /// `nodes`) included; empty when it was not served.
    pub latencies: Vec<Duration>,
}

impl MetricsApiRead {
    /// Nothing registered, nothing read.
    pub fn unregistered() -> MetricsApiRead {
        MetricsApiRead {
            services: Vec::new(),
            version: None,
            nodes: MetricsList::NotRead,
            pods: MetricsList::NotRead,
            latencies: Vec::new(),
        }
    }
}

/// The version to read: the first Available one in preference order, else
/// the first registered one (whose requests then show what is wrong).
pub fn choose(services: &[(MetricsVersion, APIService)]) -> Option<MetricsVersion> {
    let mut registered: Vec<&(MetricsVersion, APIService)> = services.iter().collect();
    registered.sort_by_key(|(v, _)| *v);
    registered
        .iter()
        .find(|(_, svc)| availability(svc).0 == ConditionStatus::True)
        .or(registered.first())
        .map(|(v, _)| *v)
}

/// The APIService's `Available` condition: status, reason, message.
fn availability(svc: &APIService) -> (ConditionStatus, String, String) {
    let available = svc
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "Available");
    match available {
        None => (
            ConditionStatus::Unknown,
            String::new(),
            "no Available condition".into(),
        ),
        Some(c) => (
            ConditionStatus::parse(&c.status),
            c.reason.clone().unwrap_or_default(),
            c.message.clone().unwrap_or_default(),
        ),
    }
}

/// p50 and p99 of the NodeMetrics list's latency (nearest rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Latency {
    pub samples: usize,
    pub p50_ms: u64,
    pub p99_ms: u64,
}

impl Latency {
    /// `None` without samples.
    pub fn of(samples: &[Duration]) -> Option<Latency> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted: Vec<Duration> = samples.to_vec();
        sorted.sort();
        // Nearest rank: the smallest sample with at least p% at or below it.
        let rank = |p: usize| sorted[(p * sorted.len()).div_ceil(100).max(1) - 1];
        Some(Latency {
            samples: sorted.len(),
            p50_ms: rank(50).as_millis() as u64,
            p99_ms: rank(99).as_millis() as u64,
        })
    }
}

/// The Metrics API at a glance: the version read, its latency, and how
/// complete it is (the baseline records this).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricsSummary {
    /// The version read; `None`: none registered.
    pub version: Option<MetricsVersion>,
    /// The versions registered.
    pub registered: Vec<MetricsVersion>,
    pub latency: Option<Latency>,
    pub ready_nodes: usize,
    /// Ready nodes with fresh NodeMetrics.
    pub nodes_fresh: usize,
    /// Running pods old enough to have been scraped.
    pub running_pods: usize,
    /// Of those, pods with fresh PodMetrics.
    pub pods_fresh: usize,
}

impl MetricsSummary {
    /// The share of Ready nodes without fresh metrics, 0..=1.
    pub fn nodes_missing_share(&self) -> f64 {
        share(self.ready_nodes - self.nodes_fresh, self.ready_nodes)
    }

    /// The share of Running pods without fresh metrics, 0..=1.
    pub fn pods_missing_share(&self) -> f64 {
        share(self.running_pods - self.pods_fresh, self.running_pods)
    }
}

fn share(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// How many missing pods a finding names; the count says the rest.
const POD_EXAMPLES: usize = 5;

/// Judge the Metrics API: the four findings, its latency against
/// `opts.metrics_latency_max`, and the summary.
pub(super) fn evaluate(
    read: &MetricsApiRead,
    nodes: &[Node],
    pods: &[Pod],
    now: SystemTime,
    opts: &Options,
    out: &mut Vec<Problem>,
) -> MetricsSummary {
    let ready: Vec<&Node> = nodes.iter().filter(|n| node_ready(n)).collect();
    // A pod is expected in PodMetrics once it has run for a scrape window.
    let running: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| time(&s.start_time))
                .is_some_and(|t| age(now, t) > opts.metrics_max_age)
        })
        .collect();
    let mut summary = MetricsSummary {
        version: read.version,
        registered: read.services.iter().map(|(v, _)| *v).collect(),
        latency: Latency::of(&read.latencies),
        ready_nodes: ready.len(),
        nodes_fresh: 0,
        running_pods: running.len(),
        pods_fresh: 0,
    };
    // 1. Registered.
    let Some(version) = read.version else {
        out.push(Problem::MetricsApiNotRegistered);
        return summary;
    };
    // 2. Available: every registered version that is not, the one read or not.
    for (v, svc) in &read.services {
        let (status, reason, message) = availability(svc);
        if status != ConditionStatus::True {
            out.push(Problem::MetricsApiNotAvailable {
                version: *v,
                status,
                reason,
                message,
            });
        }
    }
    // 3. Serving, and 4. fresh.
    let fresh = |m: &MetricsSample| {
        m.timestamp
            .map(|t| (t, age(now, t) <= opts.metrics_max_age))
    };
    match &read.nodes {
        MetricsList::NotServed { code, message } => out.push(Problem::NodeMetricsNotServed {
            version,
            code: *code,
            message: message.clone(),
        }),
        MetricsList::NotRead => {}
        MetricsList::Served(items) => {
            let by_node: BTreeMap<&str, &MetricsSample> =
                items.iter().map(|m| (m.name.as_str(), m)).collect();
            for node in &ready {
                let name = name_of(&node.metadata);
                match by_node.get(name.as_str()).and_then(|m| fresh(m)) {
                    None => out.push(Problem::NodeMetricsMissing { node: name }),
                    Some((t, false)) => out.push(Problem::NodeMetricsStale {
                        node: name,
                        age_seconds: age(now, t).as_secs(),
                    }),
                    Some((_, true)) => summary.nodes_fresh += 1,
                }
            }
        }
    }
    match &read.pods {
        MetricsList::NotServed { code, message } => out.push(Problem::PodMetricsNotServed {
            version,
            code: *code,
            message: message.clone(),
        }),
        MetricsList::NotRead => {}
        MetricsList::Served(items) => {
            let served: BTreeSet<(&str, &str)> = items
                .iter()
                .filter(|m| fresh(m).is_some_and(|(_, f)| f))
                .map(|m| (m.namespace.as_deref().unwrap_or(""), m.name.as_str()))
                .collect();
            let mut missing = Vec::new();
            for pod in &running {
                let ns = pod.metadata.namespace.as_deref().unwrap_or("");
                let name = pod.metadata.name.as_deref().unwrap_or("");
                if served.contains(&(ns, name)) {
                    summary.pods_fresh += 1;
                } else {
                    missing.push(format!("{ns}/{name}"));
                }
            }
            if !missing.is_empty() {
                out.push(Problem::PodMetricsIncomplete {
                    version,
                    missing: missing.len(),
                    running: running.len(),
                    examples: missing.into_iter().take(POD_EXAMPLES).collect(),
                });
            }
        }
    }
    if let Some(latency) = summary.latency {
        let limit = opts.metrics_latency_max.as_millis() as u64;
        if latency.p99_ms > limit {
            out.push(Problem::MetricsApiSlow {
                version,
                latency,
                limit_ms: limit,
            });
        }
    }
    summary
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(version: MetricsVersion, available: &str) -> (MetricsVersion, APIService) {
        let svc = serde_json::from_value(json!({
            "metadata": {"name": version.api_service()},
            "status": {"conditions": [{"type": "Available", "status": available}]}}))
        .unwrap();
        (version, svc)
    }

    #[test]
    fn v1_is_preferred_where_available_else_the_first_available_else_the_first_registered() {
        use MetricsVersion::*;
        assert_eq!(choose(&[]), None);
        assert_eq!(choose(&[service(V1beta1, "True")]), Some(V1beta1));
        assert_eq!(
            choose(&[service(V1beta1, "True"), service(V1, "True")]),
            Some(V1)
        );
        assert_eq!(
            choose(&[service(V1, "False"), service(V1beta1, "True")]),
            Some(V1beta1)
        );
        assert_eq!(
            choose(&[service(V1beta1, "False"), service(V1, "False")]),
            Some(V1)
        );
    }

    #[test]
    fn latency_is_the_nearest_rank() {
        assert_eq!(Latency::of(&[]), None);
        let ms = |v: &[u64]| {
            v.iter()
                .map(|m| Duration::from_millis(*m))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            Latency::of(&ms(&[7])),
            Some(Latency {
                samples: 1,
                p50_ms: 7,
                p99_ms: 7
            })
        );
        // 1..=100: p50 is the 50th, p99 the 99th.
        let hundred: Vec<u64> = (1..=100).rev().collect();
        let l = Latency::of(&ms(&hundred)).unwrap();
        assert_eq!((l.p50_ms, l.p99_ms), (50, 99));
        // Ten samples: p99 is the slowest.
        let l = Latency::of(&ms(&[5, 1, 9, 3, 2, 8, 4, 7, 6, 40])).unwrap();
        assert_eq!((l.p50_ms, l.p99_ms), (5, 40));
    }

    #[test]
    fn registered_available_serving_and_fresh_are_separate_findings_with_latency() {
        use MetricsVersion::*;
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let stamp =
            |ago: u64| nodeproof_report::conditions::rfc3339(now - Duration::from_secs(ago));
        let nodes: Vec<Node> = ["n1", "n2"]
            .map(|n| {
                serde_json::from_value(json!({"metadata": {"name": n},
                    "status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
                .unwrap()
            })
            .to_vec();
        // Two old Running pods, one just started (not expected yet), one Pending.
        let pod = |name: &str, phase: &str, started: u64| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ml"},
                "status": {"phase": phase, "startTime": stamp(started)}}))
            .unwrap()
        };
        let pods = vec![
            pod("a", "Running", 3600),
            pod("b", "Running", 3600),
            pod("new", "Running", 30),
            pod("waiting", "Pending", 3600),
        ];
        let sample = |ns: Option<&str>, name: &str, ago: u64| MetricsSample {
            namespace: ns.map(String::from),
            name: name.into(),
            timestamp: Some(now - Duration::from_secs(ago)),
        };
        let services = vec![service(V1, "True"), service(V1beta1, "False")];
        let read = MetricsApiRead {
            version: choose(&services),
            services,
            nodes: MetricsList::Served(vec![sample(None, "n1", 10), sample(None, "n2", 10)]),
            pods: MetricsList::Served(vec![
                sample(Some("ml"), "a", 10),
                sample(Some("ml"), "b", 600),
            ]),
            latencies: [30, 25, 1500, 20].map(Duration::from_millis).to_vec(),
        };
        let mut out = Vec::new();
        let summary = evaluate(&read, &nodes, &pods, now, &Options::default(), &mut out);
        assert_eq!(summary.version, Some(V1));
        assert_eq!(summary.registered, vec![V1, V1beta1]);
        assert_eq!((summary.ready_nodes, summary.nodes_fresh), (2, 2));
        assert_eq!((summary.running_pods, summary.pods_fresh), (2, 1));
        let latency = Latency {
            samples: 4,
            p50_ms: 25,
            p99_ms: 1500,
        };
        assert_eq!(summary.latency, Some(latency));
        assert_eq!(
            out,
            vec![
                Problem::MetricsApiNotAvailable {
                    version: V1beta1,
                    status: ConditionStatus::False,
                    reason: String::new(),
                    message: String::new(),
                },
                Problem::PodMetricsIncomplete {
                    version: V1,
                    missing: 1,
                    running: 2,
                    examples: vec!["ml/b".into()],
                },
                Problem::MetricsApiSlow {
                    version: V1,
                    latency,
                    limit_ms: 1000
                },
            ]
        );
        // Not served: the list's status, and nothing judged fresh.
        let read = MetricsApiRead {
            nodes: MetricsList::NotServed {
                code: 503,
                message: "service unavailable".into(),
            },
            pods: MetricsList::NotServed {
                code: 503,
                message: "service unavailable".into(),
            },
            latencies: vec![],
            ..read
        };
        let mut out = Vec::new();
        let summary = evaluate(&read, &nodes, &pods, now, &Options::default(), &mut out);
        assert_eq!((summary.nodes_fresh, summary.latency), (0, None));
        assert!(
            matches!(
                out[1],
                Problem::NodeMetricsNotServed {
                    version: V1,
                    code: 503,
                    ..
                }
            ),
            "{out:?}"
        );
        assert!(
            matches!(
                out[2],
                Problem::PodMetricsNotServed {
                    version: V1,
                    code: 503,
                    ..
                }
            ),
            "{out:?}"
        );
    }
}
