//! The job file's fields as serde reads them: one struct per mapping, each field a
//! [`Spanned`] of its type, and the types that check a value and say what is expected.
//!
//! What a single value can tell is checked here, by the value's type: durations, numbers in
//! range, names of enums. What needs several fields or the whole file (a vertex id used twice,
//! `input` on a source, `invalid_timestamp` without a bound) is checked where the job file is
//! put together ([`crate::jobfile`]), and what needs the registry or the graph in
//! [`crate::build`].

use std::fmt;
use std::marker::PhantomData;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_aux::serde_introspection::serde_introspect;
use tidemark_markers::{parse_duration, parse_history_size, ConfigError, Granularity};
use tidemark_runtime::{check_parallelism, IdleStrategy, InvalidTimestampPolicy};
use tidemark_runtime::{ParallelismError, Partitioning};

use crate::spanned::Spanned;

/// The top level of a job file (keys starting with `x-` are ignored).
#[derive(Default, Deserialize)]
#[serde(
    default,
    rename = "a mapping of fields (name, sources, operators, sinks, …)"
)]
pub(crate) struct TopLevel {
    pub name: Spanned<JobName>,
    pub parallelism: Spanned<Parallelism>,
    pub max_parallelism: Spanned<MaxParallelism>,
    pub buffer_timeout: Spanned<Dur>,
    pub channel_capacity: Spanned<ChannelCapacity>,
    pub chaining: Spanned<Flag>,
    pub e2e_latency_everywhere: Spanned<Flag>,
    pub idle_strategy: Spanned<Parsed<IdleStrategy>>,
    pub latency: Spanned<Option<LatencyFields>>,
    pub e2e: Spanned<Option<E2eFields>>,
    pub checkpoint: Spanned<Option<CheckpointFields>>,
    pub stall_timeout: Spanned<Dur>,
    pub web_config_file: Spanned<FilePath>,
    // The vertex sections are read by id, with the rules ids have, where the job file is put
    // together: here they are only known fields.
    pub sources: Spanned<IgnoredAny>,
    pub operators: Spanned<IgnoredAny>,
    pub sinks: Spanned<IgnoredAny>,
}

/// `latency`.
#[derive(Default, Deserialize)]
#[serde(default, rename = "a mapping with interval, granularity, history_size")]
pub(crate) struct LatencyFields {
    pub interval: Spanned<Dur>,
    pub granularity: Spanned<Parsed<Granularity>>,
    pub history_size: Spanned<HistorySize>,
    pub buckets: Spanned<Buckets>,
}

/// `e2e` (record end-to-end latency).
#[derive(Default, Deserialize)]
#[serde(default, rename = "a mapping with buckets")]
pub(crate) struct E2eFields {
    pub buckets: Spanned<Buckets>,
}

/// `checkpoint`.
#[derive(Default, Deserialize)]
#[serde(default, rename = "a mapping with interval")]
pub(crate) struct CheckpointFields {
    pub interval: Spanned<Dur>,
    pub dir: Spanned<DirPath>,
    pub retain: Spanned<Retain>,
    pub max_concurrent: Spanned<MaxConcurrent>,
    pub min_pause: Spanned<Dur>,
    pub tolerable_failures: Spanned<TolerableFailures>,
}

/// The fields every vertex has, besides its component's own (and a source's
/// [`EventTimeFields`], and `exchange`, which is read as a setting).
#[derive(Default, Deserialize)]
#[serde(default, rename = "a mapping with at least \"type\"")]
pub(crate) struct VertexFields {
    #[serde(rename = "type")]
    pub type_name: Spanned<TypeName>,
    pub input: Spanned<Inputs>,
    pub parallelism: Spanned<Parallelism>,
    pub max_parallelism: Spanned<MaxParallelism>,
    pub partition: Spanned<Partitioning>,
}

/// The event-time fields of a source, applied by the runtime to whatever it emits.
#[derive(Default, Deserialize)]
#[serde(default, rename = "a mapping of event-time fields")]
pub(crate) struct EventTimeFields {
    pub timestamp_before_max: Spanned<Dur>,
    pub timestamp_after_max: Spanned<Dur>,
    pub invalid_timestamp: Spanned<InvalidTimestampPolicy>,
    pub watermarks: Spanned<Watermarks>,
}

/// A source's `watermarks` mapping.
#[derive(Default, Deserialize)]
#[serde(
    default,
    rename = "a mapping with max_out_of_orderness, interval, idleness"
)]
pub(crate) struct WatermarkFields {
    pub max_out_of_orderness: Spanned<Dur>,
    pub interval: Spanned<Dur>,
    pub idleness: Spanned<Dur>,
}

