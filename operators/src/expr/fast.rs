//! A direct evaluator for the expressions most job files hold — a field, a comparison, a bit
//! of arithmetic, `&&`/`||`/`!` over those — run over the event without building CEL values.
//!
//! It is a shortcut, never a second semantics: for any record where it would need something it
//! does not handle (a missing field, a type it does not combine, an error of any kind, NaN, a
//! huge int meeting a double), it gives up and the `cel` crate evaluates the expression, so the
//! results and the error messages are the crate's (with Tidemark's mixed arithmetic). A test
//! compares the two over random events and expressions.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::sync::Arc;

use cel::common::ast::{operators, CallExpr, Expr as Ast, IdedExpr, LiteralValue};
use tidemark_runtime::value::Value;

use super::event::{EventRef, Number, Scope};

/// An expression the shortcut can evaluate.
#[derive(Debug, Clone)]
pub(crate) enum Node {
    Literal(Value),
    /// A top-level field of the event.
    Field(Arc<str>),
    /// Fields of a map: `user.address.city` is `Select(Field(user), [address, city])`.
    Select(Box<Node>, Vec<Arc<str>>),
    RecordKey,
    RecordTimestamp,
    Not(Box<Node>),
    Negate(Box<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Conditional(Box<Node>, Box<Node>, Box<Node>),
    Compare(Cmp, Box<Node>, Box<Node>),
    Arith(Op, Box<Node>, Box<Node>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

impl Cmp {
    /// Whether the comparison holds for operands ordered `ordering`.
    fn holds(self, ordering: Ordering) -> bool {
        match self {
            Cmp::Eq => ordering == Ordering::Equal,
            Cmp::Ne => ordering != Ordering::Equal,
            Cmp::Lt => ordering == Ordering::Less,
            Cmp::Le => ordering != Ordering::Greater,
            Cmp::Gt => ordering == Ordering::Greater,
            Cmp::Ge => ordering != Ordering::Less,
        }
    }
}

/// The shortcut for `e` (the expression as parsed, before the mixed-arithmetic rewrite), if it
/// only uses what the shortcut handles.
pub(crate) fn plan(e: &IdedExpr) -> Option<Node> {
    Some(match &e.expr {
        Ast::Literal(l) => Node::Literal(match l {
            LiteralValue::Boolean(b) => Value::Bool(*b.inner()),
            LiteralValue::Int(i) => Value::Int(*i.inner()),
            LiteralValue::Double(d) => Value::Double(*d.inner()),
            LiteralValue::String(s) => Value::String(Arc::from(s.inner())),
            LiteralValue::Null => Value::Null,
            LiteralValue::Bytes(_) | LiteralValue::UInt(_) => return None,
        }),
        // `record` and `event` mean more than a field: left to the crate.
        Ast::Ident(name) if name == "record" || name == "event" => return None,
        Ast::Ident(name) => Node::Field(Arc::from(name.as_str())),
        Ast::Select(s) if s.test => return None,
        Ast::Select(s) => {
            if let Ast::Ident(root) = &s.operand.expr {
                if root == "record" {
                    return match s.field.as_str() {
                        "key" => Some(Node::RecordKey),
                        "timestamp" => Some(Node::RecordTimestamp),
                        _ => None,
                    };
                }
            }
            match plan(&s.operand)? {
                Node::Select(base, mut path) => {
                    path.push(Arc::from(s.field.as_str()));
                    Node::Select(base, path)
                }
                base @ Node::Field(_) => {
                    Node::Select(Box::new(base), vec![Arc::from(s.field.as_str())])
                }
                _ => return None,
            }
        }
        Ast::Call(call) => return plan_call(call),
        _ => return None,
    })
}

fn plan_call(call: &CallExpr) -> Option<Node> {
    if call.target.is_some() {
        return None;
    }
    let arg = |i: usize| plan(&call.args[i]).map(Box::new);
    Some(match (call.func_name.as_str(), call.args.len()) {
        (operators::LOGICAL_NOT, 1) => Node::Not(arg(0)?),
        (operators::NEGATE, 1) => Node::Negate(arg(0)?),
        (operators::LOGICAL_AND, 2) => Node::And(arg(0)?, arg(1)?),
        (operators::LOGICAL_OR, 2) => Node::Or(arg(0)?, arg(1)?),
        (operators::CONDITIONAL, 3) => Node::Conditional(arg(0)?, arg(1)?, arg(2)?),
        (name, 2) => {
            let cmp = match name {
                operators::EQUALS => Some(Cmp::Eq),
                operators::NOT_EQUALS => Some(Cmp::Ne),
                operators::LESS => Some(Cmp::Lt),
                operators::LESS_EQUALS => Some(Cmp::Le),
                operators::GREATER => Some(Cmp::Gt),
                operators::GREATER_EQUALS => Some(Cmp::Ge),
                _ => None,
            };
            if let Some(cmp) = cmp {
                return Some(Node::Compare(cmp, arg(0)?, arg(1)?));
            }
            let op = match name {
                operators::ADD => Op::Add,
                operators::SUBSTRACT => Op::Sub,
                operators::MULTIPLY => Op::Mul,
                operators::DIVIDE => Op::Div,
                operators::MODULO => Op::Rem,
                _ => return None,
            };
            Node::Arith(op, arg(0)?, arg(1)?)
        }
        _ => return None,
    })
}

/// Ints beyond this meet doubles only through the crate (where a double cannot hold them).
const EXACT: u64 = 1 << 53;

impl Node {
    /// The value, or `None` to leave this record to the crate.
    #[inline]
    pub(crate) fn eval(&self, scope: &Scope<'_>) -> Option<Value> {
        self.eval_ref(scope).map(Cow::into_owned)
    }

    /// A bool, or `None` to leave this record to the crate.
    #[inline]
    pub(crate) fn eval_bool(&self, scope: &Scope<'_>) -> Option<bool> {
        self.eval_ref(scope)?.as_bool()
    }

    /// A number (`Some(None)` for null), or `None` to leave this record to the crate.
    #[inline]
    pub(crate) fn eval_number(&self, scope: &Scope<'_>) -> Option<Option<Number>> {
        match *self.eval_ref(scope)? {
            Value::Int(i) => Some(Some(Number::Int(i))),
            Value::Double(d) => Some(Some(Number::Double(d))),
            Value::Null => Some(None),
            _ => None,
        }
    }

    /// As [`Node::eval`], borrowing the event's values and the literals where it can.
    fn eval_ref<'a>(&'a self, scope: &Scope<'a>) -> Option<Cow<'a, Value>> {
        Some(match self {
            Node::Literal(v) => Cow::Borrowed(v),
            Node::Field(name) => field(scope, name)?,
            Node::Select(base, path) => match base.eval_ref(scope)? {
                Cow::Borrowed(mut v) => {
                    for name in path {
                        v = v.as_map()?.get(name)?;
                    }
                    Cow::Borrowed(v)
                }
                Cow::Owned(mut v) => {
                    for name in path {
                        v = v.as_map()?.get(name)?.clone();
                    }
                    Cow::Owned(v)
                }
            },
            Node::RecordKey => Cow::Borrowed(scope.key),
            Node::RecordTimestamp => Cow::Owned(Value::Int(scope.timestamp_ms)),
            Node::Not(a) => bool(!a.eval_ref(scope)?.as_bool()?),
            Node::Negate(a) => Cow::Owned(match *a.eval_ref(scope)? {
                Value::Int(i) => Value::Int(i.checked_neg()?),
                Value::Double(d) => Value::Double(-d),
                _ => return None,
            }),
            Node::And(a, b) => {
                // Errors on the left are left to the crate (CEL's `&&` forgives them when the
                // right is false).
                if !a.eval_ref(scope)?.as_bool()? {
                    bool(false)
                } else {
                    bool(b.eval_ref(scope)?.as_bool()?)
                }
            }
            Node::Or(a, b) => {
                if a.eval_ref(scope)?.as_bool()? {
                    bool(true)
                } else {
                    bool(b.eval_ref(scope)?.as_bool()?)
                }
            }
            Node::Conditional(c, a, b) => {
                if c.eval_ref(scope)?.as_bool()? {
                    a.eval_ref(scope)?
                } else {
                    b.eval_ref(scope)?
                }
            }
            Node::Compare(cmp, a, b) => {
                if let Some(result) = compare_text(*cmp, a, b, scope) {
                    return Some(bool(result));
                }
                let (a, b) = (a.eval_ref(scope)?, b.eval_ref(scope)?);
                bool(compare(*cmp, &a, &b)?)
            }
            Node::Arith(op, a, b) => {
                let (a, b) = (a.eval_ref(scope)?, b.eval_ref(scope)?);
                Cow::Owned(arith(*op, &a, &b)?)
            }
        })
    }
}

/// A field of an event kept as text compared with a string literal (`status == "paid"`), read
/// in the text without making the field's value: when the value there is a string without
/// escapes, its bytes between the quotes are the string. `None` for anything else (the value
/// is then made and compared as usual).
#[inline]
fn compare_text(cmp: Cmp, a: &Node, b: &Node, scope: &Scope<'_>) -> Option<bool> {
    let EventRef::Record(record) = scope.event else {
        return None;
    };
    let (name, literal, field_first) = match (a, b) {
        (Node::Field(name), Node::Literal(Value::String(s))) => (name, s, true),
        (Node::Literal(Value::String(s)), Node::Field(name)) => (name, s, false),
        _ => return None,
    };
    let text = record.field_text(name)?;
    let inner = text.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    if inner.contains(&b'\\') {
        return None;
    }
    let ordering = if field_first {
        inner.cmp(literal.as_bytes())
    } else {
        literal.as_bytes().cmp(inner)
    };
    Some(cmp.holds(ordering))
}

fn bool<'a>(b: bool) -> Cow<'a, Value> {
    Cow::Owned(Value::Bool(b))
}

fn field<'a>(scope: &Scope<'a>, name: &str) -> Option<Cow<'a, Value>> {
    match scope.event {
        EventRef::Value(event) => event.get(name).map(Cow::Borrowed),
        EventRef::Map(event) => event.get(name).map(Cow::Borrowed),
        EventRef::Record(record) => record.field(name),
        EventRef::Numeric { key, value } => match name {
            "key" => Some(Cow::Owned(Value::Int(key))),
            "value" => Some(Cow::Owned(Value::Double(value))),
            _ => None,
        },
    }
}

fn num_cmp(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => Some(x.cmp(y)),
        (Value::Double(x), Value::Double(y)) => x.partial_cmp(y),
        (Value::Int(x), Value::Double(y)) if x.unsigned_abs() <= EXACT => {
            (*x as f64).partial_cmp(y)
        }
        (Value::Double(x), Value::Int(y)) if y.unsigned_abs() <= EXACT => {
            x.partial_cmp(&(*y as f64))
        }
        _ => None,
    }
}

