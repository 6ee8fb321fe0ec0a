//! Finding and reading profile files without ever blocking or reading
//! without bound: FIFOs, sockets and devices are reported and never
//! opened, symlinks are resolved with loop detection and checked against
//! the root, files are read up to a size cap.

use std::ffi::OsStr;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::diagnostic::{Code, Diagnostic};

/// No real profile comes near this (Docker's default is ~20 KiB); it bounds
/// memory for a huge or endless file.
pub const MAX_PROFILE_BYTES: u64 = 4 << 20;

/// Directory levels followed below a root (kubelet profiles sit a few levels down).
const MAX_DIR_DEPTH: usize = 16;

/// A profile to lint: its path and bytes, or why it cannot be read.
#[derive(Debug)]
pub struct ProfileFile {
    pub path: PathBuf,
    pub contents: Result<Vec<u8>, Diagnostic>,
}

impl ProfileFile {
    pub fn display_path(&self) -> String {
        self.path.to_string_lossy().into_owned()
    }
}

/// Collect profiles from command-line paths: files are taken as given,
/// directories are walked for every file in them, whatever its name (the
/// kubelet and containerd load a `Localhost` profile by any name). A file
/// found so whose name does not end in `.json` and that is clearly no
/// profile (not a regular file; empty, or not beginning with `{`) is said
/// to be none ([`Code::NotAProfile`], a note: a README beside the
/// profiles is no fault), never read further. A given path that is a symlink to a
/// directory is that directory (a kubelet root under a symlinked
/// `/var/lib/kubelet`): the kubelet only joins the root and the profile's
/// name, and containerd's `os.ReadFile` follows every link on the way.
pub fn collect(paths: &[PathBuf]) -> Vec<ProfileFile> {
    let mut out = Vec::new();
    for p in paths {
        match fs::symlink_metadata(p) {
            Ok(m) if m.is_dir() => walk(p, p, 0, &mut out),
            Ok(m) if m.file_type().is_symlink() && fs::metadata(p).is_ok_and(|t| t.is_dir()) => {
                walk(p, p, 0, &mut out)
            }
            Ok(_) => out.push(read_entry(p, None)),
            Err(e) => out.push(ProfileFile {
                path: p.clone(),
                contents: Err(io_diag(p, "cannot access", &e)),
            }),
        }
    }
    out
}

fn walk(root: &Path, dir: &Path, depth: usize, out: &mut Vec<ProfileFile>) {
    let entries = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) => {
            out.push(ProfileFile {
                path: dir.to_path_buf(),
                contents: Err(io_diag(dir, "cannot list directory", &e)),
            });
            return;
        }
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            if depth + 1 < MAX_DIR_DEPTH {
                walk(root, &path, depth + 1, out);
            }
            continue;
        }
        if path.extension() == Some(OsStr::new("json")) {
            out.push(read_entry(&path, Some(root)));
        } else {
            out.push(read_unnamed(&path, root));
        }
    }
}

/// A file found under `root` whose name does not say it is a profile: read
/// as one unless it clearly is none.
fn read_unnamed(path: &Path, root: &Path) -> ProfileFile {
    let not_a_profile = |what: String| {
        ProfileFile {
        path: path.to_path_buf(),
        contents: Err(Diagnostic::note(
            Code::NotAProfile,
            "",
            format!("{} is {what}: not a seccomp profile, not judged as one", path.display()),
        )
        .with_help("the kubelet loads a Localhost profile by any file name: a pod that names this file does not start; keep only profiles under the seccomp root")),
    }
    };
    // Never opened: a FIFO would block, a device or socket is no file.
    if let Some(kind) = fs::metadata(path)
        .ok()
        .and_then(|m| odd_kind(m.file_type()))
    {
        return not_a_profile(kind.to_string());
    }
    let file = read_entry(path, Some(root));
    match &file.contents {
        Ok(bytes) => match first_byte(bytes) {
            None => not_a_profile("empty".into()),
            Some(b'{') => file,
            Some(b) if b.is_ascii_graphic() => {
                not_a_profile(format!("not JSON (it begins with `{}`)", char::from(b)))
            }
            Some(b) => not_a_profile(format!("not JSON (it begins with byte 0x{b:02x})")),
        },
        Err(_) => file,
    }
}

