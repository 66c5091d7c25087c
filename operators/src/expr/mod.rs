//! CEL expressions over events: compiled once when the job is built, evaluated per record.
//!
//! ```
//! use tidemark_operators::expr::{Evaluator, Expr, Scope, Type};
//! use tidemark_runtime::value::Value;
//!
//! let expr = Expr::compile("amount * 0.92")?;              // once, at job build
//! assert_eq!(expr.result_type(), Type::Double);
//! let eval = Evaluator::new();                              // once per subtask
//! let event = Value::from_json(br#"{"amount": 100}"#).unwrap();
//! let scope = Scope { event: (&event).into(), key: &Value::Null, timestamp_ms: 0 };
//! assert_eq!(eval.eval(&expr, &scope)?, Value::Double(92.0));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **Variables**: the event's fields by name at the top level (`amount`, `user.name`), and
//! `record.key` and `record.timestamp` (an int, milliseconds since the Unix epoch), and the whole
//! event as `event` (unless it has a field of that name). A field the event does not have is a
//! run-time error ("no field …"); `has(event.tier)` or `has(user.name)` tests for one.
//!
//! **Numbers** mix as the spec says, even where CEL is stricter: ints and doubles compare by
//! value (`amount > 100` holds for `100.5`), arithmetic with a double gives a double
//! (`amount * 0.92`), ints stay ints (`amount * 2`), and int overflow and int division by zero
//! are run-time errors. See [`check`] for how.
//!
//! **Compile errors** ([`CompileError`]) carry the 1-based column within the expression:
//! syntax errors, calls to functions that do not exist, fields of `record` other than `key` and
//! `timestamp`, and operators on types that cannot take them where the types are known from
//! literals. [`Expr::result_type`] tells what the expression gives where that is known, so
//! that callers can refuse a `where` that is not a bool.
//!
//! **Cost**: the [`cel`] crate builds its function registry when a context is made (tens of
//! microseconds), so an [`Evaluator`] holds one context for its subtask and each evaluation
//! only opens a scope on it that reads the record's fields on demand. The crate still boxes
//! each intermediate value it makes.

pub mod check;
mod convert;
mod event;
mod fast;
mod mixed;

use std::fmt;
use std::sync::Arc;

use cel::common::ast::IdedExpr;
use cel::Context;
use tidemark_runtime::value::Value;

pub use check::Type;
pub use event::{EvalError, EventRef, Number, Scope};

use check::{Checker, Finding};
use convert::Resolver;

/// A compiled expression: parsed, checked and rewritten once; cheap to clone and share between
/// subtasks.
#[derive(Clone)]
pub struct Expr {
    inner: Arc<Compiled>,
}

struct Compiled {
    source: String,
    ast: IdedExpr,
    result_type: Type,
    /// The variables it reads ([`Expr::variables`]).
    variables: Vec<String>,
    /// The direct evaluator, where the expression is simple enough ([`fast`]).
    shortcut: Option<fast::Node>,
}

impl fmt::Debug for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Expr({:?})", self.inner.source)
    }
}

/// Why an expression did not compile.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message} (at column {column} of `{expression}`)")]
pub struct CompileError {
    /// The expression as written.
    pub expression: String,
    /// 1-based line within the expression (1 unless it spans lines).
    pub line: usize,
    /// 1-based column within that line of the expression.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl CompileError {
    /// This error as a component's setting error at the dotted `path` (`"where"`,
    /// `"set.amount_eur"`), for a component of `type_name`.
    pub fn into_config_error(self, type_name: &str, path: &str) -> crate::ConfigError {
        let mut error = crate::FieldError::new(path, "");
        error.problem = crate::SettingProblem::Expression {
            expression: self.expression,
            line: self.line,
            column: self.column,
            message: self.message,
        };
        crate::ConfigError::invalid(type_name, error)
    }
}

