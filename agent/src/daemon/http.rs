//! `/healthz`, `/healthz/<check>`, `/readyz`, `/metrics` over HTTP/1.1.
//!
//! hyper's HTTP/1 server speaks the protocol: parsing, keep-alive, `HEAD`,
//! the header limits (431) and the header-read timeout. [`route`] is the pure
//! part (method and path → status, type, body). [`serve`] adds the bounds
//! hyper leaves to its caller: how many connections at once (one more is
//! closed on accept, never queued), how long one lives, and a graceful stop.

use std::convert::Infallible;

use super::subsystem::Subsystem;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body as _, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONNECTION, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tracing::Instrument;

use super::error_chain;
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

/// What one client may take. The defaults fit a kubelet-style prober and a
/// Prometheus scrape, with room to spare; the tests shrink them.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections served at once; one more is closed as soon as it is
    /// accepted.
    pub max_connections: usize,
    /// A request's line and headers must arrive within this, or the
    /// connection is closed (slowloris). hyper 1.12 restarts the timer when
    /// a kept-alive connection waits for its next request
    /// (`proto/h1/conn.rs`), so it is also how long an idle one is kept.
    pub header_read_timeout: Duration,
    /// Request line and headers together, in bytes; more: 431 and close.
    pub max_header_bytes: usize,
    /// Header fields in one request; more: 431 and close.
    pub max_headers: usize,
    /// A connection is asked to finish after this long, however busy: hyper
    /// has no write timeout, so a client that never reads its responses
    /// would hold its slot for good.
    pub max_connection_age: Duration,
    /// How long a response in flight may still take once its connection is
    /// asked to finish (at the age limit, or when the agent stops).
    pub grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 32,
            header_read_timeout: Duration::from_secs(5),
            max_header_bytes: 8 * 1024,
            max_headers: 32,
            max_connection_age: Duration::from_secs(30),
            grace: Duration::from_secs(1),
        }
    }
}

/// hyper's read buffer per connection (its minimum is 8 KiB; the default,
/// ~400 KiB, would let 32 clients that pipeline requests hold 12 MiB).
const MAX_BUF_BYTES: usize = 16 * 1024;

/// Connections refused at the bound are logged at most this often: a flood
/// of them must not flood the journal too.
const REFUSAL_LOG_PERIOD: Duration = Duration::from_secs(60);

const TEXT: &str = "text/plain; charset=utf-8";

/// Binds `addr`. Anything but loopback is reachable from other hosts, and the
/// endpoints have no authentication: said once, at start (docs/daemon.md
/// says how to restrict it).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, HttpError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| HttpError::Bind { addr, source })?;
    if reachable_from_other_hosts(&addr) {
        tracing::warn!(
            listen = %addr,
            "the health and metrics endpoints are reachable from other hosts and have no \
             authentication; restrict them to the scraper (NetworkPolicy or host firewall, \
             see docs/daemon.md)"
        );
    }
    Ok(listener)
}

/// Anything but loopback (127.0.0.0/8, ::1, and those as IPv4-mapped IPv6),
/// the unspecified 0.0.0.0 and :: included.
pub fn reachable_from_other_hosts(addr: &SocketAddr) -> bool {
    !addr.ip().to_canonical().is_loopback()
}

/// Serves until `stop` turns true (or its sender goes away), then stops
/// accepting, lets each connection finish its response within
/// `limits.grace`, closes what is left and returns.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    limits: Limits,
    stop: watch::Receiver<bool>,
) {
    let registry = metrics::registry(shared.clone());
    let routes: Routes =
        Box::new(move |method, path, now| route(method, path, &shared, &registry, now));
    serve_routes(listener, routes, limits, stop).await;
}

