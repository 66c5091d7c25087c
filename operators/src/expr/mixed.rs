//! The overloads behind the mixed int/double arithmetic (see [`super::check`]) and the one CEL
//! environment every expression is compiled and run with.
//!
//! Each overload takes two values of any type. An int meeting a double becomes a double; any
//! other pair goes to the crate's own operator, so strings still concatenate, ints still
//! overflow and divide by zero with the crate's errors, and a bad pair fails with the crate's
//! message.

use std::sync::{Arc, OnceLock};

use cel::common::types::{CelDouble, CelInt, CelUInt, DYN_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{Env, ExecutionError};

use super::check::{MIXED_ADD, MIXED_DIV, MIXED_MUL, MIXED_SUB};

/// The environment: the standard library with the strings and math extensions and the mixed
/// arithmetic overloads. Built once per process (it costs tens of microseconds).
pub(crate) fn env() -> Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        env.add_extension(cel::extensions::strings)
            .expect("strings extension");
        env.add_extension(cel::extensions::math)
            .expect("math extension");
        let dyn2 = || vec![DYN_TYPE, DYN_TYPE];
        env.add_overload(MIXED_ADD, "tm_add_dyn_dyn", dyn2(), add)
            .expect("unique overload");
        env.add_overload(MIXED_SUB, "tm_sub_dyn_dyn", dyn2(), sub)
            .expect("unique overload");
        env.add_overload(MIXED_MUL, "tm_mul_dyn_dyn", dyn2(), mul)
            .expect("unique overload");
        env.add_overload(MIXED_DIV, "tm_div_dyn_dyn", dyn2(), div)
            .expect("unique overload");
        Arc::new(env)
    })
    .clone()
}

/// `v` as a double if it is a number.
fn as_f64(v: &dyn Val) -> Option<f64> {
    if let Some(d) = v.downcast_ref::<CelDouble>() {
        Some(*d.inner())
    } else if let Some(i) = v.downcast_ref::<CelInt>() {
        Some(*i.inner() as f64)
    } else {
        v.downcast_ref::<CelUInt>().map(|u| *u.inner() as f64)
    }
}

fn is_double(v: &dyn Val) -> bool {
    v.downcast_ref::<CelDouble>().is_some()
}

/// The pair as doubles when exactly one side is a double and the other a number.
fn mixed_pair(l: &dyn Val, r: &dyn Val) -> Option<(f64, f64)> {
    if is_double(l) == is_double(r) {
        return None;
    }
    Some((as_f64(l)?, as_f64(r)?))
}

fn two<'b, 'v>(mut args: Vec<CowVal<'b, 'v>>) -> (CowVal<'b, 'v>, CowVal<'b, 'v>) {
    let r = args.pop().expect("two arguments");
    let l = args.pop().expect("two arguments");
    (l, r)
}

fn double<'b, 'v>(v: f64) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::owned(CelDouble::from(v)))
}

fn add<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (l, r) = two(args);
    if let Some((a, b)) = mixed_pair(l.as_ref(), r.as_ref()) {
        return double(a + b);
    }
    let result = match l.as_adder() {
        Some(op) => op.add(r.as_ref())?.into_owned(),
        None => {
            return Err(ExecutionError::UnsupportedBinaryOperator(
                "add",
                value(l.as_ref()),
                value(r.as_ref()),
            ))
        }
    };
    Ok(CowVal::Owned(result))
}

fn sub<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (l, r) = two(args);
    if let Some((a, b)) = mixed_pair(l.as_ref(), r.as_ref()) {
        return double(a - b);
    }
    let result = match l.as_subtractor() {
        Some(op) => op.sub(r.as_ref())?.into_owned(),
        None => {
            return Err(ExecutionError::UnsupportedBinaryOperator(
                "sub",
                value(l.as_ref()),
                value(r.as_ref()),
            ))
        }
    };
    Ok(CowVal::Owned(result))
}

fn mul<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (l, r) = two(args);
    if let Some((a, b)) = mixed_pair(l.as_ref(), r.as_ref()) {
        return double(a * b);
    }
    let result = match l.as_multiplier() {
        Some(op) => op.mul(r.as_ref())?.into_owned(),
        None => {
            return Err(ExecutionError::UnsupportedBinaryOperator(
                "mul",
                value(l.as_ref()),
                value(r.as_ref()),
            ))
        }
    };
    Ok(CowVal::Owned(result))
}

fn div<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (l, r) = two(args);
    if let Some((a, b)) = mixed_pair(l.as_ref(), r.as_ref()) {
        return double(a / b);
    }
    let result = match l.as_divider() {
        Some(op) => op.div(r.as_ref())?.into_owned(),
        None => {
            return Err(ExecutionError::UnsupportedBinaryOperator(
                "div",
                value(l.as_ref()),
                value(r.as_ref()),
            ))
        }
    };
    Ok(CowVal::Owned(result))
}

/// A value for an error message.
fn value(v: &dyn Val) -> cel::Value {
    cel::Value::try_from(v).unwrap_or(cel::Value::Null)
}