/// The first byte after a UTF-8 byte order mark and JSON's whitespace.
fn first_byte(bytes: &[u8]) -> Option<u8> {
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    bytes
        .iter()
        .copied()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
}

/// What a file that is not a regular file is, for a person.
fn odd_kind(ft: fs::FileType) -> Option<&'static str> {
    if ft.is_file() {
        None
    } else if ft.is_fifo() {
        Some("a FIFO")
    } else if ft.is_socket() {
        Some("a socket")
    } else if ft.is_block_device() || ft.is_char_device() {
        Some("a device")
    } else if ft.is_dir() {
        Some("a directory")
    } else {
        Some("not a regular file")
    }
}

/// The name a profile read from standard input goes by (`profile lint -`).
pub const STDIN_NAME: &str = "<stdin>";

/// A profile read from `input` (standard input), named [`STDIN_NAME`] and
/// capped at [`MAX_PROFILE_BYTES`] like a file.
pub fn read_stream(input: impl Read) -> ProfileFile {
    let path = PathBuf::from(STDIN_NAME);
    let contents = read_capped(input, &path);
    ProfileFile { path, contents }
}

/// Read one entry. `root` is set when the entry was found by walking a
/// directory, so a symlink leaving it is reported.
pub fn read_entry(path: &Path, root: Option<&Path>) -> ProfileFile {
    let contents = read_checked(path, root);
    ProfileFile {
        path: path.to_path_buf(),
        contents,
    }
}

// A diagnostic is what callers report; it is built once per file, so its size does not matter.
#[allow(clippy::result_large_err)]
fn read_checked(path: &Path, root: Option<&Path>) -> Result<Vec<u8>, Diagnostic> {
    let lmeta = fs::symlink_metadata(path).map_err(|e| io_diag(path, "cannot access", &e))?;
    if lmeta.file_type().is_symlink() {
        let target = fs::canonicalize(path).map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                Diagnostic::error(
                    Code::IoError,
                    "",
                    format!("{} is a symlink loop", path.display()),
                )
                .with_help("the runtime cannot open it either; point the link at a real file")
            } else {
                io_diag(path, "symlink cannot be resolved", &e)
            }
        })?;
        if let Some(root) = root.and_then(|r| fs::canonicalize(r).ok()) {
            if !target.starts_with(&root) {
                return Err(Diagnostic::error(
                    Code::IoError,
                    "",
                    format!(
                        "{} points outside the seccomp root, to {}; not read",
                        path.display(),
                        target.display()
                    ),
                )
                .with_help("keep profiles inside the kubelet seccomp root; a link elsewhere lets another owner change what pods load"));
            }
        }
    }
    let meta = fs::metadata(path).map_err(|e| io_diag(path, "cannot access", &e))?;
    if let Some(kind) = odd_kind(meta.file_type()) {
        return Err(Diagnostic::error(
            Code::IoError,
            "",
            format!("{} is {kind}, not a profile file; not read", path.display()),
        ));
    }
    if meta.len() > MAX_PROFILE_BYTES {
        return Err(too_large(path, meta.len()));
    }
    // O_NONBLOCK: if the file was swapped for a FIFO after the stat, the open must not hang.
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| io_diag(path, "cannot open", &e))?;
    let opened = file
        .metadata()
        .map_err(|e| io_diag(path, "cannot stat", &e))?;
    if !opened.file_type().is_file() {
        return Err(Diagnostic::error(
            Code::IoError,
            "",
            format!(
                "{} changed into a non-regular file while being read",
                path.display()
            ),
        ));
    }
    read_capped(file, path)
}

// A diagnostic is what callers report; it is built once per file, so its size does not matter.
#[allow(clippy::result_large_err)]
fn read_capped(input: impl Read, path: &Path) -> Result<Vec<u8>, Diagnostic> {
    let mut buf = Vec::new();
    input
        .take(MAX_PROFILE_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|e| io_diag(path, "cannot read", &e))?;
    if buf.len() as u64 > MAX_PROFILE_BYTES {
        return Err(too_large(path, buf.len() as u64));
    }
    Ok(buf)
}

