//! Where records go in time: which windows a timestamp belongs to, how one key's sessions
//! merge, and when a window fires and when it is forgotten. Pure logic without records, clocks
//! or output; the `window` operator drives it.
//!
//! Times are nanoseconds since the Unix epoch, like record timestamps. A window is the
//! half-open interval `[start, end)`; its *last instant* is `end - 1` (Flink's
//! `maxTimestamp()`).
//!
//! - **Tumbling** (`size`): `[n·size, (n+1)·size)`, aligned to the epoch; each timestamp is in
//!   exactly one.
//! - **Sliding** (`size`, `slide`): windows of length `size` starting at every multiple of
//!   `slide`; a timestamp is in `size / slide` of them (rounded up when `slide` does not divide
//!   `size`: the windows whose start is a multiple of `slide` in `(t - size, t]`).
//! - **Session** (`gap`): a record at `t` opens `[t, t + gap)`; a key's sessions that overlap
//!   or touch (`a.start <= b.end && b.start <= a.end`, as Flink's `TimeWindow.intersects`)
//!   merge into one spanning both. So a session's start is its first record's timestamp and
//!   its end its last record's timestamp plus `gap`.
//!
//! Firing is decided by *progress*, the instant up to which time is complete: the watermark in
//! event time, and `now - 1` in processing time (a window ends when the clock reaches its end).
//! - A window is **due** (fires) when `end - 1 <= progress`.
//! - It is **expired** (its state forgotten; a record that would only go to expired windows is
//!   *late*) when `end - 1 + allowed_lateness <= progress`. With lateness 0 a window fires and
//!   expires at once.

use std::collections::BTreeMap;
use std::hash::Hash;

use rustc_hash::FxHashMap;

/// A window: the half-open interval `[start, end)` in nanoseconds since the epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Window {
    /// The first instant in the window.
    pub start: i64,
    /// The first instant after it.
    pub end: i64,
}

impl Window {
    /// `[start, end)`.
    pub const fn new(start: i64, end: i64) -> Self {
        Window { start, end }
    }

    /// The last instant the window covers, `end - 1`: the timestamp it fires at.
    #[inline]
    pub fn last_instant(self) -> i64 {
        self.end.saturating_sub(1)
    }

    /// Whether `t` is in the window.
    #[inline]
    pub fn contains(self, t: i64) -> bool {
        self.start <= t && t < self.end
    }

    /// Whether two session windows overlap or touch, and so merge.
    #[inline]
    pub fn meets(self, other: Window) -> bool {
        self.start <= other.end && other.start <= self.end
    }

    /// The smallest window covering both.
    #[inline]
    pub fn cover(self, other: Window) -> Window {
        Window::new(self.start.min(other.start), self.end.max(other.end))
    }

    /// Whether the window fires at `progress`: `end - 1 <= progress`.
    #[inline]
    pub fn is_due(self, progress: i64) -> bool {
        self.last_instant() <= progress
    }

    /// Whether the window is forgotten at `progress`: `end - 1 + lateness <= progress`.
    #[inline]
    pub fn is_expired(self, progress: i64, lateness: i64) -> bool {
        self.last_instant().saturating_add(lateness) <= progress
    }
}

/// What is wrong with a window kind's sizes: the field and the problem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindError {
    /// The setting at fault (`size`, `slide`, `gap`).
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

/// How windows are laid out in time; sizes in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowKind {
    /// `[n·size, (n+1)·size)`.
    Tumbling {
        /// The window length.
        size: i64,
    },
    /// Windows of length `size` starting at every multiple of `slide`.
    Sliding {
        /// The window length.
        size: i64,
        /// The distance between window starts (`0 < slide <= size`).
        slide: i64,
    },
    /// Per-key sessions that close after `gap` without records.
    Session {
        /// The inactivity that closes a session.
        gap: i64,
    },
}

fn positive(field: &'static str, value: i64) -> Result<i64, KindError> {
    if value > 0 {
        Ok(value)
    } else {
        Err(KindError {
            field,
            problem: "must be more than 0".into(),
        })
    }
}

impl WindowKind {
    /// Tumbling windows of `size` (more than 0).
    pub fn tumbling(size: i64) -> Result<Self, KindError> {
        Ok(WindowKind::Tumbling {
            size: positive("size", size)?,
        })
    }

