//! Arbitrary bytes as the agent's config file (`/etc/nodeproof/config.toml`):
//! the TOML parse, the per-section schemas with every unknown key and wrong
//! type collected, the range checks, and the error text `run` and `check`
//! print (positions as line:column). Nothing may panic.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use nodeproof::config::{Config, ConfigError};

fuzz_target!(|data: &[u8]| {
    // The agent reads the file as UTF-8 (`read_to_string`): other bytes are a read error.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::parse(text, Path::new("/etc/nodeproof/config.toml")) {
        Ok(config) => {
            let _ = format!("{config:?}");
        }
        Err(e) => {
            let message = e.to_string();
            assert!(
                message.starts_with("invalid config /etc/nodeproof/config.toml"),
                "{message}"
            );
            match e {
                ConfigError::Syntax { line, column, .. } => {
                    assert!(line >= 1 && column >= 1);
                    assert!(line <= text.lines().count().max(1) + 1, "line {line}");
                }
                ConfigError::Problems { problems, .. } => assert!(!problems.is_empty()),
                ConfigError::Read { .. } => unreachable!("nothing is read"),
            }
        }
    }
});
