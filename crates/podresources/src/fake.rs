//! A fake kubelet serving the pod-resources API on a unix socket: a real
//! tonic server, so clients are tested over the same gRPC, HTTP/2 and
//! socket path as against a kubelet. For tests (feature `fake`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

use crate::api::pod_resources_lister_server::{PodResourcesLister, PodResourcesListerServer};
use crate::api::{self, ContainerDevices};
use crate::{DeviceSet, PodAllocation};

/// How the fake answers `Get`, as kubelets of different versions do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GetMode {
    /// 1.27+ with KubeletPodResourcesGet on.
    #[default]
    Served,
    /// Before 1.27: the method does not exist.
    Unimplemented,
    /// 1.27+ with the gate off: code Unknown, "PodResources API Get method disabled".
    GateOff,
}

/// What the fake kubelet answers; change it while it serves.
#[derive(Debug, Clone, Default)]
pub struct KubeletState {
    pub allocatable: Vec<DeviceSet>,
    pub pods: Vec<PodAllocation>,
    pub get: GetMode,
    /// Every answer waits this long first (a kubelet that hangs).
    pub delay: Option<Duration>,
    /// Calls answered so far, by method name.
    pub calls: Vec<&'static str>,
}

#[derive(Clone)]
struct Service(Arc<Mutex<KubeletState>>);

impl Service {
    async fn answer<T>(
        &self,
        method: &'static str,
        f: impl FnOnce(&KubeletState) -> Result<T, Status>,
    ) -> Result<Response<T>, Status> {
        let delay = {
            let mut s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            s.calls.push(method);
            s.delay
        };
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        let s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        f(&s).map(Response::new)
    }
}

fn devices(d: &DeviceSet) -> ContainerDevices {
    ContainerDevices {
        resource_name: d.resource.clone(),
        device_ids: d.ids.clone(),
        topology: None,
    }
}

fn pod(p: &PodAllocation) -> api::PodResources {
    api::PodResources {
        name: p.name.clone(),
        namespace: p.namespace.clone(),
        containers: p
            .containers
            .iter()
            .map(|c| api::ContainerResources {
                name: c.name.clone(),
                devices: c.devices.iter().map(devices).collect(),
                cpu_ids: Vec::new(),
                memory: Vec::new(),
                dynamic_resources: c
                    .claims
                    .iter()
                    .map(|d| api::DynamicResource {
                        claim_name: d.claim_name.clone(),
                        claim_namespace: d.claim_namespace.clone(),
                        claim_resources: vec![api::ClaimResource {
                            cdi_devices: Vec::new(),
                            driver_name: d.driver.clone(),
                            pool_name: d.pool.clone(),
                            device_name: d.device.clone(),
                        }],
                    })
                    .collect(),
            })
            .collect(),
    }
}

#[tonic::async_trait]
impl PodResourcesLister for Service {
    async fn list(
        &self,
        _: Request<api::ListPodResourcesRequest>,
    ) -> Result<Response<api::ListPodResourcesResponse>, Status> {
        self.answer("List", |s| {
            Ok(api::ListPodResourcesResponse {
                pod_resources: s.pods.iter().map(pod).collect(),
            })
        })
        .await
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<api::AllocatableResourcesRequest>,
    ) -> Result<Response<api::AllocatableResourcesResponse>, Status> {
        self.answer("GetAllocatableResources", |s| {
            Ok(api::AllocatableResourcesResponse {
                devices: s.allocatable.iter().map(devices).collect(),
                cpu_ids: Vec::new(),
                memory: Vec::new(),
            })
        })
        .await
    }

    async fn get(
        &self,
        req: Request<api::GetPodResourcesRequest>,
    ) -> Result<Response<api::GetPodResourcesResponse>, Status> {
        let req = req.into_inner();
        self.answer("Get", |s| match s.get {
            GetMode::Unimplemented => Err(Status::unimplemented("unknown method Get")),
            GetMode::GateOff => Err(Status::unknown("PodResources API Get method disabled")),
            GetMode::Served => s
                .pods
                .iter()
                .find(|p| p.namespace == req.pod_namespace && p.name == req.pod_name)
                .map(|p| api::GetPodResourcesResponse {
                    pod_resources: Some(pod(p)),
                })
                .ok_or_else(|| {
                    Status::unknown(format!(
                        "pod {} in namespace {} not found",
                        req.pod_name, req.pod_namespace
                    ))
                }),
        })
        .await
    }
}

/// A serving fake kubelet; dropping it stops the server and removes the socket.
pub struct FakeKubelet {
    pub state: Arc<Mutex<KubeletState>>,
    socket: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl FakeKubelet {
    /// Serves on `socket` (created; its directory must exist) from a thread of its own.
    pub fn start(socket: &Path, state: KubeletState) -> std::io::Result<FakeKubelet> {
        let state = Arc::new(Mutex::new(state));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let listener = {
            let _guard = runtime.enter();
            UnixListener::bind(socket)?
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = PodResourcesListerServer::new(Service(Arc::clone(&state)));
        let thread = std::thread::spawn(move || {
            // Stopping drops the server and its connections at once (a
            // graceful shutdown would wait for clients still connected).
            runtime.block_on(async move {
                tokio::select! {
                    _ = tonic::transport::Server::builder()
                        .add_service(service)
                        .serve_with_incoming(UnixListenerStream::new(listener)) => {}
                    _ = stopped => {}
                }
            });
            runtime.shutdown_background();
        });
        Ok(FakeKubelet {
            state,
            socket: socket.to_path_buf(),
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub fn update(&self, f: impl FnOnce(&mut KubeletState)) {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner));
    }

    pub fn calls(&self) -> Vec<&'static str> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .calls
            .clone()
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}
