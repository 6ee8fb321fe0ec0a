//! Which credentials to report with, and as which Node. Pure: the host's
//! file system is read below a root passed in ([`Host`]) and the
//! environment is a function, so the order is tested on a temp dir as `/`.
//!
//! Lookup order (docs/reporting.md, "Credentials and identity"):
//!
//! 1. `--kubeconfig` / `report.kubeconfig`;
//! 2. the kubeconfig the kubelet itself is started with: `--kubeconfig` in
//!    its systemd unit and drop-ins, then in `/etc/default/kubelet` or
//!    `/etc/sysconfig/kubelet` (`KUBELET_EXTRA_ARGS`, read by the unit as an
//!    `EnvironmentFile` and expanded last on kubeadm's and the distro
//!    packages' `ExecStart`, so it wins there too);
//! 3. where distributions put it: kubeadm `/etc/kubernetes/kubelet.conf`,
//!    GKE and the EKS AMIs `/var/lib/kubelet/kubeconfig`, k3s and RKE2
//!    under `/var/lib/rancher/{k3s,rke2}/agent/kubelet.kubeconfig`;
//! 4. in-cluster (a pod's ServiceAccount);
//! 5. none: log only, and say where we looked.

use std::path::{Component, Path, PathBuf};

use serde::Serialize;
use strum::IntoStaticStr;

/// kubeadm's kubelet kubeconfig: with it nodeproof acts as
/// `system:node:<name>` under the Node authorizer and NodeRestriction.
pub const KUBELET_KUBECONFIG: &str = "/etc/kubernetes/kubelet.conf";

/// Where in-cluster credentials live (a ServiceAccount token).
pub const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// Where a distribution keeps the kubelet's kubeconfig when no flag says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, IntoStaticStr)]
#[serde(rename_all = "kebab-case")]
pub enum WellKnown {
    /// kubeadm writes `/etc/kubernetes/kubelet.conf` after TLS bootstrap.
    #[strum(serialize = "kubeadm")]
    Kubeadm,
    /// GKE and the EKS-optimized AMIs: `/var/lib/kubelet/kubeconfig`.
    #[strum(serialize = "GKE/EKS")]
    VarLibKubelet,
    /// k3s agents: `/var/lib/rancher/k3s/agent/kubelet.kubeconfig`.
    #[strum(serialize = "k3s")]
    K3s,
    /// RKE2 agents: `/var/lib/rancher/rke2/agent/kubelet.kubeconfig`.
    #[strum(serialize = "RKE2")]
    Rke2,
}

impl WellKnown {
    /// In lookup order.
    pub const ALL: [WellKnown; 4] = [
        WellKnown::Kubeadm,
        WellKnown::VarLibKubelet,
        WellKnown::K3s,
        WellKnown::Rke2,
    ];

    pub fn path(self) -> &'static Path {
        Path::new(match self {
            WellKnown::Kubeadm => KUBELET_KUBECONFIG,
            WellKnown::VarLibKubelet => "/var/lib/kubelet/kubeconfig",
            WellKnown::K3s => "/var/lib/rancher/k3s/agent/kubelet.kubeconfig",
            WellKnown::Rke2 => "/var/lib/rancher/rke2/agent/kubelet.kubeconfig",
        })
    }

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Where the kubelet's kubeconfig was found (host paths, as on the node).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "found", rename_all = "kebab-case")]
pub enum KubeletFound {
    /// `--kubeconfig` on the kubelet's command line, in this unit file or drop-in.
    SystemdUnit { unit: PathBuf },
    /// `--kubeconfig` in an environment file the kubelet's unit reads.
    EnvironmentFile { file: PathBuf },
    /// A distribution's usual place.
    WellKnown { distribution: WellKnown },
}

