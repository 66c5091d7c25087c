//! The checkpoint form of a `window` subtask's windows: per key one entry holding every open
//! window of the key (a list of [`SavedWindow`]s), put through the keyed-state API, which
//! encodes it with serde straight into the snapshot's key-group buffers.
//!
//! Tumbling and sliding windows keep their keys per window, so a key's windows are gathered
//! first: one hash lookup per key and window into a table that points at the windows'
//! accumulators where they are (nothing is cloned, nothing allocated per key; the table and
//! its lists are made once per checkpoint), and each key's list is serialized as a view of
//! them ([`SavedWindowView`]), the same bytes as a `Vec<SavedWindow>`. Sessions are kept per
//! key already. Restoring decodes the same entries through serde (`WindowState::restore`).

use rustc_hash::FxHashMap;
use serde::ser::{Serialize, SerializeSeq, Serializer};
use std::collections::hash_map::Entry;
use tidemark_runtime::keyed_state::KeyedSnapshot;
use tidemark_runtime::state_codec::StateCodecError;
use tidemark_runtime::value::Value;

use crate::aggregate::{KeyRef, KeyedAccs};
use crate::aggregates::Acc;
use crate::window_assigner::{AlignedWindows, KeyedSessions, Window};

/// One window of one key as a checkpoint keeps it: its bounds, whether it fired with them, and
/// the key's accumulators in it. Written through [`SavedWindowView`] (the same bytes), read
/// back as itself.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct SavedWindow {
    pub start: i64,
    pub end: i64,
    pub fired: bool,
    pub accs: Vec<Acc>,
}

/// A [`SavedWindow`] borrowed from the window state: it serializes as one.
#[derive(serde::Serialize)]
#[serde(rename = "SavedWindow")]
struct SavedWindowView<'a> {
    start: i64,
    end: i64,
    fired: bool,
    accs: &'a [Acc],
}

impl<'a> SavedWindowView<'a> {
    fn new(window: Window, fired: bool, accs: &'a [Acc]) -> Self {
        SavedWindowView {
            start: window.start,
            end: window.end,
            fired,
            accs,
        }
    }
}

/// One key's gathered windows, serialized as a `Vec<SavedWindow>`.
struct KeyWindowsView<'a, 'b> {
    list: &'b KeyWindows<'a>,
    gathered: &'b [Gathered<'a>],
}

impl Serialize for KeyWindowsView<'_, '_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.list.count as usize))?;
        let mut at = self.list.first as usize;
        for _ in 0..self.list.count {
            let g = &self.gathered[at];
            seq.serialize_element(&SavedWindowView::new(g.window, g.fired, g.accs))?;
            at = g.next as usize;
        }
        seq.end()
    }
}

/// One key's sessions, serialized as a `Vec<SavedWindow>`.
struct SessionsView<'a>(&'a crate::window_assigner::Sessions<Vec<Acc>>);

impl Serialize for SessionsView<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for (window, slot) in self.0.iter() {
            seq.serialize_element(&SavedWindowView::new(window, slot.fired, &slot.state))?;
        }
        seq.end()
    }
}

/// One key's windows among the gathered ones: where its list starts and ends, and its length.
struct KeyWindows<'a> {
    key: KeyRef<'a>,
    first: u32,
    last: u32,
    count: u32,
}

/// One key's accumulators in one window, and the next window of the same key.
struct Gathered<'a> {
    window: Window,
    fired: bool,
    accs: &'a [Acc],
    next: u32,
}

/// Writes each key of the tumbling or sliding `windows` into `out`, with all its windows in
/// window order, keys in the order they are first met (windows by end, keys by first record).
pub(crate) fn write_aligned(
    windows: &AlignedWindows<KeyedAccs>,
    out: &mut KeyedSnapshot,
) -> Result<(), StateCodecError> {
    let mut index: FxHashMap<KeyRef<'_>, u32> = FxHashMap::default();
    let mut keys: Vec<KeyWindows<'_>> = Vec::new();
    let mut gathered: Vec<Gathered<'_>> = Vec::new();
    for (window, slot) in windows.iter() {
        for (key, accs) in slot.state.keys() {
            let at = u32::try_from(gathered.len()).expect("fewer than 2^32 windows of keys");
            gathered.push(Gathered {
                window,
                fired: slot.fired,
                accs,
                next: at,
            });
            match index.entry(key) {
                Entry::Occupied(e) => {
                    let list = &mut keys[*e.get() as usize];
                    gathered[list.last as usize].next = at;
                    list.last = at;
                    list.count += 1;
                }
                Entry::Vacant(e) => {
                    e.insert(keys.len() as u32);
                    keys.push(KeyWindows {
                        key,
                        first: at,
                        last: at,
                        count: 1,
                    });
                }
            }
        }
    }
    for list in &keys {
        let view = KeyWindowsView {
            list,
            gathered: &gathered,
        };
        out.put(&list.key.to_cow(), &view)?;
    }
    Ok(())
}

/// Writes each key of `sessions` into `out` with all its sessions, in order.
pub(crate) fn write_sessions(
    sessions: &KeyedSessions<Value, Vec<Acc>>,
    out: &mut KeyedSnapshot,
) -> Result<(), StateCodecError> {
    for (key, sessions) in sessions.iter() {
        out.put(key, &SessionsView(sessions))?;
    }
    Ok(())
}
