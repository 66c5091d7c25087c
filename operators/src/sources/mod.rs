//! Sources: `generator`, `file`, `stdin`.

pub mod file;
pub mod generator;
pub mod stdin;
