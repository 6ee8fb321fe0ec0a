//! The Debian mirror this machine's apt uses, read from its sources (never
//! written into the repository): `/etc/apt/sources.list`, then
//! `/etc/apt/sources.list.d/*.list` and `*.sources` in name order (the order
//! apt reads them), in the one-line format (`deb [options] URI suite
//! components`) and in deb822 (`Types:`, `URIs:`, `Suites:`, `Components:`,
//! `Enabled:`). The mirror is the first `deb` source whose suite is a Debian
//! release (`bookworm`, `stable`, ...); a `-updates` or `-backports` suite
//! only when there is no release, a `-security` one last. The environment
//! variable [`OVERRIDE_ENV`] replaces the lookup.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Names the mirror's URI outright (`http://HOST/debian`), without reading apt's sources.
pub const OVERRIDE_ENV: &str = "NODEPROOF_APT_MIRROR";
/// Where apt's configuration lives.
pub const ETC_APT: &str = "/etc/apt";

/// Debian's release codenames and suite names: a suite made of one of these
/// (and a suffix such as `-updates`) is a Debian archive's.
const RELEASES: &[&str] = &[
    "hamm",
    "slink",
    "potato",
    "woody",
    "sarge",
    "etch",
    "lenny",
    "squeeze",
    "wheezy",
    "jessie",
    "stretch",
    "buster",
    "bullseye",
    "bookworm",
    "trixie",
    "forky",
    "duke",
    "sid",
    "oldoldstable",
    "oldstable",
    "stable",
    "testing",
    "unstable",
];

/// One `deb` source as apt reads it: one URI and one suite (a deb822 stanza
/// with several of either is several sources).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub uri: String,
    pub suite: String,
    pub components: Vec<String>,
    /// `FILE:LINE` of the line or stanza.
    pub origin: String,
}

/// How well a suite serves as the mirror of a whole release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SuiteKind {
    /// `bookworm`, `stable`: the release itself.
    Release,
    /// `bookworm-updates`, `bookworm-backports`: the same archive, another suite.
    Updates,
    /// `bookworm-security`: usually a separate archive holding only security updates.
    Security,
}

impl SuiteKind {
    /// The kind of a Debian suite; `None` for another distribution's or a flat repository's.
    pub fn of(suite: &str) -> Option<SuiteKind> {
        let end = suite.find(['-', '/']).unwrap_or(suite.len());
        let (base, rest) = suite.split_at(end);
        if !RELEASES.contains(&base) {
            return None;
        }
        match rest {
            "" => Some(SuiteKind::Release),
            // Before bullseye the security archive's suite was `buster/updates`.
            "-security" | "/updates" => Some(SuiteKind::Security),
            "-updates" | "-backports" | "-backports-sloppy" | "-proposed-updates" => {
                Some(SuiteKind::Updates)
            }
            _ => None,
        }
    }
}

/// Where the mirror was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MirrorOrigin {
    /// [`OVERRIDE_ENV`].
    Override,
    /// A source's `FILE:LINE`.
    Source(String),
}

impl fmt::Display for MirrorOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MirrorOrigin::Override => write!(f, "${OVERRIDE_ENV}"),
            MirrorOrigin::Source(at) => f.write_str(at),
        }
    }
}

/// The Debian mirror: a URI apt and debootstrap take (`deb URI SUITE main`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mirror {
    pub uri: String,
    pub origin: MirrorOrigin,
}

#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error(
        "cannot read the apt sources file {}: make it readable, or set {OVERRIDE_ENV} to the Debian mirror's URI",
        path.display()
    )]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "no `deb` source of a Debian release (such as bookworm) in the apt sources under {} (read: {}): \
         add one to {}/sources.list.d/, or set {OVERRIDE_ENV} to the Debian mirror's URI",
        etc_apt.display(),
        if read.is_empty() { "no sources file".to_string() } else { read.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ") },
        etc_apt.display()
    )]
    NotFound {
        etc_apt: PathBuf,
        read: Vec<PathBuf>,
    },
    #[error(
        "{OVERRIDE_ENV}={value:?} is not a URI: set it to the Debian mirror's URI (scheme://host/path), \
         or unset it to read the mirror from the apt sources"
    )]
    BadOverride { value: String },
}

