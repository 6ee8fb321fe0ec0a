//! Drives `nodeproof_trace::run` by hand until the CLI wires it up:
//! `cargo run --example trace -- [--duration SECS] [--comm NAME] [--pid N] [--json] [--strategy S]`
//! Ctrl-C prints the summary.

use nodeproof_trace::{self as trace, OutputFormat, TraceOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let mut opts = TraceOptions::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().expect("flag needs a value");
        match a.as_str() {
            "--duration" => opts.duration = Some(Duration::from_secs_f64(val().parse().unwrap())),
            "--comm" => opts.comm = Some(val()),
            "--pid" => opts.pid = Some(val().parse().unwrap()),
            "--json" => opts.format = OutputFormat::Json,
            "--strategy" => opts.strategy = Some(val().parse().unwrap()),
            other => panic!("unknown argument {other}"),
        }
    }
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };
    match trace::run(
        &opts,
        &mut std::io::stdout().lock(),
        &STOP,
        &trace::KubeletLogs::host(),
    ) {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nodeproof trace: {e}");
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                eprintln!("  caused by: {s}");
                src = s.source();
            }
            std::process::ExitCode::FAILURE
        }
    }
}