impl KubeletFound {
    pub fn describe(&self) -> String {
        match self {
            KubeletFound::SystemdUnit { unit } => {
                format!("--kubeconfig of the kubelet in {}", unit.display())
            }
            KubeletFound::EnvironmentFile { file } => {
                format!("--kubeconfig of the kubelet in {}", file.display())
            }
            KubeletFound::WellKnown { distribution } => {
                format!("{}'s place", distribution.as_str())
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `--kubeconfig` or the config file's `report.kubeconfig`.
    Kubeconfig(PathBuf),
    /// The same with `--context` (`report.context`): that context of it.
    KubeconfigContext { path: PathBuf, context: String },
    /// The kubelet's kubeconfig (node identity), as readable here (below the host root).
    Kubelet(PathBuf),
    /// A pod's ServiceAccount.
    InCluster,
    /// Nothing found: log what would be written instead.
    None,
}

impl Source {
    pub fn describe(&self) -> String {
        match self {
            Source::Kubeconfig(p) => format!("kubeconfig {}", p.display()),
            Source::KubeconfigContext { path, context } => {
                format!("context {context:?} of kubeconfig {}", path.display())
            }
            Source::Kubelet(p) => format!("the kubelet's kubeconfig {}", p.display()),
            Source::InCluster => "in-cluster ServiceAccount".into(),
            Source::None => "no credentials (log only)".into(),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Source::Kubeconfig(_) | Source::KubeconfigContext { .. } => "kubeconfig",
            Source::Kubelet(_) => "kubelet",
            Source::InCluster => "in-cluster",
            Source::None => "none",
        }
    }
}

/// The host's file system, seen below `root` (`/`, or where a pod mounts
/// the host, or a test's temp dir).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    root: PathBuf,
}

impl Host {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Host { root: root.into() }
    }

    /// This machine's `/`.
    pub fn real() -> Self {
        Host::new("/")
    }

    /// Where the host path `p` is readable from here. A relative `p` is
    /// taken from `/` (the kubelet's working directory under systemd);
    /// `..` cannot climb above the root.
    pub fn path(&self, p: &Path) -> PathBuf {
        let mut out = self.root.clone();
        for c in p.components() {
            match c {
                Component::Normal(n) => out.push(n),
                Component::ParentDir if out != self.root => {
                    out.pop();
                }
                _ => {}
            }
        }
        out
    }

    pub fn read(&self, p: &Path) -> std::io::Result<Vec<u8>> {
        std::fs::read(self.path(p))
    }

    fn read_text(&self, p: &Path) -> Option<String> {
        String::from_utf8(self.read(p).ok()?).ok()
    }

    fn readable(&self, p: &Path) -> bool {
        std::fs::File::open(self.path(p)).is_ok()
    }

    /// The file names in host directory `dir` (none if unreadable).
    fn names(&self, dir: &Path) -> Vec<String> {
        std::fs::read_dir(self.path(dir))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect()
    }
}

/// A place the lookup tried and passed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Looked {
    /// The kubelet's `--kubeconfig` names a file that cannot be read.
    UnreadableFlag { path: PathBuf, found: KubeletFound },
    /// A distribution's place, missing or unreadable.
    WellKnown(WellKnown),
    /// No `KUBERNETES_SERVICE_HOST`, or no readable ServiceAccount token.
    InCluster,
}

impl Looked {
    pub fn describe(&self) -> String {
        match self {
            Looked::UnreadableFlag { path, found } => {
                format!("{} ({}, unreadable)", path.display(), found.describe())
            }
            Looked::WellKnown(place) => format!("{} ({})", place.path().display(), place.as_str()),
            Looked::InCluster => {
                format!("in-cluster (KUBERNETES_SERVICE_HOST and {SERVICE_ACCOUNT_TOKEN})")
            }
        }
    }
}

/// What the lookup chose, how, and every place it tried before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    pub source: Source,
    /// For [`Source::Kubelet`]: where it was found.
    pub found: Option<KubeletFound>,
    /// The host path of the kubelet's kubeconfig (for [`Source::Kubelet`]).
    pub host_path: Option<PathBuf>,
    /// Places tried and passed over (missing or unreadable), in order.
    pub looked: Vec<Looked>,
}