/// The mirror: [`OVERRIDE_ENV`] when set, else the apt sources under [`ETC_APT`].
pub fn mirror() -> Result<Mirror, MirrorError> {
    let value = std::env::var(OVERRIDE_ENV).ok();
    mirror_from(value.as_deref(), Path::new(ETC_APT))
}

/// [`mirror`] with the override's value and apt's directory given.
pub fn mirror_from(override_value: Option<&str>, etc_apt: &Path) -> Result<Mirror, MirrorError> {
    if let Some(value) = override_value.map(str::trim).filter(|v| !v.is_empty()) {
        if !is_uri(value) {
            return Err(MirrorError::BadOverride {
                value: value.to_string(),
            });
        }
        return Ok(Mirror {
            uri: value.to_string(),
            origin: MirrorOrigin::Override,
        });
    }
    let (sources, read) = read_sources(etc_apt)?;
    choose(&sources)
        .map(|s| Mirror {
            uri: s.uri.clone(),
            origin: MirrorOrigin::Source(s.origin.clone()),
        })
        .ok_or_else(|| MirrorError::NotFound {
            etc_apt: etc_apt.to_path_buf(),
            read,
        })
}

/// `scheme:rest` with an RFC 3986 scheme (`http:`, `https:`, `file:`, `mirror+file:`).
fn is_uri(s: &str) -> bool {
    s.split_once(':').is_some_and(|(scheme, rest)| {
        scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
            && !rest.is_empty()
            && !s.contains(char::is_whitespace)
    })
}

/// The first source of the best [`SuiteKind`]; `None` when no suite is a Debian one.
pub fn choose(sources: &[Source]) -> Option<&Source> {
    sources
        .iter()
        .filter_map(|s| SuiteKind::of(&s.suite).map(|k| (k, s)))
        .min_by_key(|(k, _)| *k)
        .map(|(_, s)| s)
}

/// Every `deb` source under `etc_apt` in apt's order, and the files read.
/// Absent files are skipped; an unreadable one is an error.
pub fn read_sources(etc_apt: &Path) -> Result<(Vec<Source>, Vec<PathBuf>), MirrorError> {
    let mut files = vec![etc_apt.join("sources.list")];
    let parts = etc_apt.join("sources.list.d");
    match fs::read_dir(&parts) {
        Ok(entries) => {
            let mut names: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "list" || e == "sources"))
                .collect();
            names.sort();
            files.extend(names);
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(MirrorError::Read {
                path: parts,
                source,
            })
        }
    }
    let mut sources = Vec::new();
    let mut read = Vec::new();
    for path in files {
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(source) => return Err(MirrorError::Read { path, source }),
        };
        let name = path.display().to_string();
        if path.extension().is_some_and(|e| e == "sources") {
            sources.extend(parse_deb822(&text, &name));
        } else {
            sources.extend(parse_one_line(&text, &name));
        }
        read.push(path);
    }
    Ok((sources, read))
}

/// The `deb` lines of a one-line-format file (`sources.list`, `*.list`):
/// `deb [ options ] URI SUITE [COMPONENT]...`, `#` to the end of a line a comment.
pub fn parse_one_line(text: &str, name: &str) -> Vec<Source> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        let kind_end = line
            .find(|c: char| c.is_whitespace() || c == '[')
            .unwrap_or(line.len());
        let (kind, mut rest) = line.split_at(kind_end);
        if kind != "deb" {
            continue;
        }
        rest = rest.trim_start();
        if let Some(options) = rest.strip_prefix('[') {
            let Some(close) = options.find(']') else {
                continue; // apt refuses the line too
            };
            rest = &options[close + 1..];
        }
        let mut words = rest.split_whitespace();
        let (Some(uri), Some(suite)) = (words.next(), words.next()) else {
            continue;
        };
        out.push(Source {
            uri: uri.to_string(),
            suite: suite.to_string(),
            components: words.map(str::to_string).collect(),
            origin: format!("{name}:{}", n + 1),
        });
    }
    out
}

