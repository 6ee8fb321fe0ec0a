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
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};

use nodeproof_apiclient::list::list_all;
use nodeproof_report::denial_change::DENIED_REASON;

use super::metrics_api::{
    choose, MetricsApiRead, MetricsList, MetricsResource, MetricsSample, MetricsVersion,
};
use super::roles::RoleObjects;
use super::Snapshot;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read {what}")]
    Read {
        what: &'static str,
        #[source]
        source: Box<kube::Error>,
    },
}

impl ReadError {
    /// The API server did not answer (refused, reset, timed out: kube-rs's
    /// transport errors) or answered that it cannot serve now (5xx, 429):
    /// worth reading again after a while. Anything else (403, 404, a body
    /// that does not decode) would answer the same again.
    pub fn is_transient(&self) -> bool {
        let ReadError::Read { source, .. } = self;
        match source.as_ref() {
            kube::Error::Api(s) => s.code >= 500 || s.code == 429,
            kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
                true
            }
            _ => false,
        }
    }
}

fn failed(what: &'static str) -> impl FnOnce(kube::Error) -> ReadError {
    move |e| ReadError::Read {
        what,
        source: Box::new(e),
    }
}

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
fn metrics_resource(version: MetricsVersion, resource: MetricsResource) -> ApiResource {
    ApiResource {
        group: "metrics.k8s.io".into(),
        version: version.as_str().into(),
        api_version: format!("metrics.k8s.io/{}", version.as_str()),
        kind: resource.kind().into(),
        plural: resource.plural().into(),
    }
}

/// One list of NodeMetrics or PodMetrics. An error status other than the
/// credentials' (401, 403) is the Metrics API's answer, not a failure to
/// check.
async fn metrics_list(
    client: &kube::Client,
    version: MetricsVersion,
    resource: MetricsResource,
) -> Result<MetricsList, ReadError> {
    let api: Api<DynamicObject> =
        Api::all_with(client.clone(), &metrics_resource(version, resource));
    match list_all(&api, ListParams::default()).await {
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
        Err(kube::Error::Api(s)) if s.code != 401 && s.code != 403 => Ok(MetricsList::NotServed {
            code: s.code,
            message: s.message.clone(),
        }),
        Err(e) => Err(failed(match resource {
            MetricsResource::Nodes => "NodeMetrics",
            MetricsResource::Pods => "PodMetrics",
        })(e)),
    }
}

async fn metrics_api(client: &kube::Client, samples: usize) -> Result<MetricsApiRead, ReadError> {
    let services: Api<APIService> = Api::all(client.clone());
    let mut registered = Vec::new();
    for version in MetricsVersion::PREFERENCE {
        if let Some(svc) = services
            .get_opt(version.api_service())
            .await
            .map_err(failed("the Metrics API's APIServices"))?
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
async fn mutating_bindings(
    client: &kube::Client,
) -> Result<Vec<(String, MatchResources)>, ReadError> {
    let resource = ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: "MutatingAdmissionPolicyBinding".into(),
        plural: "mutatingadmissionpolicybindings".into(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    match list_all(&api, ListParams::default()).await {
        Ok(items) => Ok(items
            .into_iter()
            .map(|b| {
                let matches = serde_json::from_value(b.data["spec"]["matchResources"].clone())
                    .unwrap_or_default();
                (b.metadata.name.unwrap_or_default(), matches)
            })
            .collect()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Vec::new()),
        Err(e) => Err(failed("MutatingAdmissionPolicyBindings")(e)),
    }
}

async fn all<K>(client: &kube::Client, what: &'static str) -> Result<Vec<K>, ReadError>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    list_all(&Api::<K>::all(client.clone()), ListParams::default())
        .await
        .map_err(failed(what))
}

pub async fn read(client: &kube::Client, opts: ReadOptions) -> Result<Snapshot, ReadError> {
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
    let events: Api<Event> = Api::all(client.clone());
    // Events live an hour (kube-apiserver's --event-ttl): the list is
    // bounded; read only when a gated pod may need one.
    let pod_events = if gated {
        list_all(
            &events,
            ListParams::default().fields("involvedObject.kind=Pod"),
        )
        .await
        .map_err(failed("Events"))?
    } else {
        Vec::new()
    };
    let warning_events = if opts.warning_events {
        list_all(&events, ListParams::default().fields("type=Warning"))
            .await
            .map_err(failed("Warning Events"))?
    } else {
        Vec::new()
    };
    // The agents' denial Events: only they can name a profile change.
    let denial_events = list_all(
        &events,
        ListParams::default().fields(&format!("type=Warning,reason={DENIED_REASON}")),
    )
    .await
    .map_err(failed("SeccompDenied Events"))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("injected", "Injected")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn what_is_read_again_is_what_the_server_could_not_answer() {
        let read = |e| failed("Nodes")(e).is_transient();
        assert!(read(kube::Error::Service("connection refused".into())));
        assert!(read(api(503)));
        assert!(read(api(500)));
        assert!(read(api(429)));
        assert!(!read(api(403)), "a missing role answers the same again");
        assert!(!read(api(404)));
    }
}
