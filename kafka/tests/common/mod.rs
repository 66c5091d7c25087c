//! Helpers for the Kafka tests: write and read topics of a mock cluster
//! (they live in [`tidemark_kafka::testing`]).
#![allow(unused_imports)]

pub use tidemark_kafka::testing::{produce_ids, read_keys, read_keys_of_values};