    /// Sliding windows of `size` every `slide` (`0 < slide <= size`).
    pub fn sliding(size: i64, slide: i64) -> Result<Self, KindError> {
        let size = positive("size", size)?;
        let slide = positive("slide", slide)?;
        if slide > size {
            return Err(KindError {
                field: "slide",
                problem: "must not be more than size (windows would leave gaps between them; \
                          a slide equal to size is a tumbling window)"
                    .into(),
            });
        }
        Ok(WindowKind::Sliding { size, slide })
    }

    /// Sessions closing after `gap` (more than 0) without records.
    pub fn session(gap: i64) -> Result<Self, KindError> {
        Ok(WindowKind::Session {
            gap: positive("gap", gap)?,
        })
    }

    /// Whether windows are per-key sessions (which merge) rather than aligned to the epoch.
    pub fn is_session(self) -> bool {
        matches!(self, WindowKind::Session { .. })
    }

    /// The windows holding a record at `t`, in ascending start order: one for tumbling and
    /// session (the record's own `[t, t + gap)`, before merging), `size / slide` (rounded up)
    /// for sliding.
    #[inline]
    pub fn assign(self, t: i64) -> Assigned {
        match self {
            WindowKind::Tumbling { size } => {
                let start = t.saturating_sub(t.rem_euclid(size));
                Assigned {
                    next: start,
                    remaining: 1,
                    step: size,
                    size,
                }
            }
            WindowKind::Sliding { size, slide } => {
                let offset = t.rem_euclid(slide);
                let last = t.saturating_sub(offset);
                // Starts last - i·slide with i·slide < size - offset (which is more than 0).
                let count = (size - offset - 1) / slide + 1;
                Assigned {
                    next: last.saturating_sub((count - 1).saturating_mul(slide)),
                    remaining: count,
                    step: slide,
                    size,
                }
            }
            WindowKind::Session { gap } => Assigned {
                next: t,
                remaining: 1,
                step: gap,
                size: gap,
            },
        }
    }
}

/// The windows of one timestamp ([`WindowKind::assign`]); no allocation.
#[derive(Clone, Debug)]
pub struct Assigned {
    next: i64,
    remaining: i64,
    step: i64,
    size: i64,
}

impl Iterator for Assigned {
    type Item = Window;

    #[inline]
    fn next(&mut self) -> Option<Window> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let start = self.next;
        self.next = start.saturating_add(self.step);
        Some(Window::new(start, start.saturating_add(self.size)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining as usize, Some(self.remaining as usize))
    }
}

/// A window's state and whether its result for the current bounds has been emitted.
#[derive(Debug)]
pub struct Slot<S> {
    /// The operator's state for the window (aggregates per key, or of one key for sessions).
    pub state: S,
    /// Whether it has fired with its current bounds.
    pub fired: bool,
}

/// Epoch-aligned windows (tumbling or sliding) not yet expired, ordered by end.
///
/// The windows of one kind all have the same length, so the end identifies the window.
#[derive(Debug)]
pub struct AlignedWindows<S> {
    windows: BTreeMap<i64, (Window, Slot<S>)>,
}

impl<S> Default for AlignedWindows<S> {
    fn default() -> Self {
        AlignedWindows {
            windows: BTreeMap::new(),
        }
    }
}

impl<S> AlignedWindows<S> {
    /// The slot of `window`, made with `make` if new.
    #[inline]
    pub fn slot(&mut self, window: Window, make: impl FnOnce() -> S) -> &mut Slot<S> {
        &mut self
            .windows
            .entry(window.end)
            .or_insert_with(|| {
                (
                    window,
                    Slot {
                        state: make(),
                        fired: false,
                    },
                )
            })
            .1
    }

    /// How many windows are kept.
    pub fn len(&self) -> usize {
        self.windows.len()
    }

    /// Every window kept, in window order, with its slot (for a checkpoint).
    pub fn iter(&self) -> impl Iterator<Item = (Window, &Slot<S>)> {
        self.windows.values().map(|(w, s)| (*w, s))
    }

    /// Every window kept and its state, in window order.
    pub fn states(&self) -> impl Iterator<Item = &S> {
        self.windows.values().map(|(_, slot)| &slot.state)
    }

