//! What an expression can be known to give before it runs, and the rewrite that gives CEL the
//! spec's mixed int/double arithmetic.
//!
//! CEL is strict: `amount * 0.92` with an int `amount` is an error in the `cel` crate. The spec
//! wants arithmetic with a double to give a double. Expressions are rewritten once, when they
//! are compiled:
//! - where both operands of `+ - * /` are known to be numbers of one type, nothing changes (the
//!   crate's own operator runs);
//! - where one is known to be an int and the other a double, the int side is wrapped in
//!   `double()`;
//! - where either side's type is only known at run time (an event field), the operator becomes a
//!   call to one of this module's overloads (`_tm_add_`, …), which converts an int to a double
//!   when the other side is a double and otherwise does exactly what the crate's operator does
//!   (errors included).
//!
//! Comparisons need no rewrite: the crate compares ints and doubles by value.
//!
//! The same walk infers each node's [`Type`] where it is known (literals, operators, the
//! conversion functions, `record.timestamp`), finds calls to functions that do not exist and
//! fields of `record` that do not exist.

use cel::common::ast::{operators, CallExpr, EntryExpr, Expr, IdedExpr, LiteralValue};

/// The type an expression is known to give before it runs, where it can be known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    /// `true` or `false`.
    Bool,
    /// A 64-bit signed integer.
    Int,
    /// A 64-bit unsigned integer (CEL's `1u`).
    Uint,
    /// A 64-bit float.
    Double,
    /// A string.
    String,
    /// `null`.
    Null,
    /// A list.
    List,
    /// A map.
    Map,
    /// Bytes (CEL's `b"…"`).
    Bytes,
    /// Only known when it runs (an event field, most functions).
    Dyn,
}

impl Type {
    /// The CEL name of the type.
    pub fn name(self) -> &'static str {
        match self {
            Type::Bool => "bool",
            Type::Int => "int",
            Type::Uint => "uint",
            Type::Double => "double",
            Type::String => "string",
            Type::Null => "null",
            Type::List => "list",
            Type::Map => "map",
            Type::Bytes => "bytes",
            Type::Dyn => "dyn",
        }
    }

    /// True for int, uint and double.
    pub fn is_number(self) -> bool {
        matches!(self, Type::Int | Type::Uint | Type::Double)
    }
}

/// The names of the overloads the mixed arithmetic rewrite calls.
pub(crate) const MIXED_ADD: &str = "_tm_add_";
pub(crate) const MIXED_SUB: &str = "_tm_sub_";
pub(crate) const MIXED_MUL: &str = "_tm_mul_";
pub(crate) const MIXED_DIV: &str = "_tm_div_";

/// Global functions an expression may call (the standard library, the strings and math
/// extensions, and the `record` fields are checked apart). A test checks each is declared.
pub(crate) const GLOBAL_FUNCTIONS: &[&str] = &[
    "size",
    "int",
    "uint",
    "double",
    "string",
    "bool",
    "bytes",
    "type",
    "dyn",
    "matches",
    "duration",
    "timestamp",
    "math.ceil",
    "math.floor",
    "math.round",
    "math.trunc",
    "math.abs",
    "math.sign",
    "math.isInf",
    "math.isNaN",
    "math.isFinite",
    "math.greatest",
    "math.least",
    "strings.quote",
];

/// Functions an expression may call on a value (`s.startsWith("x")`).
pub(crate) const MEMBER_FUNCTIONS: &[&str] = &[
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "charAt",
    "indexOf",
    "lastIndexOf",
    "lowerAscii",
    "upperAscii",
    "trim",
    "replace",
    "split",
    "substring",
    "join",
    "reverse",
    "getFullYear",
    "getMonth",
    "getDayOfYear",
    "getDayOfMonth",
    "getDate",
    "getDayOfWeek",
    "getHours",
    "getMinutes",
    "getSeconds",
    "getMilliseconds",
];

/// Something wrong found by the walk: the node it is about and what is wrong.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Finding {
    /// The AST node, to locate it in the source.
    pub id: u64,
    /// What is wrong.
    pub message: String,
    /// For a call, the function's name: the parser places calls at their `(`, and the
    /// error should point at the name.
    pub call: Option<String>,
}

