//! `nodeproof trace`: stream denials, then the exact counts.

use std::process::ExitCode;

use anyhow::{Context, Result};

use super::{stop_on_sigint_sigterm, STOP};

pub(crate) fn trace(opts: nodeproof_trace::TraceOptions) -> Result<ExitCode> {
    stop_on_sigint_sigterm()?;
    nodeproof_trace::run(&opts, &mut std::io::stdout().lock(), &STOP)
        .context("seccomp tracing failed")?;
    Ok(ExitCode::SUCCESS)
}