    /// Whether no window is kept.
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// Time has progressed to `progress`: calls `fire` for each window that is due and has not
    /// fired, in window order, then `expire` with the state of each expired window (which is
    /// forgotten).
    pub fn advance(
        &mut self,
        progress: i64,
        lateness: i64,
        mut fire: impl FnMut(Window, &mut S),
        expire: impl FnMut(S),
    ) {
        self.advance_until(
            progress,
            lateness,
            |window, state| {
                fire(window, state);
                false
            },
            expire,
        );
    }

    /// [`AlignedWindows::advance`] that stops after a window whose `fire` returned `true`
    /// (its output is full): returns whether it stopped so (the windows still due fire, and
    /// the expired ones go, when it is called again with the same `progress`).
    pub fn advance_until(
        &mut self,
        progress: i64,
        lateness: i64,
        mut fire: impl FnMut(Window, &mut S) -> bool,
        mut expire: impl FnMut(S),
    ) -> bool {
        // Due: end - 1 <= progress, i.e. end <= progress + 1.
        for (window, slot) in self
            .windows
            .range_mut(..=progress.saturating_add(1))
            .map(|e| e.1)
        {
            if !slot.fired {
                let full = fire(*window, &mut slot.state);
                slot.fired = true;
                if full {
                    return true;
                }
            }
        }
        while let Some(entry) = self.windows.first_entry() {
            if !entry.get().0.is_expired(progress, lateness) {
                break;
            }
            expire(entry.remove().1.state);
        }
        false
    }

    /// The end of input: calls `fire` for every window that has not fired, in window order, and
    /// forgets them all.
    pub fn finish(&mut self, mut fire: impl FnMut(Window, &mut S)) {
        self.finish_until(|window, state| {
            fire(window, state);
            false
        });
    }

    /// [`AlignedWindows::finish`] that stops after a window whose `fire` returned `true`:
    /// returns whether it stopped so (the rest go when it is called again).
    pub fn finish_until(&mut self, mut fire: impl FnMut(Window, &mut S) -> bool) -> bool {
        while let Some((_, (window, mut slot))) = self.windows.pop_first() {
            if !slot.fired && fire(window, &mut slot.state) {
                return true;
            }
        }
        false
    }
}

/// One key's sessions: sorted by start, no two meeting.
#[derive(Debug)]
pub struct Sessions<S> {
    list: Vec<(Window, Slot<S>)>,
}

impl<S> Default for Sessions<S> {
    fn default() -> Self {
        Sessions { list: Vec::new() }
    }
}

