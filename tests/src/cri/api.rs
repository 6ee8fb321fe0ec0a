//! The CRI runtime.v1 messages and client generated from
//! `proto/cri-api.proto` (a subset of k8s.io/cri-api, upstream's field
//! numbers), and a channel to a runtime's unix socket.

#![allow(clippy::all, clippy::pedantic)]

use std::path::PathBuf;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

tonic::include_proto!("runtime.v1");

/// A channel to the CRI socket at `path`. The URI is a placeholder the
/// connector ignores: gRPC over a unix socket, as the kubelet dials it.
pub async fn connect(path: PathBuf) -> Result<Channel, tonic::transport::Error> {
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
}
