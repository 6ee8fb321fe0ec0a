//! Whether stderr goes to the journal: systemd sets `JOURNAL_STREAM=dev:ino`
//! for the stream it connects, and a child that inherits the variable but
//! not the stream (a shell redirect) must not log there. And whether the text
//! written there instead may carry ANSI colours.

use std::ffi::OsStr;
use std::io::IsTerminal;

pub fn stderr_is_journal() -> bool {
    let Ok(value) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    let Some(expected) = parse_journal_stream(&value) else {
        return false;
    };
    let Ok(st) = nix::sys::stat::fstat(std::io::stderr()) else {
        return false;
    };
    (st.st_dev, st.st_ino) == expected
}

/// `dev:ino` in decimal.
pub fn parse_journal_stream(value: &str) -> Option<(u64, u64)> {
    let (dev, ino) = value.split_once(':')?;
    Some((dev.parse().ok()?, ino.parse().ok()?))
}

/// Colours for the text log: only when stderr is a terminal (a file, a pipe,
/// a test reading stderr or a log shipper gets plain text), and never with
/// `NO_COLOR` set to anything non-empty (no-color.org). tracing-subscriber
/// honours `NO_COLOR` only in its default, which `with_ansi` replaces, so
/// both are decided here.
pub fn stderr_wants_ansi() -> bool {
    ansi(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    )
}

pub fn ansi(terminal: bool, no_color: Option<&OsStr>) -> bool {
    terminal && no_color.is_none_or(OsStr::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_stream_is_dev_colon_ino() {
        assert_eq!(parse_journal_stream("8:1234"), Some((8, 1234)));
        assert_eq!(parse_journal_stream("8"), None);
        assert_eq!(parse_journal_stream("a:1"), None);
    }

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        assert!(ansi(true, None));
        assert!(ansi(true, Some(OsStr::new(""))));
        assert!(!ansi(true, Some(OsStr::new("1"))));
        assert!(!ansi(false, None));
    }
}
