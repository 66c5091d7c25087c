//! Source positions of mapping keys in a YAML text, so that errors found after parsing (an
//! unknown type, an unknown input, a component's configuration error) can still name a line
//! and column.
//!
//! `serde_yaml_ng` keeps no spans in its `Value`, so the text is read a second time by
//! [`saphyr_parser`], an event parser that gives every node its span: every mapping key, in
//! block or flow style (`{type: map, input: x}`), is recorded under its path of parent keys
//! (a list item's path element is its index, from 0). Keys inside block scalars are text, not
//! keys, and complex keys (`? [a, b]`) are not recorded.

use std::fmt;

/// A 1-based line and column in the job file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pos {
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1.
    pub column: usize,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// Every block-style mapping key of a YAML text with its path and position.
#[derive(Clone, Debug, Default)]
pub struct SourceMap {
    keys: Vec<(Vec<String>, Pos)>,
    lines: Vec<String>,
}

impl SourceMap {
    /// Indexes `text`. A text the parser cannot read is indexed up to the error.
    pub fn new(text: &str) -> Self {
        SourceMap {
            keys: KeyIndex::default().read(text),
            lines: text.lines().map(str::to_owned).collect(),
        }
    }

    /// Where `line`:`column` (1-based, within `value`) of a scalar value written at or after
    /// `from` is in the file: the value's text is looked for from `from` on (plain, quoted, in
    /// a flow mapping or a block scalar). `None` if it is not found as written (a quoted value
    /// with escapes, say).
    pub fn position_in_value(
        &self,
        from: Pos,
        value: &str,
        line: usize,
        column: usize,
    ) -> Option<Pos> {
        let wanted = value.lines().nth(line.saturating_sub(1))?;
        if wanted.trim().is_empty() {
            return None;
        }
        // The value's first line, then the wanted line from there on.
        let first = value.lines().next()?;
        let Some(start) = self.find_text(from, first) else {
            // Folded or escaped: look for the text from the column on, as far as it is unique
            // enough to find.
            let rest: String = wanted
                .chars()
                .skip(column.saturating_sub(1))
                .take(16)
                .collect();
            let rest = rest.trim_end();
            return (!rest.is_empty())
                .then(|| self.find_text(from, rest))
                .flatten();
        };
        let at = if line <= 1 {
            start
        } else {
            self.find_text(
                Pos {
                    line: start.line + 1,
                    column: 1,
                },
                wanted,
            )?
        };
        Some(Pos {
            line: at.line,
            column: at.column + column.saturating_sub(1),
        })
    }

    /// The first place `needle` is written at or after `from`, within 100 lines.
    fn find_text(&self, from: Pos, needle: &str) -> Option<Pos> {
        for (i, text) in self
            .lines
            .iter()
            .enumerate()
            .skip(from.line.saturating_sub(1))
            .take(100)
        {
            let skip = if i + 1 == from.line {
                text.char_indices()
                    .nth(from.column.saturating_sub(1))
                    .map_or(text.len(), |(b, _)| b)
            } else {
                0
            };
            if let Some(found) = text[skip..].find(needle) {
                let byte = skip + found;
                return Some(Pos {
                    line: i + 1,
                    column: text[..byte].chars().count() + 1,
                });
            }
        }
        None
    }

    /// The position of the first key at `path` (parent keys first).
    pub fn find(&self, path: &[&str]) -> Option<Pos> {
        self.find_all(path).into_iter().next()
    }

    /// The positions of every key at `path`, in text order (more than one for a duplicate).
    pub fn find_all(&self, path: &[&str]) -> Vec<Pos> {
        self.keys
            .iter()
            .filter(|(p, _)| p.len() == path.len() && p.iter().zip(path).all(|(a, b)| a == b))
            .map(|(_, pos)| *pos)
            .collect()
    }

    /// Every key written a second time under the same parent: its path and the positions of
    /// the first and the repeated occurrence, in text order of the repeats. Keys inside a
    /// repeated key are not listed again.
    pub fn duplicates(&self) -> Vec<(Vec<String>, Pos, Pos)> {
        let mut out: Vec<(Vec<String>, Pos, Pos)> = Vec::new();
        for (i, (path, second)) in self.keys.iter().enumerate() {
            let inside_repeat = out
                .iter()
                .any(|(p, _, _)| p.len() < path.len() && path.starts_with(p));
            if inside_repeat {
                continue;
            }
            if let Some((_, first)) = self.keys[..i].iter().find(|(p, _)| p == path) {
                out.push((path.clone(), *first, *second));
            }
        }
        out
    }
}

/// An open mapping or list while reading the events.
struct Frame {
    /// For a mapping: the key whose value is being read (`None` for a complex key, and while
    /// the key itself is read).
    key: Option<String>,
    /// For a mapping: whether the next node is a key. For a list: never.
    at_key: bool,
    /// For a list: the index of the next item; `None` for a mapping.
    index: Option<usize>,
}

