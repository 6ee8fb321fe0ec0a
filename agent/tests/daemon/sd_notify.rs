//! `daemon::notify` through `$NOTIFY_SOCKET`, which the sd-notify crate
//! reads itself at each send: one test, run alone in a process of its own
//! (this test binary again, see [`CHILD`]), so that no other thread reads
//! the environment while it is changed (as the crate's own tests do). It
//! also pins where the crate differs from libsystemd, the reasons
//! `daemon::notify` keeps code of its own.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::process::Command;
use std::time::Duration;

use nodeproof::daemon::notify::{
    status_line, watchdog_from_env, Notifier, NotifyError, NotifyState, SdNotify,
};

fn recv(sock: &UnixDatagram) -> String {
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 512];
    let n = sock.recv(&mut buf).unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Set in the child that runs [`notify_socket_from_the_environment`]. The
/// test changes the process's environment: among the other tests of the
/// binary, their threads would read it as it changes (`setenv` under a
/// `getenv` is undefined behaviour in glibc) and the agents they start
/// would inherit it (`NOTIFY_SOCKET=relative/path` makes `nodeproof run`
/// exit 1 at READY=1). So the test starts this binary again, running only
/// itself, and passes when that child does.
const CHILD: &str = "NODEPROOF_SD_NOTIFY_CHILD";

#[test]
fn notify_socket_from_the_environment() {
    if std::env::var_os(CHILD).is_none() {
        let name = "sd_notify::notify_socket_from_the_environment";
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--test-threads=1", "--nocapture"])
            .env(CHILD, "1")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID")
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        eprint!("{stderr}");
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "the child running {name}: {}\n{stdout}",
            out.status
        );
        return;
    }
    // A path socket the test binds: the crate delivers there.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify");
    let listener = UnixDatagram::bind(&path).unwrap();
    std::env::set_var("NOTIFY_SOCKET", &path);
    let n = SdNotify::from_env().unwrap().expect("NOTIFY_SOCKET is set");
    let line = status_line("profiles 3 ok\nsecond line");
    n.notify(&[NotifyState::Ready, NotifyState::Status(&line)])
        .unwrap();
    n.notify(&[NotifyState::Watchdog]).unwrap();
    n.notify(&[NotifyState::ExtendTimeoutUsec(10_000_000)])
        .unwrap();
    assert_eq!(
        recv(&listener),
        "READY=1\nSTATUS=profiles 3 ok second line\n"
    );
    assert_eq!(recv(&listener), "WATCHDOG=1\n");
    assert_eq!(recv(&listener), "EXTEND_TIMEOUT_USEC=10000000\n");

    // Nobody listening there: an error (the daemon exits 1 on READY=1).
    std::env::set_var("NOTIFY_SOCKET", dir.path().join("absent"));
    let n = SdNotify::from_env().unwrap().unwrap();
    assert!(matches!(
        n.notify(&[NotifyState::Ready]),
        Err(NotifyError::Send { .. })
    ));

    std::env::set_var("NOTIFY_SOCKET", "relative/path");
    assert!(matches!(
        SdNotify::from_env(),
        Err(NotifyError::BadSocket { .. })
    ));
    std::env::remove_var("NOTIFY_SOCKET");
    assert!(SdNotify::from_env().unwrap().is_none());

    // An abstract name: the crate hands `@name` to UnixDatagram::connect
    // as a path and fails with ENOENT although a listener is bound to the
    // name; SdNotify sends there itself. If the crate starts reaching it,
    // this fails: drop the Abstract target then.
    let name = format!("nodeproof-sd-notify-test-{}", std::process::id());
    let abstract_listener =
        UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
    std::env::set_var("NOTIFY_SOCKET", format!("@{name}"));
    let crate_error = sd_notify::notify(&[NotifyState::Stopping]).unwrap_err();
    eprintln!("sd-notify 0.5.0 to @{name}: {crate_error}");
    assert_eq!(crate_error.raw_os_error(), Some(libc::ENOENT));
    let n = SdNotify::from_env().unwrap().unwrap();
    n.notify(&[NotifyState::Stopping]).unwrap();
    assert_eq!(recv(&abstract_listener), "STOPPING=1\n");
    std::env::remove_var("NOTIFY_SOCKET");

    // WATCHDOG_USEC=0 and an unparsable WATCHDOG_PID: libsystemd's
    // sd_watchdog_enabled refuses both; the crate takes them (a zero period
    // would spin the main loop), so daemon::notify parses them itself.
    std::env::set_var("WATCHDOG_USEC", "0");
    assert_eq!(sd_notify::watchdog_enabled(), Some(Duration::ZERO));
    assert_eq!(watchdog_from_env(), None);
    std::env::set_var("WATCHDOG_USEC", "2000000");
    std::env::set_var("WATCHDOG_PID", "not-a-pid");
    assert_eq!(sd_notify::watchdog_enabled(), Some(Duration::from_secs(2)));
    assert_eq!(watchdog_from_env(), None);
    std::env::set_var("WATCHDOG_PID", std::process::id().to_string());
    assert_eq!(watchdog_from_env(), Some(Duration::from_secs(2)));
    std::env::remove_var("WATCHDOG_USEC");
    std::env::remove_var("WATCHDOG_PID");
}
