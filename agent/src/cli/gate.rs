//! `nodeproof gate-controller`: the scheduling-gate controller, cluster
//! mode (deploy/base/gate-controller.yaml, docs/gate-controller.md). The work is
//! in `nodeproof_cluster::gate`; this picks the client, the Lease and the
//! `/metrics` listener, and runs `nodeproof_cluster::device_taints` beside
//! it (DeviceTaintRules for unhealthy DRA devices, on a Lease of its own).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};

use nodeproof::config::Config;
use nodeproof::daemon::http;
use nodeproof_cluster::device_taints::controller as device_taints;
use nodeproof_cluster::device_taints::metrics::DeviceTaintMetrics;
use nodeproof_cluster::gate::controller::{self, Options};
use nodeproof_cluster::gate::leader::LeaseOptions;
use nodeproof_cluster::gate::metrics::{self, GateMetrics};

use super::parse_duration;

/// The ServiceAccount's namespace, in every pod that mounts its token.
const IN_CLUSTER_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

#[derive(clap::Args)]
pub(crate) struct GateArgs {
    /// Kubeconfig (default: in-cluster, then $KUBECONFIG or ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig's context to use instead of its current-context (as kubectl --context).
    #[arg(long)]
    context: Option<String>,
    /// The Lease's namespace (default: $POD_NAMESPACE, then the ServiceAccount's).
    #[arg(long)]
    namespace: Option<String>,
    /// The Lease the replicas elect their leader with (the device taints take
    /// `<NAME>-device-taints`).
    #[arg(long, default_value = "nodeproof-gate-controller")]
    lease_name: String,
    /// This replica's name in the Lease (default: $POD_NAME, then the hostname).
    #[arg(long)]
    identity: Option<String>,
    /// How long the Lease holds after its last renewal (whole seconds, at least 2s).
    #[arg(long, value_parser = parse_duration, default_value = "15s")]
    lease_duration: Duration,
    /// The holder renews this long before the Lease expires (whole seconds, less than the duration).
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    lease_grace: Duration,
    /// `/metrics` and `/healthz`.
    #[arg(long, default_value = "0.0.0.0:9090")]
    listen: SocketAddr,
}

pub(crate) fn gate_controller(config: &Config, args: GateArgs) -> Result<ExitCode> {
    if args.lease_grace >= args.lease_duration {
        anyhow::bail!(
            "--lease-grace ({:?}) must be shorter than --lease-duration ({:?})",
            args.lease_grace,
            args.lease_duration
        );
    }
    let namespace = match args
        .namespace
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
    {
        Some(ns) => ns,
        None => std::fs::read_to_string(IN_CLUSTER_NAMESPACE)
            .map(|s| s.trim().to_string())
            .with_context(|| {
                format!("no --namespace, no POD_NAMESPACE, and cannot read {IN_CLUSTER_NAMESPACE}")
            })?,
    };
    let identity = match args.identity.or_else(|| std::env::var("POD_NAME").ok()) {
        Some(id) => id,
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .context("no --identity, no POD_NAME, and no hostname")?,
    };
    let opts = Options {
        policy: config.gate.policy(),
        lease: LeaseOptions {
            namespace,
            name: args.lease_name,
            identity,
            duration: args.lease_duration,
            grace: args.lease_grace,
        },
        tick: Duration::from_secs(1),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    runtime.block_on(run(args.kubeconfig, args.context, args.listen, opts))?;
    Ok(ExitCode::SUCCESS)
}

async fn run(
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
    listen: SocketAddr,
    opts: Options,
) -> Result<()> {
    let client = client(kubeconfig, context.as_deref()).await?;
    let (gate_metrics, mut registry) = GateMetrics::new();
    let taint_metrics = DeviceTaintMetrics::register(&mut registry);
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let (ready_tx, ready) = tokio::sync::watch::channel(controller::Readiness::Joining {
        error: "starting".into(),
        retry_in: Duration::ZERO,
    });
    let listener = http::bind(listen).await?;
    let routes: http::Routes = Box::new(move |method, path, _now| {
        const TEXT: &str = "text/plain; charset=utf-8";
        if method != "GET" && method != "HEAD" {
            return (405, TEXT, "only GET\n".into());
        }
        match path {
            "/metrics" => match metrics::render(&registry) {
                Ok(body) => (200, metrics::CONTENT_TYPE, body),
                Err(_) => (500, TEXT, "cannot encode the metrics\n".into()),
            },
            "/healthz" => (200, TEXT, "ok\n".into()),
            // Liveness stays about the process; readiness about the work.
            "/readyz" => match &*ready.borrow() {
                controller::Readiness::Ready => (200, TEXT, "ready\n".into()),
                r => (503, TEXT, format!("{r}\n")),
            },
            _ => (404, TEXT, "not found\n".into()),
        }
    });
    let server = tokio::spawn(http::serve_routes(
        listener,
        routes,
        http::Limits::default(),
        stop.clone(),
    ));
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            tracing::error!("cannot install the SIGTERM/SIGINT handlers");
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!("stopping: the Lease is released if held");
        let _ = stop_tx.send(true);
    });
    tracing::info!(
        lease = %format!("{}/{}", opts.lease.namespace, opts.lease.name),
        identity = %opts.lease.identity,
        gates = ?opts.policy.gates.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(),
        "gate controller starting"
    );
    let taint_opts = device_taints::Options::beside(&opts.lease);
    // A second, separate duty on a Lease of its own; it stops on the same
    // signal (releasing its Lease).
    let taints = tokio::spawn(device_taints::run(
        client.clone(),
        taint_opts,
        taint_metrics,
        stop.clone(),
    ));
    controller::run(client, opts, gate_metrics, stop, ready_tx).await;
    let _ = taints.await;
    let _ = server.await;
    Ok(())
}

async fn client(
    kubeconfig: Option<PathBuf>,
    context: Option<&str>,
) -> Result<nodeproof_apiclient::Client> {
    Ok(
        nodeproof_apiclient::cluster_connect::controller_client(kubeconfig.as_deref(), context)
            .await?,
    )
}
