//! The kubelet as this node's files show it: where kubelet.service and its
//! drop-ins live, the user it runs as, the command line systemd starts it
//! with (its `Environment=` and `EnvironmentFile=` expanded), the
//! KubeletConfiguration that command line names, and the seccomp profiles
//! local static pods name. Read for preflight's checks and for the
//! kubelet's seccompDefault; the judgement is each check's.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use nodeproof_seccomp::lint::Runtime;

/// Where kubelet.service and its drop-ins may live, in systemd's order.
pub const UNIT_DIRS: [&str; 4] = [
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
    "/run/systemd/system",
    "/etc/systemd/system",
];

/// Paths a rootless kubelet needs, with the access it needs.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The host's root the other paths are under, and that the unit's
    /// absolute paths (`EnvironmentFile=`, `--config`) are taken under.
    pub host: PathBuf,
    pub unit_dirs: Vec<PathBuf>,
    pub manifests: PathBuf,
    pub kubelet_root: PathBuf,
    pub runtime_sockets: Vec<PathBuf>,
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            host: PathBuf::from("/"),
            unit_dirs: UNIT_DIRS.iter().map(PathBuf::from).collect(),
            manifests: PathBuf::from("/etc/kubernetes/manifests"),
            kubelet_root: PathBuf::from("/var/lib/kubelet"),
            runtime_sockets: [Runtime::Containerd, Runtime::Crio]
                .iter()
                .flat_map(|r| r.sockets())
                .map(PathBuf::from)
                .collect(),
        }
    }
}

impl Layout {
    /// The default layout under `host` (a DaemonSet's host mount; `/` on
    /// the host itself).
    pub fn under(host: &Path) -> Layout {
        let d = Layout::default();
        let at = |p: &Path| host.join(p.strip_prefix("/").unwrap_or(p));
        Layout {
            host: host.to_path_buf(),
            unit_dirs: d.unit_dirs.iter().map(|p| at(p)).collect(),
            manifests: at(&d.manifests),
            kubelet_root: at(&d.kubelet_root),
            runtime_sockets: d.runtime_sockets.iter().map(|p| at(p)).collect(),
        }
    }
}

/// kubelet.service as systemd would load it: the unit file (the last
/// directory holding one wins, as `/etc` overrides `/lib`), then its
/// drop-ins in name order (a later directory's file of the same name
/// replacing an earlier one), as systemd.unit(5) orders them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unit {
    /// The files read, in order; empty: no kubelet.service here.
    pub files: Vec<PathBuf>,
    /// `User=`, the last assignment winning (`None`: root).
    pub user: Option<String>,
    /// The command line of the last `ExecStart=` (an empty one resets), its
    /// variables expanded as systemd.service(5) expands them: `$VAR` alone
    /// splits into words, `${VAR}` stays one.
    pub argv: Vec<String>,
}

impl Unit {
    /// `--name=value` or `--name value`, the last one winning, as the
    /// kubelet's flag parser (spf13/pflag) takes it; a bare boolean flag is
    /// `Some("true")`.
    pub fn flag(&self, name: &str) -> Option<String> {
        let long = format!("--{name}");
        let mut found = None;
        let mut args = self.argv.iter().skip(1).peekable();
        while let Some(a) = args.next() {
            if let Some(v) = a.strip_prefix(&format!("{long}=")) {
                found = Some(v.to_string());
            } else if a == &long {
                found = match args.peek() {
                    Some(v) if !v.starts_with('-') => args.next().cloned(),
                    _ => Some("true".into()),
                };
            }
        }
        found
    }

    /// A boolean flag as pflag reads it: present alone or `=true` is true.
    /// A bare flag followed by a word is the word only for non-booleans, so
    /// here the word is not taken.
    pub fn bool_flag(&self, name: &str) -> Option<Result<bool, String>> {
        let long = format!("--{name}");
        let mut found = None;
        for a in self.argv.iter().skip(1) {
            if a == &long {
                found = Some(Ok(true));
            } else if let Some(v) = a.strip_prefix(&format!("{long}=")) {
                found = Some(match v {
                    "true" | "1" | "t" | "T" | "TRUE" | "True" => Ok(true),
                    "false" | "0" | "f" | "F" | "FALSE" | "False" => Ok(false),
                    _ => Err(v.to_string()),
                });
            }
        }
        found
    }
}

