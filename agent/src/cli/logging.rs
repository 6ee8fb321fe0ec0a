//! Where the logs go: the journal, or text/JSON on stderr.

/// The journal with native fields (NODEPROOF_CHECK=, SECCOMP_PROFILE=, ...)
/// when stderr is connected to it, else text (or `NODEPROOF_LOG_FORMAT=json`)
/// on stderr. The daemon logs at info, the one-shot commands at warn.
pub(crate) fn init(daemon: bool) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let asked = std::env::var("NODEPROOF_LOG").ok();
    let filter = tracing_subscriber::EnvFilter::new(directives(asked.as_deref(), daemon));
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

/// The log filter: `NODEPROOF_LOG` (an `EnvFilter` string) or the default
/// level, with kube-rs's own lines off unless the setting names them. An
/// error is logged once, where it is handled: kube-rs logs each failed
/// connection itself (`ERROR kube_client::client::builder: failed with
/// error client error (Connect)`, `WARN kube_client::client: eof in poll:
/// ...` with a Debug dump) and then returns it to nodeproof, which retries
/// and says so in one sentence of its own.
fn directives(asked: Option<&str>, daemon: bool) -> String {
    let base = match asked {
        Some(a) if !a.trim().is_empty() => a.trim().to_string(),
        _ => (if daemon { "info" } else { "warn" }).to_string(),
    };
    if base.contains("kube") {
        base
    } else {
        format!("{base},kube_client=off,kube_runtime=off")
    }
}

#[cfg(test)]
mod tests {
    use super::directives;

    #[test]
    fn kube_rs_lines_are_off_unless_asked_for() {
        assert_eq!(
            directives(None, true),
            "info,kube_client=off,kube_runtime=off"
        );
        assert_eq!(
            directives(Some(""), false),
            "warn,kube_client=off,kube_runtime=off"
        );
        assert_eq!(
            directives(Some("debug"), true),
            "debug,kube_client=off,kube_runtime=off"
        );
        assert_eq!(
            directives(Some("info,kube_client=debug"), true),
            "info,kube_client=debug"
        );
        // Each one parses as tracing-subscriber reads it.
        for d in [
            directives(None, true),
            directives(Some("nodeproof=debug"), false),
        ] {
            assert!(tracing_subscriber::EnvFilter::try_new(&d).is_ok(), "{d}");
        }
    }
}
