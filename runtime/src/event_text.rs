//! An event a record keeps as text ([`crate::Record::from_json_object`]): its JSON text
//! ([`EventText`]), and the fields set on it since ([`AddedFields`], `map set`).
//!
//! The text is held inside the record's own allocation when it is short (as most JSON events
//! are: a line such as `{"id":1,"user":"u42","amount":12.34,"status":"paid","ts":…}` is 70–85
//! bytes), else in a box of its own; the first two added fields are
//! held inline too, so reading a JSON line and adding a field to it allocate nothing but the
//! record.
//!
//! Inside the record, the text costs no allocation and no free of its own, and nothing is
//! shared between records: the thread that drops a record (often not the one that read it,
//! after a `hash` edge) frees one block, as for any record, and touches no count another
//! thread uses. A buffer shared by the records of a batch would save the copy but not the
//! per-record count, which the reading and the dropping threads would then both write.

use std::fmt;
use std::ops::Deref;

use smallvec::SmallVec;

use crate::name::Name;
use crate::value::Value;

/// Texts of at most this many bytes are held inline.
pub const INLINE: usize = 96;

/// One event's JSON text (see the [module docs](self)).
#[derive(Clone)]
pub(crate) enum EventText {
    /// The first `len` bytes of `bytes`.
    Inline { len: u8, bytes: [u8; INLINE] },
    /// A longer text.
    Boxed(Box<[u8]>),
}

impl EventText {
    /// A copy of `text`.
    #[inline]
    pub(crate) fn new(text: &[u8]) -> Self {
        if text.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..text.len()].copy_from_slice(text);
            EventText::Inline {
                len: text.len() as u8,
                bytes,
            }
        } else {
            EventText::Boxed(text.into())
        }
    }
}

impl Deref for EventText {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            EventText::Inline { len, bytes } => &bytes[..*len as usize],
            EventText::Boxed(b) => b,
        }
    }
}

impl fmt::Debug for EventText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self))
    }
}

/// Fields set on an event kept as text, in the order set, each name once; none of them is in
/// the text ([`crate::Record::set_field`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct AddedFields(SmallVec<[(Name, Value); 2]>);

impl AddedFields {
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    #[inline]
    pub(crate) fn get(&self, name: &str) -> Option<&Value> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Sets `name`: in place if it was set before, else last.
    pub(crate) fn insert(&mut self, name: Name, value: Value) {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => *v = value,
            None => self.0.push((name, value)),
        }
    }

    pub(crate) fn remove(&mut self, name: &str) -> Option<Value> {
        let i = self.0.iter().position(|(n, _)| n == name)?;
        Some(self.0.remove(i).1)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Name, &Value)> {
        self.0.iter().map(|(n, v)| (n, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_texts_are_inline_and_long_ones_boxed_and_both_read_back() {
        for len in [0, 1, INLINE - 1, INLINE, INLINE + 1, 1000] {
            let text: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            let t = EventText::new(&text);
            assert_eq!(&*t, &text[..], "{len}");
            assert_eq!(
                matches!(t, EventText::Inline { .. }),
                len <= INLINE,
                "{len}"
            );
            assert_eq!(&*t.clone(), &text[..]);
        }
    }

    #[test]
    fn added_fields_keep_their_order_and_each_name_once() {
        let mut a = AddedFields::default();
        for (name, v) in [("x", 1), ("y", 2), ("z", 3), ("x", 4)] {
            a.insert(Name::from(name), Value::Int(v));
        }
        let got: Vec<(&str, &Value)> = a.iter().map(|(n, v)| (n.as_str(), v)).collect();
        assert_eq!(
            got,
            [
                ("x", &Value::Int(4)),
                ("y", &Value::Int(2)),
                ("z", &Value::Int(3))
            ]
        );
        assert_eq!(a.remove("y"), Some(Value::Int(2)));
        assert_eq!((a.get("y"), a.get("z")), (None, Some(&Value::Int(3))));
        assert_eq!(a.remove("y"), None);
    }
}
