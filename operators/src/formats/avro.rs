//! Avro values ↔ events, walking the schema (formats.md's mapping).
//!
//! Reading: a record → a map (field order kept), `int`/`long` → int, `float`/`double` →
//! double, `boolean`, `string`, `null`, `enum` → its symbol, `array` → list, `map` → map (keys
//! sorted: Avro's binary form keeps an order, the crate's value does not), a union → the value
//! of its branch, `bytes`/`fixed` → base64 string, `decimal` → a string holding the exact
//! decimal (`"12.30"`, every digit of the scale), `uuid` → string, `timestamp-millis`/`-micros`
//! /`-nanos` (and their `local-` forms) → int milliseconds (rounded down), `date` → int days,
//! `time-millis`/`-micros` → int milliseconds after midnight, `duration` →
//! `{"months", "days", "millis"}`.
//!
//! Writing is the inverse, checked field by field against the writer schema: a missing field
//! takes its default (or `null` in a nullable union), and anything else that does not fit is an
//! error naming the field's path and what the schema expects; nothing is encoded until the
//! whole event fits.

use std::collections::HashMap;
use std::sync::Arc;

use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::schema::{Name as AvroName, RecordField, ResolvedSchema, Schema};
use apache_avro::types::Value as Avro;
use apache_avro::writer::datum::GenericDatumWriter;
use base64::Engine;
use num_bigint::BigInt;
use tidemark_runtime::name::{name_of, Name};
use tidemark_runtime::{Map, Value};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Parses an Avro schema's JSON text, with the parser's message on failure.
pub fn parse_schema(text: &str) -> Result<Schema, String> {
    Schema::parse_str(text).map_err(|e| e.to_string())
}

/// How to turn values of one schema into event values: the schema with named types resolved
/// and field names made once ([`Shape::of`]).
#[derive(Debug)]
struct Shape {
    /// `nodes[0]` is the root; named types are nodes that others point at by index.
    nodes: Vec<Node>,
}

#[derive(Debug)]
enum Node {
    /// null, boolean, int, long, float, double, string, enum, uuid, date, times.
    Plain,
    Bytes,
    Decimal(usize),
    Record(Vec<(Name, usize)>),
    Array(usize),
    Map(usize),
    Union(Vec<usize>),
    /// Filled in once the named type's node is made (recursive types).
    Pending,
}

impl Shape {
    fn of(schema: &Schema) -> Result<Shape, String> {
        let resolved = ResolvedSchema::try_from(schema).map_err(|e| e.to_string())?;
        let mut builder = ShapeBuilder {
            names: resolved.get_names(),
            nodes: Vec::new(),
            named: HashMap::new(),
        };
        builder.node(schema, None)?;
        Ok(Shape {
            nodes: builder.nodes,
        })
    }

    fn event(&self, value: Avro) -> Result<Map, String> {
        match self.value(0, value)? {
            Value::Map(m) => Ok(Arc::unwrap_or_clone(m)),
            other => Err(format!(
                "the schema's top level is not a record (found a {})",
                other.type_name()
            )),
        }
    }

