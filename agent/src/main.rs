//! `nodeproof`: parse the command line, set up logging, run the command
//! (`cli`). The work is in the library.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
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
