//! Whether stderr goes to the journal: systemd sets `JOURNAL_STREAM=dev:ino`
//! for the stream it connects, and a child that inherits the variable but
//! not the stream (a shell redirect) must not log there.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_stream_is_dev_colon_ino() {
        assert_eq!(parse_journal_stream("8:1234"), Some((8, 1234)));
        assert_eq!(parse_journal_stream("8"), None);
        assert_eq!(parse_journal_stream("a:1"), None);
    }
}