impl<S> Sessions<S> {
    /// How many sessions there are.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// The sessions, in start order.
    pub fn iter(&self) -> impl Iterator<Item = (Window, &Slot<S>)> {
        self.list.iter().map(|(w, s)| (*w, s))
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Adds the window of a new record (`[t, t + gap)`): merges it with every session it meets
    /// (their states folded into the first with `merge`), or starts a session with `make`.
    /// Returns the session now holding the record; it is marked not fired when its bounds
    /// changed (its earlier output covered other bounds).
    pub fn add(
        &mut self,
        window: Window,
        make: impl FnOnce() -> S,
        mut merge: impl FnMut(&mut S, S),
    ) -> (Window, &mut Slot<S>) {
        // The sessions meeting `window` are contiguous: those ending at or after its start and
        // starting at or before its end.
        let first = self.list.partition_point(|(w, _)| w.end < window.start);
        let past = first + self.list[first..].partition_point(|(w, _)| w.start <= window.end);
        if first == past {
            self.list.insert(
                first,
                (
                    window,
                    Slot {
                        state: make(),
                        fired: false,
                    },
                ),
            );
        } else {
            let merged: Vec<(Window, Slot<S>)> = self.list.drain(first + 1..past).collect();
            let (w, slot) = &mut self.list[first];
            let mut cover = w.cover(window);
            for (other, other_slot) in merged {
                cover = cover.cover(other);
                merge(&mut slot.state, other_slot.state);
            }
            if cover != *w {
                *w = cover;
                slot.fired = false;
            }
        }
        let (w, slot) = &mut self.list[first];
        (*w, slot)
    }

    /// Time has progressed to `progress`: calls `fire` for each due session that has not
    /// fired, then forgets the expired ones.
    pub fn advance(&mut self, progress: i64, lateness: i64, mut fire: impl FnMut(Window, &mut S)) {
        for (window, slot) in &mut self.list {
            if !slot.fired && window.is_due(progress) {
                fire(*window, &mut slot.state);
                slot.fired = true;
            }
        }
        self.list.retain(|(w, _)| !w.is_expired(progress, lateness));
    }

    /// The next progress at which something happens to these sessions: the last instant of the
    /// earliest unfired one, or the expiry of a fired one.
    pub fn next_instant(&self, lateness: i64) -> Option<i64> {
        self.list
            .iter()
            .map(|(w, slot)| {
                if slot.fired {
                    w.last_instant().saturating_add(lateness)
                } else {
                    w.last_instant()
                }
            })
            .min()
    }

    /// The end of input: calls `fire` for every session that has not fired and forgets all.
    pub fn finish(&mut self, mut fire: impl FnMut(Window, &mut S)) {
        for (window, mut slot) in self.list.drain(..) {
            if !slot.fired {
                fire(window, &mut slot.state);
            }
        }
    }
}

/// Sessions of every key, with a timer per key so that progress visits only the keys with
/// something due, in order of time.
#[derive(Debug)]
pub struct KeyedSessions<K, S> {
    keys: FxHashMap<K, (Sessions<S>, Option<i64>)>,
    /// Progress instant -> keys to visit then (entries whose key's timer moved are stale and
    /// skipped).
    timers: BTreeMap<i64, Vec<K>>,
}

impl<K, S> Default for KeyedSessions<K, S> {
    fn default() -> Self {
        KeyedSessions {
            keys: FxHashMap::default(),
            timers: BTreeMap::new(),
        }
    }
}

impl<K, S> KeyedSessions<K, S> {
    /// Every key's sessions.
    pub fn sessions(&self) -> impl Iterator<Item = &Sessions<S>> {
        self.keys.values().map(|(sessions, _)| sessions)
    }
}

impl<K: Clone + Eq + Hash, S> KeyedSessions<K, S> {
    /// Adds a record of `key` at `t` (see [`Sessions::add`]), and makes sure the key is visited
    /// when its session becomes due.
    pub fn add(
        &mut self,
        key: &K,
        window: Window,
        make: impl FnOnce() -> S,
        merge: impl FnMut(&mut S, S),
    ) -> (Window, &mut Slot<S>) {
        if !self.keys.contains_key(key) {
            self.keys.insert(key.clone(), (Sessions::default(), None));
        }
        let (sessions, timer) = self.keys.get_mut(key).expect("inserted above");
        let (w, slot) = sessions.add(window, make, merge);
        // The key's timer only moves earlier here: a later session end is found when the
        // earlier timer fires (visiting a key early is harmless).
        let due = w.last_instant();
        if timer.is_none_or(|t| due < t) {
            *timer = Some(due);
            self.timers.entry(due).or_default().push(key.clone());
        }
        (w, slot)
    }

    /// Keys with sessions.
    pub fn keys(&self) -> usize {
        self.keys.len()
    }

    /// Every key with its sessions (for a checkpoint), in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &Sessions<S>)> {
        self.keys.iter().map(|(k, (s, _))| (k, s))
    }

    /// Puts back a session of `key` a checkpoint held (sessions of one key never meet, so it
    /// goes in its place by start), and the key's timer.
    pub fn restore(&mut self, key: &K, window: Window, slot: Slot<S>, lateness: i64) {
        if !self.keys.contains_key(key) {
            self.keys.insert(key.clone(), (Sessions::default(), None));
        }
        let (sessions, timer) = self.keys.get_mut(key).expect("inserted above");
        let at = sessions
            .list
            .partition_point(|(w, _)| w.start < window.start);
        sessions.list.insert(at, (window, slot));
        if let Some(next) = sessions.next_instant(lateness) {
            if timer.is_none_or(|t| next < t) {
                *timer = Some(next);
                self.timers.entry(next).or_default().push(key.clone());
            }
        }
    }

