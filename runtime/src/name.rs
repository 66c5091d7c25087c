//! Field names of events: [`Name`], and the process-wide set of interned names ([`intern`]).
//!
//! A [`Map`](crate::Map) keeps its field names as [`Name`]s, `arcstr`'s `ArcStr`: one pointer,
//! reference counted like `Arc<str>`, or *static*, when cloning and dropping it touch no
//! reference count at all. Names that many events carry (the fields a source parses again and
//! again, the fields `map set` adds) are interned: made static once per process and shared by
//! every event, so records moving between threads do not make those threads contend on one
//! reference count per field. An interned name is never freed, so the set is bounded
//! ([`MAX_INTERNED`] names of at most [`MAX_INTERNED_LEN`] bytes); past that, names are
//! reference counted as any other.
//!
//! ```
//! use tidemark_runtime::name::{intern, Name};
//!
//! let a = intern("status").unwrap();
//! let b = intern("status").unwrap();
//! assert!(Name::ptr_eq(&a, &b) && Name::is_static(&a));
//! assert_eq!(a, "status");
//! ```

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

/// A field name: shared text, reference counted or static (see the [module docs](self)).
pub type Name = arcstr::ArcStr;

/// At most this many names are interned per process.
pub const MAX_INTERNED: usize = 4096;

/// Only names of at most this many bytes are interned.
pub const MAX_INTERNED_LEN: usize = 64;

/// The static name `text`, the same one for equal texts across the process; `None` for a
/// name longer than [`MAX_INTERNED_LEN`] bytes or once [`MAX_INTERNED`] names are interned.
/// Takes a lock: call it when a name is first seen (a parser's first events, a job's build),
/// not per record.
pub fn intern(text: &str) -> Option<Name> {
    static INTERNED: OnceLock<Mutex<HashSet<Name>>> = OnceLock::new();
    if text.len() > MAX_INTERNED_LEN {
        return None;
    }
    let mut set = INTERNED
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(name) = set.get(text) {
        return Some(name.clone());
    }
    if set.len() >= MAX_INTERNED {
        return None;
    }
    let name = Name::from(text);
    name.leak();
    set.insert(name.clone());
    Some(name)
}

/// `text` as a name: the interned one if it can be, else a reference-counted one.
pub fn name_of(text: &str) -> Name {
    intern(text).unwrap_or_else(|| Name::from(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_intern_to_one_static_name() {
        let a = intern("user").unwrap();
        let b = intern(&String::from("user")).unwrap();
        assert!(Name::ptr_eq(&a, &b));
        assert!(Name::is_static(&a));
        assert_eq!(&*a, "user");
        assert!(!Name::ptr_eq(&a, &intern("users").unwrap()));
        // Clones of a static name are the same static name.
        let c = a.clone();
        drop(a);
        assert!(Name::ptr_eq(&c, &b) && Name::is_static(&c));
    }

    #[test]
    fn long_names_are_not_interned() {
        let long = "n".repeat(MAX_INTERNED_LEN + 1);
        assert!(intern(&long).is_none());
        let name = name_of(&long);
        assert_eq!(&*name, long);
        assert!(!Name::is_static(&name));
        assert!(Name::is_static(&name_of("short")));
    }
}