    fn value(&self, node: usize, value: Avro) -> Result<Value, String> {
        Ok(match (&self.nodes[node], value) {
            (Node::Record(fields), Avro::Record(values)) => {
                let mut m = Map::with_capacity(fields.len() + 2);
                for ((name, field), (_, v)) in fields.iter().zip(values) {
                    m.push_unchecked(name.clone(), self.value(*field, v)?);
                }
                Value::from(m)
            }
            (Node::Array(items), Avro::Array(values)) => Value::from(
                values
                    .into_iter()
                    .map(|v| self.value(*items, v))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            (Node::Map(of), Avro::Map(values)) => {
                let mut entries: Vec<(String, Avro)> = values.into_iter().collect();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                let mut m = Map::with_capacity(entries.len());
                for (k, v) in entries {
                    m.push_unchecked(k, self.value(*of, v)?);
                }
                Value::from(m)
            }
            (Node::Union(branches), Avro::Union(i, v)) => {
                let branch = *branches
                    .get(i as usize)
                    .ok_or_else(|| format!("union branch {i} is not in the schema"))?;
                self.value(branch, *v)?
            }
            (Node::Decimal(scale), Avro::Decimal(d)) => {
                Value::from(decimal_text(&BigInt::from(d), *scale))
            }
            (_, v) => plain(v)?,
        })
    }
}

/// A value without children in the schema.
fn plain(value: Avro) -> Result<Value, String> {
    const MS: i64 = 1_000;
    Ok(match value {
        Avro::Null => Value::Null,
        Avro::Boolean(b) => Value::Bool(b),
        Avro::Int(i) | Avro::Date(i) | Avro::TimeMillis(i) => Value::Int(i.into()),
        Avro::Long(i) | Avro::TimestampMillis(i) | Avro::LocalTimestampMillis(i) => Value::Int(i),
        Avro::TimeMicros(i) | Avro::TimestampMicros(i) | Avro::LocalTimestampMicros(i) => {
            Value::Int(i.div_euclid(MS))
        }
        Avro::TimestampNanos(i) | Avro::LocalTimestampNanos(i) => Value::Int(i.div_euclid(MS * MS)),
        Avro::Float(f) => Value::Double(f.into()),
        Avro::Double(f) => Value::Double(f),
        Avro::String(s) => Value::from(s),
        Avro::Enum(_, symbol) => Value::from(symbol),
        Avro::Uuid(u) => Value::from(u.to_string()),
        Avro::Bytes(b) | Avro::Fixed(_, b) => Value::from(B64.encode(b)),
        Avro::BigDecimal(d) => Value::from(d.to_string()),
        Avro::Duration(d) => {
            let mut m = Map::with_capacity(3);
            m.push_unchecked("months", i64::from(u32::from(d.months())));
            m.push_unchecked("days", i64::from(u32::from(d.days())));
            m.push_unchecked("millis", i64::from(u32::from(d.millis())));
            Value::from(m)
        }
        Avro::Union(_, v) => plain(*v)?,
        other => return Err(format!("unexpected Avro value {other:?} for its schema")),
    })
}

/// The exact decimal `unscaled × 10^-scale` as text: `-0.05`, `12.30`, `7`.
pub fn decimal_text(unscaled: &BigInt, scale: usize) -> String {
    let digits = unscaled.magnitude().to_string();
    let sign = if unscaled.sign() == num_bigint::Sign::Minus {
        "-"
    } else {
        ""
    };
    if scale == 0 {
        return format!("{sign}{digits}");
    }
    let padded = if digits.len() <= scale {
        format!("{}{digits}", "0".repeat(scale + 1 - digits.len()))
    } else {
        digits
    };
    let (int, frac) = padded.split_at(padded.len() - scale);
    format!("{sign}{int}.{frac}")
}

/// The unscaled integer of `text` (a decimal such as `-12.3`) at `scale`: fewer fraction
/// digits are padded with zeros, more are an error (never rounded).
pub fn decimal_unscaled(text: &str, scale: usize) -> Result<BigInt, String> {
    let bad = || {
        format!("expected a decimal number with at most {scale} digits after the point, found \"{text}\"")
    };
    let t = text.trim();
    let (negative, t) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    if int.is_empty() && frac.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || frac.len() > scale
    {
        return Err(bad());
    }
    let digits = format!("{int}{frac}{}", "0".repeat(scale - frac.len()));
    let magnitude: BigInt = digits.parse().map_err(|_| bad())?;
    Ok(if negative { -magnitude } else { magnitude })
}

/// Turns the crate's values of one schema into events (for readers other than
/// [`AvroReader`]: object container files).
#[derive(Debug)]
pub struct EventMapper(Shape);

impl EventMapper {
    /// The mapping of `schema`'s values.
    pub fn new(schema: &Schema) -> Result<EventMapper, String> {
        Shape::of(schema).map(EventMapper)
    }