/// Method, path and the time → status, content type and body: what a server
/// answers (the agent's [`route`], or another command's, e.g. the gate
/// controller's `/metrics`).
pub type Routes = Box<dyn Fn(&str, &str, Instant) -> (u16, &'static str, String) + Send + Sync>;

/// [`serve`] with other routes, under the same bounds.
pub async fn serve_routes(
    listener: TcpListener,
    routes: Routes,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) {
    let app = Arc::new(App { routes });
    let http = builder(&limits);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut connections = JoinSet::new();
    let mut refusals = Refusals::default();
    // Each connection watches the stop too (`stop` itself is borrowed by the
    // loop's wait).
    let told = stop.clone();
    loop {
        tokio::select! {
            () = stopped(&mut stop) => break,
            Some(done) = connections.join_next(), if !connections.is_empty() => {
                if let Err(e) = done {
                    if e.is_panic() {
                        tracing::error!(error = %e, "an HTTP connection task panicked");
                    }
                }
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(slot) = slots.clone().try_acquire_owned() else {
                        // Closed unanswered: answering would mean waiting on
                        // a client we have no room for.
                        refusals.note(peer, limits.max_connections);
                        drop(stream);
                        continue;
                    };
                    let span = tracing::debug_span!("http_connection", peer = %peer);
                    connections.spawn(
                        connection(stream, http.clone(), app.clone(), told.clone(), limits.clone(), slot)
                            .instrument(span),
                    );
                }
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accepting an HTTP connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
    drop(listener);
    // Every connection saw the same stop and is finishing; the grace is
    // theirs, plus a little for the tasks to end.
    let drained = tokio::time::timeout(limits.grace + Duration::from_millis(100), async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::debug!(
            left = connections.len(),
            "HTTP connections still busy after the grace are closed"
        );
    }
    connections.shutdown().await;
}

/// hyper's HTTP/1 server with `limits`' protocol bounds.
fn builder(limits: &Limits) -> http1::Builder {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(limits.max_header_bytes)
        .max_headers(limits.max_headers)
        .max_buf_size(MAX_BUF_BYTES);
    http
}

/// One connection over any byte stream, served exactly as [`serve_routes`]
/// serves an accepted one (same hyper settings, same responses), until the
/// client closes it or `limits` end it: what `fuzz/`'s `http_router` drives
/// in memory.
pub async fn serve_stream<S>(stream: S, routes: Routes, limits: Limits)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let app = Arc::new(App { routes });
    let http = builder(&limits);
    // Nobody stops it: the sender stays alive until the connection ends.
    let (_stop, stop) = watch::channel(false);
    let slot = Arc::new(Semaphore::new(1))
        .try_acquire_owned()
        .expect("a fresh semaphore has a permit");
    connection(stream, http, app, stop, limits, slot).await;
}

/// One connection, from accept to close; its slot is given back on return.
async fn connection<S>(
    stream: S,
    http: http1::Builder,
    app: Arc<App>,
    mut stop: watch::Receiver<bool>,
    limits: Limits,
    _slot: OwnedSemaphorePermit,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req: Request<Incoming>| {
        let app = app.clone();
        async move { Ok::<_, Infallible>(app.respond(&req)) }
    });
    let conn = http.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let deadline = tokio::time::sleep(limits.max_connection_age);
    tokio::pin!(deadline);
    let mut finishing = false;
    loop {
        tokio::select! {
            done = conn.as_mut() => {
                // A client's doing (a reset, a header timeout, a parse error
                // hyper already answered): worth a debug line, no more.
                if let Err(e) = done {
                    tracing::debug!(error = %error_chain(&e), "HTTP connection ended");
                }
                return;
            }
            () = &mut deadline => {
                if finishing {
                    tracing::debug!("HTTP connection closed: its response was not taken within the grace");
                    return;
                }
                finishing = true;
                // hyper's graceful shutdown: no keep-alive, an idle connection
                // closes now, a busy one after its response.
                conn.as_mut().graceful_shutdown();
                deadline.as_mut().reset((Instant::now() + limits.grace).into());
            }
            () = stopped(&mut stop), if !finishing => {
                finishing = true;
                conn.as_mut().graceful_shutdown();
                deadline.as_mut().reset((Instant::now() + limits.grace).into());
            }
        }
    }
}

/// `stop` turned true, or its sender is gone (nobody left to say stop).
/// The guard `wait_for` returns is dropped here: it must not be held across
/// the awaits of a task that may move between threads.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopping| *stopping).await;
}

struct App {
    routes: Routes,
}

