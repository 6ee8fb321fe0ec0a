//! Where the logs go: the journal, or text/JSON on stderr.

/// The journal with native fields (NODEPROOF_CHECK=, SECCOMP_PROFILE=, ...)
/// when stderr is connected to it, else text (or `NODEPROOF_LOG_FORMAT=json`)
/// on stderr. The daemon logs at info, the one-shot commands at warn.
pub(crate) fn init(daemon: bool) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("NODEPROOF_LOG").unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new(if daemon { "info" } else { "warn" })
        });
    if nodeproof::daemon::logs::stderr_is_journal() {
        if let Ok(layer) = tracing_journald::layer() {
            let layer = layer
                .with_field_prefix(None)
                .with_syslog_identifier("nodeproof".into());
            let _ = tracing_subscriber::registry()
                .with(filter)
                .with(layer)
                .try_init();
            return;
        }
    }
    let json = std::env::var("NODEPROOF_LOG_FORMAT").is_ok_and(|f| f == "json");
    // A stderr nobody reads any more (a pipe whose reader left) must not
    // stop the agent: by default a failed write is reported with eprintln!,
    // which panics on that same stderr.
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(nodeproof::daemon::logs::stderr_wants_ansi())
        .log_internal_errors(false);
    let _ = if json {
        fmt.json().try_init()
    } else {
        fmt.try_init()
    };
}
