//! The command line and what documents it, as one test binary: each of
//! these was its own, linking the whole agent again for a few fast tests.
//! `cargo test -p nodeproof --test cli_and_docs <module>` runs one part.

mod cli;
mod cli_docs;
mod deploy_daemonset;
mod deploy_runtimeclass;
mod error_texts;
mod lint_messages;
mod operations_reference;
mod readme_examples;
mod systemd_units;