impl Expr {
    /// Parses and checks `source`.
    pub fn compile(source: &str) -> Result<Expr, CompileError> {
        let env = mixed::env();
        let program = env.compile(source).map_err(|errors| {
            let first = errors.errors.first();
            let (line, column) = first
                .map(|e| (e.pos.0.max(1) as usize, e.pos.1.max(1) as usize))
                .unwrap_or((1, 1));
            let message = first.map_or_else(|| errors.to_string(), |e| syntax_message(&e.msg));
            CompileError {
                expression: source.to_owned(),
                line,
                column,
                message,
            }
        })?;
        let shortcut = fast::plan(program.expression());
        let mut ast = program.expression().clone();
        let mut checker = Checker::new();
        let result_type = checker.walk(&mut ast);
        if let Some(Finding { id, message, call }) = checker.findings.into_iter().next() {
            let (line, column) = program
                .source_info()
                .offset_for(id)
                .map(|(start, _)| {
                    let start = start as usize;
                    let start = call.map_or(start, |name| name_before(source, start, &name));
                    line_column(source, start)
                })
                .unwrap_or((1, 1));
            return Err(CompileError {
                expression: source.to_owned(),
                line,
                column,
                message,
            });
        }
        Ok(Expr {
            inner: Arc::new(Compiled {
                source: source.to_owned(),
                ast,
                result_type,
                variables: checker.variables,
                shortcut,
            }),
        })
    }

    /// Compiles `source`, which must give a bool where that can be known (a `where`).
    pub fn compile_condition(source: &str) -> Result<Expr, CompileError> {
        let expr = Expr::compile(source)?;
        match expr.result_type() {
            Type::Bool | Type::Dyn => Ok(expr),
            other => Err(CompileError {
                expression: source.to_owned(),
                line: 1,
                column: 1,
                message: format!(
                    "must give a bool, but gives {} {}",
                    article(other),
                    other.name()
                ),
            }),
        }
    }

    /// Whether a record can be evaluated without the `cel` crate's interpreter (the
    /// expression is a field, a comparison, arithmetic or `&&`/`||`/`!` over those); the
    /// results are the same either way.
    pub fn has_shortcut(&self) -> bool {
        self.inner.shortcut.is_some()
    }

    /// This expression without the shortcut: always evaluated by the `cel` crate (for tests
    /// and benchmarks that compare the two).
    #[doc(hidden)]
    pub fn without_shortcut(&self) -> Expr {
        Expr {
            inner: Arc::new(Compiled {
                source: self.inner.source.clone(),
                ast: self.inner.ast.clone(),
                result_type: self.inner.result_type,
                variables: self.inner.variables.clone(),
                shortcut: None,
            }),
        }
    }

    /// The variables the expression reads: its free identifiers (the event's fields it
    /// names), but `record`, each once.
    pub fn variables(&self) -> &[String] {
        &self.inner.variables
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.inner.source
    }

    /// What the expression gives, where that is known before it runs ([`Type::Dyn`] if not).
    pub fn result_type(&self) -> Type {
        self.inner.result_type
    }
}

fn article(t: Type) -> &'static str {
    match t {
        Type::Int | Type::Uint => "an",
        _ => "a",
    }
}

/// The parser's message, with its jargon ("mismatched input '<EOF>' expecting {…}") made
/// plainer: what was found where something else was expected.
fn syntax_message(msg: &str) -> String {
    let msg = msg.strip_prefix("Syntax error: ").unwrap_or(msg);
    for prefix in [
        "mismatched input ",
        "extraneous input ",
        "no viable alternative at input ",
    ] {
        if let Some(rest) = msg.strip_prefix(prefix) {
            let found = rest.split(" expecting").next().unwrap_or(rest).trim();
            return if found == "'<EOF>'" || found.ends_with("<EOF>'") {
                "syntax error: the expression ends too early".to_owned()
            } else {
                format!("syntax error: unexpected {found}")
            };
        }
    }
    format!("syntax error: {msg}")
}

/// Where `name` starts when it ends just before the character at `offset` (the parser places a
/// call at its `(`); `offset` if it does not.
fn name_before(source: &str, offset: usize, name: &str) -> usize {
    let chars: Vec<char> = source.chars().collect();
    let n = name.chars().count();
    if offset >= n && offset <= chars.len() {
        let candidate: String = chars[offset - n..offset].iter().collect();
        if candidate == name {
            return offset - n;
        }
    }
    offset
}

/// 1-based line and column of the character at `offset` (in characters) of `source`.
fn line_column(source: &str, offset: usize) -> (usize, usize) {
    let mut line = 1;
    let mut column = 1;
    for c in source.chars().take(offset) {
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    (line, column)
}

/// Evaluates expressions for one subtask: holds the CEL context (built once, as it costs tens
/// of microseconds) and opens a cheap scope on it per evaluation.
pub struct Evaluator {
    context: Context<'static, 'static>,
}

impl fmt::Debug for Evaluator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Evaluator")
    }
}

