//! `nodeproof`: parse the command line, set up logging, run the command
//! (`cli`). The work is in the library.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    allocator_settings();
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

/// glibc's allocator, set for a long-running agent with one parse of tens
/// of MiB at its start (the kernel BTF), measured with
/// `cargo bench -p nodeproof --bench agent_memory`:
///
/// - allocations of 128 KiB and more are mmap'd and unmapped when freed, at
///   every size. glibc raises that threshold to the largest block freed so
///   far (up to 32 MiB): once the tracer's load had freed the BTF's
///   buffers, the next large ones came from the heap, and the agent kept
///   13-22 MiB of anonymous memory it no longer used (RssAnon 4 MiB with
///   the threshold fixed);
/// - at most two arenas: one per thread (tokio's workers, the tracer's,
///   the GPU probe's and the lint's blocking threads) kept ~1 MiB more
///   touched and fragmented (steady RSS 24.8-25.1 MiB with glibc's default
///   of 8 per CPU, 23.6-23.9 MiB with two).
fn allocator_settings() {
    // SAFETY: mallopt only sets glibc's allocator parameters; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}
