//! `nodeproof`: parse the command line, set up logging, run the command
//! (`cli`). The work is in the library.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    fixed_mmap_threshold();
    let cli = cli::parse();
    let daemon = matches!(cli.command, cli::Command::Run);
    cli::init_logging(daemon);
    if daemon {
        return cli::run_daemon(&cli);
    }
    let structured = cli.output().filter(|f| f.structured());
    match cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            let text = cli::error_text(&e);
            eprintln!("nodeproof: {text}");
            if let Some(f) = structured {
                println!("{}", cli::error_document(f, &text, 2));
            }
            ExitCode::from(2)
        }
    }
}

/// Allocations of 128 KiB and more are mmap'd and unmapped when freed, at
/// every size. glibc raises that threshold to the largest block freed so
/// far (up to 32 MiB): once the tracer's load had freed the kernel BTF's
/// buffers (tens of MiB, parsed once by aya's loader and once for the
/// programs), the next large ones came from the heap, and the agent kept
/// 13-22 MiB of anonymous memory it no longer used (RssAnon 4 MiB with the
/// threshold fixed, measured with the daemon_start bench's config).
fn fixed_mmap_threshold() {
    // SAFETY: mallopt only sets glibc's allocator parameters; called before any other thread exists.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024) };
}