impl Lookup {
    /// One line for stderr and the journal.
    pub fn describe(&self) -> String {
        match (&self.source, &self.found, &self.host_path) {
            (Source::Kubelet(_), Some(found), Some(host)) => format!(
                "the kubelet's kubeconfig {} ({})",
                host.display(),
                found.describe()
            ),
            (Source::None, _, _) => format!(
                "no credentials (log only); looked at {}",
                self.looked
                    .iter()
                    .map(Looked::describe)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            (source, _, _) => source.describe(),
        }
    }

    /// The `credentials` field of `nodeproof check -o json`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "source": self.source.kind(),
            "description": self.describe(),
        });
        match &self.source {
            Source::Kubeconfig(p) => v["path"] = p.display().to_string().into(),
            Source::KubeconfigContext { path, context } => {
                v["path"] = path.display().to_string().into();
                v["context"] = context.clone().into();
            }
            Source::Kubelet(_) => {
                if let Some(p) = &self.host_path {
                    v["path"] = p.display().to_string().into();
                }
                let found = self.found.as_ref().map(serde_json::to_value);
                if let (Some(Ok(serde_json::Value::Object(m))), Some(o)) =
                    (found, v.as_object_mut())
                {
                    o.extend(m);
                }
            }
            Source::InCluster | Source::None => {}
        }
        v["looked"] = self.looked.iter().map(Looked::describe).collect();
        v
    }
}

/// The kubelet's unit file, in systemd's precedence (first found wins).
const KUBELET_UNITS: [&str; 3] = [
    "/etc/systemd/system/kubelet.service",
    "/usr/lib/systemd/system/kubelet.service",
    "/lib/systemd/system/kubelet.service",
];

/// Drop-in directories, in systemd's precedence: a drop-in in an earlier
/// one masks a same-named one in a later one (systemd.unit(5)).
const KUBELET_DROP_IN_DIRS: [&str; 4] = [
    "/etc/systemd/system/kubelet.service.d",
    "/run/systemd/system/kubelet.service.d",
    "/usr/lib/systemd/system/kubelet.service.d",
    "/lib/systemd/system/kubelet.service.d",
];

/// The environment files kubeadm's drop-in and the distro packages read
/// (`EnvironmentFile=-/etc/default/kubelet` on deb, `/etc/sysconfig/kubelet` on rpm).
const KUBELET_ENV_FILES: [&str; 2] = ["/etc/default/kubelet", "/etc/sysconfig/kubelet"];

/// The last `--kubeconfig` value in a unit or environment file: on
/// `ExecStart=` lines, in `Environment="KUBELET_KUBECONFIG_ARGS=--kubeconfig=..."`
/// assignments and in `KUBELET_EXTRA_ARGS=...` (the kubelet's flag parser,
/// spf13/pflag, keeps the last of a repeated flag). Variables are not
/// expanded: every assignment is searched, since kubeadm's `ExecStart` puts
/// them all on the command line. `--bootstrap-kubeconfig` is another flag.
pub fn kubeconfig_flag(text: &str) -> Option<String> {
    // Continuation lines (`\` at the end) are one line to systemd.
    let joined = text.replace("\\\n", " ");
    let mut found = None;
    for line in joined.lines() {
        let line = line.trim_start();
        if line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let mut tokens = line
            .split_whitespace()
            .map(|t| t.trim_matches(|c| c == '"' || c == '\''))
            .map(strip_assignments);
        while let Some(t) = tokens.next() {
            if let Some(v) = t.strip_prefix("--kubeconfig=") {
                found = Some(v.to_string());
            } else if t == "--kubeconfig" {
                if let Some(v) = tokens.next() {
                    found = Some(v.to_string());
                }
            }
        }
    }
    found.filter(|v| !v.is_empty())
}

/// `ExecStart=--x`, `Environment=A=--x`, `A=--x` → `--x` (a flag never starts
/// with a key: strip `KEY=` prefixes until it is a flag or has none).
fn strip_assignments(mut t: &str) -> &str {
    while !t.starts_with('-') {
        match t.split_once('=') {
            Some((_, rest)) => t = rest.trim_start_matches(['"', '\'']),
            None => break,
        }
    }
    t
}

