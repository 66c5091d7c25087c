//! Sinks: `discard`, `stdout`, `file`.

pub mod discard;
pub mod file;
pub mod stdout;