    /// The event of `value` (a record).
    pub fn event(&self, value: Avro) -> Result<Map, String> {
        self.0.event(value)
    }
}

struct ShapeBuilder<'a, 's> {
    names: &'a HashMap<AvroName, &'s Schema>,
    nodes: Vec<Node>,
    named: HashMap<AvroName, usize>,
}

impl ShapeBuilder<'_, '_> {
    fn push(&mut self, node: Node) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    fn node(&mut self, schema: &Schema, name: Option<&AvroName>) -> Result<usize, String> {
        if let Schema::Ref { name } = schema {
            if let Some(&known) = self.named.get(name) {
                return Ok(known);
            }
            let target = *self
                .names
                .get(name)
                .ok_or_else(|| format!("unknown type {name}"))?;
            return self.node(target, Some(name));
        }
        let at = self.push(Node::Pending);
        // Under the name it was referred by and its own (a nested type's may lack the
        // namespace its references carry): a recursive reference finds it either way.
        for key in name.into_iter().chain(schema.name()) {
            self.named.insert(key.clone(), at);
        }
        let node = match schema {
            Schema::Record(r) => Node::Record(
                r.fields
                    .iter()
                    .map(|f| Ok((name_of(&f.name), self.node(&f.schema, None)?)))
                    .collect::<Result<_, String>>()?,
            ),
            Schema::Array(a) => Node::Array(self.node(&a.items, None)?),
            Schema::Map(m) => Node::Map(self.node(&m.types, None)?),
            Schema::Union(u) => Node::Union(
                u.variants()
                    .iter()
                    .map(|v| self.node(v, None))
                    .collect::<Result<_, String>>()?,
            ),
            Schema::Decimal(d) => Node::Decimal(d.scale),
            Schema::Bytes | Schema::Fixed(_) => Node::Bytes,
            _ => Node::Plain,
        };
        self.nodes[at] = node;
        Ok(at)
    }
}

/// Reads Avro binary values of one writer schema as events, resolved to a reader schema when
/// one is given (Avro schema resolution: reader defaults filled, writer-only fields dropped).
pub struct AvroReader {
    datum: GenericDatumReader<'static>,
    /// The reader schema, when values are resolved to one.
    reader: Option<&'static Schema>,
    shape: Shape,
}

impl std::fmt::Debug for AvroReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AvroReader").finish_non_exhaustive()
    }
}

/// The length decimals are widened to before the crate resolves them: it refuses a `bytes`
/// decimal whose (minimal, two's complement) length could not hold every digit of the schema's
/// precision, though the value fits (`1.25` in one byte at precision 10). 64 bytes hold 153
/// digits.
const DECIMAL_BYTES: usize = 64;

/// Widens every decimal in `value` to [`DECIMAL_BYTES`] (sign-extended: the same number).
fn widen_decimals(value: &mut Avro) {
    match value {
        Avro::Decimal(d) => {
            let n = BigInt::from(d.clone());
            let bytes = n.to_signed_bytes_be();
            if bytes.len() < DECIMAL_BYTES {
                let fill = if n.sign() == num_bigint::Sign::Minus {
                    0xff
                } else {
                    0
                };
                let mut wide = vec![fill; DECIMAL_BYTES - bytes.len()];
                wide.extend_from_slice(&bytes);
                *d = apache_avro::Decimal::from(wide);
            }
        }
        Avro::Union(_, v) => widen_decimals(v),
        Avro::Array(items) => items.iter_mut().for_each(widen_decimals),
        Avro::Map(m) => m.values_mut().for_each(widen_decimals),
        Avro::Record(fields) => fields.iter_mut().for_each(|(_, v)| widen_decimals(v)),
        _ => {}
    }
}

impl AvroReader {
    /// A reader of `writer`'s values, as `reader` when given. The schemas are kept for the
    /// life of the process (a job reads a handful of schema versions; the crate's reader
    /// borrows them).
    pub fn new(writer: Schema, reader: Option<Arc<Schema>>) -> Result<AvroReader, String> {
        let writer: &'static Schema = Box::leak(Box::new(writer));
        let reader: Option<&'static Schema> =
            reader.map(|r| &*Box::leak(Box::new(Arc::unwrap_or_clone(r))));
        let shape = Shape::of(reader.unwrap_or(writer))?;
        let datum = GenericDatumReader::builder(writer)
            .build()
            .map_err(|e| e.to_string())?;
        if let Some(reader) = reader {
            apache_avro::schema_compatibility::SchemaCompatibility::can_read(writer, reader)
                .map_err(|e| format!("the reader schema cannot read the writer schema: {e}"))?;
        }
        Ok(AvroReader {
            datum,
            reader,
            shape,
        })
    }