/// Infers types, rewrites mixed arithmetic and collects findings, in one walk.
pub(crate) struct Checker {
    pub findings: Vec<Finding>,
    /// Names bound by comprehensions around the node being walked (`x` in `l.all(x, …)`).
    bound: Vec<String>,
    /// The variables the expression reads (its free identifiers but `record`), each once, in
    /// the order first met.
    pub variables: Vec<String>,
}

impl Checker {
    pub fn new() -> Self {
        Checker {
            findings: Vec::new(),
            bound: Vec::new(),
            variables: Vec::new(),
        }
    }

    fn find(&mut self, id: u64, message: String) {
        self.findings.push(Finding {
            id,
            message,
            call: None,
        });
    }

    fn find_call(&mut self, id: u64, name: &str, message: String) {
        self.findings.push(Finding {
            id,
            message,
            call: Some(name.rsplit('.').next().unwrap_or(name).to_owned()),
        });
    }

    /// Walks `e`, rewriting it in place; returns its type.
    pub fn walk(&mut self, e: &mut IdedExpr) -> Type {
        let id = e.id;
        match &mut e.expr {
            Expr::Literal(l) => match l {
                LiteralValue::Boolean(_) => Type::Bool,
                LiteralValue::Bytes(_) => Type::Bytes,
                LiteralValue::Double(_) => Type::Double,
                LiteralValue::Int(_) => Type::Int,
                LiteralValue::Null => Type::Null,
                LiteralValue::String(_) => Type::String,
                LiteralValue::UInt(_) => Type::Uint,
            },
            Expr::Ident(name) => {
                let bound = self.bound.iter().any(|b| b == name);
                if name == "record" && !bound {
                    Type::Map
                } else {
                    if !bound && !self.variables.iter().any(|v| v == name) {
                        self.variables.push(name.clone());
                    }
                    Type::Dyn
                }
            }
            Expr::Select(select) => {
                let is_record = matches!(&select.operand.expr, Expr::Ident(n) if n == "record")
                    && !self.bound.iter().any(|b| b == "record");
                if is_record {
                    return match select.field.as_str() {
                        "timestamp" => Type::Int,
                        "key" => Type::Dyn,
                        _ if select.test => Type::Bool,
                        other => {
                            self.find(
                                id,
                                format!(
                                    "record has no field \"{other}\": it has `key` and \
                                     `timestamp` (the event's fields are read by name, without \
                                     `record.`)"
                                ),
                            );
                            Type::Dyn
                        }
                    };
                }
                self.walk(&mut select.operand);
                if select.test {
                    Type::Bool
                } else {
                    Type::Dyn
                }
            }
            Expr::List(list) => {
                for el in &mut list.elements {
                    self.walk(el);
                }
                Type::List
            }
            Expr::Map(map) => {
                for entry in &mut map.entries {
                    if let EntryExpr::MapEntry(m) = &mut entry.expr {
                        self.walk(&mut m.key);
                        self.walk(&mut m.value);
                    }
                }
                Type::Map
            }
            Expr::Struct(s) => {
                for entry in &mut s.entries {
                    if let EntryExpr::StructField(f) = &mut entry.expr {
                        self.walk(&mut f.value);
                    }
                }
                Type::Dyn
            }
            Expr::Comprehension(c) => {
                self.walk(&mut c.iter_range);
                self.walk(&mut c.accu_init);
                self.bound.push(c.iter_var.clone());
                self.bound.push(c.accu_var.clone());
                self.walk(&mut c.loop_cond);
                self.walk(&mut c.loop_step);
                let t = self.walk(&mut c.result);
                self.bound.truncate(self.bound.len() - 2);
                t
            }
            Expr::Call(call) => self.call(id, call),
            Expr::Unspecified => Type::Dyn,
        }
    }

