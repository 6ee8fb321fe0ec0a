//! Embeds `nodeproof --version`'s line (src/version_line.rs).
//!
//! The commit comes from `NODEPROOF_REVISION`, which `cargo xtask` sets for
//! the release builds it makes (image, dist, deb, install, run), not from
//! git here: a build script that read git would rerun on every commit and
//! rebuild the library and relink every test binary with it.

#[path = "src/version_line.rs"]
mod version_line;

fn main() {
    println!("cargo:rerun-if-env-changed=NODEPROOF_REVISION");
    println!("cargo:rerun-if-changed=src/version_line.rs");
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let revision = std::env::var("NODEPROOF_REVISION").unwrap_or_default();
    println!(
        "cargo:rustc-env=NODEPROOF_VERSION_LINE={}",
        version_line::version_line(&version, &revision)
    );
    // nodeproof_build_info's revision label.
    let label = match revision.trim() {
        "" => "unknown",
        r => r,
    };
    println!("cargo:rustc-env=NODEPROOF_BUILD_REVISION={label}");
}