/// The kubelet's `--kubeconfig` as its unit files say: (value, where).
fn kubelet_flag(host: &Host, looked: &mut Vec<Looked>) -> Option<(PathBuf, KubeletFound)> {
    let mut files: Vec<(PathBuf, bool)> = Vec::new();
    if let Some(unit) = KUBELET_UNITS
        .iter()
        .map(Path::new)
        .find(|p| host.readable(p))
    {
        files.push((unit.to_path_buf(), true));
    }
    // Drop-ins apply in file-name order across all directories.
    let mut drop_ins: std::collections::BTreeMap<String, PathBuf> = Default::default();
    for dir in KUBELET_DROP_IN_DIRS {
        for name in host.names(Path::new(dir)) {
            if name.ends_with(".conf") {
                drop_ins
                    .entry(name.clone())
                    .or_insert_with(|| Path::new(dir).join(name));
            }
        }
    }
    files.extend(drop_ins.into_values().map(|p| (p, true)));
    files.extend(KUBELET_ENV_FILES.iter().map(|f| (PathBuf::from(f), false)));
    let mut last = None;
    for (file, is_unit) in files {
        let Some(text) = host.read_text(&file) else {
            continue;
        };
        if let Some(value) = kubeconfig_flag(&text) {
            let found = if is_unit {
                KubeletFound::SystemdUnit { unit: file }
            } else {
                KubeletFound::EnvironmentFile { file }
            };
            last = Some((Path::new("/").join(value), found));
        }
    }
    let (path, found) = last?;
    if host.readable(&path) {
        Some((path, found))
    } else {
        looked.push(Looked::UnreadableFlag { path, found });
        None
    }
}

/// The lookup order, on `host` and `env`. In-cluster credentials are the
/// pod's own, so they are read from this machine's `/`, not the host's
/// (`in_cluster_token_readable`).
pub fn lookup(
    explicit: Option<&Path>,
    host: &Host,
    env: impl Fn(&str) -> Option<String>,
    in_cluster_token_readable: impl Fn() -> bool,
) -> Lookup {
    let mut looked = Vec::new();
    let found = |source, found, host_path, looked| Lookup {
        source,
        found,
        host_path,
        looked,
    };
    if let Some(path) = explicit {
        // Explicit wins even if unreadable: loading it then says why.
        return found(Source::Kubeconfig(path.to_path_buf()), None, None, looked);
    }
    if let Some((path, how)) = kubelet_flag(host, &mut looked) {
        return found(
            Source::Kubelet(host.path(&path)),
            Some(how),
            Some(path),
            looked,
        );
    }
    for place in WellKnown::ALL {
        let path = place.path();
        if host.readable(path) {
            let how = KubeletFound::WellKnown {
                distribution: place,
            };
            return found(
                Source::Kubelet(host.path(path)),
                Some(how),
                Some(path.to_path_buf()),
                looked,
            );
        }
        looked.push(Looked::WellKnown(place));
    }
    if env("KUBERNETES_SERVICE_HOST").is_some() && in_cluster_token_readable() {
        return found(Source::InCluster, None, None, looked);
    }
    looked.push(Looked::InCluster);
    found(Source::None, None, None, looked)
}

/// `lookup` against this machine, the host at `host_root` (default `/`).
pub fn lookup_here(explicit: Option<&Path>, host_root: Option<&Path>) -> Lookup {
    let host = host_root.map_or_else(Host::real, Host::new);
    lookup(
        explicit,
        &host,
        |k| std::env::var(k).ok(),
        || std::fs::File::open(SERVICE_ACCOUNT_TOKEN).is_ok(),
    )
}

/// The order without the host scan: explicit, kubeadm's path if
/// `readable`, in-cluster, none. Kept for callers that hold a kubeconfig
/// (the tests' clients); the agent uses [`lookup`].
pub fn choose(
    explicit: Option<&Path>,
    readable: impl Fn(&Path) -> bool,
    env: impl Fn(&str) -> Option<String>,
) -> Source {
    if let Some(path) = explicit {
        return Source::Kubeconfig(path.to_path_buf());
    }
    let kubelet = Path::new(KUBELET_KUBECONFIG);
    if readable(kubelet) {
        return Source::Kubelet(kubelet.to_path_buf());
    }
    if env("KUBERNETES_SERVICE_HOST").is_some() && readable(Path::new(SERVICE_ACCOUNT_TOKEN)) {
        return Source::InCluster;
    }
    Source::None
}

/// `lookup_here`'s source on this machine's `/`.
pub fn choose_here(explicit: Option<&Path>) -> Source {
    lookup_here(explicit, None).source
}

