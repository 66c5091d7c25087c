//! The real-events example of the docs (`docs/examples/orders.yaml`) runs as documented:
//! keys and RFC 3339 timestamps from the events, malformed lines in the dead-letter file,
//! events written with their ints as ints.

mod common;

use common::{tidemark, TempDir};

#[test]
fn the_orders_example_filters_enriches_and_dead_letters() {
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples");
    let dir = TempDir::new("orders-example");
    for name in ["orders.yaml", "orders.jsonl"] {
        dir.write(name, &std::fs::read_to_string(examples.join(name)).unwrap());
    }
    let out = tidemark(dir.path(), ["run", "orders.yaml"]);
    assert_eq!(out.code(), 0, "stderr:\n{}", out.stderr);

    let written = dir.read("orders-out.jsonl");
    let lines: Vec<&str> = written.lines().collect();
    assert_eq!(
        lines,
        [
            r#"{"id":1,"customer":"c7","amount":120,"ts":"2026-11-30T12:00:00.100Z","amount_eur":110.4,"tier":"standard","event_time":1796040000100}"#,
            r#"{"id":3,"customer":"c7","amount":1500,"ts":"2026-11-30T12:00:01.200Z","amount_eur":1380.0,"tier":"gold","event_time":1796040001200}"#,
        ],
        "output:\n{written}"
    );

    let rejected: Vec<serde_json::Value> = dir
        .read("orders-rejected.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let records: Vec<&str> = rejected
        .iter()
        .map(|r| r["record"].as_str().unwrap())
        .collect();
    assert_eq!(
        records,
        [
            "not an order",
            r#"[4, "c3", 10]"#,
            r#"{"id":6,"amount":300,"status":"paid","ts":"2026-11-30T12:00:02.000Z"}"#
        ]
    );
    assert!(rejected.iter().all(|r| r["vertex"] == "orders"));
    let errors: Vec<&str> = rejected
        .iter()
        .map(|r| r["error"].as_str().unwrap())
        .collect();
    assert!(
        errors[0].contains("line 3, column 2: malformed line: invalid JSON"),
        "{errors:?}"
    );
    assert!(
        errors[1].ends_with("line 5: malformed line: expected a JSON object, found a list"),
        "{errors:?}"
    );
    assert!(
        errors[2].ends_with(
            "line 7: malformed line: key: no field `customer` in the event (it has id, amount, status, ts)"
        ),
        "{errors:?}"
    );
}

/// The compile errors docs/events.md shows are what `tidemark validate` prints, to the byte:
/// each shown line's expression put in as the `where` of the orders example (its line 18).
#[test]
fn the_compile_errors_shown_in_events_md_are_printed_as_shown() {
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
    let events_md = std::fs::read_to_string(docs.join("events.md")).unwrap();
    let shown: Vec<&str> = events_md
        .lines()
        .filter(|l| l.starts_with("error: orders.yaml:18:"))
        .collect();
    assert_eq!(
        shown.len(),
        2,
        "the two compile errors of events.md: {shown:?}"
    );
    let example = std::fs::read_to_string(docs.join("examples/orders.yaml")).unwrap();
    let where_line = "    where: 'status == \"paid\" && amount > 100'";
    assert_eq!(
        example.lines().nth(17),
        Some(where_line),
        "line 18 of orders.yaml"
    );
    for line in shown {
        let expression = line
            .rsplit_once(", in `")
            .and_then(|(_, rest)| rest.strip_suffix('`'))
            .unwrap_or_else(|| panic!("no expression in {line:?}"));
        let dir = TempDir::new("events-md-errors");
        dir.write(
            "orders.yaml",
            &example.replace(where_line, &format!("    where: '{expression}'")),
        );
        dir.write("orders.jsonl", "");
        let out = tidemark(dir.path(), ["validate", "orders.yaml"]);
        assert_eq!(out.code(), 2, "stderr:\n{}", out.stderr);
        assert!(
            out.stderr.lines().any(|l| l == line),
            "events.md shows\n{line}\nstderr:\n{}",
            out.stderr
        );
    }
}
