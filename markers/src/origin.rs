//! The instances markers came from: a marker that crossed instances through a Kafka exchange
//! carries the index of its origin's name here ([`crate::LatencyMarker::origin`]), so that the
//! marker stays `Copy` and small; the exporter labels its series `source_instance` with the
//! name. Index [`LOCAL`] (0) is this process: no label.
//!
//! ```
//! use tidemark_markers::origin;
//!
//! let a = origin::intern("host-a");
//! assert_ne!(a, origin::LOCAL);
//! assert_eq!(origin::intern("host-a"), a);
//! assert_eq!(origin::name(a).as_deref(), Some("host-a"));
//! assert_eq!(origin::name(origin::LOCAL), None);
//! ```

use std::sync::{Mutex, OnceLock};

/// The origin of a marker made in this process.
pub const LOCAL: u32 = 0;

fn names() -> &'static Mutex<Vec<String>> {
    static NAMES: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    NAMES.get_or_init(|| Mutex::new(Vec::new()))
}

/// The index of instance `name` (the same for the same name, never [`LOCAL`]). One look-up per
/// marker that crossed instances; the table only grows by the number of instances.
pub fn intern(name: &str) -> u32 {
    let mut names = names().lock().unwrap_or_else(|e| e.into_inner());
    match names.iter().position(|n| n == name) {
        Some(i) => i as u32 + 1,
        None => {
            names.push(name.to_owned());
            names.len() as u32
        }
    }
}

/// The name of origin `index`; `None` for [`LOCAL`] or an index never handed out.
pub fn name(index: u32) -> Option<String> {
    if index == LOCAL {
        return None;
    }
    let names = names().lock().unwrap_or_else(|e| e.into_inner());
    names.get(index as usize - 1).cloned()
}
