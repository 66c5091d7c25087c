//! What identifies a record across a failover (`docs/kafka.md`, "Result ids"): the input
//! message it was made from ([`Origin`]) and, for an operator's result, which result it is
//! ([`ResultId`]). A record carries both beside its event ([`Record::origin`],
//! [`Record::result_id`]); neither is part of the event.
//!
//! - A `kafka` source gives each record the origin of its message (topic, partition, offset);
//!   the writer of a Kafka exchange numbers the records one message gave (`seq`) and writes
//!   the origin as a header, and the reader gives it back to the record it makes.
//! - A `window` gives each result it fires a [`ResultId::Window`] (its vertex, the window's
//!   bounds and the firing's number); a `reduce` gives each output a [`ResultId::Reduce`]
//!   (its vertex), with the input's origin.
//! - The `kafka` sink writes [`write_result_id`]'s text as the header `tidemark-result-id`: a
//!   result emitted again after a failover is the same record with the same id, so a consumer
//!   drops repeats by it.
//!
//! Both are small values made once per input message or per result (the names are interned:
//! cloning one touches no reference count), never per record in between.

use std::io::Write as _;

use crate::record::Record;
pub use crate::record_id::{Origin, OriginText, ResultId};

/// Appends `record`'s result id, as the `kafka` sink writes it in the header
/// `tidemark-result-id`, and returns whether it has one:
///
/// - `window/<vertex>/<start ns>/<end ns>/<firing>/<key as JSON>`
/// - `reduce/<vertex>/<topic>/<partition>/<offset>/<seq>/<key as JSON>`
/// - `join/<vertex>/<left origin>/<right origin>/<key as JSON>`, each origin
///   `<topic>/<partition>/<offset>/<seq>`, `-` for a null side
///
/// The key comes last, so it may hold any text. A reduce's output whose input had no origin
/// (a source other than `kafka`) has no id.
pub fn write_result_id(record: &Record, out: &mut Vec<u8>) -> bool {
    match record.result_id() {
        Some(ResultId::Window {
            vertex,
            start,
            end,
            firing,
        }) => {
            let _ = write!(out, "window/{vertex}/{start}/{end}/{firing}/");
        }
        Some(ResultId::Reduce { vertex }) => {
            let Some(origin) = record.origin() else {
                return false;
            };
            let _ = write!(out, "reduce/{vertex}/");
            origin.write_text(out);
            out.push(b'/');
        }
        Some(ResultId::Join {
            vertex,
            left,
            right,
        }) => {
            let _ = write!(out, "join/{vertex}/");
            for side in [left, right] {
                match side {
                    Some(origin) => origin.write_text(out),
                    None => out.push(b'-'),
                }
                out.push(b'/');
            }
        }
        None => return false,
    }
    record
        .key()
        .write_json(&mut *out)
        .expect("writing to memory cannot fail");
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::name::name_of;
    use crate::value::{Map, Value};

    fn origin(offset: i64, seq: u32) -> Origin {
        Origin {
            topic: name_of("orders.v2"),
            partition: 3,
            offset,
            seq,
        }
    }

    #[test]
    fn an_origin_is_read_back_from_its_text_and_ordered_by_offset_then_seq() {
        let mut text = Vec::new();
        origin(41, 2).write_text(&mut text);
        assert_eq!(text, b"orders.v2/3/41/2");
        assert_eq!(origin(41, 2).to_string(), "orders.v2/3/41/2");
        let back = OriginText::parse(&text).unwrap();
        assert_eq!(
            back,
            OriginText {
                topic: "orders.v2",
                partition: 3,
                offset: 41,
                seq: 2
            }
        );
        assert!(origin(41, 2).is_after(41, 1) && origin(41, 2).is_after(40, 9));
        assert!(!origin(41, 2).is_after(41, 2) && !origin(41, 2).is_after(42, 0));
        for bad in [
            &b""[..],
            b"t/1/2",
            b"/1/2/3",
            b"t/x/2/3",
            b"t/1/2/-1",
            b"a/b/1/2/3",
        ] {
            assert_eq!(
                OriginText::parse(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    fn id_of(record: &Record) -> Option<String> {
        let mut out = Vec::new();
        write_result_id(record, &mut out).then(|| String::from_utf8(out).unwrap())
    }

    #[test]
    fn result_ids_name_the_vertex_the_result_and_the_key_last() {
        let key = Value::from("a/\"b\"");
        let mut r = Record::with_event(key.clone(), Map::new(), 0);
        assert_eq!(id_of(&r), None);
        r.set_result_id(ResultId::Window {
            vertex: name_of("per_user"),
            start: 1_000_000_000,
            end: 2_000_000_000,
            firing: 1,
        });
        assert_eq!(
            id_of(&r).unwrap(),
            r#"window/per_user/1000000000/2000000000/1/"a/\"b\"""#
        );
        let mut r = Record::with_event(Value::Int(7), Map::new(), 0);
        r.set_result_id(ResultId::Reduce {
            vertex: name_of("totals"),
        });
        // No origin: no id.
        assert_eq!(id_of(&r), None);
        r.set_origin(origin(41, 0));
        assert_eq!(id_of(&r).unwrap(), "reduce/totals/orders.v2/3/41/0/7");
        let mut j = Record::with_event(Value::from("u1"), Map::new(), 0);
        j.set_result_id(ResultId::Join {
            vertex: name_of("paid"),
            left: Some(origin(5, 0)),
            right: None,
        });
        assert_eq!(id_of(&j).unwrap(), r#"join/paid/orders.v2/3/5/0/-/"u1""#);
        j.set_result_id(ResultId::Join {
            vertex: name_of("paid"),
            left: Some(origin(5, 0)),
            right: Some(origin(9, 2)),
        });
        assert_eq!(
            id_of(&j).unwrap(),
            r#"join/paid/orders.v2/3/5/0/orders.v2/3/9/2/"u1""#
        );
        // Clones keep both; changing the event keeps both.
        let mut c = r.clone();
        c.set("x", 1);
        assert_eq!(id_of(&c), id_of(&r));
        assert_eq!(c.origin(), Some(&origin(41, 0)));
    }
}
