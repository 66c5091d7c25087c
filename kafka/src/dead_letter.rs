//! What a source's dead letter holds of a Kafka message it could not read: where it was and
//! its bytes, so that it can be found and replayed.

use base64::Engine;
use rdkafka::message::Message;
use tidemark_runtime::{Map, Value};

/// `{"topic", "partition", "offset", "timestamp", "key", "value"}`: the key and the value as
/// base64 (they are whatever bytes the producer wrote), `null` when absent; the timestamp in
/// milliseconds, `null` when the message has none.
pub fn message_record<M: Message>(message: &M) -> Value {
    let b64 = |b: Option<&[u8]>| {
        b.map_or(Value::Null, |b| {
            Value::from(base64::engine::general_purpose::STANDARD.encode(b))
        })
    };
    let mut m = Map::with_capacity(6);
    m.push_unchecked("topic", message.topic());
    m.push_unchecked("partition", message.partition());
    m.push_unchecked("offset", message.offset());
    m.push_unchecked(
        "timestamp",
        message
            .timestamp()
            .to_millis()
            .map_or(Value::Null, Value::Int),
    );
    m.push_unchecked("key", b64(message.key()));
    m.push_unchecked("value", b64(message.payload()));
    Value::from(m)
}
