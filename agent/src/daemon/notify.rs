//! The systemd edge: `sd_notify(3)` messages (READY=1, STATUS=, WATCHDOG=1,
//! STOPPING=1, EXTEND_TIMEOUT_USEC=) as plain datagrams to `$NOTIFY_SOCKET`.
//! No libsystemd: the protocol is one `sendto` of `KEY=VALUE` lines.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::PathBuf;
use std::time::Duration;

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
    fn notify(&self, message: &str) -> Result<(), NotifyError>;
}

/// Not run by a service manager: nothing to tell.
pub struct NoNotify;

impl Notifier for NoNotify {
    fn notify(&self, _message: &str) -> Result<(), NotifyError> {
        Ok(())
    }
}

/// `sd_notify` over `$NOTIFY_SOCKET`.
pub struct SdNotify {
    socket: UnixDatagram,
    addr: SocketAddr,
}

impl SdNotify {
    /// From `$NOTIFY_SOCKET`; `None` when it is unset (not started by systemd
    /// or not `Type=notify`).
    pub fn from_env() -> Result<Option<SdNotify>, NotifyError> {
        match std::env::var("NOTIFY_SOCKET") {
            Ok(value) if !value.is_empty() => SdNotify::new(&value).map(Some),
            _ => Ok(None),
        }
    }

    /// `value` as systemd writes it: an absolute path, or `@name` for the
    /// abstract namespace.
    pub fn new(value: &str) -> Result<SdNotify, NotifyError> {
        let addr = if let Some(name) = value.strip_prefix('@') {
            SocketAddr::from_abstract_name(name.as_bytes())
        } else if value.starts_with('/') {
            SocketAddr::from_pathname(PathBuf::from(value))
        } else {
            return Err(NotifyError::BadSocket {
                value: value.to_string(),
            });
        }
        .map_err(|source| NotifyError::Address {
            value: value.to_string(),
            source,
        })?;
        let socket = UnixDatagram::unbound().map_err(NotifyError::Socket)?;
        Ok(SdNotify { socket, addr })
    }
}

impl Notifier for SdNotify {
    fn notify(&self, message: &str) -> Result<(), NotifyError> {
        self.socket
            .send_to_addr(message.as_bytes(), &self.addr)
            .map(|_| ())
            .map_err(|source| NotifyError::Send {
                message: message.to_string(),
                source,
            })
    }
}

/// The watchdog period systemd expects pings within (`WATCHDOG_USEC`), when
/// it is meant for this process (`WATCHDOG_PID` absent or ours).
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

/// `STATUS=` takes one line: newlines would end the field early.
pub fn status_message(summary: &str) -> String {
    format!("STATUS={}", summary.replace('\n', " "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recv(sock: &UnixDatagram) -> String {
        let mut buf = [0u8; 512];
        let n = sock.recv(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn messages_reach_a_path_socket_the_test_binds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        let n = SdNotify::new(path.to_str().unwrap()).unwrap();
        n.notify("READY=1").unwrap();
        n.notify(&status_message("profiles 3 ok\nsecond line"))
            .unwrap();
        n.notify("WATCHDOG=1").unwrap();
        assert_eq!(recv(&listener), "READY=1");
        assert_eq!(recv(&listener), "STATUS=profiles 3 ok second line");
        assert_eq!(recv(&listener), "WATCHDOG=1");
    }

    #[test]
    fn abstract_names_start_with_at() {
        let name = format!("nodeproof-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixDatagram::bind_addr(&addr).unwrap();
        let n = SdNotify::new(&format!("@{name}")).unwrap();
        n.notify("STOPPING=1").unwrap();
        assert_eq!(recv(&listener), "STOPPING=1");
    }

    #[test]
    fn relative_socket_names_are_refused_and_a_missing_listener_is_an_error() {
        assert!(matches!(
            SdNotify::new("relative/path"),
            Err(NotifyError::BadSocket { .. })
        ));
        let dir = tempfile::tempdir().unwrap();
        let n = SdNotify::new(dir.path().join("absent").to_str().unwrap()).unwrap();
        assert!(matches!(n.notify("READY=1"), Err(NotifyError::Send { .. })));
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
        assert_eq!(watchdog_from(Some("0"), None, 7), None);
        assert_eq!(watchdog_from(None, None, 7), None);
    }
}
