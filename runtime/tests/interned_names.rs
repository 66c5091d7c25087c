//! The process-wide set of interned names is bounded: past `MAX_INTERNED` names, `intern` says
//! no and `name_of` gives reference-counted names, while names interned before stay interned.
//! (Its own test binary: it fills the process's set.)

use tidemark_runtime::name::{intern, name_of, Name, MAX_INTERNED};
use tidemark_runtime::Map;

#[test]
fn interning_stops_at_the_bound_and_names_still_work() {
    let first = intern("first").unwrap();
    let mut n = 1;
    while intern(&format!("name-{n}")).is_some() {
        n += 1;
        assert!(n <= MAX_INTERNED, "interned more than {MAX_INTERNED} names");
    }
    assert_eq!(n, MAX_INTERNED, "every name up to the bound was interned");
    assert!(intern("one-more").is_none());
    let counted = name_of("one-more");
    assert!(!Name::is_static(&counted));
    assert!(Name::ptr_eq(&intern("first").unwrap(), &first));
    // Maps take either kind.
    let mut m = Map::new();
    m.insert(first, 1);
    m.insert(counted, 2);
    m.insert("first", 3);
    assert_eq!(m.keys().collect::<Vec<_>>(), ["first", "one-more"]);
    assert_eq!(m.get("first"), Some(&tidemark_runtime::Value::Int(3)));
}