    /// Time has progressed to `progress`: fires the due sessions of every key (in order of
    /// their timers, then of the keys' first records) and forgets the expired ones.
    pub fn advance(
        &mut self,
        progress: i64,
        lateness: i64,
        mut fire: impl FnMut(&K, Window, &mut S),
    ) {
        while let Some(entry) = self.timers.first_entry() {
            if *entry.key() > progress {
                break;
            }
            let (instant, keys) = entry.remove_entry();
            for key in keys {
                let Some((sessions, timer)) = self.keys.get_mut(&key) else {
                    continue;
                };
                if *timer != Some(instant) {
                    continue; // stale: the key has a newer timer
                }
                sessions.advance(progress, lateness, |w, s| fire(&key, w, s));
                match sessions.next_instant(lateness) {
                    None => {
                        self.keys.remove(&key);
                    }
                    Some(next) => {
                        *timer = Some(next);
                        self.timers.entry(next).or_default().push(key);
                    }
                }
            }
        }
    }

    /// The end of input: fires every session that has not fired (by key, in order of their
    /// next timer) and forgets all.
    pub fn finish(&mut self, mut fire: impl FnMut(&K, Window, &mut S)) {
        let mut keys: Vec<(i64, K)> = Vec::with_capacity(self.keys.len());
        for (key, (sessions, _)) in &self.keys {
            let first = sessions
                .iter()
                .map(|(w, _)| w.start)
                .min()
                .unwrap_or(i64::MAX);
            keys.push((first, key.clone()));
        }
        keys.sort_by_key(|(first, _)| *first);
        for (_, key) in keys {
            if let Some((mut sessions, _)) = self.keys.remove(&key) {
                sessions.finish(|w, s| fire(&key, w, s));
            }
        }
        self.timers.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn windows(kind: WindowKind, t: i64) -> Vec<(i64, i64)> {
        kind.assign(t).map(|w| (w.start, w.end)).collect()
    }

    #[test]
    fn tumbling_windows_are_aligned_to_the_epoch() {
        let k = WindowKind::tumbling(10).unwrap();
        assert_eq!(windows(k, 0), [(0, 10)]);
        assert_eq!(windows(k, 9), [(0, 10)]);
        assert_eq!(windows(k, 10), [(10, 20)]);
        assert_eq!(windows(k, -1), [(-10, 0)]);
        assert_eq!(windows(k, -10), [(-10, 0)]);
        // 1 s windows over real timestamps start on whole seconds.
        let s = 1_000_000_000;
        let k = WindowKind::tumbling(s).unwrap();
        let t = 1_764_500_000_123_456_789;
        assert_eq!(windows(k, t), [(1_764_500_000 * s, 1_764_500_001 * s)]);
    }

    #[test]
    fn a_record_is_in_size_over_slide_sliding_windows() {
        let k = WindowKind::sliding(10, 2).unwrap();
        assert_eq!(windows(k, 5), [(-4, 6), (-2, 8), (0, 10), (2, 12), (4, 14)]);
        assert_eq!(windows(k, 4), [(-4, 6), (-2, 8), (0, 10), (2, 12), (4, 14)]);
        assert_eq!(
            windows(k, 10),
            [(2, 12), (4, 14), (6, 16), (8, 18), (10, 20)]
        );
        assert_eq!(windows(k, -1).len(), 5);
        // A slide that does not divide the size: the windows starting in (t - size, t].
        let k = WindowKind::sliding(10, 3).unwrap();
        assert_eq!(windows(k, 5), [(-3, 7), (0, 10), (3, 13)]);
        assert_eq!(windows(k, 0), [(-9, 1), (-6, 4), (-3, 7), (0, 10)]);
        // slide = size is tumbling.
        let s = WindowKind::sliding(10, 10).unwrap();
        let t = WindowKind::tumbling(10).unwrap();
        for x in -25..25 {
            assert_eq!(windows(s, x), windows(t, x));
        }
    }

    #[test]
    fn sliding_assignment_matches_the_definition() {
        let mut rng = StdRng::seed_from_u64(9);
        for _ in 0..2_000 {
            let size = rng.random_range(1..50);
            let slide = rng.random_range(1..=size);
            let k = WindowKind::sliding(size, slide).unwrap();
            let t = rng.random_range(-1_000..1_000);
            // Every window [n·slide, n·slide + size) holding t, by brute force.
            let expected: Vec<(i64, i64)> = (-1_100..1_100)
                .map(|n: i64| (n * slide, n * slide + size))
                .filter(|&(s, e)| s <= t && t < e)
                .collect();
            assert_eq!(windows(k, t), expected, "size {size} slide {slide} t {t}");
            if size % slide == 0 {
                assert_eq!(expected.len() as i64, size / slide);
            }
        }
    }

    #[test]
    fn sizes_are_checked() {
        let err = |r: Result<WindowKind, KindError>| {
            let e = r.unwrap_err();
            format!("{}: {}", e.field, e.problem)
        };
        assert_eq!(err(WindowKind::tumbling(0)), "size: must be more than 0");
        assert_eq!(err(WindowKind::sliding(0, 1)), "size: must be more than 0");
        assert_eq!(
            err(WindowKind::sliding(10, 0)),
            "slide: must be more than 0"
        );
        assert!(err(WindowKind::sliding(10, 11)).starts_with("slide: must not be more than size"));
        assert_eq!(err(WindowKind::session(-1)), "gap: must be more than 0");
        assert!(WindowKind::session(1).unwrap().is_session());
        assert!(!WindowKind::sliding(2, 1).unwrap().is_session());
    }

    #[test]
    fn timestamps_at_the_ends_of_time_do_not_overflow() {
        let k = WindowKind::sliding(1_000, 300).unwrap();
        for t in [i64::MIN, i64::MIN + 1, i64::MAX - 1, i64::MAX] {
            let ws = windows(k, t);
            assert!(!ws.is_empty() && ws.len() <= 4, "{t}: {ws:?}");
        }
        assert_eq!(
            windows(WindowKind::session(10).unwrap(), i64::MAX),
            [(i64::MAX, i64::MAX)]
        );
        assert!(Window::new(0, i64::MAX).is_expired(i64::MAX, i64::MAX));
        assert!(!Window::new(0, i64::MAX).is_expired(i64::MAX - 2, 1));
    }

    #[test]
    fn due_and_expired() {
        let w = Window::new(0, 10);
        assert_eq!(w.last_instant(), 9);
        assert!(!w.is_due(8));
        assert!(w.is_due(9));
        assert!(w.is_expired(9, 0));
        assert!(!w.is_expired(10, 2));
        assert!(w.is_expired(11, 2));
        assert!(w.contains(0) && w.contains(9) && !w.contains(10) && !w.contains(-1));
    }

    #[test]
    fn aligned_windows_fire_once_in_order_and_expire_after_the_lateness() {
        let mut ws: AlignedWindows<Vec<i64>> = AlignedWindows::default();
        let k = WindowKind::sliding(10, 5).unwrap();
        for t in [12, 3, 7] {
            for w in k.assign(t) {
                ws.slot(w, Vec::new).state.push(t);
            }
        }
        // [-5,5) [0,10) [5,15) [10,20)
        assert_eq!(ws.len(), 4);
        let mut fired = Vec::new();
        let mut expired = Vec::new();
        ws.advance(
            5,
            3,
            |w, s| fired.push((w.start, s.clone())),
            |s| expired.push(s),
        );
        assert_eq!(fired, [(-5, vec![3])]);
        assert!(expired.is_empty(), "kept until 4 + 3");
        fired.clear();
        ws.advance(
            9,
            3,
            |w, s| fired.push((w.start, s.clone())),
            |s| expired.push(s),
        );
        // [0,10) fires; [-5,5) expires at 4 + 3 = 7 <= 9.
        assert_eq!(fired, [(0, vec![3, 7])]);
        assert_eq!(expired, [vec![3]]);
        // A late record for the fired, unexpired window finds its slot marked fired.
        let slot = ws.slot(Window::new(0, 10), Vec::new);
        assert!(slot.fired);
        slot.state.push(1);
        fired.clear();
        ws.advance(11, 3, |w, s| fired.push((w.start, s.clone())), |_| {});
        assert!(fired.is_empty(), "fires once");
        ws.advance(12, 3, |_, _| {}, |s| expired.push(s));
        assert_eq!(expired, [vec![3], vec![3, 7, 1]]);
        fired.clear();
        ws.finish(|w, s| fired.push((w.start, s.clone())));
        assert_eq!(fired, [(5, vec![12, 7]), (10, vec![12])]);
        assert!(ws.is_empty());
    }

    /// Session bounds of a key as the spec defines them: sorted timestamps split where two
    /// neighbours are more than `gap` apart; each session from its first timestamp to its last
    /// plus `gap`.
    fn reference_sessions(mut ts: Vec<i64>, gap: i64) -> Vec<(i64, i64, usize)> {
        ts.sort_unstable();
        let mut out: Vec<(i64, i64, usize)> = Vec::new();
        for t in ts {
            match out.last_mut() {
                Some((_, end, n)) if t <= *end => {
                    *end = (*end).max(t + gap);
                    *n += 1;
                }
                _ => out.push((t, t + gap, 1)),
            }
        }
        out
    }

    fn add(s: &mut Sessions<usize>, t: i64, gap: i64) -> (Window, bool) {
        let (w, slot) = s.add(Window::new(t, t + gap), || 0, |a, b| *a += b);
        slot.state += 1;
        (w, slot.fired)
    }

    fn bounds(s: &Sessions<usize>) -> Vec<(i64, i64, usize)> {
        s.iter()
            .map(|(w, slot)| (w.start, w.end, slot.state))
            .collect()
    }

    #[test]
    fn sessions_within_the_gap_merge() {
        let mut s = Sessions::default();
        assert_eq!(add(&mut s, 0, 10).0, Window::new(0, 10));
        // Within the gap: the session grows to the last record + gap.
        assert_eq!(add(&mut s, 5, 10).0, Window::new(0, 15));
        assert_eq!(add(&mut s, 30, 10).0, Window::new(30, 40));
        assert_eq!(add(&mut s, 20, 10).0, Window::new(20, 40), "touching merge");
        assert_eq!(bounds(&s), [(0, 15, 2), (20, 40, 2)]);
        // A record in the hole joins both sides: one session, states merged.
        assert_eq!(add(&mut s, 15, 10).0, Window::new(0, 40));
        assert_eq!(bounds(&s), [(0, 40, 5)]);
        // Records inside and before a session.
        assert_eq!(add(&mut s, 2, 10).0, Window::new(0, 40));
        assert_eq!(add(&mut s, -10, 10).0, Window::new(-10, 40));
        assert_eq!(add(&mut s, -21, 10).0, Window::new(-21, -11));
        assert_eq!(bounds(&s), [(-21, -11, 1), (-10, 40, 7)]);
    }

    #[test]
    fn sessions_in_any_order_match_the_reference() {
        let mut rng = StdRng::seed_from_u64(3);
        for round in 0..300 {
            let gap = rng.random_range(1..20);
            let n = rng.random_range(1..60);
            let ts: Vec<i64> = (0..n).map(|_| rng.random_range(-200..200)).collect();
            let mut s = Sessions::default();
            for &t in &ts {
                add(&mut s, t, gap);
            }
            assert_eq!(bounds(&s), reference_sessions(ts, gap), "round {round}");
        }
    }

    #[test]
    fn a_session_fires_when_due_and_again_when_it_grows_within_the_lateness() {
        let mut s = Sessions::default();
        add(&mut s, 0, 10);
        add(&mut s, 30, 10);
        let mut fired = Vec::new();
        s.advance(8, 5, |w, n| fired.push((w.start, w.end, *n)));
        assert!(fired.is_empty());
        assert_eq!(s.next_instant(5), Some(9));
        s.advance(9, 5, |w, n| fired.push((w.start, w.end, *n)));
        assert_eq!(fired, [(0, 10, 1)]);
        assert_eq!(
            s.next_instant(5),
            Some(14),
            "the fired one expires at 9 + 5"
        );
        // A late record inside the fired session keeps its bounds: still fired (the operator
        // emits the update itself).
        assert_eq!(add(&mut s, 3, 10), (Window::new(0, 13), false));
        // Growing it changed the bounds: it is due again at once.
        fired.clear();
        s.advance(12, 5, |w, n| fired.push((w.start, w.end, *n)));
        assert_eq!(fired, [(0, 13, 2)]);
        assert_eq!(add(&mut s, 1, 10), (Window::new(0, 13), true));
        // Expired at 12 + 5 = 17.
        s.advance(16, 5, |_, _| {});
        assert_eq!(bounds(&s), [(0, 13, 3), (30, 40, 1)]);
        s.advance(17, 5, |_, _| {});
        assert_eq!(bounds(&s), [(30, 40, 1)]);
        fired.clear();
        s.finish(|w, n| fired.push((w.start, w.end, *n)));
        assert_eq!(fired, [(30, 40, 1)]);
        assert!(s.is_empty());
    }

    #[test]
    fn keyed_sessions_visit_keys_by_timer() {
        let mut ks: KeyedSessions<&str, usize> = KeyedSessions::default();
        let put = |ks: &mut KeyedSessions<&str, usize>, key, t| {
            let (_, slot) = ks.add(&key, Window::new(t, t + 10), || 0, |a, b| *a += b);
            slot.state += 1;
        };
        put(&mut ks, "a", 0);
        put(&mut ks, "b", 5);
        put(&mut ks, "a", 8); // a: [0, 18)
        put(&mut ks, "a", 40); // a: [40, 50)
        assert_eq!(ks.keys(), 2);
        let mut fired = Vec::new();
        // a's timer was set at 9 for [0, 10); it grew, so nothing fires there.
        ks.advance(10, 0, |k, w, n| fired.push((*k, w.start, w.end, *n)));
        assert!(fired.is_empty());
        ks.advance(14, 0, |k, w, n| fired.push((*k, w.start, w.end, *n)));
        assert_eq!(fired, [("b", 5, 15, 1)]);
        assert_eq!(ks.keys(), 1, "b has no session left");
        ks.advance(100, 0, |k, w, n| fired.push((*k, w.start, w.end, *n)));
        assert_eq!(fired, [("b", 5, 15, 1), ("a", 0, 18, 2), ("a", 40, 50, 1)]);
        assert_eq!(ks.keys(), 0);
        // The end of input fires what is open, keys in order of their first session.
        put(&mut ks, "z", 300);
        put(&mut ks, "y", 200);
        put(&mut ks, "y", 400);
        fired.clear();
        ks.finish(|k, w, n| fired.push((*k, w.start, w.end, *n)));
        assert_eq!(
            fired,
            [("y", 200, 210, 1), ("y", 400, 410, 1), ("z", 300, 310, 1)]
        );
        assert_eq!(ks.keys(), 0);
    }

    #[test]
    fn keyed_sessions_with_progress_match_the_reference() {
        // Records arrive in order of time with some disorder, and the progress trails the
        // largest timestamp by the bound of the disorder: every session fires once, whole.
        let mut rng = StdRng::seed_from_u64(11);
        for round in 0..50 {
            let gap = rng.random_range(1..30);
            let disorder = rng.random_range(0..20);
            // (key, timestamp, arrival): each record arrives up to `disorder` early.
            let mut records: Vec<(u8, i64, i64)> = (0..500)
                .map(|i| {
                    let t = i * 3 + rng.random_range(0..=disorder);
                    (
                        rng.random_range(0..5u8),
                        t,
                        t - rng.random_range(0..=disorder),
                    )
                })
                .collect();
            records.sort_by_key(|r| r.2);
            let mut ks: KeyedSessions<u8, usize> = KeyedSessions::default();
            let mut fired: Vec<(u8, i64, i64, usize)> = Vec::new();
            let mut max = i64::MIN;
            for &(key, t, _) in &records {
                let progress = max.saturating_sub(2 * disorder + 1);
                assert!(
                    !Window::new(t, t + gap).is_expired(progress, 0),
                    "the test keeps records on time"
                );
                let (_, slot) = ks.add(&key, Window::new(t, t + gap), || 0, |a, b| *a += b);
                slot.state += 1;
                max = max.max(t);
                ks.advance(max.saturating_sub(2 * disorder + 1), 0, |k, w, n| {
                    fired.push((*k, w.start, w.end, *n))
                });
            }
            ks.finish(|k, w, n| fired.push((*k, w.start, w.end, *n)));
            for key in 0..5u8 {
                let got: Vec<(i64, i64, usize)> = fired
                    .iter()
                    .filter(|f| f.0 == key)
                    .map(|f| (f.1, f.2, f.3))
                    .collect();
                let ts = records.iter().filter(|r| r.0 == key).map(|r| r.1).collect();
                assert_eq!(got, reference_sessions(ts, gap), "round {round} key {key}");
            }
        }
    }
}
