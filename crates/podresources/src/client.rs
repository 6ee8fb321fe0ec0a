//! [`KubeletPodResources`]: the pod-resources API over the kubelet's unix
//! socket, with every call bounded by a timeout.
//!
//! The client is synchronous to its callers (the GPU probe loop is a
//! blocking task, `nodeproof gpu` a one-shot command) and runs tonic on a
//! small current-thread runtime of its own.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::Code;

use crate::api::pod_resources_lister_client::PodResourcesListerClient;
use crate::api::{AllocatableResourcesRequest, GetPodResourcesRequest, ListPodResourcesRequest};
use crate::{Call, DeviceSet, PodAllocation, PodResourcesError, PodResourcesSource};

/// Where the kubelet serves the API (`--pod-resources-socket`'s default is
/// `<root-dir>/pod-resources/kubelet.sock`).
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// The kubelet's server limit for a message (podresources.DefaultMaxMsgSize,
/// 16 MiB); tonic's own default (4 MiB) would refuse a busy node's List.
const MAX_MESSAGE: usize = 16 << 20;

/// What the kubelet answers to `Get` while its KubeletPodResourcesGet gate is
/// off: a plain Go error, so gRPC code Unknown with this text
/// (pkg/kubelet/apis/podresources/server_v1.go). Kubelets before 1.27 have
/// no `Get` and answer Unimplemented.
const GET_DISABLED: &str = "PodResources API Get method disabled";

pub struct KubeletPodResources {
    socket: PathBuf,
    timeout: Duration,
    runtime: tokio::runtime::Runtime,
    client: Option<PodResourcesListerClient<Channel>>,
    /// `None` until `Get` was tried; `Some(false)`: this kubelet has no `Get`.
    get_served: Option<bool>,
}

impl KubeletPodResources {
    /// Nothing is contacted until the first call.
    pub fn new(socket: impl Into<PathBuf>, timeout: Duration) -> Result<Self, PodResourcesError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| PodResourcesError::Runtime { source })?;
        Ok(KubeletPodResources {
            socket: socket.into(),
            timeout,
            runtime,
            client: None,
            get_served: None,
        })
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Whether `Get` is served (`None`: not tried yet).
    pub fn get_served(&self) -> Option<bool> {
        self.get_served
    }

    fn client(&mut self) -> Result<PodResourcesListerClient<Channel>, PodResourcesError> {
        // A socket that went away (kubelet stopped) drops the channel: the
        // next kubelet makes a new socket, and asking first keeps an absent
        // kubelet a quiet state rather than a connect error each cycle.
        if !self.socket.exists() {
            self.client = None;
            return Err(PodResourcesError::SocketMissing {
                path: self.socket.clone(),
            });
        }
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let path = self.socket.clone();
        // The URI is required by tonic and ignored by the connector.
        // Each call is bounded by `call`'s own timeout (one error for it,
        // not tonic's Cancelled status racing it).
        let endpoint =
            Endpoint::from_static("http://kubelet.pod-resources").connect_timeout(self.timeout);
        let timeout = self.timeout;
        // Futures that arm timers or spawn are made inside the runtime.
        let connect = async move {
            let connector = tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
            });
            tokio::time::timeout(timeout, endpoint.connect_with_connector(connector)).await
        };
        let channel = match self.runtime.block_on(connect) {
            Ok(Ok(c)) => c,
            Ok(Err(source)) => {
                return Err(PodResourcesError::Connect {
                    path: self.socket.clone(),
                    source,
                })
            }
            Err(_) => {
                return Err(PodResourcesError::Timeout {
                    call: Call::List,
                    timeout_ms: self.timeout.as_millis() as u64,
                })
            }
        };
        let client = PodResourcesListerClient::new(channel).max_decoding_message_size(MAX_MESSAGE);
        Ok(self.client.insert(client).clone())
    }

    fn call<T, F>(&mut self, call: Call, fut: F) -> Result<T, PodResourcesError>
    where
        F: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let timeout = self.timeout;
        match self
            .runtime
            .block_on(async move { tokio::time::timeout(timeout, fut).await })
        {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(status)) => Err(PodResourcesError::Call {
                call,
                source: Box::new(status),
            }),
            Err(_) => Err(PodResourcesError::Timeout {
                call,
                timeout_ms: self.timeout.as_millis() as u64,
            }),
        }
    }
}

impl PodResourcesSource for KubeletPodResources {
    fn allocatable(&mut self) -> Result<Vec<DeviceSet>, PodResourcesError> {
        let mut c = self.client()?;
        let r = self.call(
            Call::GetAllocatableResources,
            c.get_allocatable_resources(AllocatableResourcesRequest {}),
        )?;
        Ok(r.devices.into_iter().map(DeviceSet::from).collect())
    }

    fn list(&mut self) -> Result<Vec<PodAllocation>, PodResourcesError> {
        let mut c = self.client()?;
        let r = self.call(Call::List, c.list(ListPodResourcesRequest {}))?;
        Ok(r.pod_resources
            .into_iter()
            .map(PodAllocation::from)
            .collect())
    }

    fn get(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<PodAllocation>, PodResourcesError> {
        if self.get_served == Some(false) {
            return Ok(list_one(self.list()?, namespace, name));
        }
        let mut c = self.client()?;
        let req = GetPodResourcesRequest {
            pod_name: name.to_string(),
            pod_namespace: namespace.to_string(),
        };
        match self.call(Call::Get, c.get(req)) {
            Ok(r) => {
                self.get_served = Some(true);
                Ok(r.pod_resources.map(PodAllocation::from))
            }
            Err(PodResourcesError::Call { source, .. }) if not_served(&source) => {
                tracing::debug!(socket = %self.socket.display(), code = ?source.code(), "the kubelet does not serve pod-resources Get; using List");
                self.get_served = Some(false);
                Ok(list_one(self.list()?, namespace, name))
            }
            // The kubelet answers an unknown pod with a plain error
            // ("pod NAME in namespace NS not found", code Unknown).
            Err(PodResourcesError::Call { source, .. })
                if source.code() == Code::Unknown && source.message().ends_with("not found") =>
            {
                self.get_served = Some(true);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

fn not_served(s: &tonic::Status) -> bool {
    s.code() == Code::Unimplemented || (s.code() == Code::Unknown && s.message() == GET_DISABLED)
}

fn list_one(pods: Vec<PodAllocation>, namespace: &str, name: &str) -> Option<PodAllocation> {
    pods.into_iter()
        .find(|p| p.namespace == namespace && p.name == name)
}
