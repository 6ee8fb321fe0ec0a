//! Starting the server: its thread, its listener, the TLS handshake, and
//! connections refused while it is down or cut when a test cuts them.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::Router;

use crate::auth::{Authn, PeerCert};
use crate::faults::{Fault, FaultState};
use crate::persist::{self, Recording};
use crate::router;
use crate::state::{State, TestApiServer};
use crate::tls::{self, ServingCert};

impl TestApiServer {
    /// Start on 127.0.0.1 with a fresh self-signed certificate.
    pub fn start() -> Self {
        let cert = ServingCert::generate();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        Self::serve(listener, &cert, State::default())
    }

    /// Serves on `listener` with `cert`, its objects kept in `storage`:
    /// those stored by an earlier process are served again (see
    /// [`persist::load`]).
    pub fn start_stored(
        listener: std::net::TcpListener,
        cert: &ServingCert,
        storage: &Path,
    ) -> Self {
        let mut state = State::default();
        let stored_rv = match persist::load(storage) {
            Some(store) => {
                let rv = store.rv;
                state.store = store;
                rv
            }
            None => 0,
        };
        *state.part::<Recording>() = Recording {
            storage: Some(storage.to_path_buf()),
            stored_rv,
            ..Recording::default()
        };
        Self::serve(listener, cert, state)
    }

    fn serve(std_listener: std::net::TcpListener, cert: &ServingCert, mut state: State) -> Self {
        let ca_pem = cert.cert_pem.clone();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cert.server_config()));
        let (client_ca, client_ca_der) = tls::client_ca();
        state.part::<Authn>().client_ca_der = client_ca_der;
        let state = Arc::new(Mutex::new(state));
        std_listener.set_nonblocking(true).expect("nonblocking");
        let addr = std_listener.local_addr().expect("addr");
        let st = state.clone();
        let (cut, cut_rx) = tokio::sync::watch::channel(0u64);
        let runtime = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("server runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(std_listener).expect("listener");
                let app = Router::new()
                    .fallback(router::handle)
                    .with_state(st.clone());
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        continue;
                    };
                    let mut cut = cut_rx.clone();
                    {
                        let mut s = st.lock().unwrap();
                        let faults = s.part::<FaultState>();
                        faults.accepted.push(Instant::now());
                        if faults.fault == Some(Fault::Down) {
                            drop(tcp); // connection reset: the API server is not there
                            continue;
                        }
                        // Only a cut after this connection was accepted closes
                        // it. Marked under the lock `set_fault` takes: a test
                        // that sets Down and then cuts either finds this
                        // connection refused or cuts it; marked after the
                        // lock, a cut sent in between was taken as seen and
                        // the connection (a watch) outlived it.
                        cut.mark_unchanged();
                    }
                    let acceptor = acceptor.clone();
                    let app = app.clone();
                    tokio::spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let app = app.layer(axum::Extension(PeerCert::of(tls.get_ref().1)));
                        let svc = hyper_util::service::TowerToHyperService::new(app);
                        let builder = hyper_util::server::conn::auto::Builder::new(
                            hyper_util::rt::TokioExecutor::new(),
                        );
                        let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(tls), svc);
                        // Dropped on a cut: the socket closes, open watches with it.
                        tokio::select! {
                            _ = conn => {}
                            _ = cut.changed() => {}
                        }
                    });
                }
            });
        });
        TestApiServer {
            addr,
            state,
            ca_pem,
            client_ca,
            cut,
            _runtime: runtime,
        }
    }
}