fn too_large(path: &Path, len: u64) -> Diagnostic {
    Diagnostic::error(
        Code::TooLarge,
        "",
        format!(
            "{} is {len} bytes, over nodeproof's {} MiB limit for a profile; not read",
            path.display(),
            MAX_PROFILE_BYTES >> 20
        ),
    )
    .with_help("a real seccomp profile is tens of kilobytes; check that this is the intended file")
}

fn io_diag(path: &Path, what: &str, e: &io::Error) -> Diagnostic {
    let help = match e.kind() {
        io::ErrorKind::PermissionDenied => Some(
            "nodeproof needs read access to the seccomp root (the systemd unit grants it with ReadOnlyPaths=)",
        ),
        io::ErrorKind::NotFound => Some("pods that reference this profile fail with CreateContainerError"),
        _ => None,
    };
    let d = Diagnostic::error(Code::IoError, "", format!("{what} {}: {e}", path.display()));
    match help {
        Some(h) => d.with_help(h),
        None => d,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_stream_is_read_under_the_cap() {
        let f = read_stream(&b"{}"[..]);
        assert_eq!(f.display_path(), "<stdin>");
        assert_eq!(f.contents.unwrap(), b"{}");
        let big = vec![b' '; MAX_PROFILE_BYTES as usize + 10];
        let f = read_stream(&big[..]);
        let d = f.contents.unwrap_err();
        assert_eq!(d.code, Code::TooLarge);
        assert!(
            d.message.starts_with("<stdin> is 4194305 bytes"),
            "{}",
            d.message
        );
    }

    #[test]
    fn odd_entries_are_reported_never_opened() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::write(root.join("ok.json"), b"{}").unwrap();
        fs::write(root.join("notes.txt"), b"ignored").unwrap();
        let fifo = root.join("fifo.json");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        let _sock = std::os::unix::net::UnixListener::bind(root.join("sock.json")).unwrap();
        symlink(root.join("loop-b.json"), root.join("loop-a.json")).unwrap();
        symlink(root.join("loop-a.json"), root.join("loop-b.json")).unwrap();
        let outside = tempfile::NamedTempFile::new().unwrap();
        symlink(outside.path(), root.join("escape.json")).unwrap();
        symlink(root.join("ok.json"), root.join("inside.json")).unwrap();
        let big = File::create(root.join("big.json")).unwrap();
        big.set_len(1 << 30).unwrap();
        let nested = root.join("profiles");
        fs::create_dir(&nested).unwrap();
        fs::write(nested.join("vllm.json"), b"{}").unwrap();

        let found = collect(&[root.to_path_buf()]);
        let summary: Vec<(String, String)> = found
            .iter()
            .map(|f| {
                let name = f
                    .path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                let what = match &f.contents {
                    Ok(b) => format!("ok {}", b.len()),
                    Err(d) => d.message.replace(&root.display().to_string(), "ROOT"),
                };
                (name, what)
            })
            .collect();
        let want = [
            ("big.json", "ROOT/big.json is 1073741824 bytes, over nodeproof's 4 MiB limit for a profile; not read"),
            ("escape.json", "ROOT/escape.json points outside the seccomp root"),
            ("fifo.json", "ROOT/fifo.json is a FIFO, not a profile file; not read"),
            ("inside.json", "ok 2"),
            ("loop-a.json", "ROOT/loop-a.json is a symlink loop"),
            ("loop-b.json", "ROOT/loop-b.json is a symlink loop"),
            ("notes.txt", "ROOT/notes.txt is not JSON (it begins with `i`): not a seccomp profile"),
            ("ok.json", "ok 2"),
            ("profiles/vllm.json", "ok 2"),
            ("sock.json", "ROOT/sock.json is a socket, not a profile file; not read"),
        ];
        assert_eq!(summary.len(), want.len(), "{summary:#?}");
        for ((name, what), (wname, wwhat)) in summary.iter().zip(want) {
            assert_eq!(name, wname);
            assert!(what.starts_with(wwhat), "{name}: {what}");
        }
    }

    /// The kubelet loads a Localhost profile by any name: a file without
    /// `.json` is judged, and one that is clearly no profile is said to be
    /// none, per file.
    #[test]
    fn every_file_is_judged_whatever_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir(root.join("profiles")).unwrap();
        fs::write(root.join("profiles/vllm-strict"), b"\n {\"defaultAction\":").unwrap();
        fs::write(root.join(".gitkeep"), b"").unwrap();
        fs::write(root.join("blob"), b"\x7fELF").unwrap();
        let _sock = std::os::unix::net::UnixListener::bind(root.join("agent.sock")).unwrap();
        /// A file's name below the root, and its length or its diagnostic.
        type Seen = (String, Result<usize, (Code, String)>);
        let found: Vec<Seen> = collect(&[root.to_path_buf()])
            .into_iter()
            .map(|f| {
                let name = f.path.strip_prefix(root).unwrap().display().to_string();
                let what = f.contents.map(|b| b.len()).map_err(|d| {
                    assert_eq!(
                        d.code == Code::NotAProfile,
                        d.severity == crate::diagnostic::Severity::Note
                    );
                    (
                        d.code,
                        d.message.replace(&root.display().to_string(), "ROOT"),
                    )
                });
                (name, what)
            })
            .collect();
        let nap = |m: &str| {
            Err((
                Code::NotAProfile,
                format!("{m}: not a seccomp profile, not judged as one"),
            ))
        };
        assert_eq!(
            found,
            [
                (".gitkeep".to_string(), nap("ROOT/.gitkeep is empty")),
                ("agent.sock".to_string(), nap("ROOT/agent.sock is a socket")),
                (
                    "blob".to_string(),
                    nap("ROOT/blob is not JSON (it begins with byte 0x7f)")
                ),
                ("profiles/vllm-strict".to_string(), Ok(19)),
            ]
        );
        // A file named on the command line is a profile, whatever it holds.
        let given = collect(&[root.join("blob")]);
        assert_eq!(given[0].contents.as_ref().unwrap(), b"\x7fELF");
    }

    /// Found by the soak harness (agent/tests/soak.rs, "root-symlink"): a
    /// root replaced by a symlink to the same directory was read as one
    /// profile, "is a directory, not a profile file", and
    /// SeccompProfilesReady went False.
    #[test]
    fn a_root_that_is_a_symlink_to_a_directory_is_walked() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("seccomp.real");
        fs::create_dir(&real).unwrap();
        fs::write(real.join("ok.json"), b"{}").unwrap();
        symlink(real.join("ok.json"), real.join("inside.json")).unwrap();
        let root = dir.path().join("seccomp");
        symlink(&real, &root).unwrap();

        let found = collect(std::slice::from_ref(&root));
        let names: Vec<(PathBuf, bool)> = found
            .iter()
            .map(|f| (f.path.clone(), f.contents.is_ok()))
            .collect();
        assert_eq!(
            names,
            [
                (root.join("inside.json"), true),
                (root.join("ok.json"), true)
            ],
            "{found:#?}"
        );
        // A link to a file is still taken as given.
        let file = dir.path().join("one.json");
        symlink(real.join("ok.json"), &file).unwrap();
        assert!(collect(&[file])[0].contents.is_ok());
    }

    #[test]
    fn non_utf8_names_and_unreadable_files() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let odd = dir.path().join(OsStr::from_bytes(b"caf\xe9.json"));
        fs::write(&odd, b"{}").unwrap();
        let found = collect(&[dir.path().to_path_buf()]);
        assert_eq!(found.len(), 1);
        assert!(found[0].display_path().ends_with("caf\u{fffd}.json"));
        assert!(found[0].contents.is_ok());

        let missing = collect(&[dir.path().join("nope.json")]);
        assert!(missing[0]
            .contents
            .as_ref()
            .unwrap_err()
            .message
            .contains("cannot access"));
    }
}
