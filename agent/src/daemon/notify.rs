//! The systemd edge: `sd_notify(3)` messages (READY=1, STATUS=, WATCHDOG=1,
//! STOPPING=1, EXTEND_TIMEOUT_USEC=) to `$NOTIFY_SOCKET` through the
//! `sd-notify` crate (pure Rust, no libsystemd), behind [`Notifier`].

use std::fmt::Write as _;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

pub use sd_notify::NotifyState;

#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("NOTIFY_SOCKET {value:?} is neither a path nor an abstract (@) name")]
    BadSocket { value: String },
    #[error("cannot address NOTIFY_SOCKET {value:?}")]
    Address {
        value: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create the notification socket")]
    Socket(#[source] std::io::Error),
    #[error("cannot send {message:?} to the service manager")]
    Send {
        message: String,
        #[source]
        source: std::io::Error,
    },
}

/// Where the daemon tells its supervisor how it is doing. systemd is the
/// only real implementation; without it (a terminal, a container) the
/// messages go nowhere.
pub trait Notifier: Send + Sync {
    /// One datagram holding every state, in order.
    fn notify(&self, states: &[NotifyState<'_>]) -> Result<(), NotifyError>;
}

/// Not run by a service manager: nothing to tell.
pub struct NoNotify;

impl Notifier for NoNotify {
    fn notify(&self, _states: &[NotifyState<'_>]) -> Result<(), NotifyError> {
        Ok(())
    }
}

/// `sd_notify` to `$NOTIFY_SOCKET`.
pub struct SdNotify {
    target: Target,
}

enum Target {
    /// A socket path: `sd_notify::notify`, which reads `$NOTIFY_SOCKET`
    /// itself at each call (the crate takes no address), so an `SdNotify`
    /// exists only through [`SdNotify::from_env`].
    Path,
    /// An abstract name (`@name`), sent to here. sd-notify 0.5.0 cannot:
    /// it hands the variable to `UnixDatagram::connect`, a pathname address,
    /// so `@name` is looked up as a relative file and the send fails with
    /// ENOENT while a listener is bound to the abstract name
    /// (`agent/tests/daemon/sd_notify.rs` measures it, and fails once the crate
    /// learns abstract names, to drop this). libsystemd sends to both forms.
    Abstract {
        socket: UnixDatagram,
        addr: SocketAddr,
    },
}

impl SdNotify {
    /// From `$NOTIFY_SOCKET`; `None` when it is unset (not started by systemd
    /// or not `Type=notify`).
    pub fn from_env() -> Result<Option<SdNotify>, NotifyError> {
        match std::env::var("NOTIFY_SOCKET") {
            Ok(value) if !value.is_empty() => SdNotify::for_value(&value).map(Some),
            _ => Ok(None),
        }
    }

    /// `value` as systemd writes it: an absolute path, or `@name` for the
    /// abstract namespace. Not public: for a path, the crate sends to what
    /// the variable says, whatever `value` was.
    fn for_value(value: &str) -> Result<SdNotify, NotifyError> {
        let target = if let Some(name) = value.strip_prefix('@') {
            let addr = SocketAddr::from_abstract_name(name.as_bytes()).map_err(|source| {
                NotifyError::Address {
                    value: value.to_string(),
                    source,
                }
            })?;
            let socket = UnixDatagram::unbound().map_err(NotifyError::Socket)?;
            Target::Abstract { socket, addr }
        } else if value.starts_with('/') {
            Target::Path
        } else {
            // libsystemd takes no other AF_UNIX form either (EINVAL); its
            // `vsock:` addresses are not spoken here.
            return Err(NotifyError::BadSocket {
                value: value.to_string(),
            });
        };
        Ok(SdNotify { target })
    }
}

/// The datagram: each state and a newline, as `sd_notify::notify` writes it,
/// so both targets send the same bytes.
pub fn datagram(states: &[NotifyState<'_>]) -> String {
    let mut message = String::new();
    for state in states {
        let _ = writeln!(message, "{state}");
    }
    message
}

impl Notifier for SdNotify {
    fn notify(&self, states: &[NotifyState<'_>]) -> Result<(), NotifyError> {
        let sent = match &self.target {
            Target::Path => sd_notify::notify(states),
            Target::Abstract { socket, addr } => socket
                .send_to_addr(datagram(states).as_bytes(), addr)
                .map(|_| ()),
        };
        sent.map_err(|source| NotifyError::Send {
            message: datagram(states).trim_end().to_string(),
            source,
        })
    }
}

/// The watchdog period systemd expects pings within (`WATCHDOG_USEC`), when
/// it is meant for this process (`WATCHDOG_PID` absent or ours).
///
/// Not `sd_notify::watchdog_enabled`: sd-notify 0.5.0 returns
/// `Some(Duration::ZERO)` for `WATCHDOG_USEC=0` (the main loop would then
/// spin at a zero period) and takes an unparsable `WATCHDOG_PID` as ours;
/// libsystemd's `sd_watchdog_enabled` refuses both. `agent/tests/daemon/sd_notify.rs`
/// pins the difference.
pub fn watchdog_from_env() -> Option<Duration> {
    watchdog_from(
        std::env::var("WATCHDOG_USEC").ok().as_deref(),
        std::env::var("WATCHDOG_PID").ok().as_deref(),
        std::process::id(),
    )
}

pub fn watchdog_from(usec: Option<&str>, pid: Option<&str>, me: u32) -> Option<Duration> {
    if let Some(pid) = pid {
        if pid.parse::<u32>().ok() != Some(me) {
            return None;
        }
    }
    let usec: u64 = usec?.parse().ok().filter(|&u| u > 0)?;
    Some(Duration::from_micros(usec))
}

/// `STATUS=` takes one line: a newline would end the field early (the crate
/// writes the text as given).
pub fn status_line(summary: &str) -> String {
    summary.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recv(sock: &UnixDatagram) -> String {
        let mut buf = [0u8; 512];
        let n = sock.recv(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    // Delivery to a path socket goes through `$NOTIFY_SOCKET`, which a
    // threaded test binary must not change: agent/tests/daemon/sd_notify.rs.

    #[test]
    fn abstract_names_start_with_at() {
        let name = format!("nodeproof-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixDatagram::bind_addr(&addr).unwrap();
        let n = SdNotify::for_value(&format!("@{name}")).unwrap();
        n.notify(&[NotifyState::Stopping]).unwrap();
        let line = status_line("profiles 3 ok\nsecond line");
        n.notify(&[NotifyState::Ready, NotifyState::Status(&line)])
            .unwrap();
        assert_eq!(recv(&listener), "STOPPING=1\n");
        assert_eq!(
            recv(&listener),
            "READY=1\nSTATUS=profiles 3 ok second line\n"
        );
    }

    #[test]
    fn relative_socket_names_are_refused_and_a_missing_listener_is_an_error() {
        assert!(matches!(
            SdNotify::for_value("relative/path"),
            Err(NotifyError::BadSocket { .. })
        ));
        let name = format!("nodeproof-test-absent-{}", std::process::id());
        let n = SdNotify::for_value(&format!("@{name}")).unwrap();
        let e = n
            .notify(&[NotifyState::Ready, NotifyState::Watchdog])
            .unwrap_err();
        assert!(matches!(e, NotifyError::Send { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "cannot send \"READY=1\\nWATCHDOG=1\" to the service manager"
        );
    }

    #[test]
    fn watchdog_is_for_this_pid_only() {
        assert_eq!(
            watchdog_from(Some("3000000"), None, 7),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            watchdog_from(Some("3000000"), Some("7"), 7),
            Some(Duration::from_secs(3))
        );
        assert_eq!(watchdog_from(Some("3000000"), Some("8"), 7), None);
        assert_eq!(watchdog_from(Some("3000000"), Some("x"), 7), None);
        assert_eq!(watchdog_from(Some("0"), None, 7), None);
        assert_eq!(watchdog_from(None, None, 7), None);
    }
}
