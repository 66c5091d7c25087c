//! A quick validating scan of one JSON object, finding where its top-level fields lie: what
//! [`super::check_indexed`] tries before serde_json.
//!
//! It is conservative: it accepts only text that is certainly one JSON object serde_json
//! reads without error (the whole text is valid UTF-8, checked by the caller), and gives up
//! (`None`) on anything it does not settle itself: any error, an escape other than the
//! one-character ones (`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`) in a value, any escape in
//! a top-level name, a number with an exponent or more than [`MAX_DIGITS`] digits (which
//! serde_json may find out of range), nesting deeper than [`MAX_DEPTH`], more than
//! [`INDEXED`] top-level fields. serde_json then checks the text, and says what
//! is wrong with it, as before: a malformed event is refused exactly as a full parse refuses it.

/// How many top-level fields a [`FieldIndex`](super::FieldIndex) holds.
pub const INDEXED: usize = 8;

/// One field: its name's text (without the quotes) and its value's, as byte ranges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Span {
    pub name: u16,
    pub name_end: u16,
    pub value: u16,
    pub value_end: u16,
}

/// The top-level fields a scan found, in order: every one of the object.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Fields {
    pub len: u8,
    pub spans: [Span; INDEXED],
}

/// Numbers with more digits are left to serde_json.
const MAX_DIGITS: usize = 30;

/// Deeper nesting is left to serde_json (whose own limit is 128).
const MAX_DEPTH: usize = 64;

/// The index of `text`, one JSON object with whitespace around it, when the scan settles that
/// it is valid (see the [module docs](self)); `None` when it does not.
pub(super) fn object_index(text: &[u8]) -> Option<Fields> {
    if text.len() > u16::MAX as usize {
        return None;
    }
    let mut s = Scan { text, at: 0 };
    let mut index = Fields::default();
    s.ws();
    if s.peek() != Some(b'{') {
        return None;
    }
    s.sequence(b'}', |s| {
        s.eat(b'"')?;
        let name = s.at;
        s.string_body(false)?;
        let name_end = s.at - 1;
        s.ws();
        s.eat(b':')?;
        s.ws();
        let value = s.at;
        s.value(1)?;
        let len = index.len as usize;
        if len == INDEXED {
            return None;
        }
        index.spans[len] = Span {
            name: name as u16,
            name_end: name_end as u16,
            value: value as u16,
            value_end: s.at as u16,
        };
        index.len += 1;
        Some(())
    })?;
    s.ws();
    (s.at == text.len()).then_some(index)
}

struct Scan<'t> {
    text: &'t [u8],
    at: usize,
}

