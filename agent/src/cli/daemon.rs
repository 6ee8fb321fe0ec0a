//! `nodeproof run`: the agent, with the systemd notifier chosen here.

use std::process::ExitCode;

use super::Cli;

/// `nodeproof run`: exit 64 (EX_USAGE... of sysexits, as systemd's
/// RestartPreventExitStatus= names it) on a bad config, 1 on other failures.
pub(crate) fn run(cli: &Cli) -> ExitCode {
    use nodeproof::daemon::{self, notify};
    let notifier: Box<dyn notify::Notifier> = match notify::SdNotify::from_env() {
        Ok(Some(n)) => Box::new(n),
        Ok(None) => Box::new(notify::NoNotify),
        Err(e) => {
            eprintln!("nodeproof: {}", super::error_text(&anyhow::Error::from(e)));
            Box::new(notify::NoNotify)
        }
    };
    let opts = daemon::Options {
        config_path: cli.config.clone(),
        seccomp_root: cli.seccomp_root.clone(),
    };
    match daemon::run(&opts, notifier) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = if matches!(e, daemon::DaemonError::Config(_)) {
                64
            } else {
                1
            };
            eprintln!("nodeproof: {}", super::error_text(&anyhow::Error::from(e)));
            ExitCode::from(code)
        }
    }
}