fn compare(cmp: Cmp, a: &Value, b: &Value) -> Option<bool> {
    let ordering = match (a, b) {
        (Value::String(x), Value::String(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Value::Bool(x), Value::Bool(y)) if matches!(cmp, Cmp::Eq | Cmp::Ne) => x.cmp(y),
        (Value::Null, Value::Null) if matches!(cmp, Cmp::Eq | Cmp::Ne) => Ordering::Equal,
        _ => num_cmp(a, b)?,
    };
    Some(cmp.holds(ordering))
}

fn arith(op: Op, a: &Value, b: &Value) -> Option<Value> {
    Some(match (a, b) {
        (Value::Int(x), Value::Int(y)) => Value::Int(match op {
            Op::Add => x.checked_add(*y)?,
            Op::Sub => x.checked_sub(*y)?,
            Op::Mul => x.checked_mul(*y)?,
            Op::Div => x.checked_div(*y)?,
            Op::Rem => x.checked_rem(*y)?,
        }),
        (Value::String(x), Value::String(y)) if op == Op::Add => {
            let mut s = String::with_capacity(x.len() + y.len());
            s.push_str(x);
            s.push_str(y);
            Value::String(Arc::from(s))
        }
        _ => {
            let (x, y) = match (a, b) {
                (Value::Double(x), Value::Double(y)) => (*x, *y),
                (Value::Int(x), Value::Double(y)) if x.unsigned_abs() <= EXACT => (*x as f64, *y),
                (Value::Double(x), Value::Int(y)) if y.unsigned_abs() <= EXACT => (*x, *y as f64),
                _ => return None,
            };
            Value::Double(match op {
                Op::Add => x + y,
                Op::Sub => x - y,
                Op::Mul => x * y,
                Op::Div => x / y,
                Op::Rem => return None,
            })
        }
    })
}