/// The fields of `T`, in order.
pub(crate) fn fields_of<T: Deserialize<'static>>() -> &'static [&'static str] {
    serde_introspect::<T>()
}

/// What a value is expected to be, for types read from text ([`Parsed`]).
pub(crate) trait Expecting {
    /// Said when the value is not a string.
    const EXPECTED: &'static str;
}

impl Expecting for IdleStrategy {
    const EXPECTED: &'static str = "park or spin";
}

impl Expecting for Granularity {
    const EXPECTED: &'static str = "one of single, operator, subtask";
}

/// A `T` written as a string and parsed by its `FromStr`, whose error is the message.
pub(crate) struct Parsed<T>(pub T);

impl<'de, T: FromStr + Expecting> Deserialize<'de> for Parsed<T>
where
    T::Err: fmt::Display,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<T: FromStr + Expecting> Visitor<'_> for V<T>
        where
            T::Err: fmt::Display,
        {
            type Value = Parsed<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(T::EXPECTED)
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Parsed<T>, E> {
                s.parse().map(Parsed).map_err(E::custom)
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// The job's name (checked for its characters where the job file is put together).
pub(crate) struct JobName(pub String);

impl<'de> Deserialize<'de> for JobName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        string(d, "the job's name (letters, digits, '.', '_' or '-')").map(JobName)
    }
}

/// A vertex's component type.
pub(crate) struct TypeName(pub String);

impl<'de> Deserialize<'de> for TypeName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        string(d, "the component type as a string").map(TypeName)
    }
}

/// A string, else `expected`.
fn string<'de, D: Deserializer<'de>>(d: D, expected: &'static str) -> Result<String, D::Error> {
    struct V(&'static str);
    impl Visitor<'_> for V {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<String, E> {
            Ok(s.to_owned())
        }
    }
    d.deserialize_any(V(expected))
}

/// `true` or `false`.
pub(crate) struct Flag(pub bool);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Flag;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("true or false")
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Flag, E> {
                Ok(Flag(b))
            }
        }
        d.deserialize_any(V)
    }
}

/// A number as the job file shows it (`2.5`, `1e3`), for the parsers of text.
fn number_text(n: impl Into<serde_yaml_ng::Number>) -> String {
    n.into().to_string()
}

/// Visits of numbers that hand them to the visitor's `visit_str` as the job file shows them
/// (a duration's bare milliseconds, an id written as a number).
macro_rules! numbers_as_text {
    ($value:ty) => {
        fn visit_u64<E: de::Error>(self, n: u64) -> Result<$value, E> {
            self.visit_str(&number_text(n))
        }
        fn visit_i64<E: de::Error>(self, n: i64) -> Result<$value, E> {
            self.visit_str(&number_text(n))
        }
        fn visit_f64<E: de::Error>(self, n: f64) -> Result<$value, E> {
            self.visit_str(&number_text(n))
        }
    };
}

/// A duration: a string with a unit (`200ms`) or a bare number of milliseconds, read by
/// [`parse_duration`].
pub(crate) struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration like 200ms, 1s, 5us (a bare number means milliseconds)")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Dur, E> {
                parse_duration(s).map(Dur).map_err(E::custom)
            }
            numbers_as_text!(Dur);
        }
        d.deserialize_any(V)
    }
}

/// A parallelism: a whole number from 1 to the runtime's maximum.
pub(crate) struct Parallelism(pub NonZeroUsize);

impl<'de> Deserialize<'de> for Parallelism {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl V {
            /// A number too large for 64 bits: the runtime's "too high", with its digits.
            fn too_high<E: de::Error>(digits: String) -> E {
                let error = ParallelismError::TooHigh(u64::MAX).to_string();
                E::custom(error.replacen(&u64::MAX.to_string(), &digits, 1))
            }
        }
        impl Visitor<'_> for V {
            type Value = Parallelism;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a whole number of at least 1")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Parallelism, E> {
                match check_parallelism(n) {
                    Ok(n) => NonZeroUsize::new(n)
                        .map(Parallelism)
                        .ok_or_else(|| E::custom("parallelism must be at least 1")),
                    Err(e) => Err(E::custom(e)),
                }
            }
            fn visit_u128<E: de::Error>(self, n: u128) -> Result<Parallelism, E> {
                Err(V::too_high(n.to_string()))
            }
            fn visit_i128<E: de::Error>(self, n: i128) -> Result<Parallelism, E> {
                Err(V::too_high(n.to_string()))
            }
        }
        d.deserialize_u64(V)
    }
}