impl Default for Evaluator {
    fn default() -> Self {
        Self::new()
    }
}

impl Evaluator {
    /// An evaluator with the standard library, the strings and math extensions and the mixed
    /// arithmetic of the spec.
    pub fn new() -> Self {
        Evaluator {
            context: Context::with_env(mixed::env()),
        }
    }

    /// Evaluates `expr` over `scope`, converting the result to an event [`Value`].
    pub fn eval(&self, expr: &Expr, scope: &Scope<'_>) -> Result<Value, EvalError> {
        if let Some(v) = expr.inner.shortcut.as_ref().and_then(|n| n.eval(scope)) {
            return Ok(v);
        }
        self.with_result(expr, scope, convert::to_value)?
    }

    /// Evaluates a condition: `Ok(true)` or `Ok(false)`, or an error if it fails or does not
    /// give a bool.
    pub fn eval_bool(&self, expr: &Expr, scope: &Scope<'_>) -> Result<bool, EvalError> {
        if let Some(b) = expr
            .inner
            .shortcut
            .as_ref()
            .and_then(|n| n.eval_bool(scope))
        {
            return Ok(b);
        }
        self.with_result(expr, scope, |v| match convert::as_bool(v) {
            Some(b) => Ok(b),
            None => Err(EvalError {
                message: format!("must give a bool, but gave {}", convert::describe(v)),
            }),
        })?
    }

    /// Evaluates `expr` as a number: `Ok(Some(Number))`, or `Ok(None)` for `null`.
    pub fn eval_number(&self, expr: &Expr, scope: &Scope<'_>) -> Result<Option<Number>, EvalError> {
        if let Some(n) = expr
            .inner
            .shortcut
            .as_ref()
            .and_then(|n| n.eval_number(scope))
        {
            return Ok(n);
        }
        self.with_result(expr, scope, |v| match convert::as_number(v) {
            Some(n) => Ok(Some(n)),
            None if convert::is_null(v) => Ok(None),
            None => Err(EvalError {
                message: format!("must give a number, but gave {}", convert::describe(v)),
            }),
        })?
    }

    fn with_result<T>(
        &self,
        expr: &Expr,
        scope: &Scope<'_>,
        f: impl FnOnce(&dyn cel::common::value::Val) -> T,
    ) -> Result<T, EvalError> {
        let resolver = Resolver { scope: *scope };
        let root = shorten(&self.context);
        let mut inner = root.new_inner_scope();
        inner.set_variable_resolver(&resolver);
        let result = match cel::Value::resolve_val(&expr.inner.ast, &inner) {
            Ok(v) => Ok(f(v.as_ref())),
            Err(e) => Err(EvalError {
                message: convert::error_message(&e, &scope.event),
            }),
        };
        result
    }
}

/// The context with its lifetimes shortened to the borrow (it is covariant in both), so a
/// scope on it can borrow a record.
fn shorten<'a>(context: &'a Context<'static, 'static>) -> &'a Context<'a, 'a> {
    context
}

#[cfg(test)]
mod tests;

/// Calls `f` with the [`Scope`] of `record`: its event, key and timestamp in milliseconds.
/// A numeric record is read in place (no map is built).
#[inline]
pub fn with_record<T>(record: &tidemark_runtime::Record, f: impl FnOnce(&Scope<'_>) -> T) -> T {
    let key = record.key();
    let timestamp_ms = record.timestamp_millis();
    match record.numeric_parts() {
        Some((k, value)) => f(&Scope {
            event: EventRef::Numeric { key: k, value },
            key: &key,
            timestamp_ms,
        }),
        // Kept as text: read field by field.
        None if record.is_text() => f(&Scope {
            event: EventRef::Record(record),
            key: &key,
            timestamp_ms,
        }),
        None => {
            let event = record.event_map();
            f(&Scope {
                event: EventRef::Map(&event),
                key: &key,
                timestamp_ms,
            })
        }
    }
}

/// Sets `record`'s key to `key`, what `hash` edges route on.
#[inline]
pub fn set_key(record: &mut tidemark_runtime::Record, key: Value) {
    record.set_key(key);
}

/// The key of `record` as a value.
pub fn key_of(record: &tidemark_runtime::Record) -> Value {
    record.key().into_owned()
}