    /// The event in `bytes` (one Avro binary value of a record schema). Bytes left over after
    /// the value are an error.
    pub fn read(&self, bytes: &[u8]) -> Result<Map, String> {
        let mut value = self.read_value(bytes)?;
        if let Some(reader) = self.reader {
            widen_decimals(&mut value);
            value = value.resolve(reader).map_err(|e| e.to_string())?;
        }
        self.shape.event(value)
    }

    /// The value as the crate reads it with the writer schema (the benchmark's baseline does
    /// only this). Bytes left over after the value are an error.
    pub fn read_value(&self, mut bytes: &[u8]) -> Result<Avro, String> {
        let value = self
            .datum
            .read_value(&mut bytes)
            .map_err(|e| e.to_string())?;
        if !bytes.is_empty() {
            return Err(format!("{} bytes left over after the value", bytes.len()));
        }
        Ok(value)
    }
}

/// Writes events as Avro binary values of one schema.
pub struct AvroWriter {
    schema: &'static Schema,
    names: HashMap<AvroName, &'static Schema>,
    datum: GenericDatumWriter<'static>,
}

impl std::fmt::Debug for AvroWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AvroWriter").finish_non_exhaustive()
    }
}

impl AvroWriter {
    /// A writer of `schema` (a record schema).
    pub fn new(schema: Schema) -> Result<AvroWriter, String> {
        if !matches!(schema, Schema::Record(_)) {
            return Err("the schema's top level must be a record".into());
        }
        let schema: &'static Schema = Box::leak(Box::new(schema));
        let resolved = ResolvedSchema::try_from(schema).map_err(|e| e.to_string())?;
        let names = resolved.get_names().clone();
        // The event is checked against the schema field by field as it is converted
        // ([`to_avro`]); the crate's own validation would walk it a second time.
        let datum = GenericDatumWriter::builder(schema)
            .resolved_schemata(resolved)
            .validate(false)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(AvroWriter {
            schema,
            names,
            datum,
        })
    }

    /// Appends the Avro binary value of `event` to `out`; an event that does not fit the
    /// schema is an error naming the field and what is expected, and `out` is left as it was.
    pub fn write(&self, event: &Map, out: &mut Vec<u8>) -> Result<(), String> {
        let Schema::Record(record) = self.schema else {
            unreachable!("checked in new")
        };
        let value = self.record(&record.fields, event, "")?;
        let len = out.len();
        self.datum.write_value_ref(out, &value).map_err(|e| {
            out.truncate(len);
            e.to_string()
        })?;
        Ok(())
    }

    fn record(&self, fields: &[RecordField], event: &Map, path: &str) -> Result<Avro, String> {
        let mut values = Vec::with_capacity(fields.len());
        for f in fields {
            let at = if path.is_empty() {
                f.name.clone()
            } else {
                format!("{path}.{}", f.name)
            };
            let v = match event.get(&f.name) {
                Some(v) => self.to_avro(&f.schema, v, &at)?,
                None => match &f.default {
                    Some(default) => Avro::try_from(default.clone())
                        .and_then(|v| v.resolve(&f.schema))
                        .map_err(|e| format!("field `{at}`: its default does not fit: {e}"))?,
                    None if nullable(&f.schema).is_some() => {
                        Avro::Union(nullable(&f.schema).unwrap_or(0), Box::new(Avro::Null))
                    }
                    None => {
                        return Err(format!(
                            "field `{at}`: missing, expected {} (the schema gives no default)",
                            describe(&f.schema)
                        ))
                    }
                },
            };
            values.push((f.name.clone(), v));
        }
        Ok(Avro::Record(values))
    }

