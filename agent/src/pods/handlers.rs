//! Which RuntimeClass handlers the container runtime on this node has:
//! containerd's `runtimes` tables (config versions 1, 2 and 3, with
//! `imports`) and CRI-O's `[crio.runtime.runtimes.<name>]` (main file plus
//! `crio.conf.d`, in order). The table walk is pure; reading is separate.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use toml::Value;

use nodeproof_seccomp::lint::Runtime;

#[derive(Debug, thiserror::Error)]
pub enum HandlersError {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not valid TOML")]
    Parse {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
}

fn table<'a>(v: &'a Value, path: &[&str]) -> Option<&'a toml::Table> {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_table)
}

/// containerd: the CRI plugin's runtimes, wherever this config version keeps them.
pub fn containerd_handlers(docs: &[Value]) -> BTreeSet<String> {
    const PLACES: &[&[&str]] = &[
        // version 3 (containerd 2.x)
        &[
            "plugins",
            "io.containerd.cri.v1.runtime",
            "containerd",
            "runtimes",
        ],
        // version 2
        &[
            "plugins",
            "io.containerd.grpc.v1.cri",
            "containerd",
            "runtimes",
        ],
        // version 1
        &["plugins", "cri", "containerd", "runtimes"],
    ];
    let mut out = BTreeSet::new();
    for doc in docs {
        for place in PLACES {
            if let Some(t) = table(doc, place) {
                out.extend(t.keys().cloned());
            }
        }
    }
    // containerd merges its file onto the built-in CRI config, which always has runc.
    out.insert("runc".into());
    out
}

/// CRI-O: every `[crio.runtime.runtimes.<name>]`, plus the default runtime.
pub fn crio_handlers(docs: &[Value]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut default = None;
    for doc in docs {
        if let Some(t) = table(doc, &["crio", "runtime", "runtimes"]) {
            out.extend(t.keys().cloned());
        }
        if let Some(d) = table(doc, &["crio", "runtime"])
            .and_then(|t| t.get("default_runtime"))
            .and_then(Value::as_str)
        {
            default = Some(d.to_string());
        }
    }
    // CRI-O's own default since 1.31 is crun; older releases used runc.
    out.insert(default.unwrap_or_else(|| "crun".into()));
    out
}

fn parse(path: &Path) -> Result<Option<Value>, HandlersError> {
    match std::fs::read_to_string(path) {
        Ok(s) => toml::from_str(&s)
            .map(Some)
            .map_err(|source| HandlersError::Parse {
                path: path.into(),
                source,
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(HandlersError::Read {
            path: path.into(),
            source,
        }),
    }
}

/// `dir/*.<ext>` sorted, or the single path `p` (containerd imports may be globs).
fn expand(p: &str) -> Vec<PathBuf> {
    let path = Path::new(p);
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let Some(suffix) = name.strip_prefix('*') else {
        return vec![path.to_path_buf()];
    };
    let dir = path.parent().unwrap_or(Path::new("/"));
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_str().is_some_and(|s| s.ends_with(suffix)))
        .collect();
    out.sort();
    out
}

/// Reads the runtime's configuration under `etc` (`/etc` on a node).
pub fn read_handlers(runtime: Runtime, etc: &Path) -> Result<BTreeSet<String>, HandlersError> {
    let mut docs = Vec::new();
    match runtime {
        Runtime::Containerd => {
            if let Some(main) = parse(&etc.join("containerd/config.toml"))? {
                let imports: Vec<String> = main
                    .get("imports")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                docs.push(main);
                for p in imports.iter().flat_map(|i| expand(i)) {
                    docs.extend(parse(&p)?);
                }
            }
            Ok(containerd_handlers(&docs))
        }
        Runtime::Crio => {
            docs.extend(parse(&etc.join("crio/crio.conf"))?);
            let dropins = etc.join("crio/crio.conf.d/*.conf");
            for p in expand(&dropins.to_string_lossy()) {
                docs.extend(parse(&p)?);
            }
            Ok(crio_handlers(&docs))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toml(s: &str) -> Value {
        toml::from_str(s).unwrap()
    }

    fn set(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn containerd_versions() {
        let v2 = toml(
            r#"version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
runtime_type = "io.containerd.runc.v2"
"#,
        );
        assert_eq!(containerd_handlers(&[v2]), set(&["nvidia", "runc"]));
        let v3 = toml(
            r#"version = 3
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.kata]
runtime_type = "io.containerd.kata.v2"
"#,
        );
        assert_eq!(containerd_handlers(&[v3]), set(&["kata", "runc"]));
        let v1 = toml(
            "[plugins.cri.containerd.runtimes.gvisor]\nruntime_type = \"io.containerd.runsc.v1\"\n",
        );
        assert_eq!(containerd_handlers(&[v1]), set(&["gvisor", "runc"]));
        assert_eq!(containerd_handlers(&[]), set(&["runc"]));
    }

    #[test]
    fn crio_runtimes_and_default() {
        let main =
            toml("[crio.runtime]\ndefault_runtime = \"runc\"\n[crio.runtime.runtimes.runc]\n");
        let dropin = toml("[crio.runtime.runtimes.nvidia]\nruntime_path = \"/usr/bin/nvidia-container-runtime\"\n");
        assert_eq!(crio_handlers(&[main, dropin]), set(&["nvidia", "runc"]));
        assert_eq!(crio_handlers(&[]), set(&["crun"]));
    }

    #[test]
    fn reads_containerd_imports_from_disk() {
        let etc = tempfile::tempdir().unwrap();
        let d = etc.path().join("containerd");
        std::fs::create_dir_all(d.join("conf.d")).unwrap();
        std::fs::write(
            d.join("config.toml"),
            format!(
                "version = 2\nimports = [\"{}/conf.d/*.toml\"]\n",
                d.display()
            ),
        )
        .unwrap();
        std::fs::write(
            d.join("conf.d/nvidia.toml"),
            "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\n",
        )
        .unwrap();
        let got = read_handlers(Runtime::Containerd, etc.path()).unwrap();
        assert_eq!(got, set(&["nvidia", "runc"]));
        std::fs::write(d.join("conf.d/bad.toml"), "[").unwrap();
        let err = read_handlers(Runtime::Containerd, etc.path()).unwrap_err();
        assert!(
            err.to_string().ends_with("bad.toml is not valid TOML"),
            "{err}"
        );
    }
}
