//! Arbitrary bytes as what a client sends to `nodeproof run`'s endpoints
//! (`/healthz`, `/healthz/<check>`, `/readyz`, `/metrics`): through hyper's
//! HTTP/1 server exactly as the agent configures it (`serve_stream`: header
//! limits, keep-alive, the 405/413 handling) over an in-memory stream, and
//! the pure `route` on the request line's method and target. Nothing may
//! panic; every answer is a well-formed HTTP/1.1 response with a status the
//! router gives.

#![no_main]

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use nodeproof::daemon::http::{route, serve_stream, Limits, Routes};
use nodeproof::daemon::metrics;
use nodeproof::daemon::state::Shared;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Runtime;

fn runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a tokio runtime")
    })
}

fn shared() -> Arc<Shared> {
    let shared = Arc::new(Shared::default());
    shared.main_progress(
        Instant::now(),
        std::time::SystemTime::now(),
        Duration::from_secs(1),
    );
    shared
}

/// Statuses the agent's server answers with: the router's, and hyper's own
/// for what it refuses to parse (400, 414 URI too long, 431 header fields
/// too large, 501 unsupported transfer coding, 505 version).
const STATUSES: [&str; 12] = [
    "200", "400", "404", "405", "413", "414", "431", "500", "501", "503", "505", "408",
];

fuzz_target!(|data: &[u8]| {
    let shared = shared();
    let registry = metrics::registry(shared.clone());
    // The router alone, on the request line's first two words.
    let line = String::from_utf8_lossy(data.split(|&b| b == b'\n').next().unwrap_or(&[]));
    let mut words = line.split(' ');
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let (code, _, _) = route(method, path, &shared, &registry, Instant::now());
    assert!([200, 404, 405, 500, 503].contains(&code), "{code}");

    // The whole server, one connection.
    let routes: Routes =
        Box::new(move |method, path, now| route(method, path, &shared, &registry, now));
    let limits = Limits {
        // Every byte is there at once: only a request left unfinished waits.
        header_read_timeout: Duration::from_millis(50),
        max_connection_age: Duration::from_secs(2),
        grace: Duration::from_millis(50),
        ..Limits::default()
    };
    let response = runtime().block_on(async move {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let served = tokio::spawn(serve_stream(server, routes, limits));
        // The server may close before taking everything (a refused request).
        let _ = client.write_all(data).await;
        let _ = client.shutdown().await;
        let mut response = Vec::new();
        let _ = client.read_to_end(&mut response).await;
        served.await.expect("the connection task does not panic");
        response
    });
    // Each response's status line.
    let text = String::from_utf8_lossy(&response);
    // (A body ends with a bare newline: the next status line starts a line.)
    for status_line in text.lines().filter(|l| l.starts_with("HTTP/")) {
        let status = status_line.split(' ').nth(1).unwrap_or("");
        assert!(STATUSES.contains(&status), "{status_line:?}");
    }
    if !response.is_empty() {
        assert!(response.starts_with(b"HTTP/1."), "{text:?}");
    }
});
