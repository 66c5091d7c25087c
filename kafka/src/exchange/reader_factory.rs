//! The factory of an exchange's reader: the `kafka` source's code reading the exchange topic,
//! with a [`Relay`] that turns its messages back into records, markers and watermarks, and the
//! keyed state behind the exchange when the vertex keeps it ([`super::state`]).

use std::sync::Arc;

use tidemark_operators::event_json::EventParser;
use tidemark_runtime::component::SourceFactory;
use tidemark_runtime::{Source, SubtaskContext};

use super::coordination::Exchange;
use super::reader::Relay;
use crate::source::{KafkaSourceConfig, KafkaSourceFactory, Start};

impl Exchange {
    /// The factory of the reader (parallelism: the downstream vertex's).
    pub fn reader_factory(self: &Arc<Self>) -> SourceFactory {
        let exchange = self.clone();
        let source = KafkaSourceConfig {
            brokers: self.config.brokers.clone(),
            topics: vec![self.topic.clone()],
            group: None,
            start: Start::Committed,
            format: Default::default(),
            key: None,
            timestamp: None,
            on_error: Default::default(),
            properties: self.config.properties.clone(),
            schema_registry: None,
            schema: None,
            reader_schema: None,
            message: None,
            key_format: Default::default(),
            tombstones: Default::default(),
        };
        let factory = KafkaSourceFactory::new(source, &self.kafka)
            .map(Arc::new)
            .map_err(|e| e.to_string());
        Box::new(move |ctx: &SubtaskContext| {
            let factory = factory.clone()?;
            let what = format!("kafka exchange reader \"{}\"", ctx.vertex_id);
            exchange.ready(&what)?;
            // Checked before the consumer joins the group: a subtask that fails after joining
            // leaves a member behind that the group waits for.
            let state_partitions = match exchange.keeps_state() {
                true => Some(exchange.state_ready(&what)?),
                false => None,
            };
            let mut source = factory.make(ctx)?;
            if let Some(partitions) = state_partitions {
                let store = super::state::StateStore::new(
                    exchange.state_topic.clone(),
                    partitions as u32,
                    what.clone(),
                    &exchange.config.brokers,
                    &exchange.config.properties,
                    exchange.kafka.timeout(),
                )?
                .seeded_from(exchange.seed.clone());
                let kept = Arc::new(super::state::KeptState::new(
                    store,
                    exchange.topic.clone(),
                    exchange.vertex.clone(),
                    exchange.kafka.metrics().clone(),
                ));
                source.keep_state(kept.clone());
                exchange
                    .kept
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(ctx.subtask, kept);
            }
            source.relay = Some(Relay {
                exchange: exchange.clone(),
                subtask: ctx.subtask,
                readers: ctx.parallelism,
                local: exchange.kafka.instance(),
                what,
                last_check: i64::MIN,
                parser: EventParser::new(),
                replays: Default::default(),
                drops_replays: exchange.keeps_state(),
                replays_dropped: 0,
                restores_taken: 0,
                topic: tidemark_runtime::name::name_of(&exchange.topic),
            });
            Ok(Box::new(source) as Box<dyn Source>)
        })
    }
}
