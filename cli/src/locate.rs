//! Source positions of mapping keys in a YAML text, so that errors found after parsing (an
//! unknown type, an unknown input, a component's configuration error) can still name a line.
//!
//! `serde_yaml_ng` keeps no spans in its `Value`, so this scans the text: every line of the form
//! `key:` in block style is recorded under its path of parent keys, found by indentation. Flow
//! style (`{a: 1}`) and keys inside block scalars are not indexed; a lookup for them gives `None`
//! and the error goes without a line.

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
    /// Indexes `text`.
    pub fn new(text: &str) -> Self {
        let mut keys = Vec::new();
        // (indent, key) of the enclosing keys.
        let mut stack: Vec<(usize, String)> = Vec::new();
        // Lines more indented than this belong to a block scalar (`|` or `>`).
        let mut block_scalar_indent: Option<usize> = None;
        for (n, raw) in text.lines().enumerate() {
            let content = raw.trim_start_matches(' ');
            let indent = raw.len() - content.len();
            if content.is_empty() || content.starts_with('#') {
                continue;
            }
            if let Some(limit) = block_scalar_indent {
                if indent > limit {
                    continue;
                }
                block_scalar_indent = None;
            }
            if indent == 0 && (content.starts_with("---") || content.starts_with("...")) {
                stack.clear();
                continue;
            }
            let Some((key, rest)) = split_key(content) else {
                continue;
            };
            while stack.last().is_some_and(|(i, _)| *i >= indent) {
                stack.pop();
            }
            let mut path: Vec<String> = stack.iter().map(|(_, k)| k.clone()).collect();
            path.push(key.clone());
            keys.push((
                path,
                Pos {
                    line: n + 1,
                    column: indent + 1,
                },
            ));
            let value = rest.trim_start();
            if value.starts_with('|') || value.starts_with('>') {
                block_scalar_indent = Some(indent);
            }
            stack.push((indent, key));
        }
        SourceMap {
            keys,
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

/// Splits `key: rest` or `key:` (plain or quoted key) off a line's content.
fn split_key(content: &str) -> Option<(String, &str)> {
    if content.starts_with('-') && (content.len() == 1 || content[1..].starts_with(' ')) {
        return None; // a sequence item
    }
    let quote = content.chars().next().filter(|c| *c == '"' || *c == '\'');
    if let Some(q) = quote {
        let end = content[1..].find(q)? + 1;
        let after = &content[end + 1..];
        let rest = after.strip_prefix(':')?;
        if !(rest.is_empty() || rest.starts_with(' ')) {
            return None;
        }
        return Some((content[1..end].to_string(), rest));
    }
    if content.starts_with(['{', '[', '&', '*', '!', '|', '>', '%', '@', '`']) {
        return None;
    }
    let mut search = 0;
    while let Some(i) = content[search..].find(':') {
        let at = search + i;
        let rest = &content[at + 1..];
        if rest.is_empty() || rest.starts_with(' ') {
            let key = content[..at].trim_end();
            if key.is_empty() || key.contains(" #") {
                return None;
            }
            return Some((key.to_string(), rest));
        }
        search = at + 1;
    }
    None
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
        assert_eq!(map.find(&["sinks", "out", "type"]), None);
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
