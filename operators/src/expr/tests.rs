use super::*;
use tidemark_runtime::value::Value;

fn event(json: &str) -> Value {
    Value::from_json(json.as_bytes()).unwrap()
}

fn eval(src: &str, json: &str) -> Result<Value, EvalError> {
    let expr = Expr::compile(src).unwrap_or_else(|e| panic!("{src}: {e}"));
    let ev = event(json);
    Evaluator::new().eval(
        &expr,
        &Scope {
            event: (&ev).into(),
            key: &Value::String("k1".into()),
            timestamp_ms: 1_700_000_000_123,
        },
    )
}

fn ok(src: &str, json: &str) -> Value {
    eval(src, json).unwrap_or_else(|e| panic!("{src} over {json}: {e}"))
}

fn err(src: &str, json: &str) -> String {
    match eval(src, json) {
        Ok(v) => panic!("{src} over {json} gave {v}, expected an error"),
        Err(e) => e.message,
    }
}

fn compile_err(src: &str) -> CompileError {
    match Expr::compile(src) {
        Ok(e) => panic!("{src} compiled: {e:?}"),
        Err(e) => e,
    }
}

#[test]
fn arithmetic_with_a_double_gives_a_double() {
    // The spec's cases: int amount times a double literal, int stays int with an int.
    assert_eq!(
        ok("amount * 0.92", r#"{"amount": 100}"#),
        Value::Double(92.0)
    );
    assert_eq!(ok("amount * 2", r#"{"amount": 100}"#), Value::Int(200));
    assert_eq!(ok("v * 2", r#"{"v": 1}"#), Value::Int(2));
    assert_eq!(ok("v * 2", r#"{"v": 2.5}"#), Value::Double(5.0));
    // Both sides fields, of either type, in either order.
    for (json, expected) in [
        (r#"{"a": 3, "b": 0.5}"#, 3.5),
        (r#"{"a": 0.5, "b": 3}"#, 3.5),
    ] {
        assert_eq!(ok("a + b", json), Value::Double(expected), "{json}");
    }
    assert_eq!(ok("a - b", r#"{"a": 3, "b": 0.5}"#), Value::Double(2.5));
    assert_eq!(ok("a / b", r#"{"a": 3, "b": 2.0}"#), Value::Double(1.5));
    assert_eq!(ok("a / b", r#"{"a": 7, "b": 2}"#), Value::Int(3));
    assert_eq!(ok("a + b", r#"{"a": 7, "b": 2}"#), Value::Int(9));
    // Literals of both kinds, and nested expressions whose type is only known at run time.
    assert_eq!(ok("1 + 0.5", "{}"), Value::Double(1.5));
    assert_eq!(ok("(a + 1) * 0.5", r#"{"a": 3}"#), Value::Double(2.0));
    assert_eq!(
        ok("2.0 * (a - b)", r#"{"a": 3, "b": 1}"#),
        Value::Double(4.0)
    );
    assert_eq!(ok("-a * 1.5", r#"{"a": 2}"#), Value::Double(-3.0));
    assert_eq!(ok("size(s) * 0.5", r#"{"s": "abcd"}"#), Value::Double(2.0));
    assert_eq!(ok("x.y * 0.5", r#"{"x": {"y": 4}}"#), Value::Double(2.0));
    assert_eq!(ok("l[0] / 2.0", r#"{"l": [5]}"#), Value::Double(2.5));
    // Other types keep CEL's meaning.
    assert_eq!(
        ok("a + b", r#"{"a": "x", "b": "y"}"#),
        Value::String("xy".into())
    );
    assert_eq!(ok("a + '!'", r#"{"a": "x"}"#), Value::String("x!".into()));
    assert_eq!(ok("a + b", r#"{"a": [1], "b": [2]}"#), ok("[1, 2]", "{}"));
}

#[test]
fn ints_and_doubles_compare_by_value() {
    assert_eq!(
        ok("amount > 100", r#"{"amount": 100.5}"#),
        Value::Bool(true)
    );
    assert_eq!(ok("amount > 100", r#"{"amount": 100}"#), Value::Bool(false));
    assert_eq!(
        ok("amount >= 100.0", r#"{"amount": 100}"#),
        Value::Bool(true)
    );
    assert_eq!(
        ok("amount == 100", r#"{"amount": 100.0}"#),
        Value::Bool(true)
    );
    assert_eq!(
        ok("amount != 100", r#"{"amount": 100.0}"#),
        Value::Bool(false)
    );
    assert_eq!(ok("a < b", r#"{"a": 1, "b": 1.5}"#), Value::Bool(true));
}

#[test]
fn int_errors_are_errors_not_crashes() {
    assert_eq!(
        err("a / b", r#"{"a": 100, "b": 0}"#),
        "division by zero: 100 / 0"
    );
    assert_eq!(err("a % 0", r#"{"a": 100}"#), "remainder by zero: 100 % 0");
    assert_eq!(
        err("a * 2", r#"{"a": 9223372036854775807}"#),
        "int overflow: 9223372036854775807 * 2"
    );
    // A double divided by zero is infinite, as in IEEE arithmetic.
    assert_eq!(ok("a / 0", r#"{"a": 1.0}"#), Value::Double(f64::INFINITY));
    assert_eq!(
        err("a * 2", r#"{"a": "x"}"#),
        "'*' cannot be applied to a string \"x\" and an int 2"
    );
}

#[test]
fn reads_fields_and_the_record() {
    let json = r#"{"status": "paid", "user": {"name": "ann", "tags": ["a", "b"]}, "n": null}"#;
    assert_eq!(ok("status", json), Value::String("paid".into()));
    assert_eq!(ok("user.name", json), Value::String("ann".into()));
    assert_eq!(ok("user.tags[1]", json), Value::String("b".into()));
    assert_eq!(ok("size(user.tags)", json), Value::Int(2));
    assert_eq!(ok("'a' in user.tags", json), Value::Bool(true));
    assert_eq!(
        ok("has(user.name) && !has(user.age)", json),
        Value::Bool(true)
    );
    assert_eq!(ok("n == null", json), Value::Bool(true));
    assert_eq!(ok("status.startsWith('pa')", json), Value::Bool(true));
    assert_eq!(
        ok("user.name.upperAscii()", json),
        Value::String("ANN".into())
    );
    assert_eq!(ok("record.key", json), Value::String("k1".into()));
    assert_eq!(ok("record.timestamp", json), Value::Int(1_700_000_000_123));
    assert_eq!(
        ok("record.timestamp / 1000 * 1000", json),
        Value::Int(1_700_000_000_000)
    );
    assert_eq!(
        ok("status == 'paid' ? 'gold' : 'standard'", json),
        Value::String("gold".into())
    );
    assert_eq!(ok("int(1.9) + int('3')", json), Value::Int(4));
    assert_eq!(ok("math.floor(2.5)", json), Value::Double(2.0));
    assert_eq!(ok("user.tags.exists(t, t == 'b')", json), Value::Bool(true));
    assert_eq!(
        ok("user.tags.map(t, t + '!')", json),
        ok("['a!', 'b!']", "{}")
    );
}

#[test]
fn missing_fields_name_the_fields_there_are() {
    assert_eq!(
        err("w > 2", r#"{"k": "a", "v": 1}"#),
        "no field \"w\" in the event (it has k, v)"
    );
    assert_eq!(
        err("user.age", r#"{"user": {"name": "x"}}"#),
        "no field \"age\""
    );
}

#[test]
fn results_become_event_values() {
    assert_eq!(
        ok("[1, 2.5, 'x', null, true]", "{}").to_string(),
        r#"[1,2.5,"x",null,true]"#
    );
    // CEL maps have no order: keys come out sorted.
    assert_eq!(
        ok("{'b': 1, 'a': {'c': [2]}}", "{}").to_string(),
        r#"{"a":{"c":[2]},"b":1}"#
    );
    assert_eq!(
        ok("user", r#"{"user": {"z": 1, "a": 2}}"#).to_string(),
        r#"{"z":1,"a":2}"#
    );
    assert_eq!(ok("5u", "{}"), Value::Int(5));
}

#[test]
fn conditions_and_numbers() {
    let ev = event(r#"{"v": 3, "s": "x", "n": null}"#);
    let scope = Scope {
        event: (&ev).into(),
        key: &Value::Null,
        timestamp_ms: 0,
    };
    let e = Evaluator::new();
    let c = |s: &str| Expr::compile(s).unwrap();
    assert_eq!(e.eval_bool(&c("v > 2"), &scope), Ok(true));
    assert_eq!(
        e.eval_bool(&c("s"), &scope).unwrap_err().message,
        "must give a bool, but gave a string \"x\""
    );
    assert_eq!(e.eval_number(&c("v"), &scope), Ok(Some(Number::Int(3))));
    assert_eq!(
        e.eval_number(&c("v * 0.5"), &scope),
        Ok(Some(Number::Double(1.5)))
    );
    assert_eq!(e.eval_number(&c("n"), &scope), Ok(None));
    assert_eq!(
        e.eval_number(&c("s"), &scope).unwrap_err().message,
        "must give a number, but gave a string \"x\""
    );
}

#[test]
fn syntax_errors_have_a_column() {
    let e = compile_err("v +");
    assert_eq!((e.line, e.column), (1, 4), "{e:?}");
    assert!(e.message.starts_with("syntax error: "), "{}", e.message);
    assert_eq!(e.message, "syntax error: the expression ends too early");
    let e = compile_err("a && (b");
    assert_eq!(e.line, 1);
    assert!(e.column >= 7, "{e:?}");
    let e = compile_err("a ==== b");
    assert!(e.message.starts_with("syntax error: unexpected "), "{e:?}");
    assert!(!e.message.contains("expecting"), "{e:?}");
}

#[test]
fn names_from_other_languages_suggest_the_cel_function() {
    for (expression, message) in [
        (
            "length(s)",
            "unknown function 'length' (did you mean 'size'?)",
        ),
        ("s.len()", "unknown function 'len' (did you mean 'size'?)"),
        (
            "s.toUpperCase() == 'A'",
            "unknown function 'toUpperCase' (did you mean 'upperAscii'?)",
        ),
        (
            "abs(v) > 1",
            "unknown function 'abs' (did you mean 'math.abs'?)",
        ),
        (
            "max(v, 2) > 1",
            "unknown function 'max' (did you mean 'math.greatest'?)",
        ),
        // Near a name of another language only by more than a third of it: no suggestion.
        ("count(s) > 1", "unknown function 'count'"),
    ] {
        assert_eq!(compile_err(expression).message, message, "{expression}");
    }
}

#[test]
fn unknown_functions_and_record_fields_are_compile_errors() {
    let e = compile_err("v > 1 && lenght(s) > 2");
    assert_eq!(
        e.message,
        "unknown function 'lenght' (did you mean 'size'?)"
    );
    assert_eq!(e.column, 10);
    let e = compile_err("v > 1 && frobnicate(s) > 2");
    assert_eq!(e.message, "unknown function 'frobnicate'");
    let e = compile_err("sise(s)");
    assert_eq!(e.message, "unknown function 'sise' (did you mean 'size'?)");
    let e = compile_err("s.startswith('x')");
    assert_eq!(
        e.message,
        "unknown function 'startswith' (did you mean 'startsWith'?)"
    );
    let e = compile_err("startsWith(s, 'x')");
    assert!(
        e.message.contains("it is called on a value"),
        "{}",
        e.message
    );
    let e = compile_err("record.ts > 0");
    assert!(
        e.message.starts_with("record has no field \"ts\""),
        "{}",
        e.message
    );
    assert_eq!(e.column, 7);
    let e = compile_err("'a' - 1");
    assert_eq!(
        e.message,
        "operator '-' cannot be applied to string and int"
    );
    let e = compile_err("1 && true");
    assert_eq!(e.message, "operator '&&' needs bools, this is an int");
    // Known functions, namespaced ones and comprehension variables are fine.
    for ok in [
        "math.abs(x) > 1",
        "l.all(record, record > 1)",
        "strings.quote(s)",
        "s.matches('^a') && matches(s, 'b')",
        "timestamp('2024-01-01T00:00:00Z') < timestamp(record.timestamp / 1000)",
    ] {
        Expr::compile(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
}

#[test]
fn conditions_must_be_bools_where_known() {
    for (src, gives) in [
        ("'paid'", "a string"),
        ("v + 1.5", "a double"),
        ("size(s)", "an int"),
    ] {
        let e = Expr::compile_condition(src).unwrap_err();
        assert_eq!(
            e.message,
            format!("must give a bool, but gives {gives}"),
            "{src}"
        );
    }
    for src in [
        "v > 2",
        "flag",
        "a == 'x' || has(b.c)",
        "l.exists(x, x > 1)",
    ] {
        Expr::compile_condition(src).unwrap_or_else(|e| panic!("{src}: {e}"));
    }
    assert_eq!(Expr::compile("v > 2").unwrap().result_type(), Type::Bool);
    assert_eq!(Expr::compile("v * 2").unwrap().result_type(), Type::Dyn);
    assert_eq!(
        Expr::compile("v * 2.0").unwrap().result_type(),
        Type::Double
    );
    assert_eq!(Expr::compile("1 + 2").unwrap().result_type(), Type::Int);
}

/// The function lists the checker accepts are exactly functions the environment declares:
/// calling each never fails as undeclared.
#[test]
fn listed_functions_exist() {
    let e = Evaluator::new();
    let ev = event("{}");
    let scope = Scope {
        event: (&ev).into(),
        key: &Value::Null,
        timestamp_ms: 0,
    };
    for name in check::GLOBAL_FUNCTIONS {
        let src = format!("{name}(1)");
        let expr = Expr::compile(&src).unwrap_or_else(|e| panic!("{src}: {e}"));
        if let Err(err) = e.eval(&expr, &scope) {
            assert!(!err.message.contains("no field"), "{src}: {err}");
            assert!(!err.message.contains("Undeclared"), "{src}: {err}");
        }
    }
    for name in check::MEMBER_FUNCTIONS {
        let src = format!("'x'.{name}(1)");
        let expr = Expr::compile(&src).unwrap_or_else(|e| panic!("{src}: {e}"));
        if let Err(err) = e.eval(&expr, &scope) {
            assert!(!err.message.contains("no field"), "{src}: {err}");
            assert!(!err.message.contains("Undeclared"), "{src}: {err}");
        }
    }
    // And a name not listed is undeclared for the crate too.
    let raw = Evaluator::new();
    let expr = Expr {
        inner: Arc::new(Compiled {
            source: "nosuch(1)".into(),
            ast: mixed::env()
                .compile("nosuch(1)")
                .unwrap()
                .expression()
                .clone(),
            result_type: Type::Dyn,
            variables: Vec::new(),
            shortcut: None,
        }),
    };
    assert!(raw
        .eval(&expr, &scope)
        .unwrap_err()
        .message
        .contains("nosuch"));
}

/// Every example of the cheat-sheet in docs/events.md runs and gives what it says.
#[test]
fn cheat_sheet_examples() {
    let json = r#"{"amount": 150, "name": "ann", "first": "a", "last": "b", "tags": ["vip", "x"],
        "regions_by_name": {"eu": 1}, "user": {"email": "a@b.c"}, "s": "u1-a,b", "x": -2.5,
        "status": "paid", "m": {"key": 3}, "tier": "gold"}"#;
    for (src, expected) in [
        ("amount > 100 && status == \"paid\"", "true"),
        ("amount > 1000 ? \"gold\" : \"standard\"", "\"standard\""),
        ("has(user.email)", "true"),
        ("has(event.tier) ? tier : \"standard\"", "\"gold\""),
        ("has(event.nope) ? nope : \"standard\"", "\"standard\""),
        ("\"vip\" in tags", "true"),
        ("\"eu\" in regions_by_name", "true"),
        ("size(name) + size(tags) + name.size()", "8"),
        (
            "s.startsWith(\"u\") && s.endsWith(\"b\") && s.contains(\"-\")",
            "true",
        ),
        ("s.matches(\"^u[0-9]+\")", "true"),
        ("s.lowerAscii() + s.upperAscii()", "\"u1-a,bU1-A,B\""),
        ("\" x \".trim()", "\"x\""),
        ("s.replace(\"-\", \"_\")", "\"u1_a,b\""),
        ("s.split(\",\")", "[\"u1-a\",\"b\"]"),
        ("s.substring(0, 3)", "\"u1-\""),
        ("s.indexOf(\"-\")", "2"),
        ("s.charAt(0)", "\"u\""),
        ("[\"a\",\"b\"].join(\"-\")", "\"a-b\""),
        ("first + \" \" + last", "\"a b\""),
        ("int(\"42\") + int(3.9)", "45"),
        ("double(amount)", "150.0"),
        ("string(42)", "\"42\""),
        ("bool(\"true\")", "true"),
        (
            "math.floor(x) + math.ceil(x) + math.round(x) + math.trunc(x)",
            "-10.0",
        ),
        ("math.abs(x) * math.sign(x)", "-2.5"),
        ("math.greatest(1, 2.5) + math.least(1, 2)", "3.5"),
        ("math.isNaN(x)", "false"),
        (
            "tags.exists(t, t == \"x\") && tags.all(t, size(t) > 0)",
            "true",
        ),
        ("tags.exists_one(t, t == \"x\")", "true"),
        ("tags.map(t, t.upperAscii())", "[\"VIP\",\"X\"]"),
        ("tags.filter(t, t != \"x\")", "[\"vip\"]"),
        ("tags[0]", "\"vip\""),
        ("m[\"key\"] + m.key", "6"),
        ("{\"a\": 1, \"b\": x}", "{\"a\":1,\"b\":-2.5}"),
        ("timestamp(record.timestamp / 1000).getHours()", "22"),
        ("timestamp(\"2026-11-30T10:00:00Z\").getDayOfWeek()", "1"),
        ("duration(\"90s\") > duration(\"1m\")", "true"),
        ("x == null", "false"),
        ("7 / 2 == 3 && 1 == 1.0", "true"),
        ("\"a\" < \"b\"", "true"),
    ] {
        assert_eq!(ok(src, json).to_string(), expected, "{src}");
    }
}

/// Maps with their keys sorted, so the two evaluators' results compare whatever the order.
fn canonical(v: &Value) -> String {
    match v {
        Value::Map(m) => {
            let mut entries: Vec<(String, String)> = m
                .iter()
                .map(|(k, v)| (k.to_owned(), canonical(v)))
                .collect();
            entries.sort();
            format!("{entries:?}")
        }
        Value::List(l) => format!("{:?}", l.iter().map(canonical).collect::<Vec<_>>()),
        other => format!("{other:?}"),
    }
}

/// The shortcut gives exactly what the `cel` crate gives, over random events of every type
/// (fields missing, null, ints at the edges, NaN, strings, maps), for expressions it takes.
#[test]
fn the_shortcut_agrees_with_the_crate() {
    use rand::{Rng, SeedableRng};
    let exprs = [
        "a",
        "a.b",
        "a.b.c",
        "a == b",
        "a != b",
        "a < b",
        "a <= b",
        "a > b",
        "a >= 2",
        "a > 2.5",
        "a == 'x'",
        "'x' == a",
        "a != 'x'",
        "a < 'p'",
        "'p' >= a",
        "a + b",
        "a - b",
        "a * b",
        "a / b",
        "a % b",
        "a * 0.92",
        "a * 2",
        "-a",
        "!a",
        "a && b",
        "a || b",
        "a > 1 && b < 2",
        "a > 1 || b",
        "a ? b : c",
        "a == null",
        "(a + 1) * 0.5",
        "a / 2.0 + b * 3",
        "record.key",
        "record.timestamp - a",
        "key * value",
        "value > 0.5",
        "'p' + a",
        "a.b > 1 && c == 'u'",
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let scalar = |rng: &mut rand::rngs::StdRng, depth: u32| -> String {
        match rng.random_range(0..12) {
            0 => "null".into(),
            1 => format!("{}", rng.random_bool(0.5)),
            2 => format!("{}", rng.random_range(-3i64..4)),
            3 => format!(
                "{}",
                [i64::MAX, i64::MIN, 1 << 53, (1 << 53) + 1][rng.random_range(0..4)]
            ),
            4 | 5 => format!("{:?}", rng.random_range(-3.0f64..3.0)),
            6 => "0".into(),
            7 => "0.0".into(),
            // Strings, some written with an escape (`\u0078` is `x`).
            8 => format!(
                "\"{}\"",
                ["x", "u", "", "p", "\\u0078", "a\\\"b"][rng.random_range(0..6)]
            ),
            9 if depth > 0 => "[1, \"x\"]".into(),
            10 if depth > 0 => format!(
                "{{\"b\": {}, \"c\": {{\"x\": 1}}}}",
                ["1", "2.5", "\"s\"", "null", "{\"c\": 3}"][rng.random_range(0..5)]
            ),
            _ => "2".into(),
        }
    };
    let compiled: Vec<(Expr, Expr)> = exprs
        .iter()
        .map(|s| {
            let e = Expr::compile(s).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert!(e.has_shortcut(), "{s} should have a shortcut");
            let slow = e.without_shortcut();
            (e, slow)
        })
        .collect();
    let eval = Evaluator::new();
    let mut took = 0;
    for _ in 0..3000 {
        let mut fields = Vec::new();
        for name in ["a", "b", "c"] {
            if rng.random_bool(0.9) {
                fields.push(format!("\"{name}\": {}", scalar(&mut rng, 1)));
            }
        }
        let json = format!("{{{}}}", fields.join(", "));
        let event = Value::from_json(json.as_bytes()).unwrap();
        let key = Value::from_json(scalar(&mut rng, 0).as_bytes()).unwrap();
        let numeric = rng.random_bool(0.2);
        let scope = Scope {
            event: if numeric {
                EventRef::Numeric {
                    key: rng.random_range(-5..5),
                    value: rng.random_range(-1.0..1.0),
                }
            } else {
                EventRef::Value(&event)
            },
            key: &key,
            timestamp_ms: 1_700_000_000_000,
        };
        for (fast, slow) in &compiled {
            let shortcut = fast.inner.shortcut.as_ref().unwrap();
            if !numeric {
                // The same event kept as text, read field by field
                // (`Record::from_json_object`); a new one per expression, as one the crate
                // evaluated is made.
                let text = || {
                    tidemark_runtime::Record::from_json_object(
                        key.clone(),
                        json.as_bytes(),
                        scope.timestamp_ms * 1_000_000,
                    )
                    .unwrap()
                };
                let text_first = text();
                let from_text = with_record(&text_first, |s| shortcut.eval(s));
                if from_text.is_some() {
                    assert!(!text_first.event_made(), "{} over {json}", fast.source());
                }
                assert_eq!(
                    from_text.as_ref().map(canonical),
                    shortcut.eval(&scope).as_ref().map(canonical),
                    "{} over {json} kept as text",
                    fast.source()
                );
                assert_eq!(
                    with_record(&text(), |s| eval.eval_bool(fast, s)),
                    eval.eval_bool(slow, &scope),
                    "{} over {json} kept as text",
                    fast.source()
                );
            }
            let Some(direct) = shortcut.eval(&scope) else {
                continue; // the crate evaluates it either way
            };
            took += 1;
            let crate_says = eval.eval(slow, &scope);
            match &crate_says {
                Ok(v) => assert_eq!(
                    canonical(&direct),
                    canonical(v),
                    "{} over {json} (numeric: {numeric})",
                    fast.source()
                ),
                Err(e) => panic!(
                    "{} over {json}: the shortcut gave {direct}, the crate failed: {e}",
                    fast.source()
                ),
            }
            assert_eq!(
                eval.eval_bool(fast, &scope),
                eval.eval_bool(slow, &scope),
                "{}",
                fast.source()
            );
            // (By text: NaN is not equal to itself.)
            assert_eq!(
                format!("{:?}", eval.eval_number(fast, &scope)),
                format!("{:?}", eval.eval_number(slow, &scope)),
                "{}",
                fast.source()
            );
        }
    }
    // The shortcut was exercised (random types defeat it often; real events far less).
    assert!(took > 3000 * exprs.len() / 10, "{took}");
    // Things it leaves to the crate.
    for s in [
        "size(a)",
        "a.startsWith('x')",
        "has(a.b)",
        "event",
        "record",
        "[a]",
        "1u + a",
    ] {
        assert!(!Expr::compile(s).unwrap().has_shortcut(), "{s}");
    }
}