/// Reads kubelet.service and its drop-ins under `unit_dirs`, the files
/// they name under `host`.
pub fn unit(unit_dirs: &[PathBuf], host: &Path) -> Unit {
    let main = unit_dirs
        .iter()
        .rev()
        .map(|d| d.join("kubelet.service"))
        .find(|f| f.is_file());
    let mut dropins: Vec<(String, PathBuf)> = Vec::new();
    for dir in unit_dirs {
        if let Ok(entries) = std::fs::read_dir(dir.join("kubelet.service.d")) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.ends_with(".conf") {
                    dropins.retain(|(n, _)| n != &name);
                    dropins.push((name, e.path()));
                }
            }
        }
    }
    dropins.sort();
    let files: Vec<PathBuf> = main
        .into_iter()
        .chain(dropins.into_iter().map(|(_, p)| p))
        .collect();
    let texts: Vec<(PathBuf, String)> = files
        .iter()
        .filter_map(|f| Some((f.clone(), std::fs::read_to_string(f).ok()?)))
        .collect();
    let mut parsed = service_section(texts.iter().map(|(_, t)| t.as_str()));
    let env = environment(&parsed.environment, &parsed.environment_files, host);
    parsed.user = parsed
        .user
        .filter(|u| !u.is_empty() && u != "root" && u != "0");
    Unit {
        files,
        user: parsed.user,
        argv: expand(&parsed.exec_start, &env),
    }
}

/// The `User=` the kubelet runs as (`None`: root or no unit).
pub fn kubelet_user(unit_dirs: &[PathBuf]) -> Option<String> {
    unit(unit_dirs, Path::new("/")).user
}

/// What the `[Service]` sections of a unit and its drop-ins say, in order.
#[derive(Debug, Default)]
struct Service {
    user: Option<String>,
    exec_start: String,
    environment: Vec<String>,
    environment_files: Vec<String>,
}

fn service_section<'a>(texts: impl IntoIterator<Item = &'a str>) -> Service {
    let mut s = Service::default();
    for text in texts {
        let mut in_service = false;
        // A backslash at the end of a line continues it (systemd.syntax(7)).
        let joined = text.replace("\\\n", " ");
        for line in joined.lines().map(str::trim) {
            if line.starts_with('[') {
                in_service = line == "[Service]";
                continue;
            }
            if !in_service || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let value = value.trim().to_string();
            match key.trim() {
                "User" => s.user = Some(value),
                "ExecStart" => s.exec_start = value,
                "Environment" if value.is_empty() => s.environment.clear(),
                "Environment" => s.environment.push(value),
                "EnvironmentFile" if value.is_empty() => s.environment_files.clear(),
                "EnvironmentFile" => s.environment_files.push(value),
                _ => {}
            }
        }
    }
    s
}

/// The unit's environment: `EnvironmentFile=`s first, then `Environment=`,
/// later assignments winning (systemd.exec(5) reads the files after
/// `Environment=`, so a file's value wins: done here in that order).
fn environment(assignments: &[String], files: &[String], host: &Path) -> HashMap<String, String> {
    let mut env = HashMap::new();
    for a in assignments {
        for word in words(a) {
            if let Some((k, v)) = word.split_once('=') {
                env.insert(k.to_string(), v.to_string());
            }
        }
    }
    for f in files {
        // `-` before the path: a missing file is not an error.
        let path = f.strip_prefix('-').unwrap_or(f);
        let path = host.join(Path::new(path).strip_prefix("/").unwrap_or(Path::new(path)));
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        for line in text.lines().map(str::trim) {
            if line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some((k, v)) = line.split_once('=') {
                let v = v.trim();
                let v = v
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                    .unwrap_or(v);
                env.insert(k.trim().to_string(), v.to_string());
            }
        }
    }
    env
}

