//! Protobuf messages → events, from `.proto` text compiled at run time (protox) and read as
//! dynamic messages (prost-reflect).
//!
//! A message → a map of its fields in declaration order: integers → int (a `uint64` beyond
//! `i64` → double), `float`/`double` → double, `bool`, `string`, `bytes` → base64 string, an
//! enum → its value's name (the number when the schema has no name for it), a repeated field →
//! list, a map field → map (keys as text, sorted), a nested message → map (`null` when unset),
//! `google.protobuf.Timestamp` → int milliseconds since the Unix epoch, the wrapper types
//! (`google.protobuf.Int64Value`, …) → their value. Of a `oneof`, only the field that is set
//! appears. Scalar fields without presence that are unset take their default (0, `""`,
//! `false`), as Protobuf reads them.

use std::collections::HashMap;

use base64::Engine;
use prost_reflect::{
    DescriptorPool, DynamicMessage, Kind, MapKey, MessageDescriptor, ReflectMessage, Value as Pb,
};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};
use tidemark_runtime::{Map, Value};

/// Compiles a Protobuf schema: `main` (its name and text) and the files it imports
/// (`imports`: name → text); Google's well-known types are built in. A text may be `.proto`
/// source or, as Confluent's serialisers register it, a base64 `FileDescriptorProto`. Returns
/// the descriptors and the main file's name (a descriptor carries its own).
pub fn compile(
    main: (&str, &str),
    imports: &HashMap<String, String>,
) -> Result<(DescriptorPool, String), String> {
    struct Sources {
        main: (String, String),
        imports: HashMap<String, String>,
    }
    impl FileResolver for Sources {
        fn open_file(&self, name: &str) -> Result<File, protox::Error> {
            if name == self.main.0 {
                return file(name, &self.main.1);
            }
            match self.imports.get(name) {
                Some(text) => file(name, text),
                None => Err(protox::Error::file_not_found(name)),
            }
        }
    }
    let main_name = serialized(main.1).map_or(main.0.to_owned(), |d| d.name().to_owned());
    let mut resolver = ChainFileResolver::new();
    resolver.add(Sources {
        main: (main_name.clone(), main.1.to_owned()),
        imports: imports.clone(),
    });
    resolver.add(GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.include_imports(true);
    compiler.open_file(&main_name).map_err(|e| e.to_string())?;
    Ok((compiler.descriptor_pool(), main_name))
}

/// A file from its text: a base64 descriptor, else `.proto` source.
fn file(name: &str, text: &str) -> Result<File, protox::Error> {
    match serialized(text) {
        Some(descriptor) => Ok(File::from_file_descriptor_proto(descriptor)),
        None => File::from_source(name, text),
    }
}

/// `text` as a base64 `FileDescriptorProto`, if it is one.
fn serialized(text: &str) -> Option<prost_types::FileDescriptorProto> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .ok()?;
    let descriptor =
        <prost_types::FileDescriptorProto as prost::Message>::decode(&bytes[..]).ok()?;
    (!descriptor.name().is_empty()).then_some(descriptor)
}

/// The message `name` (`pkg.Name`) of a compiled file.
pub fn message(pool: &DescriptorPool, name: &str) -> Result<MessageDescriptor, String> {
    pool.get_message_by_name(name).ok_or_else(|| {
        let known: Vec<String> = pool
            .all_messages()
            .filter(|m| !m.full_name().starts_with("google.protobuf."))
            .map(|m| m.full_name().to_owned())
            .collect();
        format!(
            "no message `{name}` in the schema (it has {})",
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        )
    })
}

/// The message a Confluent message-index list points at in file `file` of `pool`: the first
/// index among the file's top-level messages, the next ones among the nested messages.
pub fn message_at(
    pool: &DescriptorPool,
    file: &str,
    indexes: &[usize],
) -> Result<MessageDescriptor, String> {
    let file = pool
        .get_file_by_name(file)
        .ok_or_else(|| format!("no file {file} in the schema"))?;
    let mut current: Option<MessageDescriptor> = None;
    for &i in indexes {
        let next = match &current {
            None => file.messages().nth(i),
            Some(m) => m.child_messages().filter(|c| !c.is_map_entry()).nth(i),
        };
        current =
            Some(next.ok_or_else(|| format!("message index {indexes:?} is not in the schema"))?);
    }
    current.ok_or_else(|| "empty message-index list".to_owned())
}

