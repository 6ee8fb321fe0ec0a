//! Reproducible archives, shared by the image's layer and the release
//! bundle: a tar whose entries are sorted, owned by 0:0 and dated by one
//! epoch; gzip with a fixed header; sha256 digests.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

/// One file of an archive: its path (a leading `/` is dropped), its bytes,
/// its mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    pub path: String,
    pub bytes: Vec<u8>,
    pub mode: u32,
}

/// A tar of `files`, their parent directories (0755) and `dirs` (path
/// ending in `/`, mode), sorted by path, every owner 0:0 and every time
/// `epoch`. A path given twice is an error.
pub fn tar(files: &[File], epoch: u64, dirs: &[(&str, u32)]) -> Result<Vec<u8>> {
    enum Entry<'a> {
        Dir(u32),
        File(&'a File),
    }
    let mut entries: BTreeMap<String, Entry> = BTreeMap::new();
    for f in files {
        let rel = f.path.trim_start_matches('/');
        let mut dir = Path::new(rel).parent();
        while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
            entries
                .entry(format!("{}/", d.display()))
                .or_insert(Entry::Dir(0o755));
            dir = d.parent();
        }
        if entries.insert(rel.to_string(), Entry::File(f)).is_some() {
            bail!("{} is in the archive twice", f.path);
        }
    }
    for (d, mode) in dirs {
        entries.insert((*d).to_string(), Entry::Dir(*mode));
    }
    let mut tar = tar::Builder::new(Vec::new());
    for (path, entry) in &entries {
        let mut h = tar::Header::new_ustar();
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(epoch);
        match entry {
            Entry::File(f) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(f.mode);
                h.set_size(f.bytes.len() as u64);
                tar.append_data(&mut h, path, f.bytes.as_slice())
            }
            Entry::Dir(mode) => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(*mode);
                h.set_size(0);
                tar.append_data(&mut h, path, std::io::empty())
            }
        }
        .with_context(|| format!("adding {path} to the archive"))?;
    }
    tar.into_inner().context("finishing the archive")
}

/// gzip with flate2's fixed header (mtime 0, no file name): the same tar,
/// the same bytes.
pub fn gzip(tar: &[u8]) -> Result<Vec<u8>> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(tar)?;
    Ok(gz.finish()?)
}

/// The sha256 of `bytes` in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `sha256:<hex>`, as OCI descriptors write a digest.
pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(bytes))
}
