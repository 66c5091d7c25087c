//! Per-record cost of CEL expressions over W6-like events, against hand-written Rust doing the
//! same, in the same run. Run by hand (numbers vary with the machine and its load):
//!
//! ```text
//! cargo run --release -p tidemark-operators --example expr_cost
//! ```

use std::hint::black_box;
use std::time::Instant;

use tidemark_operators::expr::{Evaluator, Expr, Scope};
use tidemark_runtime::value::Value;

const N: usize = 1_000_000;

fn events() -> Vec<Value> {
    let statuses = ["paid", "refunded", "open"];
    (0..1000)
        .map(|i| {
            let line = format!(
                r#"{{"id":{i},"user":"u{}","amount":{}.{:02},"status":"{}","ts":{}}}"#,
                i * 7 % 10_000,
                i % 500,
                i % 100,
                statuses[i % 3],
                1_700_000_000_000i64 + i as i64
            );
            Value::from_json(line.as_bytes()).unwrap()
        })
        .collect()
}

fn time(name: &str, baseline_ns: Option<f64>, mut f: impl FnMut(usize) -> bool) -> f64 {
    for i in 0..N / 10 {
        black_box(f(i));
    }
    let start = Instant::now();
    let mut kept = 0usize;
    for i in 0..N {
        kept += usize::from(black_box(f(i)));
    }
    let ns = start.elapsed().as_nanos() as f64 / N as f64;
    match baseline_ns {
        Some(b) => println!(
            "{name:<44} {ns:>8.1} ns/record  ({:.1}x the Rust baseline)  kept={kept}",
            ns / b
        ),
        None => println!("{name:<44} {ns:>8.1} ns/record  kept={kept}"),
    }
    ns
}

fn main() {
    let events = events();
    let eval = Evaluator::new();
    let scope = |i: usize| Scope {
        event: (&events[i % events.len()]).into(),
        key: &Value::Null,
        timestamp_ms: 0,
    };

    let rust_filter = time("rust: status == \"paid\" && amount > 100", None, |i| {
        let e = &events[i % events.len()];
        e.get("status").and_then(Value::as_str) == Some("paid")
            && e.get("amount")
                .and_then(Value::as_f64)
                .is_some_and(|a| a > 100.0)
    });
    for src in [
        "status == \"paid\" && amount > 100",
        "status == \"paid\"",
        "size(user) > 3 && user.startsWith(\"u1\")",
    ] {
        let e = Expr::compile(src).unwrap();
        let label = format!("expr: {src}");
        time(&label, Some(rust_filter), |i| {
            eval.eval_bool(&e, &scope(i)).unwrap()
        });
        let slow = e.without_shortcut();
        if e.has_shortcut() {
            time("  (the cel crate alone)", Some(rust_filter), |i| {
                eval.eval_bool(&slow, &scope(i)).unwrap()
            });
        }
    }

    let rust_map = time("rust: amount * 0.92", None, |i| {
        let e = &events[i % events.len()];
        black_box(e.get("amount").and_then(Value::as_f64).unwrap() * 0.92) > 0.0
    });
    for src in ["amount * 0.92", "double(amount) * 0.92", "id * 2"] {
        let e = Expr::compile(src).unwrap();
        let label = format!("expr: {src}");
        time(&label, Some(rust_map), |i| eval.eval(&e, &scope(i)).is_ok());
        let slow = e.without_shortcut();
        if e.has_shortcut() {
            time("  (the cel crate alone)", Some(rust_map), |i| {
                eval.eval(&slow, &scope(i)).is_ok()
            });
        }
    }

    let rust_key = time("rust: user (clone the string value)", None, |i| {
        let e = &events[i % events.len()];
        black_box(e.get("user").cloned()).is_some()
    });
    let user = Expr::compile("user").unwrap();
    time("expr: user (a key)", Some(rust_key), |i| {
        matches!(eval.eval(&user, &scope(i)).unwrap(), Value::String(_))
    });
    let slow = user.without_shortcut();
    time("  (the cel crate alone)", Some(rust_key), |i| {
        matches!(eval.eval(&slow, &scope(i)).unwrap(), Value::String(_))
    });

    let start = Instant::now();
    let n = 2_000;
    for _ in 0..n {
        black_box(Evaluator::new());
    }
    println!(
        "{:<44} {:>8.1} ns (once per subtask)",
        "Evaluator::new() (shared Env)",
        start.elapsed().as_nanos() as f64 / n as f64
    );
    let start = Instant::now();
    for _ in 0..n {
        black_box(cel::Context::default());
    }
    println!(
        "{:<44} {:>8.1} ns (what a context per record would cost)",
        "cel::Context::default()",
        start.elapsed().as_nanos() as f64 / n as f64
    );
}