    fn call(&mut self, id: u64, call: &mut CallExpr) -> Type {
        let func_name = call.func_name.clone();
        let name = func_name.as_str();
        if call.target.is_none() && call.args.len() == 2 {
            let mixed = match name {
                operators::ADD => Some(MIXED_ADD),
                operators::SUBSTRACT => Some(MIXED_SUB),
                operators::MULTIPLY => Some(MIXED_MUL),
                operators::DIVIDE => Some(MIXED_DIV),
                _ => None,
            };
            if let Some(mixed) = mixed {
                let (l, r) = (self.walk(&mut call.args[0]), self.walk(&mut call.args[1]));
                return match (l, r) {
                    (a, b) if a == b && a != Type::Dyn => a,
                    (Type::Int, Type::Double) => {
                        wrap_in_double(&mut call.args[0]);
                        Type::Double
                    }
                    (Type::Double, Type::Int) => {
                        wrap_in_double(&mut call.args[1]);
                        Type::Double
                    }
                    (a, b) if a == Type::Dyn || b == Type::Dyn => {
                        if a.is_number() || b.is_number() || (a == Type::Dyn && b == Type::Dyn) {
                            call.func_name = mixed.to_owned();
                        }
                        if a == Type::Double || b == Type::Double {
                            Type::Double
                        } else {
                            Type::Dyn
                        }
                    }
                    (a, b) => {
                        self.find(
                            id,
                            format!(
                                "operator '{}' cannot be applied to {} and {}",
                                operator_symbol(name),
                                a.name(),
                                b.name()
                            ),
                        );
                        Type::Dyn
                    }
                };
            }
        }
        // `math.abs(x)` parses as a call of `abs` on `math`: a namespaced global function.
        let namespaced = match call.target.as_deref() {
            Some(IdedExpr {
                expr: Expr::Ident(ns),
                ..
            }) if !self.bound.contains(ns) => {
                let full = format!("{ns}.{name}");
                GLOBAL_FUNCTIONS.iter().find(|f| **f == full).copied()
            }
            _ => None,
        };
        let name: &str = namespaced.unwrap_or(name);
        // Walk the target and arguments.
        let target = if namespaced.is_some() {
            None
        } else {
            call.target.as_mut().map(|t| self.walk(t))
        };
        let args: Vec<Type> = call.args.iter_mut().map(|a| self.walk(a)).collect();
        match name {
            operators::LOGICAL_AND | operators::LOGICAL_OR | operators::LOGICAL_NOT => {
                for (i, t) in args.iter().enumerate() {
                    if !matches!(t, Type::Bool | Type::Dyn) {
                        self.find(
                            call.args[i].id,
                            format!(
                                "operator '{}' needs bools, this is {} {}",
                                operator_symbol(name),
                                article(*t),
                                t.name()
                            ),
                        );
                    }
                }
                return Type::Bool;
            }
            operators::EQUALS
            | operators::NOT_EQUALS
            | operators::LESS
            | operators::LESS_EQUALS
            | operators::GREATER
            | operators::GREATER_EQUALS
            | operators::IN
            | operators::NOT_STRICTLY_FALSE => return Type::Bool,
            operators::NEGATE => return args.first().copied().unwrap_or(Type::Dyn),
            operators::MODULO => {
                return match (args[0], args[1]) {
                    (a, b) if a == b && matches!(a, Type::Int | Type::Uint) => a,
                    _ => Type::Dyn,
                }
            }
            operators::CONDITIONAL => {
                if !matches!(args[0], Type::Bool | Type::Dyn) {
                    self.find(
                        call.args[0].id,
                        format!(
                            "the condition of '? :' must be a bool, this is {} {}",
                            article(args[0]),
                            args[0].name()
                        ),
                    );
                }
                return if args[1] == args[2] {
                    args[1]
                } else {
                    Type::Dyn
                };
            }
            operators::INDEX | operators::OPT_INDEX | operators::OPT_SELECT => return Type::Dyn,
            _ => {}
        }
        if name.starts_with("_tm_") || name.contains('@') {
            return Type::Dyn;
        }
        match target {
            None => {
                if !GLOBAL_FUNCTIONS.contains(&name) {
                    let member = MEMBER_FUNCTIONS.contains(&name);
                    self.find_call(
                        id,
                        name,
                        if member {
                            format!(
                                "unknown function '{name}': it is called on a value, as in \
                                 `x.{name}(…)`"
                            )
                        } else {
                            format!("unknown function '{name}'{}", suggestion(name))
                        },
                    );
                    return Type::Dyn;
                }
            }
            Some(_) => {
                if !MEMBER_FUNCTIONS.contains(&name) {
                    self.find_call(
                        id,
                        name,
                        format!("unknown function '{name}'{}", suggestion(name)),
                    );
                    return Type::Dyn;
                }
            }
        }
        match name {
            "size" | "int" | "indexOf" | "lastIndexOf" => Type::Int,
            "uint" => Type::Uint,
            "double" | "math.ceil" | "math.floor" | "math.round" | "math.trunc" => Type::Double,
            "string" | "lowerAscii" | "upperAscii" | "trim" | "replace" | "substring"
            | "charAt" | "join" | "strings.quote" => Type::String,
            "bool" | "contains" | "startsWith" | "endsWith" | "matches" | "math.isInf"
            | "math.isNaN" | "math.isFinite" => Type::Bool,
            "split" => Type::List,
            "math.abs" | "math.sign" => args.first().copied().unwrap_or(Type::Dyn),
            _ => Type::Dyn,
        }
    }
}