/// `max_parallelism`: the number of key groups, 1 to 32768 (checked against the vertex's
/// parallelism when the graph is built).
pub(crate) struct MaxParallelism(pub u32);

impl<'de> Deserialize<'de> for MaxParallelism {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = MaxParallelism;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let max = tidemark_runtime::key_group::MAX_KEY_GROUPS;
                write!(f, "a whole number of key groups from 1 to {max}")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<MaxParallelism, E> {
                let max = tidemark_runtime::key_group::MAX_KEY_GROUPS;
                match u32::try_from(n) {
                    Ok(n) if (1..=max).contains(&n) => Ok(MaxParallelism(n)),
                    _ => Err(E::invalid_value(de::Unexpected::Unsigned(n), &self)),
                }
            }
        }
        d.deserialize_u64(V)
    }
}

/// `channel_capacity`: a whole number of batches within the bounds `--channel-capacity`
/// takes (its parser's message).
pub(crate) struct ChannelCapacity(pub usize);

impl<'de> Deserialize<'de> for ChannelCapacity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ChannelCapacity;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a whole number of batches from 1 to 4096")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<ChannelCapacity, E> {
                parse(number_text(n))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<ChannelCapacity, E> {
                parse(number_text(n))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<ChannelCapacity, E> {
                parse(number_text(n))
            }
            // Too large for 64 bits: out of range all the same.
            fn visit_u128<E: de::Error>(self, n: u128) -> Result<ChannelCapacity, E> {
                parse(n.to_string())
            }
            fn visit_i128<E: de::Error>(self, n: i128) -> Result<ChannelCapacity, E> {
                parse(n.to_string())
            }
        }
        fn parse<E: de::Error>(text: String) -> Result<ChannelCapacity, E> {
            crate::values::parse_channel_capacity(&text)
                .map(ChannelCapacity)
                .map_err(E::custom)
        }
        d.deserialize_any(V)
    }
}

/// `latency.history_size`: read by [`parse_history_size`], whose message names what was
/// written (a value that is not a scalar as its description).
pub(crate) struct HistorySize(pub NonZeroUsize);

impl<'de> Deserialize<'de> for HistorySize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = HistorySize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a whole number of at least 1")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<HistorySize, E> {
                parse_history_size(s).map(HistorySize).map_err(E::custom)
            }
            numbers_as_text!(HistorySize);
            fn visit_u128<E: de::Error>(self, n: u128) -> Result<HistorySize, E> {
                self.visit_str(&format!("the number {n}"))
            }
            fn visit_i128<E: de::Error>(self, n: i128) -> Result<HistorySize, E> {
                self.visit_str(&format!("the number {n}"))
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<HistorySize, E> {
                self.visit_str(&b.to_string())
            }
            fn visit_unit<E: de::Error>(self) -> Result<HistorySize, E> {
                self.visit_str("nothing (null)")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<HistorySize, A::Error> {
                self.visit_str("a list")
            }
            fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<HistorySize, A::Error> {
                self.visit_str("a mapping")
            }
        }
        d.deserialize_any(V)
    }
}

/// A list of durations, ascending, as histogram bucket bounds (`latency.buckets`,
/// `e2e.buckets`).
pub(crate) struct Buckets(pub tidemark_markers::Buckets);

impl<'de> Deserialize<'de> for Buckets {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Buckets;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of durations in ascending order, like [1ms, 10ms, 100ms, 1s]")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Buckets, A::Error> {
                let mut bounds = Vec::new();
                while let Some(Dur(d)) = items.next_element()? {
                    bounds.push(d);
                }
                tidemark_markers::Buckets::new(&bounds)
                    .map(Buckets)
                    .map_err(|e| de::Error::custom(ConfigError::from(e)))
            }
        }
        d.deserialize_any(V)
    }
}

/// `checkpoint.dir`: a path, not blank.
pub(crate) struct DirPath(pub PathBuf);

impl<'de> Deserialize<'de> for DirPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        path(d, "a directory path as a string").map(DirPath)
    }
}

/// A file's path (`web_config_file`): a string that is not blank.
pub(crate) struct FilePath(pub PathBuf);

impl<'de> Deserialize<'de> for FilePath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        path(d, "a file path as a string").map(FilePath)
    }
}

/// A path written as a string that is not blank; `expected` says what it names.
fn path<'de, D: Deserializer<'de>>(d: D, expected: &'static str) -> Result<PathBuf, D::Error> {
    struct V(&'static str);
    impl Visitor<'_> for V {
        type Value = PathBuf;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<PathBuf, E> {
            match s.trim().is_empty() {
                true => Err(E::invalid_value(de::Unexpected::Str(s), &self)),
                false => Ok(PathBuf::from(s)),
            }
        }
    }
    d.deserialize_any(V(expected))
}

