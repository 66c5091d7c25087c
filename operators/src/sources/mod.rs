//! Sources: `generator`, `file`, `stdin`.

mod avro_file;
pub mod file;
pub mod generator;
pub mod stdin;