    fn to_avro(&self, schema: &Schema, v: &Value, at: &str) -> Result<Avro, String> {
        let wrong = || {
            format!(
                "field `{at}`: expected {}, found {}",
                describe(schema),
                shown(v)
            )
        };
        Ok(match (schema, v) {
            (Schema::Ref { name }, _) => {
                let target = self
                    .names
                    .get(name)
                    .ok_or_else(|| format!("field `{at}`: unknown type {name}"))?;
                self.to_avro(target, v, at)?
            }
            (Schema::Null, Value::Null) => Avro::Null,
            (Schema::Boolean, Value::Bool(b)) => Avro::Boolean(*b),
            (Schema::Int, Value::Int(i)) => Avro::Int(i32::try_from(*i).map_err(|_| wrong())?),
            (Schema::Long, Value::Int(i)) => Avro::Long(*i),
            (Schema::Float, Value::Int(i)) => Avro::Float(*i as f32),
            (Schema::Float, Value::Double(d)) => Avro::Float(*d as f32),
            (Schema::Double, Value::Int(i)) => Avro::Double(*i as f64),
            (Schema::Double, Value::Double(d)) => Avro::Double(*d),
            (Schema::String, Value::String(s)) => Avro::String(s.to_string()),
            (Schema::Bytes, Value::String(s)) => {
                Avro::Bytes(B64.decode(s.as_bytes()).map_err(|_| wrong())?)
            }
            (Schema::Fixed(f), Value::String(s)) => {
                let b = B64.decode(s.as_bytes()).map_err(|_| wrong())?;
                if b.len() != f.size {
                    return Err(wrong());
                }
                Avro::Fixed(f.size, b)
            }
            (Schema::Enum(e), Value::String(s)) => {
                let i = e.symbols.iter().position(|x| x == &**s).ok_or_else(wrong)?;
                Avro::Enum(i as u32, s.to_string())
            }
            (Schema::Array(a), Value::List(items)) => Avro::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, x)| self.to_avro(&a.items, x, &format!("{at}[{i}]")))
                    .collect::<Result<_, _>>()?,
            ),
            (Schema::Map(m), Value::Map(entries)) => Avro::Map(
                entries
                    .iter()
                    .map(|(k, x)| {
                        Ok((
                            k.to_owned(),
                            self.to_avro(&m.types, x, &format!("{at}.{k}"))?,
                        ))
                    })
                    .collect::<Result<_, String>>()?,
            ),
            (Schema::Record(r), Value::Map(m)) => self.record(&r.fields, m, at)?,
            (Schema::Union(u), _) => {
                let mut last_error = None;
                for (i, branch) in u.variants().iter().enumerate() {
                    match self.to_avro(branch, v, at) {
                        Ok(x) => return Ok(Avro::Union(i as u32, Box::new(x))),
                        Err(e) if !matches!(branch, Schema::Null) => last_error = Some(e),
                        Err(_) => {}
                    }
                }
                // Inside a nullable record or list, the error within it says more.
                let inside = matches!(v, Value::Map(_) | Value::List(_));
                return Err(match last_error {
                    Some(e) if inside && u.variants().len() == 2 && u.is_nullable() => e,
                    _ => wrong(),
                });
            }
            (Schema::Decimal(d), _) => {
                let text = match v {
                    Value::String(s) => s.to_string(),
                    Value::Int(i) => i.to_string(),
                    _ => return Err(wrong()),
                };
                let unscaled =
                    decimal_unscaled(&text, d.scale).map_err(|e| format!("field `{at}`: {e}"))?;
                let bytes = unscaled.to_signed_bytes_be();
                let bytes = match &d.inner {
                    apache_avro::schema::InnerDecimalSchema::Fixed(f) => {
                        if bytes.len() > f.size {
                            return Err(format!(
                                "field `{at}`: {text} does not fit in {} bytes",
                                f.size
                            ));
                        }
                        let fill = if unscaled.sign() == num_bigint::Sign::Minus {
                            0xff
                        } else {
                            0
                        };
                        let mut b = vec![fill; f.size - bytes.len()];
                        b.extend_from_slice(&bytes);
                        b
                    }
                    apache_avro::schema::InnerDecimalSchema::Bytes => bytes,
                };
                Avro::Decimal(apache_avro::Decimal::from(bytes))
            }
            (Schema::BigDecimal, Value::String(s)) => {
                Avro::BigDecimal(s.parse().map_err(|_| wrong())?)
            }
            (Schema::Uuid(_), Value::String(s)) => Avro::Uuid(s.parse().map_err(|_| wrong())?),
            (Schema::Date, Value::Int(i)) => Avro::Date(i32::try_from(*i).map_err(|_| wrong())?),
            (Schema::TimeMillis, Value::Int(i)) => {
                Avro::TimeMillis(i32::try_from(*i).map_err(|_| wrong())?)
            }
            (Schema::TimeMicros, Value::Int(i)) => Avro::TimeMicros(i.saturating_mul(1_000)),
            (Schema::TimestampMillis, Value::Int(i)) => Avro::TimestampMillis(*i),
            (Schema::TimestampMicros, Value::Int(i)) => {
                Avro::TimestampMicros(i.saturating_mul(1_000))
            }
            (Schema::TimestampNanos, Value::Int(i)) => {
                Avro::TimestampNanos(i.saturating_mul(1_000_000))
            }
            (Schema::LocalTimestampMillis, Value::Int(i)) => Avro::LocalTimestampMillis(*i),
            (Schema::LocalTimestampMicros, Value::Int(i)) => {
                Avro::LocalTimestampMicros(i.saturating_mul(1_000))
            }
            (Schema::LocalTimestampNanos, Value::Int(i)) => {
                Avro::LocalTimestampNanos(i.saturating_mul(1_000_000))
            }
            _ => return Err(wrong()),
        })
    }
}