/// A command line's words, double and single quotes grouping.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            (None, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// `ExecStart=`'s words with `$VAR` (a word of its own: split into words,
/// an unset one dropped) and `${VAR}` (substituted in place) expanded.
fn expand(exec_start: &str, env: &HashMap<String, String>) -> Vec<String> {
    // Prefixes such as `-` or `@` before the binary (systemd.service(5)).
    let line = exec_start.trim_start_matches(['-', '@', ':', '+', '!']);
    let mut out = Vec::new();
    for word in words(line) {
        if let Some(name) = word.strip_prefix('$').filter(|n| is_name(n)) {
            out.extend(env.get(name).map(|v| words(v)).unwrap_or_default());
            continue;
        }
        let mut s = String::new();
        let mut rest = word.as_str();
        while let Some(i) = rest.find("${") {
            s.push_str(&rest[..i]);
            match rest[i + 2..].find('}') {
                Some(j) => {
                    let name = &rest[i + 2..i + 2 + j];
                    s.push_str(env.get(name).map(String::as_str).unwrap_or(""));
                    rest = &rest[i + 3 + j..];
                }
                None => {
                    s.push_str(&rest[i..]);
                    rest = "";
                }
            }
        }
        s.push_str(rest);
        out.push(s);
    }
    out
}

fn is_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The KubeletConfiguration the kubelet reads: the `--config` file, then
/// the `--config-dir` drop-ins (`*.conf`, in name order), each as read
/// (`Err`: why it could not be). Paths are taken under `host`.
pub fn config_files(unit: &Unit, host: &Path) -> Vec<(PathBuf, Result<String, String>)> {
    let at = |p: &str| host.join(Path::new(p).strip_prefix("/").unwrap_or(Path::new(p)));
    let mut out = Vec::new();
    let read = |p: PathBuf| {
        let text = std::fs::read_to_string(&p).map_err(|e| e.to_string());
        (p, text)
    };
    if let Some(c) = unit.flag("config") {
        out.push(read(at(&c)));
    }
    if let Some(dir) = unit.flag("config-dir") {
        let mut files: Vec<PathBuf> = std::fs::read_dir(at(&dir))
            .map(|d| {
                d.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|e| e == "conf"))
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        out.extend(files.into_iter().map(read));
    }
    out
}

/// The last `User=` of a unit file's `[Service]` section (`User=` alone resets).
pub fn user_in(unit: &str) -> Option<String> {
    service_section([unit]).user
}

