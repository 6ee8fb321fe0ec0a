//! An error and its causes on one line, for log fields and status texts: the
//! one walk of the `source()` chain in the workspace (the daemon, the eBPF
//! loader, the GPU report and the checks use it). `anyhow`'s `{:#}` does the same in `main.rs`,
//! where errors are `anyhow::Error` already.

/// `error: cause: cause`.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        // Errors that put their source's text in their own (kube-rs' do) are
        // not said twice: "failed to infer config" once, not three times.
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        source = cause.source();
    }
    s
}

/// [`error_chain`] cut to at most `max` bytes (on a character boundary) and
/// an ellipsis, for causes that can run long (a BPF verifier log).
pub fn error_chain_capped(e: &dyn std::error::Error, max: usize) -> String {
    let mut s = error_chain(e);
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot read {path}")]
    struct Outer {
        path: &'static str,
        #[source]
        source: std::io::Error,
    }

    #[test]
    fn every_cause_in_order_on_one_line() {
        let e = Outer {
            path: "/x",
            source: std::io::Error::other("permission denied"),
        };
        assert_eq!(error_chain(&e), "cannot read /x: permission denied");
        assert_eq!(
            error_chain(&std::io::Error::other("alone")),
            "alone",
            "no trailing separator without a cause"
        );
    }

    /// As kube-rs' errors are: the source's text inside the error's own.
    #[derive(Debug, thiserror::Error)]
    #[error("failed to infer config: {source}")]
    struct SaysItsSource {
        #[source]
        source: std::io::Error,
    }

    #[test]
    fn a_cause_already_said_is_not_said_again() {
        let e = Outer {
            path: "/x",
            source: std::io::Error::other(SaysItsSource {
                source: std::io::Error::other("no such file"),
            }),
        };
        assert_eq!(
            error_chain(&e),
            "cannot read /x: failed to infer config: no such file"
        );
    }

    #[test]
    fn capping_keeps_whole_characters() {
        let e = std::io::Error::other("ééé");
        // 'é' is two bytes: byte 3 is inside the second one.
        assert_eq!(error_chain_capped(&e, 3), "é…");
        assert_eq!(error_chain_capped(&e, 6), "ééé");
    }
}
