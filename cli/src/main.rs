//! `tidemark`: run, validate and plan Tidemark job files. Everything is in the library
//! (`tidemark_cli`); this is its entry point.

fn main() -> std::process::ExitCode {
    tidemark_cli::main()
}