/// Reads `bytes` as message `desc` and maps it to an event.
pub fn read(desc: &MessageDescriptor, bytes: &[u8]) -> Result<Map, String> {
    let message = DynamicMessage::decode(desc.clone(), bytes).map_err(|e| e.to_string())?;
    Ok(event(&message))
}

fn event(message: &DynamicMessage) -> Map {
    let desc = message.descriptor();
    let mut m = Map::with_capacity(desc.fields().len() + 2);
    for field in desc.fields() {
        let in_oneof = field.containing_oneof().is_some_and(|o| !o.is_synthetic());
        let unset_message = matches!(field.kind(), Kind::Message(_))
            && !field.is_list()
            && !field.is_map()
            && !message.has_field(&field);
        if in_oneof && !message.has_field(&field) {
            continue;
        }
        let value = if unset_message
            || (field.supports_presence() && !message.has_field(&field) && !field.is_list())
        {
            Value::Null
        } else {
            value(&message.get_field(&field), &field.kind())
        };
        m.push_unchecked(field.name(), value);
    }
    m
}

fn value(v: &Pb, kind: &Kind) -> Value {
    match v {
        Pb::Bool(b) => Value::Bool(*b),
        Pb::I32(i) => Value::Int((*i).into()),
        Pb::I64(i) => Value::Int(*i),
        Pb::U32(i) => Value::Int((*i).into()),
        Pb::U64(i) => i64::try_from(*i).map_or(Value::Double(*i as f64), Value::Int),
        Pb::F32(f) => Value::Double((*f).into()),
        Pb::F64(f) => Value::Double(*f),
        Pb::String(s) => Value::from(s.as_str()),
        Pb::Bytes(b) => Value::from(base64::engine::general_purpose::STANDARD.encode(b)),
        Pb::EnumNumber(n) => match kind {
            Kind::Enum(e) => match e.get_value(*n) {
                Some(v) => Value::from(v.name()),
                None => Value::Int((*n).into()),
            },
            _ => Value::Int((*n).into()),
        },
        Pb::Message(m) => message_value(m),
        Pb::List(items) => Value::from(items.iter().map(|x| value(x, kind)).collect::<Vec<_>>()),
        Pb::Map(entries) => {
            let value_kind = match kind {
                Kind::Message(entry) => entry.map_entry_value_field().kind(),
                other => other.clone(),
            };
            let mut sorted: Vec<(&MapKey, &Pb)> = entries.iter().collect();
            sorted.sort_by(|a, b| a.0.cmp(b.0));
            let mut m = Map::with_capacity(sorted.len());
            for (k, x) in sorted {
                let key = match k {
                    MapKey::Bool(b) => b.to_string(),
                    MapKey::I32(i) => i.to_string(),
                    MapKey::I64(i) => i.to_string(),
                    MapKey::U32(i) => i.to_string(),
                    MapKey::U64(i) => i.to_string(),
                    MapKey::String(s) => s.clone(),
                };
                m.insert(key, value(x, &value_kind));
            }
            Value::from(m)
        }
    }
}