/// Where the Node's name came from, for the message when the credential disagrees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, IntoStaticStr)]
pub enum NameFrom {
    /// `--node-name` or `report.node-name`.
    #[strum(serialize = "--node-name/report.node-name")]
    Configured,
    /// `NODE_NAME` (a DaemonSet's downward API).
    #[strum(serialize = "NODE_NAME")]
    Env,
    /// The client certificate's `system:node:<name>`.
    #[strum(serialize = "the credential")]
    Credential,
    /// `/proc/sys/kernel/hostname`, lowercased.
    #[strum(serialize = "the hostname")]
    Hostname,
}

impl NameFrom {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// The Node to report on: configured, then `NODE_NAME`, then the hostname
/// (lowercased, as the kubelet registers it).
pub fn node_name(
    configured: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
    hostname: impl FnOnce() -> Option<String>,
) -> Option<String> {
    node_name_from(configured, env, None, hostname).map(|(n, _)| n)
}

/// `node_name` with the credential's own Node (`system:node:<name>`) between
/// `NODE_NAME` and the hostname: the kubelet registered under that name
/// (`--hostname-override`, cloud providers' names), so it beats the
/// hostname; a configured name is kept, and checked against it by the caller.
pub fn node_name_from(
    configured: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
    credential: Option<&str>,
    hostname: impl FnOnce() -> Option<String>,
) -> Option<(String, NameFrom)> {
    let usable = |n: &String| !n.trim().is_empty();
    configured
        .map(str::to_string)
        .filter(usable)
        .map(|n| (n, NameFrom::Configured))
        .or_else(|| env("NODE_NAME").filter(usable).map(|n| (n, NameFrom::Env)))
        .or_else(|| credential.map(|n| (n.to_string(), NameFrom::Credential)))
        .or_else(|| {
            hostname()
                .map(|h| h.trim().to_lowercase())
                .filter(usable)
                .map(|h| (h, NameFrom::Hostname))
        })
}

/// `node_name` against this machine.
pub fn node_name_here(configured: Option<&str>) -> Option<String> {
    node_name_from_here(configured, None).map(|(n, _)| n)
}

/// `node_name_from` against this machine.
pub fn node_name_from_here(
    configured: Option<&str>,
    credential: Option<&str>,
) -> Option<(String, NameFrom)> {
    node_name_from(
        configured,
        |k| std::env::var(k).ok(),
        credential,
        || std::fs::read_to_string("/proc/sys/kernel/hostname").ok(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = "apiVersion: v1\nkind: Config\nclusters: []\nusers: []\ncontexts: []\n";

    fn host() -> (tempfile::TempDir, Host) {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new(dir.path());
        (dir, host)
    }

    fn put(host: &Host, path: &str, text: &str) {
        let p = host.path(Path::new(path));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn on(host: &Host) -> Lookup {
        lookup(None, host, no_env, || false)
    }

    /// (host path, how) of a kubelet lookup.
    fn kubelet(l: &Lookup) -> (PathBuf, KubeletFound) {
        assert!(matches!(l.source, Source::Kubelet(_)), "{l:?}");
        (l.host_path.clone().unwrap(), l.found.clone().unwrap())
    }

    #[test]
    fn each_distributions_place_is_found_with_a_fixture_kubeconfig() {
        for place in WellKnown::ALL {
            let (_d, host) = host();
            put(&host, place.path().to_str().unwrap(), FIXTURE);
            let l = on(&host);
            assert_eq!(
                kubelet(&l),
                (
                    place.path().to_path_buf(),
                    KubeletFound::WellKnown {
                        distribution: place
                    }
                )
            );
            // Readable from here below the root, and the real file.
            assert_eq!(l.source, Source::Kubelet(host.path(place.path())));
            assert_eq!(
                std::fs::read_to_string(host.path(place.path())).unwrap(),
                FIXTURE
            );
        }
    }

    #[test]
    fn well_known_places_in_order() {
        let (_d, host) = host();
        put(
            &host,
            "/var/lib/rancher/rke2/agent/kubelet.kubeconfig",
            FIXTURE,
        );
        put(&host, "/var/lib/kubelet/kubeconfig", FIXTURE);
        let l = on(&host);
        assert_eq!(kubelet(&l).0, Path::new("/var/lib/kubelet/kubeconfig"));
        // kubeadm's was looked at first and was not there.
        assert_eq!(l.looked, [Looked::WellKnown(WellKnown::Kubeadm)]);
    }

    #[test]
    fn kubeadm_drop_in_environment_line() {
        let (_d, host) = host();
        // kubeadm's 10-kubeadm.conf, as its deb/rpm packages install it.
        put(
            &host,
            "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf",
            "[Service]\nEnvironment=\"KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/custom.conf\"\nEnvironment=\"KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml\"\nEnvironmentFile=-/etc/default/kubelet\nExecStart=\nExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_EXTRA_ARGS\n",
        );
        put(&host, "/etc/kubernetes/custom.conf", FIXTURE);
        put(&host, KUBELET_KUBECONFIG, FIXTURE);
        let (path, how) = kubelet(&on(&host));
        assert_eq!(path, Path::new("/etc/kubernetes/custom.conf"));
        assert_eq!(
            how,
            KubeletFound::SystemdUnit {
                unit: "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf".into()
            }
        );
    }

    #[test]
    fn exec_start_in_the_unit_with_continuations_and_a_masking_drop_in() {
        let (_d, host) = host();
        put(
            &host,
            "/etc/systemd/system/kubelet.service",
            "[Service]\nExecStart=/usr/local/bin/kubelet \\\n  --config=/etc/kubelet.yaml \\\n  --kubeconfig /var/lib/kubelet/unit.kubeconfig\n",
        );
        // Same name in /etc masks /usr/lib's: its flag is not used.
        put(
            &host,
            "/usr/lib/systemd/system/kubelet.service.d/20-x.conf",
            "[Service]\nExecStart=/usr/bin/kubelet --kubeconfig=/masked\n",
        );
        put(
            &host,
            "/etc/systemd/system/kubelet.service.d/20-x.conf",
            "[Service]\n# --kubeconfig=/commented\nEnvironment=OTHER=1\n",
        );
        put(&host, "/var/lib/kubelet/unit.kubeconfig", FIXTURE);
        put(&host, "/masked", FIXTURE);
        let (path, how) = kubelet(&on(&host));
        assert_eq!(path, Path::new("/var/lib/kubelet/unit.kubeconfig"));
        assert_eq!(
            how,
            KubeletFound::SystemdUnit {
                unit: "/etc/systemd/system/kubelet.service".into()
            }
        );
    }

    #[test]
    fn extra_args_in_etc_default_or_sysconfig_come_last_and_win() {
        for file in KUBELET_ENV_FILES {
            let (_d, host) = host();
            put(
                &host,
                "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf",
                "[Service]\nEnvironment=\"KUBELET_KUBECONFIG_ARGS=--kubeconfig=/etc/kubernetes/kubelet.conf\"\n",
            );
            put(&host, file, "KUBELET_EXTRA_ARGS=--node-ip=10.0.0.5 --kubeconfig=/etc/kubelet/extra.kubeconfig\n");
            put(&host, "/etc/kubelet/extra.kubeconfig", FIXTURE);
            put(&host, KUBELET_KUBECONFIG, FIXTURE);
            let (path, how) = kubelet(&on(&host));
            assert_eq!(path, Path::new("/etc/kubelet/extra.kubeconfig"));
            assert_eq!(how, KubeletFound::EnvironmentFile { file: file.into() });
        }
    }

    #[test]
    fn a_flag_naming_an_unreadable_file_is_said_and_the_places_tried() {
        let (_d, host) = host();
        put(
            &host,
            "/etc/default/kubelet",
            "KUBELET_EXTRA_ARGS=\"--kubeconfig=/gone.kubeconfig\"\n",
        );
        put(
            &host,
            "/var/lib/rancher/k3s/agent/kubelet.kubeconfig",
            FIXTURE,
        );
        let l = on(&host);
        assert_eq!(
            kubelet(&l).1,
            KubeletFound::WellKnown {
                distribution: WellKnown::K3s
            }
        );
        assert_eq!(
            l.looked[0].describe(),
            "/gone.kubeconfig (--kubeconfig of the kubelet in /etc/default/kubelet, unreadable)"
        );
    }

    #[test]
    fn flag_parsing() {
        assert_eq!(
            kubeconfig_flag("ExecStart=/k --kubeconfig=/a"),
            Some("/a".into())
        );
        assert_eq!(
            kubeconfig_flag("ExecStart=/k --bootstrap-kubeconfig=/b"),
            None
        );
        assert_eq!(
            kubeconfig_flag("ExecStart=/k --kubeconfig=/a --kubeconfig=/b"),
            Some("/b".into())
        );
        assert_eq!(
            kubeconfig_flag("Environment=KUBELET_KUBECONFIG_ARGS=--kubeconfig=/c"),
            Some("/c".into())
        );
        assert_eq!(
            kubeconfig_flag("KUBELET_EXTRA_ARGS='--kubeconfig /d'"),
            Some("/d".into())
        );
        assert_eq!(kubeconfig_flag("; ExecStart=/k --kubeconfig=/e"), None);
    }

    #[test]
    fn host_paths_stay_below_the_root() {
        let host = Host::new("/host");
        assert_eq!(host.path(Path::new("/etc/x")), Path::new("/host/etc/x"));
        assert_eq!(
            host.path(Path::new("../../etc/x")),
            Path::new("/host/etc/x")
        );
        assert_eq!(Host::real().path(Path::new("/etc/x")), Path::new("/etc/x"));
    }

    #[test]
    fn lookup_order() {
        let (_d, host) = host();
        let in_cluster = |k: &str| (k == "KUBERNETES_SERVICE_HOST").then(|| "10.0.0.1".into());
        let empty = on(&host);
        assert_eq!(empty.source, Source::None);
        assert_eq!(
            empty.looked.iter().map(Looked::describe).collect::<Vec<_>>(),
            [
                "/etc/kubernetes/kubelet.conf (kubeadm)",
                "/var/lib/kubelet/kubeconfig (GKE/EKS)",
                "/var/lib/rancher/k3s/agent/kubelet.kubeconfig (k3s)",
                "/var/lib/rancher/rke2/agent/kubelet.kubeconfig (RKE2)",
                "in-cluster (KUBERNETES_SERVICE_HOST and /var/run/secrets/kubernetes.io/serviceaccount/token)",
            ]
        );
        assert!(empty.describe().starts_with(
            "no credentials (log only); looked at /etc/kubernetes/kubelet.conf (kubeadm), "
        ));
        assert_eq!(
            lookup(None, &host, in_cluster, || true).source,
            Source::InCluster
        );
        assert_eq!(
            lookup(None, &host, in_cluster, || false).source,
            Source::None
        );
        assert_eq!(lookup(None, &host, no_env, || true).source, Source::None);
        put(&host, KUBELET_KUBECONFIG, FIXTURE);
        assert!(matches!(
            lookup(None, &host, in_cluster, || true).source,
            Source::Kubelet(_)
        ));
        assert_eq!(
            lookup(Some(Path::new("/k")), &host, in_cluster, || true).source,
            Source::Kubeconfig("/k".into())
        );
    }

    #[test]
    fn json_names_the_place() {
        let (_d, host) = host();
        put(
            &host,
            "/var/lib/rancher/k3s/agent/kubelet.kubeconfig",
            FIXTURE,
        );
        let v = on(&host).to_json();
        assert_eq!(v["source"], "kubelet");
        assert_eq!(v["found"], "well-known");
        assert_eq!(v["distribution"], "k3s");
        assert_eq!(v["path"], "/var/lib/rancher/k3s/agent/kubelet.kubeconfig");
        assert_eq!(v["looked"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn node_name_order() {
        let env = |k: &str| (k == "NODE_NAME").then(|| "from-env".into());
        let host = || Some("Worker-1\n".into());
        assert_eq!(node_name(Some("cfg"), env, host).as_deref(), Some("cfg"));
        assert_eq!(node_name(None, env, host).as_deref(), Some("from-env"));
        assert_eq!(node_name(None, |_| None, host).as_deref(), Some("worker-1"));
        assert_eq!(node_name(None, |_| None, || None), None);
        assert_eq!(
            node_name_from(None, |_| None, Some("ip-10-0-0-1.ec2.internal"), host),
            Some(("ip-10-0-0-1.ec2.internal".into(), NameFrom::Credential))
        );
        assert_eq!(
            node_name_from(None, env, Some("n1"), host),
            Some(("from-env".into(), NameFrom::Env))
        );
    }
}
