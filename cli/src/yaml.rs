//! The job file as YAML: the document as a [`Value`] (big integers kept, duplicate keys
//! refused), how a value is described in messages ("found the string \"x\""), and a
//! component's settings as JSON.

use serde_yaml_ng::{Mapping, Value};

/// The YAML tag the reader gives integers too large for 64 bits (kept as their digits).
pub(crate) const BIG_NUMBER_TAG: &str = "!tidemark-big-number";

/// A short description of a YAML value for "found …".
pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::Null => "nothing (null)".into(),
        Value::Bool(b) => format!("{b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string \"{s}\""),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(t) if t.tag == BIG_NUMBER_TAG => match &t.value {
            Value::String(digits) => format!("the number {digits}"),
            _ => "a number".into(),
        },
        Value::Tagged(t) => format!("a value tagged {}", t.tag),
    }
}

/// A YAML document as a [`Value`], except that integers beyond 64 bits are kept (as their
/// digits, tagged [`BIG_NUMBER_TAG`]) rather than failing the whole document, so that
/// `parallelism: 99999999999999999999` is one error about one field.
pub(crate) struct Document(pub(crate) Value);

impl<'de> serde::Deserialize<'de> for Document {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(DocumentVisitor).map(Document)
    }
}

struct DocumentVisitor;

impl<'de> serde::de::Visitor<'de> for DocumentVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Value, E> {
        Ok(big_number(v.to_string()))
    }
    fn visit_u128<E>(self, v: u128) -> Result<Value, E> {
        Ok(big_number(v.to_string()))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(DocumentVisitor)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Document(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Sequence(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Mapping::new();
        while let Some(Document(k)) = map.next_key()? {
            let Document(v) = map.next_value()?;
            if out.contains_key(&k) {
                return Err(serde::de::Error::custom(format!(
                    "duplicate key {}",
                    describe(&k)
                )));
            }
            out.insert(k, v);
        }
        Ok(Value::Mapping(out))
    }
    fn visit_enum<A: serde::de::EnumAccess<'de>>(self, data: A) -> Result<Value, A::Error> {
        use serde::de::VariantAccess as _;
        let (tag, variant): (String, _) = data.variant()?;
        let Document(value) = variant.newtype_variant()?;
        Ok(Value::Tagged(Box::new(serde_yaml_ng::value::TaggedValue {
            tag: serde_yaml_ng::value::Tag::new(tag),
            value,
        })))
    }
}

fn big_number(digits: String) -> Value {
    Value::Tagged(Box::new(serde_yaml_ng::value::TaggedValue {
        tag: serde_yaml_ng::value::Tag::new(BIG_NUMBER_TAG),
        value: Value::String(digits),
    }))
}

/// A mapping key as text (ids and fields may be written as numbers or booleans in YAML).
pub(crate) fn key_text(k: &Value) -> Option<String> {
    match k {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Converts a YAML value of a component's configuration to JSON, or says what is expected.
pub(crate) fn to_json(v: &Value) -> Result<serde_json::Value, &'static str> {
    use serde_json::Value as J;
    Ok(match v {
        Value::Null => J::Null,
        Value::Bool(b) => J::Bool(*b),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                J::from(u)
            } else if let Some(i) = n.as_i64() {
                J::from(i)
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                J::Number(serde_json::Number::from_f64(f).ok_or("a finite number")?)
            }
        }
        Value::String(s) => J::String(s.clone()),
        Value::Sequence(items) => J::Array(items.iter().map(to_json).collect::<Result<_, _>>()?),
        Value::Mapping(m) => {
            let mut out = serde_json::Map::new();
            for (k, v) in m {
                let k = key_text(k).ok_or("a mapping with text keys")?;
                out.insert(k, to_json(v)?);
            }
            J::Object(out)
        }
        Value::Tagged(_) => return Err("a plain value (YAML tags are not supported)"),
    })
}
