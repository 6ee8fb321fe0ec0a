//! Reading the snapshot: paged lists with a cluster reader's credentials
//! (deploy/base/rbac-cluster-check.yaml grants exactly these reads).

use std::time::{Instant, SystemTime};

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, MutatingWebhookConfiguration, ValidatingAdmissionPolicyBinding,
    ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;

use nodeproof_apiclient::cluster_read::{all, all_dynamic, api_service, events, DynamicKind};
use nodeproof_apiclient::Client;
use nodeproof_report::denial_change::DENIED_REASON;

use super::metrics_api::{
    choose, MetricsApiRead, MetricsList, MetricsResource, MetricsSample, MetricsVersion,
};
use super::roles::RoleObjects;
use super::Snapshot;

/// The edge's: which reads failed, and whether reading again may help.
pub use nodeproof_apiclient::cluster_read::ReadError;

/// What to read beyond the check's own needs.
#[derive(Debug, Clone, Copy)]
pub struct ReadOptions {
    /// How many times the NodeMetrics list is requested to measure its
    /// latency (at least once: the first answer is the data).
    pub metrics_samples: usize,
    /// Read every Warning Event (the baseline counts them by reason).
    pub warning_events: bool,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            metrics_samples: 10,
            warning_events: false,
        }
    }
}

/// A Metrics resource (no k8s-openapi type: metrics.k8s.io is an
/// aggregated API, not part of the core OpenAPI).
fn metrics_kind(version: MetricsVersion, resource: MetricsResource) -> DynamicKind<'static> {
    DynamicKind {
        group: "metrics.k8s.io",
        version: version.as_str(),
        kind: resource.kind(),
        plural: resource.plural(),
    }
}

/// One list of NodeMetrics or PodMetrics. An error status other than the
/// credentials' (401, 403) is the Metrics API's answer, not a failure to
/// check.
async fn metrics_list(
    client: &Client,
    version: MetricsVersion,
    resource: MetricsResource,
) -> Result<MetricsList, ReadError> {
    let what = match resource {
        MetricsResource::Nodes => "NodeMetrics",
        MetricsResource::Pods => "PodMetrics",
    };
    match all_dynamic(client, metrics_kind(version, resource), what).await {
        Ok(items) => Ok(MetricsList::Served(
            items
                .into_iter()
                .map(|m| MetricsSample {
                    namespace: m.metadata.namespace.clone(),
                    name: m.metadata.name.clone().unwrap_or_default(),
                    timestamp: m.data["timestamp"]
                        .as_str()
                        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
                        .map(SystemTime::from),
                })
                .collect(),
        )),
        Err(e) => match e.answered() {
            Some((code, message)) if code != 401 && code != 403 => Ok(MetricsList::NotServed {
                code,
                message: message.to_string(),
            }),
            _ => Err(e),
        },
    }
}

async fn metrics_api(client: &Client, samples: usize) -> Result<MetricsApiRead, ReadError> {
    let mut registered = Vec::new();
    for version in MetricsVersion::PREFERENCE {
        if let Some(svc) = api_service(
            client,
            version.api_service(),
            "the Metrics API's APIServices",
        )
        .await?
        {
            registered.push((version, svc));
        }
    }
    let Some(version) = choose(&registered) else {
        return Ok(MetricsApiRead::unregistered());
    };
    let mut latencies = Vec::new();
    let started = Instant::now();
    let nodes = metrics_list(client, version, MetricsResource::Nodes).await?;
    if matches!(nodes, MetricsList::Served(_)) {
        latencies.push(started.elapsed());
        for _ in 1..samples {
            let started = Instant::now();
            // Only the time: the first answer is the data.
            if !matches!(
                metrics_list(client, version, MetricsResource::Nodes).await?,
                MetricsList::Served(_)
            ) {
                break;
            }
            latencies.push(started.elapsed());
        }
    }
    let pods = metrics_list(client, version, MetricsResource::Pods).await?;
    Ok(MetricsApiRead {
        services: registered,
        version: Some(version),
        nodes,
        pods,
        latencies,
    })
}

/// MutatingAdmissionPolicyBindings, `admissionregistration.k8s.io/v1`
/// from Kubernetes 1.36 (k8s-openapi's types stop at 1.33): read
/// dynamically, empty where the version is not served (404).
async fn mutating_bindings(client: &Client) -> Result<Vec<(String, MatchResources)>, ReadError> {
    let kind = DynamicKind {
        group: "admissionregistration.k8s.io",
        version: "v1",
        kind: "MutatingAdmissionPolicyBinding",
        plural: "mutatingadmissionpolicybindings",
    };
    match all_dynamic(client, kind, "MutatingAdmissionPolicyBindings").await {
        Ok(items) => Ok(items
            .into_iter()
            .map(|b| {
                let matches = serde_json::from_value(b.data["spec"]["matchResources"].clone())
                    .unwrap_or_default();
                (b.metadata.name.unwrap_or_default(), matches)
            })
            .collect()),
        Err(e) if e.answered().is_some_and(|(code, _)| code == 404) => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

pub async fn read(client: &Client, opts: ReadOptions) -> Result<Snapshot, ReadError> {
    let metrics = metrics_api(client, opts.metrics_samples.max(1)).await?;
    let nodes: Vec<Node> = all(client, "Nodes").await?;
    let runtime_classes: Vec<RuntimeClass> = all(client, "RuntimeClasses").await?;
    let pods: Vec<Pod> = all(client, "Pods").await?;
    let gated = pods.iter().any(|p| {
        p.spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_ref())
            .is_some_and(|g| !g.is_empty())
    });
    // Events live an hour (kube-apiserver's --event-ttl): the list is
    // bounded; read only when a gated pod may need one.
    let pod_events = if gated {
        events(client, "involvedObject.kind=Pod", "Events").await?
    } else {
        Vec::new()
    };
    let warning_events = if opts.warning_events {
        events(client, "type=Warning", "Warning Events").await?
    } else {
        Vec::new()
    };
    // The agents' denial Events: only they can name a profile change.
    let denial_events = events(
        client,
        &format!("type=Warning,reason={DENIED_REASON}"),
        "SeccompDenied Events",
    )
    .await?;
    let hpas: Vec<HorizontalPodAutoscaler> = all(client, "HorizontalPodAutoscalers").await?;
    let role_objects = RoleObjects {
        deployments: all::<Deployment>(client, "Deployments").await?,
        daemon_sets: all::<DaemonSet>(client, "DaemonSets").await?,
        stateful_sets: all::<StatefulSet>(client, "StatefulSets").await?,
        jobs: all::<Job>(client, "Jobs").await?,
        cron_jobs: all::<CronJob>(client, "CronJobs").await?,
        validating_webhooks: all::<ValidatingWebhookConfiguration>(
            client,
            "ValidatingWebhookConfigurations",
        )
        .await?,
        mutating_webhooks: all::<MutatingWebhookConfiguration>(
            client,
            "MutatingWebhookConfigurations",
        )
        .await?,
        validating_bindings: all::<ValidatingAdmissionPolicyBinding>(
            client,
            "ValidatingAdmissionPolicyBindings",
        )
        .await?,
        mutating_bindings: mutating_bindings(client).await?,
    };
    Ok(Snapshot {
        metrics,
        nodes,
        runtime_classes,
        pods,
        pod_events,
        warning_events,
        denial_events,
        hpas,
        role_objects,
    })
}