impl Frame {
    /// This frame's element of a child's path, if it has one.
    fn element(&self) -> Option<String> {
        match self.index {
            Some(i) => Some(i.to_string()),
            None if !self.at_key => self.key.clone(),
            None => None, // inside a complex key
        }
    }

    /// A child node was read whole.
    fn child_done(&mut self) {
        match &mut self.index {
            Some(i) => *i += 1,
            None => self.at_key = !self.at_key,
        }
    }
}

/// Collects the keys of a YAML text from its events.
#[derive(Default)]
struct KeyIndex {
    frames: Vec<Frame>,
    keys: Vec<(Vec<String>, Pos)>,
}

impl KeyIndex {
    fn read(mut self, text: &str) -> Vec<(Vec<String>, Pos)> {
        use saphyr_parser::{Event, Parser};
        for event in Parser::new_from_str(text) {
            let Ok((event, span)) = event else {
                break; // a syntax error: the YAML reader reports it
            };
            match event {
                Event::DocumentStart(_) => self.frames.clear(),
                Event::Scalar(value, ..) => {
                    self.node_starts(Some(&value), span.start);
                    self.node_done();
                }
                Event::Alias(_) => {
                    self.node_starts(None, span.start);
                    self.node_done();
                }
                Event::MappingStart(..) | Event::SequenceStart(..) => {
                    self.node_starts(None, span.start);
                    let mapping = matches!(event, Event::MappingStart(..));
                    self.frames.push(Frame {
                        key: None,
                        at_key: mapping,
                        index: (!mapping).then_some(0),
                    });
                }
                Event::MappingEnd | Event::SequenceEnd => {
                    self.frames.pop();
                    self.node_done();
                }
                _ => {}
            }
        }
        self.keys
    }

    /// A node starts at `at`; `scalar` is its text if it is a scalar.
    fn node_starts(&mut self, scalar: Option<&str>, at: saphyr_parser::Marker) {
        let Some((top, parents)) = self.frames.split_last_mut() else {
            return;
        };
        if top.index.is_some() || !top.at_key {
            return; // a value
        }
        top.key = scalar.map(str::to_owned);
        let Some(key) = &top.key else {
            return;
        };
        let path: Option<Vec<String>> = parents
            .iter()
            .map(Frame::element)
            .chain([Some(key.clone())])
            .collect();
        if let Some(path) = path {
            let pos = Pos {
                line: at.line(),
                column: at.col() + 1,
            };
            self.keys.push((path, pos));
        }
    }

    fn node_done(&mut self) {
        if let Some(top) = self.frames.last_mut() {
            top.child_done();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
name: demo   # a comment
latency:
  interval: 100ms
sources:
  gen:
    type: generator
    rate: 10
operators:
  'work':
    type: map
    note: |
      type: not a key
      input: neither
    input: gen
sinks:
  out: {type: discard, input: work}
";

    #[test]
    fn finds_nested_keys() {
        let map = SourceMap::new(TEXT);
        assert_eq!(map.find(&["name"]), Some(Pos { line: 1, column: 1 }));
        assert_eq!(
            map.find(&["latency", "interval"]),
            Some(Pos { line: 3, column: 3 })
        );
        assert_eq!(
            map.find(&["sources", "gen", "rate"]),
            Some(Pos { line: 7, column: 5 })
        );
        assert_eq!(
            map.find(&["operators", "work"]),
            Some(Pos { line: 9, column: 3 })
        );
        assert_eq!(
            map.find(&["operators", "work", "input"]),
            Some(Pos {
                line: 14,
                column: 5
            })
        );
        assert_eq!(map.find(&["operators", "work", "type"]).unwrap().line, 10);
        assert_eq!(map.find(&["sinks", "out"]).unwrap().line, 16);
        // Flow style: the key's own column.
        assert_eq!(
            map.find(&["sinks", "out", "type"]),
            Some(Pos {
                line: 16,
                column: 9
            })
        );
        assert_eq!(
            map.find(&["sinks", "out", "input"]),
            Some(Pos {
                line: 16,
                column: 24
            })
        );
        // Keys in a block scalar are text.
        assert_eq!(map.find(&["operators", "work", "note", "type"]), None);
        assert_eq!(map.find(&["operators", "work", "type"]).unwrap().line, 10);
    }

    #[test]
    fn finds_duplicates() {
        let map = SourceMap::new("sources:\n  a:\n    type: x\n  a:\n    type: y\n");
        let dups = map.duplicates();
        // The repeated vertex's `type` is not listed again.
        assert_eq!(dups.len(), 1, "{dups:?}");
        let (path, first, second) = &dups[0];
        assert_eq!(path, &vec!["sources", "a"]);
        assert_eq!((first.line, second.line), (2, 4));
        let map = SourceMap::new("sources:\n  a:\n    type: x\n  b:\n    type: y\n");
        assert!(map.duplicates().is_empty());
    }
}
