//! The real `nodeproof run` as a child process, for end-to-end tests: a
//! config, a free port, plain HTTP GETs of its endpoints, SIGTERM on drop.
#![allow(dead_code)] // each test crate uses part of it

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` on the agent's listener: (status, body). `Connection: close`:
/// the server keeps connections alive otherwise, and the body is read to EOF.
pub fn get(port: u16, path: &str) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    // A connection reset while the agent starts (or stops) is no answer,
    // like a refused connect: code 0, and the callers poll again.
    let mut out = String::new();
    let asked = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    if let Err(e) = asked.and_then(|()| s.read_to_string(&mut out).map(drop)) {
        return (0, e.to_string());
    }
    let code = out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (code, body)
}

/// A running agent; stopped (SIGTERM, then waited for) on drop.
pub struct Agent {
    pub child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Agent {
    /// Starts `nodeproof run` with `config_toml` plus a `[daemon]` listen
    /// address of its own (added to the caller's `[daemon]` table if it has
    /// one); its log goes to `dir/agent.log`.
    pub fn start(dir: &Path, config_toml: &str) -> Agent {
        Agent::start_binary(Path::new(env!("CARGO_BIN_EXE_nodeproof")), dir, config_toml)
    }

    /// [`Agent::start`] with another build of nodeproof (a benchmark's "before").
    pub fn start_binary(bin: &Path, dir: &Path, config_toml: &str) -> Agent {
        let port = free_port();
        let config = dir.join("config.toml");
        // TOML allows one [daemon] table: join the caller's when it has one.
        let listen = format!("[daemon]\nlisten = \"127.0.0.1:{port}\"\n");
        let text = if config_toml.contains("[daemon]\n") {
            config_toml.replacen("[daemon]\n", &listen, 1)
        } else {
            format!("{config_toml}\n{listen}")
        };
        std::fs::write(&config, text).unwrap();
        let log = dir.join("agent.log");
        let child = Command::new(bin)
            .args(["run", "--config"])
            .arg(&config)
            .env_remove("JOURNAL_STREAM")
            .env_remove("NOTIFY_SOCKET")
            .env("NODEPROOF_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Agent { child, port, log }
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        get(self.port, path)
    }

    /// Waits for `/readyz` (the first check cycle).
    pub fn wait_ready(&mut self, within: Duration) -> Duration {
        let start = Instant::now();
        while self.get("/readyz").0 != 200 {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("agent exited ({status}): {}", self.log_text());
            }
            assert!(
                start.elapsed() < within,
                "not ready within {within:?}: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        start.elapsed()
    }

    /// Polls `f` every 20 ms until it holds; fails with `what` and the
    /// agent's log after `limit`. Returns how long it took.
    pub fn within(&self, what: &str, limit: Duration, f: impl Fn() -> bool) -> Duration {
        let start = Instant::now();
        while !f() {
            assert!(
                start.elapsed() < limit,
                "not within {limit:?}: {what}\n--- agent log ---\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        start.elapsed()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM and wait; true when it exited 0.
    pub fn stop(&mut self) -> bool {
        // SAFETY: a plain kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        self.child.wait().is_ok_and(|s| s.success())
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

/// The project's default profile: the good profile the agent tests put on a node.
pub fn good_profile() -> Vec<u8> {
    std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../profiles/runtime-default-x86_64.json"
    ))
    .unwrap()
}

/// `dir/seccomp` with a `profiles/` directory, holding `good.json` when `good`.
pub fn seccomp_root(dir: &Path, good: bool) -> PathBuf {
    let root = dir.join("seccomp");
    std::fs::create_dir_all(root.join("profiles")).unwrap();
    if good {
        std::fs::write(root.join("profiles/good.json"), good_profile()).unwrap();
    }
    root
}

/// An agent config judging `root` and reporting to `kubeconfig` as node n1:
/// no NVML library and no start spread (one agent, written at once).
pub fn reporting_config(root: &Path, kubeconfig: &Path) -> String {
    format!(
        "[seccomp]\nroot = \"{}\"\n[report]\nkubeconfig = \"{}\"\nnode-name = \"n1\"\nstart-spread-s = 0\n[gpu]\nnvml-library = \"/nonexistent/libnvidia-ml.so.1\"\n",
        root.display(),
        kubeconfig.display()
    )
}