fn article(t: Type) -> &'static str {
    match t {
        Type::Int | Type::Uint => "an",
        _ => "a",
    }
}

/// The operator as users write it.
pub(crate) fn operator_symbol(name: &str) -> &str {
    match name {
        operators::ADD => "+",
        operators::SUBSTRACT => "-",
        operators::MULTIPLY => "*",
        operators::DIVIDE => "/",
        operators::MODULO => "%",
        operators::LOGICAL_AND => "&&",
        operators::LOGICAL_OR => "||",
        operators::LOGICAL_NOT => "!",
        other => other,
    }
}

/// Names other languages give to functions CEL has under another name, with that CEL name:
/// `length(s)` or its typo `lenght(s)` suggests `size`.
const OTHER_NAMES: &[(&str, &str)] = &[
    ("length", "size"),
    ("len", "size"),
    ("lower", "lowerAscii"),
    ("toLowerCase", "lowerAscii"),
    ("upper", "upperAscii"),
    ("toUpperCase", "upperAscii"),
    ("strip", "trim"),
    ("substr", "substring"),
    ("includes", "contains"),
    ("abs", "math.abs"),
    ("ceil", "math.ceil"),
    ("floor", "math.floor"),
    ("round", "math.round"),
    ("trunc", "math.trunc"),
    ("max", "math.greatest"),
    ("min", "math.least"),
];

/// ` (did you mean 'x'?)` for the function nearest `name`, or nothing. Nearest by edit distance
/// ignoring case ([`strsim::levenshtein`]): a CEL function within `max(2, its length / 3)`
/// edits, or a name from [`OTHER_NAMES`] within its length / 3 edits (which suggests its CEL
/// function); of equally near ones, the one that sorts first.
fn suggestion(name: &str) -> String {
    let name = name.to_lowercase();
    let distance = |candidate: &str| strsim::levenshtein(&name, &candidate.to_lowercase());
    let functions = GLOBAL_FUNCTIONS
        .iter()
        .chain(MEMBER_FUNCTIONS)
        .map(|f| (distance(f), *f))
        .filter(|(d, f)| *d <= 2.max(f.len() / 3));
    let other_names = OTHER_NAMES
        .iter()
        .map(|(other, f)| (distance(other), *f, other.len()))
        .filter(|(d, _, len)| *d <= len / 3)
        .map(|(d, f, _)| (d, f));
    match functions.chain(other_names).min() {
        Some((_, f)) => format!(" (did you mean '{f}'?)"),
        None => String::new(),
    }
}

/// Replaces `e` with `double(e)`, keeping its id (so errors still point at it).
fn wrap_in_double(e: &mut IdedExpr) {
    let inner = std::mem::take(e);
    *e = IdedExpr {
        id: inner.id,
        expr: Expr::Call(CallExpr {
            func_name: "double".to_owned(),
            target: None,
            args: vec![inner],
        }),
    };
}