/// A nested message: well-known types by their meaning, others as maps.
fn message_value(m: &DynamicMessage) -> Value {
    let desc = m.descriptor();
    match desc.full_name() {
        "google.protobuf.Timestamp" => {
            let get = |name: &str| match desc.get_field_by_name(name).map(|f| m.get_field(&f)) {
                Some(v) => match v.as_ref() {
                    Pb::I64(i) => *i,
                    Pb::I32(i) => i64::from(*i),
                    _ => 0,
                },
                None => 0,
            };
            let (seconds, nanos) = (get("seconds"), get("nanos"));
            Value::Int(
                seconds
                    .saturating_mul(1_000)
                    .saturating_add(nanos.div_euclid(1_000_000)),
            )
        }
        "google.protobuf.DoubleValue"
        | "google.protobuf.FloatValue"
        | "google.protobuf.Int64Value"
        | "google.protobuf.UInt64Value"
        | "google.protobuf.Int32Value"
        | "google.protobuf.UInt32Value"
        | "google.protobuf.BoolValue"
        | "google.protobuf.StringValue"
        | "google.protobuf.BytesValue" => match desc.get_field_by_name("value") {
            Some(f) => value(&m.get_field(&f), &f.kind()),
            None => Value::Null,
        },
        _ => Value::from(event(m)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    const PROTO: &str = r#"
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  enum Status { OPEN = 0; PAID = 1; }
  int64 id = 1;
  string user = 2;
  Status status = 3;
  repeated string tags = 4;
  map<string, int32> counts = 5;
  Address address = 6;
  google.protobuf.Timestamp at = 7;
  oneof payment { string card = 8; string iban = 9; }
  bytes raw = 10;
  double amount = 11;
  optional string note = 12;
  message Address { string city = 1; }
}
message Other { int32 x = 1; }
"#;

    #[test]
    fn every_kind_of_field_maps_as_the_spec_says() {
        let (pool, main) = compile(("order.proto", PROTO), &HashMap::new()).unwrap();
        assert_eq!(main, "order.proto");
        let order = message(&pool, "shop.Order").unwrap();
        let mut m = DynamicMessage::new(order.clone());
        m.set_field_by_name("id", Pb::I64(7));
        m.set_field_by_name("user", Pb::String("u1".into()));
        m.set_field_by_name("status", Pb::EnumNumber(1));
        m.set_field_by_name("tags", Pb::List(vec![Pb::String("a".into())]));
        m.set_field_by_name(
            "counts",
            Pb::Map(HashMap::from([
                (MapKey::String("b".into()), Pb::I32(2)),
                (MapKey::String("a".into()), Pb::I32(1)),
            ])),
        );
        let at = pool
            .get_message_by_name("google.protobuf.Timestamp")
            .unwrap();
        let mut ts = DynamicMessage::new(at);
        ts.set_field_by_name("seconds", Pb::I64(1_700_000_000));
        ts.set_field_by_name("nanos", Pb::I32(250_000_000));
        m.set_field_by_name("at", Pb::Message(ts));
        m.set_field_by_name("iban", Pb::String("DE00".into()));
        m.set_field_by_name("raw", Pb::Bytes(vec![1, 2, 255].into()));
        m.set_field_by_name("amount", Pb::F64(2.5));
        let event = read(&order, &m.encode_to_vec()).unwrap();
        assert_eq!(
            Value::from(event).to_string(),
            r#"{"id":7,"user":"u1","status":"PAID","tags":["a"],"counts":{"a":1,"b":2},"address":null,"at":1700000000250,"iban":"DE00","raw":"AQL/","amount":2.5,"note":null}"#
        );
        assert!(read(&order, &[0xff, 0xff]).is_err());
        assert_eq!(
            message_at(&pool, "order.proto", &[1]).unwrap().full_name(),
            "shop.Other"
        );
        assert_eq!(
            message_at(&pool, "order.proto", &[0, 0])
                .unwrap()
                .full_name(),
            "shop.Order.Address"
        );
        let unknown = message(&pool, "shop.Nope").unwrap_err();
        assert!(
            unknown.starts_with("no message `shop.Nope` in the schema (it has ")
                && unknown.contains("shop.Order.Address")
                && unknown.contains("shop.Other"),
            "{unknown}"
        );
        assert!(compile(("bad.proto", "message {"), &HashMap::new()).is_err());
        // As Confluent's serialisers register it: the file's descriptor in base64.
        let file = pool.get_file_by_name("order.proto").unwrap();
        let text = base64::engine::general_purpose::STANDARD
            .encode(file.file_descriptor_proto().encode_to_vec());
        let (again, main) = compile(("ignored.proto", &text), &HashMap::new()).unwrap();
        assert_eq!(main, "order.proto");
        assert!(again.get_message_by_name("shop.Order.Address").is_some());
    }
}