/// The index of `null` in a union schema.
fn nullable(schema: &Schema) -> Option<u32> {
    match schema {
        Schema::Union(u) => u
            .variants()
            .iter()
            .position(|s| matches!(s, Schema::Null))
            .map(|i| i as u32),
        _ => None,
    }
}

/// What a schema expects, for messages.
fn describe(schema: &Schema) -> String {
    match schema {
        Schema::Null => "null".into(),
        Schema::Boolean => "a boolean".into(),
        Schema::Int => "an int (32-bit)".into(),
        Schema::Long => "an int (long)".into(),
        Schema::Float | Schema::Double => "a number".into(),
        Schema::String => "a string".into(),
        Schema::Bytes => "bytes (a base64 string)".into(),
        Schema::Fixed(f) => format!("{} bytes (a base64 string)", f.size),
        Schema::Enum(e) => format!("one of the symbols {}", e.symbols.join(", ")),
        Schema::Array(_) => "a list".into(),
        Schema::Map(_) => "a map".into(),
        Schema::Record(r) => format!("a map (record {})", r.name),
        Schema::Union(u) => u
            .variants()
            .iter()
            .map(describe)
            .collect::<Vec<_>>()
            .join(" or "),
        Schema::Decimal(d) => format!("a decimal string with scale {}", d.scale),
        Schema::Uuid(_) => "a UUID string".into(),
        Schema::Date => "an int of days since 1970-01-01".into(),
        Schema::TimestampMillis
        | Schema::TimestampMicros
        | Schema::TimestampNanos
        | Schema::LocalTimestampMillis
        | Schema::LocalTimestampMicros
        | Schema::LocalTimestampNanos => "an int of milliseconds since the Unix epoch".into(),
        Schema::TimeMillis | Schema::TimeMicros => "an int of milliseconds after midnight".into(),
        Schema::Ref { name } => format!("a {name}"),
        other => format!("{other:?}"),
    }
}

/// A value in a message: its type and, when short, itself.
fn shown(v: &Value) -> String {
    let text = v.to_string();
    if text.len() <= 40 {
        format!("{} {text}", v.type_name())
    } else {
        format!("a {}", v.type_name())
    }
}

#[cfg(test)]
mod tests;