/// The `deb` sources of a deb822 file (`*.sources`): stanzas separated by
/// blank lines, `Field: value` with continuation lines indented, `#` lines
/// comments; a stanza with `Enabled: no` is skipped; each URI with each suite
/// is one source.
pub fn parse_deb822(text: &str, name: &str) -> Vec<Source> {
    let mut out = Vec::new();
    let mut stanza: Vec<(String, String)> = Vec::new();
    let mut start = 0;
    let mut flush = |stanza: &mut Vec<(String, String)>, start: usize| {
        if !stanza.is_empty() {
            out.extend(stanza_sources(stanza, &format!("{name}:{start}")));
        }
        stanza.clear();
    };
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            flush(&mut stanza, start);
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        if line.starts_with([' ', '\t']) {
            if let Some((_, value)) = stanza.last_mut() {
                value.push(' ');
                value.push_str(line.trim());
            }
            continue;
        }
        if let Some((field, value)) = line.split_once(':') {
            if stanza.is_empty() {
                start = n + 1;
            }
            stanza.push((field.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    flush(&mut stanza, start);
    out
}

fn stanza_sources(stanza: &[(String, String)], origin: &str) -> Vec<Source> {
    let field = |name: &str| -> Vec<&str> {
        stanza
            .iter()
            .rev()
            .find(|(f, _)| f == name)
            .map(|(_, v)| v.split_whitespace().collect())
            .unwrap_or_default()
    };
    let disabled = field("enabled")
        .first()
        .is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "no" | "false" | "0"));
    if disabled || !field("types").contains(&"deb") {
        return Vec::new();
    }
    let components: Vec<String> = field("components")
        .into_iter()
        .map(str::to_string)
        .collect();
    let mut out = Vec::new();
    for uri in field("uris") {
        for suite in field("suites") {
            out.push(Source {
                uri: uri.to_string(),
                suite: suite.to_string(),
                components: components.clone(),
                origin: origin.to_string(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brief(sources: &[Source]) -> Vec<(String, String, String)> {
        sources
            .iter()
            .map(|s| (s.uri.clone(), s.suite.clone(), s.components.join(" ")))
            .collect()
    }

    fn owned(rows: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
        rows.iter()
            .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
            .collect()
    }

    #[test]
    fn one_line_format_with_options_and_comments() {
        let text = "\
# the release
deb http://mirror.example/debian bookworm main contrib
deb-src http://mirror.example/debian bookworm main
  deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://mirror.example/debian bookworm-updates main # inline
deb [ trusted=yes ] file:/srv/mirror trixie main
#deb http://commented.example/debian sid main
deb http://broken.example/debian
deb [arch=amd64 http://unclosed.example/debian sid main
";
        let found = parse_one_line(text, "sources.list");
        assert_eq!(
            brief(&found),
            owned(&[
                ("http://mirror.example/debian", "bookworm", "main contrib"),
                ("http://mirror.example/debian", "bookworm-updates", "main"),
                ("file:/srv/mirror", "trixie", "main"),
            ])
        );
        assert_eq!(found[0].origin, "sources.list:2");
        assert_eq!(found[1].origin, "sources.list:4");
    }

    #[test]
    fn deb822_with_several_uris_suites_and_disabled_stanzas() {
        let text = "\
# a disabled stanza first
Types: deb
URIs: http://disabled.example/debian
Suites: bookworm
Components: main
Enabled: no

Types: deb-src
URIs: http://src.example/debian
Suites: bookworm
Components: main

Types: deb deb-src
# a comment inside the stanza
URIs: http://one.example/debian
 http://two.example/debian
Suites: bookworm bookworm-updates
Components: main non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

types: deb
uris: http://security.example/debian-security
suites: bookworm-security
components: main
enabled: yes
";
        let found = parse_deb822(text, "debian.sources");
        assert_eq!(
            brief(&found),
            owned(&[
                (
                    "http://one.example/debian",
                    "bookworm",
                    "main non-free-firmware"
                ),
                (
                    "http://one.example/debian",
                    "bookworm-updates",
                    "main non-free-firmware"
                ),
                (
                    "http://two.example/debian",
                    "bookworm",
                    "main non-free-firmware"
                ),
                (
                    "http://two.example/debian",
                    "bookworm-updates",
                    "main non-free-firmware"
                ),
                (
                    "http://security.example/debian-security",
                    "bookworm-security",
                    "main"
                ),
            ])
        );
        assert_eq!(found[0].origin, "debian.sources:13");
        assert_eq!(found[4].origin, "debian.sources:21");
    }

    #[test]
    fn the_release_wins_over_updates_and_security_and_other_archives() {
        let s = |uri: &str, suite: &str| Source {
            uri: uri.into(),
            suite: suite.into(),
            components: vec!["main".into()],
            origin: String::new(),
        };
        let sources = [
            s("https://vendor.example/apt", "nodistro"),
            s(
                "http://security.example/debian-security",
                "bookworm-security",
            ),
            s("http://mirror.example/debian", "bookworm-updates"),
            s("http://first.example/debian", "bookworm"),
            s("http://second.example/debian", "trixie"),
        ];
        assert_eq!(choose(&sources).unwrap().uri, "http://first.example/debian");
        assert_eq!(
            choose(&sources[..3]).unwrap().uri,
            "http://mirror.example/debian"
        );
        assert_eq!(
            choose(&sources[..2]).unwrap().uri,
            "http://security.example/debian-security"
        );
        assert_eq!(choose(&sources[..1]), None);
        assert_eq!(SuiteKind::of("buster/updates"), Some(SuiteKind::Security));
        assert_eq!(SuiteKind::of("stable"), Some(SuiteKind::Release));
        assert_eq!(SuiteKind::of("jammy"), None);
        assert_eq!(SuiteKind::of("./"), None);
    }

    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> TempDir {
            let dir =
                std::env::temp_dir().join(format!("nodeproof-debpkg-{tag}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(dir.join("sources.list.d")).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn reads_the_files_in_apts_order() {
        let etc = TempDir::new("order");
        let d = etc.0.join("sources.list.d");
        fs::write(
            d.join("b.sources"),
            "Types: deb\nURIs: http://b.example/debian\nSuites: trixie\nComponents: main\n",
        )
        .unwrap();
        fs::write(
            d.join("a.list"),
            "deb https://vendor.example/apt stable-ish main\n",
        )
        .unwrap();
        fs::write(
            d.join("c.list.disabled"),
            "deb http://off.example/debian sid main\n",
        )
        .unwrap();
        let (sources, read) = read_sources(&etc.0).unwrap();
        assert_eq!(read, vec![d.join("a.list"), d.join("b.sources")]);
        let m = mirror_from(None, &etc.0).unwrap();
        assert_eq!(m.uri, "http://b.example/debian");
        assert_eq!(
            m.origin,
            MirrorOrigin::Source(format!("{}:1", d.join("b.sources").display()))
        );
        assert_eq!(sources.len(), 2);

        // sources.list comes first.
        fs::write(
            etc.0.join("sources.list"),
            "deb http://main.example/debian bookworm main\n",
        )
        .unwrap();
        assert_eq!(
            mirror_from(None, &etc.0).unwrap().uri,
            "http://main.example/debian"
        );
    }

    #[test]
    fn the_override_wins_and_a_missing_mirror_names_the_files_read() {
        let etc = TempDir::new("none");
        let d = etc.0.join("sources.list.d");
        fs::write(
            d.join("vendor.list"),
            "deb https://vendor.example/apt nodistro main\n",
        )
        .unwrap();
        let e = mirror_from(None, &etc.0).unwrap_err().to_string();
        assert!(
            e.contains(&d.join("vendor.list").display().to_string()),
            "{e}"
        );
        assert!(e.contains(OVERRIDE_ENV), "{e}");
        assert!(e.starts_with("no `deb` source of a Debian release"), "{e}");

        let m = mirror_from(Some("http://override.example/debian"), &etc.0).unwrap();
        assert_eq!(m.uri, "http://override.example/debian");
        assert_eq!(m.origin, MirrorOrigin::Override);
        // Empty is unset.
        assert!(mirror_from(Some(""), &etc.0).is_err());
        let e = mirror_from(Some("override.example"), &etc.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not a URI"), "{e}");

        let empty = TempDir::new("empty");
        let e = mirror_from(None, &empty.0).unwrap_err().to_string();
        assert!(e.contains("(read: no sources file)"), "{e}");
    }
}