/// `checkpoint.retain`: complete checkpoints kept, 1 to 1000.
pub(crate) struct Retain(pub usize);

impl<'de> Deserialize<'de> for Retain {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Retain;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a whole number of checkpoints from 1 to 1000")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Retain, E> {
                match n {
                    1..=1000 => Ok(Retain(n as usize)),
                    _ => Err(E::invalid_value(de::Unexpected::Unsigned(n), &self)),
                }
            }
        }
        d.deserialize_u64(V)
    }
}

/// A whole number in `min..=max` (`expected` names it for the error).
fn whole_number<'de, D: Deserializer<'de>>(
    d: D,
    min: u64,
    max: u64,
    expected: &'static str,
) -> Result<u64, D::Error> {
    struct V(u64, u64, &'static str);
    impl Visitor<'_> for V {
        type Value = u64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.2)
        }
        fn visit_u64<E: de::Error>(self, n: u64) -> Result<u64, E> {
            match (self.0..=self.1).contains(&n) {
                true => Ok(n),
                false => Err(E::invalid_value(de::Unexpected::Unsigned(n), &self)),
            }
        }
    }
    d.deserialize_u64(V(min, max, expected))
}

/// `checkpoint.max_concurrent`: checkpoints in flight at once, 1 to 100.
pub(crate) struct MaxConcurrent(pub u64);

impl<'de> Deserialize<'de> for MaxConcurrent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        whole_number(d, 1, 100, "a whole number of checkpoints from 1 to 100").map(MaxConcurrent)
    }
}

/// `checkpoint.tolerable_failures`: checkpoints that may fail in a row, 0 to 1000000.
pub(crate) struct TolerableFailures(pub u64);

impl<'de> Deserialize<'de> for TolerableFailures {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        whole_number(
            d,
            0,
            1_000_000,
            "a whole number of checkpoints from 0 to 1000000",
        )
        .map(TolerableFailures)
    }
}

/// An operator's or sink's `input`: an id or a non-empty list of ids (each read on its own,
/// so that every bad one is reported).
pub(crate) struct Inputs(pub Vec<String>);

impl<'de> Deserialize<'de> for Inputs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Inputs;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a vertex id or a non-empty list of vertex ids")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Inputs, E> {
                Ok(Inputs(vec![s.to_owned()]))
            }
            numbers_as_text!(Inputs);
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Inputs, E> {
                self.visit_str(&b.to_string())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Inputs, A::Error> {
                let mut ids = Vec::new();
                let mut any = false;
                while let Some(id) = items.next_element::<Spanned<InputId>>()? {
                    any = true;
                    ids.extend(id.value.map(|InputId(id)| id));
                }
                match any {
                    true => Ok(Inputs(ids)),
                    false => Err(de::Error::invalid_length(0, &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// One id of a list of inputs.
struct InputId(String);

impl<'de> Deserialize<'de> for InputId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = InputId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a vertex id")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<InputId, E> {
                Ok(InputId(s.to_owned()))
            }
            numbers_as_text!(InputId);
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<InputId, E> {
                self.visit_str(&b.to_string())
            }
        }
        d.deserialize_any(V)
    }
}

/// A source's `watermarks`: a mapping (empty or `null` for the defaults) or `true` turns them
/// on, `false` leaves them off.
pub(crate) enum Watermarks {
    /// `false`.
    Off,
    /// On, with these fields (all absent for the defaults).
    On(WatermarkFields),
}

impl<'de> Deserialize<'de> for Watermarks {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Watermarks;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a mapping with max_out_of_orderness, interval, idleness (empty for the \
                     defaults), or true or false",
                )
            }
            fn visit_unit<E: de::Error>(self) -> Result<Watermarks, E> {
                Ok(Watermarks::On(WatermarkFields::default()))
            }
            fn visit_bool<E: de::Error>(self, on: bool) -> Result<Watermarks, E> {
                Ok(match on {
                    true => Watermarks::On(WatermarkFields::default()),
                    false => Watermarks::Off,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Watermarks, A::Error> {
                let de = de::value::MapAccessDeserializer::new(map);
                WatermarkFields::deserialize(de).map(Watermarks::On)
            }
        }
        // Named without "a mapping": `true`, `false` and `null` come to the visitor too.
        d.deserialize_struct("watermarks", fields_of::<WatermarkFields>(), V)
    }
}