impl Scan<'_> {
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    #[inline]
    fn eat(&mut self, b: u8) -> Option<()> {
        self.eat_if(b).then_some(())
    }

    #[inline]
    fn eat_if(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        self.at += usize::from(hit);
        hit
    }

    /// JSON's whitespace (space, tab, line feed, carriage return).
    #[inline]
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// After the opening quote: up to and past the closing one. With `escapes`, the
    /// one-character escapes are read; without, any escape gives up.
    #[inline]
    fn string_body(&mut self, escapes: bool) -> Option<()> {
        loop {
            let b = self.peek()?;
            self.at += 1;
            match b {
                b'"' => return Some(()),
                b'\\' if escapes => {
                    let e = self.peek()?;
                    if !matches!(e, b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') {
                        return None;
                    }
                    self.at += 1;
                }
                b'\\' => return None,
                // Control characters must be escaped.
                0..=0x1f => return None,
                _ => {}
            }
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        self.at - start
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?`, at most `MAX_DIGITS` digits; an exponent gives up.
    fn number(&mut self) -> Option<()> {
        self.eat_if(b'-');
        let first = self.peek()?;
        let mut count = self.digits();
        if count == 0 || (first == b'0' && count > 1) {
            return None;
        }
        if self.eat_if(b'.') {
            let fraction = self.digits();
            if fraction == 0 {
                return None;
            }
            count += fraction;
        }
        if count > MAX_DIGITS || matches!(self.peek(), Some(b'e' | b'E')) {
            return None;
        }
        Some(())
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        (self.text.get(self.at..end)? == word).then(|| self.at = end)
    }

    /// At an opening bracket: `item`s separated by commas, up to and past `close`.
    fn sequence(&mut self, close: u8, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.at += 1;
        self.ws();
        if self.eat_if(close) {
            return Some(());
        }
        loop {
            item(self)?;
            self.ws();
            if self.eat_if(b',') {
                self.ws();
                continue;
            }
            return self.eat(close);
        }
    }

    fn value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'"' => {
                self.at += 1;
                self.string_body(true)
            }
            b'-' | b'0'..=b'9' => self.number(),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'[' if depth < MAX_DEPTH => self.sequence(b']', |s| s.value(depth + 1)),
            b'{' if depth < MAX_DEPTH => self.sequence(b'}', |s| {
                s.eat(b'"')?;
                s.string_body(true)?;
                s.ws();
                s.eat(b':')?;
                s.ws();
                s.value(depth + 1)
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{check_indexed_by_serde, FieldIndex};
    use super::*;

    /// Whenever the scan settles a text, serde_json reads it as an object, and finds the same
    /// fields in the same places.
    fn agrees(text: &[u8]) -> bool {
        let Some(index) = std::str::from_utf8(text)
            .ok()
            .and_then(|_| object_index(text))
            .map(FieldIndex::from)
        else {
            return false;
        };
        let value: Result<serde_json::Value, _> = serde_json::from_slice(text);
        assert!(
            value.as_ref().is_ok_and(|v| v.is_object()),
            "accepted {:?}: {value:?}",
            String::from_utf8_lossy(text)
        );
        let by_serde = check_indexed_by_serde(text).unwrap();
        assert_eq!(index, by_serde, "{:?}", String::from_utf8_lossy(text));
        true
    }

    const SEEDS: [&str; 8] = [
        r#"{"id":1,"user":"u9401","amount":636.74,"status":"open","ts":1790000000000}"#,
        r#"  { "a" : [1, -2.5, {"b": [true, false, null]}, "x\"y\\z\/\n"] , "c":{} }  "#,
        r#"{"n":-0,"m":0.0,"e":"","l":[],"o":{"k":[[]]},"a":"a","a":"b"}"#,
        r#"{}"#,
        r#"{"s":"é ü \t","d":123456789012345678901234567890}"#,
        r#"{"x":1e5,"y":"\u0041"}"#,
        "{\"a\":\r\n1\t}",
        r#"{"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8}"#,
    ];

    #[test]
    fn what_the_scan_accepts_serde_json_accepts_with_the_same_fields() {
        // The plain seeds are settled by the scan (the exponent, the `\u` escape and the
        // 30-digit number are left to serde_json).
        let settled: Vec<bool> = SEEDS.iter().map(|s| agrees(s.as_bytes())).collect();
        assert_eq!(settled, [true, true, true, true, true, false, true, true]);
        assert!(!agrees(
            br#"{"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9}"#
        ));
        // Mutants: bytes changed, dropped, doubled or inserted from JSON's own alphabet. Every
        // one the scan accepts must agree with serde_json; most mutants are refused.
        const ALPHABET: &[u8] = b"{}[]\":,.-+0123456789eE \t\n\\/tfnulrsabu\x01\xc3\xa9";
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let (mut accepted, mut total) = (0, 0);
        for seed in SEEDS {
            for _ in 0..4_000 {
                let mut text = seed.as_bytes().to_vec();
                for _ in 0..1 + next(3) {
                    let at = next(text.len() + 1);
                    let b = ALPHABET[next(ALPHABET.len())];
                    match next(4) {
                        0 if at < text.len() => text[at] = b,
                        1 if at < text.len() => {
                            text.remove(at);
                        }
                        2 if at < text.len() => text.insert(at, text[at]),
                        _ => text.insert(at, b),
                    }
                }
                total += 1;
                accepted += usize::from(agrees(&text));
            }
        }
        assert!(accepted > 100 && accepted < total, "{accepted} of {total}");
    }

    #[test]
    fn deep_nesting_long_numbers_and_long_texts_are_left_to_serde_json() {
        let deep = format!("{{\"a\":{}1{}}}", "[".repeat(70), "]".repeat(70));
        assert!(object_index(deep.as_bytes()).is_none());
        assert!(serde_json::from_str::<serde_json::Value>(&deep).is_ok());
        let long = format!("{{\"a\":\"{}\"}}", "x".repeat(70_000));
        assert!(object_index(long.as_bytes()).is_none());
        let digits = format!("{{\"a\":{}}}", "9".repeat(31));
        assert!(object_index(digits.as_bytes()).is_none());
    }
}
