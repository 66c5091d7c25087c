//! The checkpoint form of a `window` subtask's windows: per key one entry holding every open
//! window of the key ([`SavedWindow`]s, as the checkpoint codec encodes a `Vec<SavedWindow>`),
//! written by hand straight into the snapshot's key-group buffers.
//!
//! Tumbling and sliding windows keep their keys per window, so a key's windows are gathered
//! first: one hash lookup per key and window into a table that points at the windows'
//! accumulators where they are (nothing is cloned, nothing allocated per key; the table and
//! its lists are made once per checkpoint). Sessions are kept per key already. Restoring
//! decodes the same entries through serde (`WindowState::restore`).

use rustc_hash::FxHashMap;
use std::collections::hash_map::Entry;
use tidemark_runtime::keyed_state::KeyedSnapshot;
use tidemark_runtime::state_codec::{encode_varint, encode_varint_signed};
use tidemark_runtime::value::Value;

use crate::aggregate::{KeyRef, KeyedAccs};
use crate::aggregates::Acc;
use crate::window_assigner::{AlignedWindows, KeyedSessions, Window};

/// One window of one key as a checkpoint keeps it: its bounds, whether it fired with them, and
/// the key's accumulators in it. Written by [`write_aligned`] and [`write_sessions`] without
/// serde (the same bytes), read back through serde.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct SavedWindow {
    pub start: i64,
    pub end: i64,
    pub fired: bool,
    pub accs: Vec<Acc>,
}

/// Appends one window as the checkpoint codec encodes its [`SavedWindow`].
fn encode_window(window: Window, fired: bool, accs: &[Acc], out: &mut Vec<u8>) {
    encode_varint_signed(window.start, out);
    encode_varint_signed(window.end, out);
    out.push(u8::from(fired));
    Acc::encode_all(accs, out);
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
pub(crate) fn write_aligned(windows: &AlignedWindows<KeyedAccs>, out: &mut KeyedSnapshot) {
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
        out.put_encoded_with(&list.key.to_cow(), |buf| {
            encode_varint(u64::from(list.count), buf);
            let mut at = list.first as usize;
            for _ in 0..list.count {
                let g = &gathered[at];
                encode_window(g.window, g.fired, g.accs, buf);
                at = g.next as usize;
            }
        });
    }
}

/// Writes each key of `sessions` into `out` with all its sessions, in order.
pub(crate) fn write_sessions(sessions: &KeyedSessions<Value, Vec<Acc>>, out: &mut KeyedSnapshot) {
    for (key, sessions) in sessions.iter() {
        out.put_encoded_with(key, |buf| {
            encode_varint(sessions.len() as u64, buf);
            for (window, slot) in sessions.iter() {
                encode_window(window, slot.fired, &slot.state, buf);
            }
        });
    }
}