impl App {
    fn respond(&self, req: &Request<Incoming>) -> Response<Full<Bytes>> {
        // No route takes a body, and hyper reads one only when asked; it
        // does not reuse a connection whose request body was left unread,
        // so a request with one is refused and its connection closed.
        let (code, content_type, body) = if req.body().size_hint().exact() != Some(0) {
            (413, TEXT, "request bodies are not accepted\n".to_string())
        } else {
            (self.routes)(req.method().as_str(), req.uri().path(), Instant::now())
        };
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() =
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        match code {
            405 => {
                headers.insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            }
            413 => {
                headers.insert(CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        response
    }
}

/// Connections closed at the bound since the last log line.
#[derive(Default)]
struct Refusals {
    since_log: u64,
    logged: Option<Instant>,
}

impl Refusals {
    fn note(&mut self, peer: SocketAddr, max: usize) {
        self.since_log += 1;
        if self
            .logged
            .is_none_or(|at| at.elapsed() >= REFUSAL_LOG_PERIOD)
        {
            tracing::warn!(
                peer = %peer,
                max_connections = max,
                refused = self.since_log,
                "HTTP connections refused: the agent serves at most max_connections at once"
            );
            self.since_log = 0;
            self.logged = Some(Instant::now());
        }
    }
}

/// Status code, content type and body for a request's method and path (a
/// query, if the path carries one, is ignored).
pub fn route(
    method: &str,
    path: &str,
    shared: &Shared,
    registry: &Registry,
    now: Instant,
) -> (u16, &'static str, String) {
    if method != "GET" && method != "HEAD" {
        return (405, TEXT, "only GET\n".into());
    }
    let path = path.split('?').next().unwrap_or(path);
    let health = |h: super::state::Health| (if h.ok { 200 } else { 503 }, TEXT, h.body);
    match path {
        "/healthz" => health(shared.healthz(now)),
        "/readyz" => health(shared.readyz(now)),
        "/metrics" => match metrics::render(registry) {
            Ok(body) => (200, metrics::CONTENT_TYPE, body),
            Err(e) => {
                tracing::error!(error = %error_chain(&e), "cannot serve /metrics");
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
    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    fn shared() -> Arc<Shared> {
        let shared = Arc::new(Shared::default());
        shared.main_progress(
            Instant::now(),
            std::time::SystemTime::now(),
            Duration::from_secs(1),
        );
        shared
    }

    #[test]
    fn route_is_pure_path_to_response() {
        let shared = shared();
        let registry = metrics::registry(shared.clone());
        let now = Instant::now();
        let r = |method, path| route(method, path, &shared, &registry, now);
        assert_eq!(r("GET", "/healthz").0, 200);
        assert_eq!(r("HEAD", "/healthz").0, 200);
        assert_eq!(r("GET", "/healthz?verbose=1").0, 200);
        // Not ready until the first cycle is done.
        assert_eq!(r("GET", "/readyz").0, 503);
        // No such check yet (it has not reported once): 404, like any path.
        assert_eq!(r("GET", "/healthz/gpu").0, 404);
        assert_eq!(r("GET", "/nothing").0, 404);
        assert_eq!(r("POST", "/healthz").0, 405);
        let (code, content_type, body) = r("GET", "/metrics");
        assert_eq!((code, content_type), (200, metrics::CONTENT_TYPE));
        assert!(body.ends_with("\n# EOF\n"), "{body}");
    }

    #[test]
    fn only_loopback_is_private() {
        for (addr, exposed) in [
            ("127.0.0.1:9810", false),
            ("127.0.0.2:9810", false),
            ("[::1]:9810", false),
            ("[::ffff:127.0.0.1]:9810", false),
            ("0.0.0.0:9810", true),
            ("[::]:9810", true),
            ("10.0.0.5:9810", true),
            ("[fd00::5]:9810", true),
        ] {
            let addr: SocketAddr = addr.parse().unwrap();
            assert_eq!(reachable_from_other_hosts(&addr), exposed, "{addr}");
        }
    }

    /// The real server on a loopback port of its own.
    async fn start(
        limits: Limits,
    ) -> (SocketAddr, watch::Sender<bool>, tokio::task::JoinHandle<()>) {
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stop_rx) = watch::channel(false);
        let server = tokio::spawn(serve(listener, shared(), limits, stop_rx));
        (addr, stop, server)
    }

    /// Writes `request` as raw bytes and reads until the server closes (or
    /// resets) the connection, at most 5 s.
    async fn raw(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request).await.unwrap();
        read_until_closed(&mut s).await
    }

    async fn read_until_closed(s: &mut TcpStream) -> String {
        let mut out = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
        assert!(
            read.is_ok(),
            "not closed within 5 s; got {:?}",
            String::from_utf8_lossy(&out)
        );
        String::from_utf8_lossy(&out).into_owned()
    }

    async fn get_close(addr: SocketAddr, path: &str) -> String {
        raw(
            addr,
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
    }

    #[tokio::test]
    async fn answers_over_tcp() {
        let (addr, _stop, _server) = start(Limits::default()).await;
        assert!(get_close(addr, "/healthz")
            .await
            .starts_with("HTTP/1.1 200 OK"));
        assert!(get_close(addr, "/readyz").await.starts_with("HTTP/1.1 503"));
        assert!(get_close(addr, "/healthz/gpu")
            .await
            .starts_with("HTTP/1.1 404"));
        assert!(get_close(addr, "/nothing")
            .await
            .starts_with("HTTP/1.1 404 Not Found"));
        let post = raw(
            addr,
            b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        assert!(
            post.to_ascii_lowercase()
                .contains("\r\nallow: get, head\r\n"),
            "{post}"
        );
        let m = get_close(addr, "/metrics").await;
        assert!(m.starts_with("HTTP/1.1 200 OK"), "{m}");
        assert!(
            m.to_ascii_lowercase()
                .contains(&format!("\r\ncontent-type: {}\r\n", metrics::CONTENT_TYPE)),
            "{m}"
        );
        assert!(m.contains("nodeproof_build_info{version="), "{m}");
        assert!(m.ends_with("\n# EOF\n"), "{m}");
        // HEAD: the headers of GET, no body (hyper drops it).
        let head = raw(
            addr,
            b"HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
        assert!(head.ends_with("\r\n\r\n"), "{head}");
    }

    /// Raw bytes through `serve_stream` over an in-memory stream (the last
    /// request must end the connection); everything the server wrote back.
    async fn in_memory(request: &'static [u8]) -> String {
        let shared = shared();
        let registry = metrics::registry(shared.clone());
        let routes: Routes =
            Box::new(move |method, path, now| route(method, path, &shared, &registry, now));
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let served = tokio::spawn(serve_stream(server, routes, Limits::default()));
        client.write_all(request).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut out))
            .await
            .expect("closed within 5 s")
            .unwrap();
        served.await.unwrap();
        String::from_utf8_lossy(&out).into_owned()
    }

    fn statuses(out: &str) -> Vec<&str> {
        // A body ends with a bare newline, so the next status line starts a line.
        out.lines().filter(|l| l.starts_with("HTTP/1.1 ")).collect()
    }

    /// `serve_stream` answers as the TCP server does: pipelined requests in
    /// order; a request with a body refused.
    #[tokio::test]
    async fn serve_stream_answers_like_the_server() {
        let out = in_memory(
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n\
              GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n\
              POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert_eq!(
            statuses(&out),
            [
                "HTTP/1.1 200 OK",
                "HTTP/1.1 404 Not Found",
                "HTTP/1.1 405 Method Not Allowed"
            ],
            "{out}"
        );
        let out =
            in_memory(b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi").await;
        assert_eq!(statuses(&out), ["HTTP/1.1 413 Payload Too Large"], "{out}");
    }

    #[tokio::test]
    async fn two_requests_on_one_kept_alive_connection() {
        let (addr, _stop, _server) = start(Limits::default()).await;
        let stream = TcpStream::connect(addr).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        let driver = tokio::spawn(conn);
        for (path, code) in [("/healthz", 200), ("/nothing", 404), ("/metrics", 200)] {
            sender.ready().await.expect("the connection is still open");
            let req = Request::get(path)
                .header("host", "x")
                .body(http_body_util::Empty::<Bytes>::new())
                .unwrap();
            let res = sender.send_request(req).await.unwrap();
            assert_eq!(res.status().as_u16(), code, "{path}");
            assert!(
                res.headers().get(CONNECTION).is_none(),
                "{path}: {:?}",
                res.headers()
            );
            let body = res.into_body().collect().await.unwrap().to_bytes();
            assert!(!body.is_empty(), "{path}");
        }
        // All three went over the one TCP connection the handshake took.
        assert!(!driver.is_finished());
    }

    #[tokio::test]
    async fn oversized_requests_are_refused() {
        let (addr, _stop, _server) = start(Limits::default()).await;
        let big = format!(
            "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
            "a".repeat(10 * 1024)
        );
        let r = raw(addr, big.as_bytes()).await;
        assert!(
            r.starts_with("HTTP/1.1 431 Request Header Fields Too Large"),
            "{r}"
        );
        let many: String = (0..40).map(|i| format!("X-{i}: y\r\n")).collect();
        let r = raw(
            addr,
            format!("GET /healthz HTTP/1.1\r\nHost: x\r\n{many}\r\n").as_bytes(),
        )
        .await;
        assert!(r.starts_with("HTTP/1.1 431"), "{r}");
        let r = raw(
            addr,
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
        )
        .await;
        assert!(r.starts_with("HTTP/1.1 413 Payload Too Large"), "{r}");
    }

    #[tokio::test]
    async fn connections_over_the_bound_are_closed_unanswered() {
        let limits = Limits {
            max_connections: 2,
            header_read_timeout: Duration::from_secs(30),
            ..Limits::default()
        };
        let (addr, _stop, _server) = start(limits).await;
        let first = TcpStream::connect(addr).await.unwrap();
        let _second = TcpStream::connect(addr).await.unwrap();
        // Both accepted (and their slots taken) before the third arrives.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut third = TcpStream::connect(addr).await.unwrap();
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(2), third.read(&mut buf))
            .await
            .expect("the third connection is closed, not kept waiting");
        // EOF, or a reset if the close raced a write: never a response.
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        // A slot given back is a slot to use.
        drop(first);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(get_close(addr, "/healthz")
            .await
            .starts_with("HTTP/1.1 200"));
    }

    #[tokio::test]
    async fn a_slow_client_is_cut_off_and_blocks_nobody() {
        let timeout = Duration::from_secs(1);
        let limits = Limits {
            header_read_timeout: timeout,
            ..Limits::default()
        };
        let (addr, _stop, _server) = start(limits).await;
        let started = Instant::now();
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET /healthz HTTP/1.1\r\nHo")
            .await
            .unwrap();
        // Others are answered while the slow one still holds its connection.
        for _ in 0..3 {
            assert!(get_close(addr, "/healthz")
                .await
                .starts_with("HTTP/1.1 200"));
        }
        let mut buf = [0u8; 1];
        assert!(
            started.elapsed() < timeout
                && matches!(slow.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "answered only after the slow client was cut off ({:?})",
            started.elapsed()
        );
        // It is closed once its head is late; hyper sends nothing.
        let r = read_until_closed(&mut slow).await;
        assert_eq!(r, "");
        let took = started.elapsed();
        assert!((timeout..timeout * 4).contains(&took), "{took:?}");
        // A kept-alive connection that goes quiet is closed the same way.
        let mut idle = TcpStream::connect(addr).await.unwrap();
        idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let r = read_until_closed(&mut idle).await;
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    }

    #[tokio::test]
    async fn an_old_connection_is_asked_to_finish() {
        let limits = Limits {
            header_read_timeout: Duration::from_secs(30),
            max_connection_age: Duration::from_millis(300),
            grace: Duration::from_millis(200),
            ..Limits::default()
        };
        let (addr, _stop, _server) = start(limits).await;
        let started = Instant::now();
        let mut s = TcpStream::connect(addr).await.unwrap();
        assert_eq!(read_until_closed(&mut s).await, "");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn stop_is_graceful_and_bounded() {
        let (addr, stop, server) = start(Limits::default()).await;
        let mut idle = TcpStream::connect(addr).await.unwrap();
        idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut first = [0u8; 15];
        idle.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"HTTP/1.1 200 OK");
        let asked = Instant::now();
        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(3), server)
            .await
            .expect("serve returns within the grace")
            .unwrap();
        assert!(
            asked.elapsed() < Duration::from_millis(1500),
            "{:?}",
            asked.elapsed()
        );
        // The kept-alive connection was closed, and nobody listens any more.
        read_until_closed(&mut idle).await;
        assert!(TcpStream::connect(addr).await.is_err());
    }
}
