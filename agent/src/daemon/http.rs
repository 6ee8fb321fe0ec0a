//! `/healthz`, `/healthz/<check>`, `/readyz`, `/metrics` on a loopback port.
//! Four GET routes read by a kubelet-style prober and Prometheus do not need
//! an HTTP framework: a minimal HTTP/1.1 responder (one request per
//! connection, `Connection: close`) keeps the binary and the RSS small.

use crate::checks::Subsystem;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use prometheus_client::registry::Registry;

use super::metrics;
use super::state::Shared;

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot listen on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

pub async fn bind(addr: SocketAddr) -> Result<TcpListener, HttpError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| HttpError::Bind { addr, source })
}

/// Serves until the task is dropped.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let registry = Arc::new(metrics::registry(shared.clone()));
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let shared = shared.clone();
                let registry = registry.clone();
                tokio::spawn(async move {
                    // A slow or silent client only costs its own connection.
                    let _ = tokio::time::timeout(
                        Duration::from_secs(5),
                        answer(stream, &shared, &registry),
                    )
                    .await;
                });
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(error = %e, "accepting an HTTP connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn answer(
    mut stream: TcpStream,
    shared: &Shared,
    registry: &Registry,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 8192 {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (code, content_type, body) = route(method, path, shared, registry, Instant::now());
    let reason = match code {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        500 => "Internal Server Error",
        _ => "Service Unavailable",
    };
    let response = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    if method != "HEAD" {
        stream.write_all(body.as_bytes()).await?;
    }
    stream.shutdown().await
}

/// Status code, content type and body for a request line.
pub fn route(
    method: &str,
    path: &str,
    shared: &Shared,
    registry: &Registry,
    now: Instant,
) -> (u16, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    if method != "GET" && method != "HEAD" {
        return (405, TEXT, "only GET\n".into());
    }
    let path = path.split('?').next().unwrap_or(path);
    let health = |h: super::state::Health| (if h.ok { 200 } else { 503 }, TEXT, h.body);
    match path {
        "/healthz" => health(shared.healthz(now)),
        "/readyz" => health(shared.readyz()),
        "/metrics" => match metrics::render(registry) {
            Ok(body) => (200, metrics::CONTENT_TYPE, body),
            Err(e) => {
                tracing::error!(error = %super::error_chain(&e), "cannot serve /metrics");
                (500, TEXT, "cannot encode the metrics\n".into())
            }
        },
        _ => match path
            .strip_prefix("/healthz/")
            .and_then(Subsystem::parse)
            .and_then(|c| shared.check_health(c, now))
        {
            Some(h) => health(h),
            None => (404, TEXT, "not found\n".into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_over_tcp() {
        let shared = Arc::new(Shared::default());
        shared.main_progress(Instant::now(), Duration::from_secs(1));
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve(listener, shared.clone()));
        let get = |path: &'static str| async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        };
        assert!(get("/healthz").await.starts_with("HTTP/1.1 200 OK"));
        assert!(get("/readyz").await.starts_with("HTTP/1.1 503"));
        assert!(get("/healthz/gpu").await.starts_with("HTTP/1.1 404"));
        let m = get("/metrics").await;
        assert!(m.starts_with("HTTP/1.1 200 OK"), "{m}");
        assert!(
            m.contains(&format!("\r\nContent-Type: {}\r\n", metrics::CONTENT_TYPE)),
            "{m}"
        );
        assert!(m.contains("nodeproof_build_info{version="), "{m}");
        assert!(m.ends_with("\n# EOF\n"), "{m}");
        server.abort();
    }
}
