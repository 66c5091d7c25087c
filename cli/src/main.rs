//! `tidemark`: run, validate and plan Tidemark job files. Everything is in the library
//! (`tidemark_cli`); this is its entry point.

/// mimalloc instead of the system allocator: events are made on source threads and freed on the
/// threads downstream of them, a pattern glibc's malloc handles poorly (a profile of a JSON job
/// at parallelism 2 put about 42% of its CPU in malloc and free).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    tidemark_cli::main()
}