/// `localhostProfile:` values in local static pod manifests (a line scan:
/// the key is unambiguous and a YAML parser is not worth it for this).
pub fn static_pod_profiles(manifests: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(manifests) else {
        return out;
    };
    let mut files: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    files.sort();
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        for line in text.lines() {
            if let Some(v) = line.trim().strip_prefix("localhostProfile:") {
                let v = v.trim().trim_matches(|c| c == '"' || c == '\'');
                if !v.is_empty() {
                    out.push((f.clone(), v.to_string()));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_user_in_the_service_section_wins_and_root_is_not_rootless() {
        assert_eq!(
            user_in("[Unit]\nUser=x\n[Service]\nUser=kube\nExecStart=/k\n"),
            Some("kube".into())
        );
        assert_eq!(
            user_in("[Service]\nUser=kube\nUser=\n"),
            Some(String::new())
        );
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("lib"), dir.path().join("etc"));
        std::fs::create_dir_all(a.join("kubelet.service.d")).unwrap();
        std::fs::create_dir_all(b.join("kubelet.service.d")).unwrap();
        std::fs::write(a.join("kubelet.service"), "[Service]\nExecStart=/k\n").unwrap();
        assert_eq!(kubelet_user(&[a.clone(), b.clone()]), None);
        std::fs::write(
            a.join("kubelet.service.d/10-user.conf"),
            "[Service]\nUser=kube\n",
        )
        .unwrap();
        assert_eq!(kubelet_user(&[a.clone(), b.clone()]), Some("kube".into()));
        // Same name in a later directory replaces it.
        std::fs::write(
            b.join("kubelet.service.d/10-user.conf"),
            "[Service]\nUser=root\n",
        )
        .unwrap();
        assert_eq!(kubelet_user(&[a, b]), None);
    }

    /// kubeadm's drop-in, as kubeadm writes it: the unit's ExecStart reset,
    /// its words from `Environment=` and an optional `EnvironmentFile=`.
    #[test]
    fn a_kubeadm_unit_expands_to_the_kubelets_command_line() {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path();
        let lib = host.join("usr/lib/systemd/system");
        std::fs::create_dir_all(lib.join("kubelet.service.d")).unwrap();
        std::fs::write(
            lib.join("kubelet.service"),
            "[Service]\nExecStart=/usr/bin/kubelet\nRestart=always\n",
        )
        .unwrap();
        std::fs::write(
            lib.join("kubelet.service.d/10-kubeadm.conf"),
            "[Service]\n\
             Environment=\"KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf\"\n\
             Environment=\"KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml\"\n\
             EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env\n\
             EnvironmentFile=-/etc/default/kubelet\n\
             ExecStart=\n\
             ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS\n",
        )
        .unwrap();
        std::fs::create_dir_all(host.join("var/lib/kubelet")).unwrap();
        std::fs::write(
            host.join("var/lib/kubelet/kubeadm-flags.env"),
            "KUBELET_KUBEADM_ARGS=\"--container-runtime-endpoint=unix:///run/containerd/containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.10\"\n",
        )
        .unwrap();
        let u = unit(&[lib.clone(), host.join("etc/systemd/system")], host);
        assert_eq!(u.files.len(), 2, "{u:?}");
        assert_eq!(
            u.argv,
            [
                "/usr/bin/kubelet",
                "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
                "--kubeconfig=/etc/kubernetes/kubelet.conf",
                "--config=/var/lib/kubelet/config.yaml",
                "--container-runtime-endpoint=unix:///run/containerd/containerd.sock",
                "--pod-infra-container-image=registry.k8s.io/pause:3.10",
            ]
        );
        assert_eq!(
            u.flag("config").as_deref(),
            Some("/var/lib/kubelet/config.yaml")
        );
        assert_eq!(u.bool_flag("seccomp-default"), None);
        // /etc/default/kubelet's extra args reach the command line.
        std::fs::create_dir_all(host.join("etc/default")).unwrap();
        std::fs::write(
            host.join("etc/default/kubelet"),
            "KUBELET_EXTRA_ARGS='--seccomp-default --config-dir=/etc/kubernetes/kubelet.conf.d'\n",
        )
        .unwrap();
        let u = unit(&[lib], host);
        assert_eq!(u.bool_flag("seccomp-default"), Some(Ok(true)));
        assert_eq!(
            u.flag("config-dir").as_deref(),
            Some("/etc/kubernetes/kubelet.conf.d")
        );
    }

    #[test]
    fn flags_read_as_pflag_reads_them() {
        let u = Unit {
            argv: [
                "kubelet",
                "--config",
                "/a",
                "--seccomp-default=false",
                "--config=/b",
                "--seccomp-default=maybe",
            ]
            .map(String::from)
            .to_vec(),
            ..Unit::default()
        };
        assert_eq!(u.flag("config").as_deref(), Some("/b"));
        assert_eq!(u.bool_flag("seccomp-default"), Some(Err("maybe".into())));
        let u = Unit {
            argv: ["kubelet", "--seccomp-default=false"]
                .map(String::from)
                .to_vec(),
            ..Unit::default()
        };
        assert_eq!(u.bool_flag("seccomp-default"), Some(Ok(false)));
        assert_eq!(words("a 'b c' \"\" d"), ["a", "b c", "", "d"]);
    }
}
