//! `${NAME}` and `${NAME:-default}` in a job file are replaced by environment variables before
//! the YAML is read; `$$` is a literal `$`. An unset variable without a default is an error
//! naming it and its line. References in comments are left alone.
//!
//! The value is put into the text as it is: quote the reference (`password: "${PASSWORD}"`) when
//! the value may hold characters that mean something in YAML (`: `, `#`, a leading `*` or `&`).

use crate::locate::Pos;

/// A `${…}` that cannot be replaced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubstitutionError {
    /// The variable is not set and the reference gives no default.
    #[error("environment variable {name} is not set: set it, or write ${{{name}:-default}} for a default")]
    Unset {
        /// The variable.
        name: String,
        /// Where the reference is.
        pos: Pos,
    },
    /// `${` without a closing `}` or with an invalid name.
    #[error("invalid variable reference \"{text}\": expected ${{NAME}} or ${{NAME:-default}} with NAME of letters, digits and '_' (write $$ for a literal $)")]
    Invalid {
        /// The reference as written (up to the end of the line).
        text: String,
        /// Where it is.
        pos: Pos,
    },
}

impl SubstitutionError {
    /// Where the reference is.
    pub fn pos(&self) -> Pos {
        match self {
            SubstitutionError::Unset { pos, .. } | SubstitutionError::Invalid { pos, .. } => *pos,
        }
    }
}

/// Replaces the references in `text`, looking variables up with `lookup`. Returns the new text,
/// or every reference that could not be replaced.
pub fn substitute(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, Vec<SubstitutionError>> {
    if !text.contains('$') {
        return Ok(text.to_owned());
    }
    let mut out = String::with_capacity(text.len());
    let mut errors = Vec::new();
    for (n, line) in text.split_inclusive('\n').enumerate() {
        let comment = comment_start(line);
        let (body, rest) = line.split_at(comment.unwrap_or(line.len()));
        let mut i = 0;
        let bytes = body.as_bytes();
        while i < body.len() {
            let c = bytes[i];
            if c != b'$' {
                let ch = body[i..].chars().next().expect("in bounds");
                out.push(ch);
                i += ch.len_utf8();
                continue;
            }
            let pos = Pos {
                line: n + 1,
                column: body[..i].chars().count() + 1,
            };
            match bytes.get(i + 1) {
                Some(b'$') => {
                    out.push('$');
                    i += 2;
                }
                Some(b'{') => {
                    let Some(close) = body[i..].find('}') else {
                        errors.push(SubstitutionError::Invalid {
                            text: body[i..].trim_end().to_owned(),
                            pos,
                        });
                        break;
                    };
                    let inner = &body[i + 2..i + close];
                    let (name, default) = match inner.split_once(":-") {
                        Some((n, d)) => (n, Some(d)),
                        None => (inner, None),
                    };
                    if !valid_name(name) {
                        errors.push(SubstitutionError::Invalid {
                            text: body[i..=i + close].to_owned(),
                            pos,
                        });
                    } else {
                        match lookup(name).or_else(|| default.map(str::to_owned)) {
                            Some(v) => out.push_str(&v),
                            None => errors.push(SubstitutionError::Unset {
                                name: name.to_owned(),
                                pos,
                            }),
                        }
                    }
                    i += close + 1;
                }
                _ => {
                    out.push('$');
                    i += 1;
                }
            }
        }
        out.push_str(rest);
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Where a YAML comment starts on `line`: a `#` at the start or after a space, outside quotes.
fn comment_start(line: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if (c == '"' || c == '\'')
                && (prev == ' ' || prev == ':' || prev == '[' || prev == '{' || prev == ',') =>
            {
                quote = Some(c)
            }
            None if c == '#' && (prev == ' ' || prev == '\t' || i == 0) => return Some(i),
            None => {}
        }
        prev = c;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOST" => Some("kafka:9092".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn replaces_defaults_and_dollars() {
        let text = "a: ${HOST}\nb: ${NOPE:-fallback}\nc: $$HOME costs $5\nd: x${EMPTY}y\ne: ${HOST:-unused}\n";
        assert_eq!(
            substitute(text, &env).unwrap(),
            "a: kafka:9092\nb: fallback\nc: $HOME costs $5\nd: xy\ne: kafka:9092\n"
        );
    }

    #[test]
    fn unset_variables_are_errors_with_their_line() {
        let errs = substitute(
            "name: x\npassword: ${DB_PASSWORD}\nother: ${ALSO_UNSET}\n",
            &env,
        )
        .unwrap_err();
        assert_eq!(errs.len(), 2);
        assert_eq!(
            errs[0],
            SubstitutionError::Unset {
                name: "DB_PASSWORD".into(),
                pos: Pos {
                    line: 2,
                    column: 11
                }
            }
        );
        assert_eq!(errs[1].pos().line, 3);
        assert!(errs[0]
            .to_string()
            .starts_with("environment variable DB_PASSWORD is not set"));
    }

    #[test]
    fn comments_are_left_alone_and_bad_references_reported() {
        assert_eq!(
            substitute("a: 1 # uses ${UNSET}\n# ${ALSO}\nb: \"#${HOST}\"\n", &env).unwrap(),
            "a: 1 # uses ${UNSET}\n# ${ALSO}\nb: \"#kafka:9092\"\n"
        );
        let errs = substitute("a: ${1BAD}\nb: ${OPEN\n", &env).unwrap_err();
        assert!(matches!(&errs[0], SubstitutionError::Invalid { text, .. } if text == "${1BAD}"));
        assert!(matches!(&errs[1], SubstitutionError::Invalid { pos, .. } if pos.line == 2));
    }
}
