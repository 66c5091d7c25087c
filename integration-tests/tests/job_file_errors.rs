//! Invalid job files and settings: `run` and `validate` exit 2 before anything runs, with a
//! message on stderr naming the file, line and column, the vertex, and what is expected.

mod common;

use common::{tidemark, TempDir};

/// A bad job file: its name, its text, where the error is (`line:col`, if the file has one) and
/// the parts the message must contain.
struct Case {
    name: &'static str,
    yaml: &'static str,
    at: Option<&'static str>,
    expect: &'static [&'static str],
}

const CASES: &[Case] = &[
    Case {
        name: "where_syntax_error",
        yaml: "name: bad
sources:
  gen:
    type: generator
    count: 10
operators:
  paid:
    type: filter
    input: gen
    where: 'v +'
sinks:
  out:
    type: discard
    input: paid
",
        at: Some("10:16"),
        expect: &[
            "operator \"paid\"",
            "where: syntax error: the expression ends too early",
            "in `v +`",
        ],
    },
    Case {
        name: "where_unknown_function",
        yaml: "name: bad
sources:
  gen:
    type: generator
    count: 10
operators:
  paid:
    type: filter
    input: gen
    where: 'value > 1 && sise(key) > 2'
sinks:
  out:
    type: discard
    input: paid
",
        at: Some("10:26"),
        expect: &[
            "operator \"paid\"",
            "unknown function 'sise' (did you mean 'size'?)",
        ],
    },
    Case {
        name: "unknown_field",
        yaml: "name: bad
sources:
  gen:
    type: generator
    count: 10
operators:
  work:
    type: map
    input: gen
    cots: 2us
sinks:
  out:
    type: discard
    input: work
",
        at: Some("10:5"),
        expect: &[
            "operator \"work\"",
            "unknown field \"cots\"",
            "expected one of",
            "cost",
            "did you mean \"cost\"?",
        ],
    },
    Case {
        name: "unknown_top_level_field",
        yaml: "name: bad
paralelism: 2
sources:
  gen:
    type: generator
    count: 10
sinks:
  out:
    type: discard
    input: gen
",
        at: Some("2:1"),
        expect: &[
            "unknown field \"paralelism\"",
            "expected one of",
            "did you mean \"parallelism\"?",
        ],
    },
    Case {
        name: "unknown_type",
        yaml: "name: bad
sources:
  gen:
    type: generator
    count: 10
operators:
  work:
    type: mapp
    input: gen
sinks:
  out:
    type: discard
    input: work
",
        at: Some("8:5"),
        expect: &[
            "operator \"work\"",
            "unknown operator type \"mapp\"",
            "expected one of map, filter, delay, reduce, window",
            "did you mean \"map\"?",
        ],
    },
    Case {
        name: "type_of_another_section",
        yaml: "name: bad
sources:
  gen:
    type: generator
    count: 10
operators:
  work:
    type: discard
    input: gen
sinks:
  out:
    type: discard
    input: work
",
        at: Some("8:5"),
        expect: &["operator \"work\"", "\"discard\" is a sink type"],
    },
    Case {
        name: "missing_input",
        yaml: "name: bad
sources:
  gen:
    type: generator
    count: 10
sinks:
  out:
    type: discard
",
        at: Some("7:3"),
        expect: &["sink \"out\"", "missing field \"input\""],
    },
    Case {
        name: "unknown_input",
        yaml: "name: bad
sources:
  gen:
    type: generator
    count: 10
operators:
  work:
    type: map
    input: gen
sinks:
  out:
    type: discard
    input: wrok
",
        at: Some("13:5"),
        expect: &[
            "sink \"out\"",
            "unknown input \"wrok\"",
            "expected one of the vertex ids gen, work",
            "did you mean \"work\"?",
        ],
    },
    Case {
        name: "cycle",
        yaml: "name: bad
sources:
  gen:
    type: generator
    count: 10
operators:
  a:
    type: map
    input: [gen, c]
  b:
    type: map
    input: a
  c:
    type: map
    input: b
sinks:
  out:
    type: discard
    input: c
",
        at: Some("9:5"),
        expect: &[
            "operator \"a\"",
            "cycle",
            "a -> b -> c -> a",
            "must be acyclic",
        ],
    },
    Case {
        name: "duplicate_id",
        yaml: "name: bad
sources:
  gen:
    type: generator
    count: 10
operators:
  gen:
    type: map
    input: gen
sinks:
  out:
    type: discard
    input: gen
",
        at: Some("7:3"),
        expect: &[
            "operator \"gen\"",
            "duplicate vertex id \"gen\"",
            "already used by the source at line 3",
            "unique",
        ],
    },
    Case {
        name: "parallelism_zero",
        yaml: "name: bad
sources:
  gen:
    type: generator
    count: 10
    parallelism: 0
sinks:
  out:
    type: discard
    input: gen
",
        at: Some("6:5"),
        expect: &[
            "source \"gen\"",
            "parallelism",
            "must be at least 1, found 0",
        ],
    },
    Case {
        name: "forward_between_different_parallelisms",
        yaml: "name: bad
sources:
  gen:
    type: generator
    count: 10
    parallelism: 2
operators:
  work:
    type: map
    input: gen
    parallelism: 1
    partition: forward
sinks:
  out:
    type: discard
    input: work
",
        at: None,
        expect: &[
            "operator \"work\"",
            "forward partitioning needs equal parallelism",
            "\"gen\" has 2 and \"work\" has 1",
            "use rebalance or hash",
        ],
    },
    Case {
        name: "unknown_partition",
        yaml: "name: bad
sources:
  gen:
    type: generator
    count: 10
operators:
  work:
    type: map
    input: gen
    partition: hsah
sinks:
  out:
    type: discard
    input: work
",
        at: None,
        expect: &[
            "operator \"work\"",
            "unknown partition \"hsah\"",
            "expected one of forward, rebalance, hash, broadcast",
            "did you mean \"hash\"?",
        ],
    },
    Case {
        name: "unparsable_interval",
        yaml: "name: bad
latency:
  interval: fast
sources:
  gen:
    type: generator
    count: 10
sinks:
  out:
    type: discard
    input: gen
",
        at: Some("3:3"),
        expect: &[
            "field \"latency.interval\"",
            "invalid duration \"fast\"",
            "expected a duration like 200ms",
        ],
    },
    Case {
        name: "negative_interval",
        yaml: "name: bad
latency:
  interval: -5ms
sources:
  gen:
    type: generator
    count: 10
sinks:
  out:
    type: discard
    input: gen
",
        at: Some("3:3"),
        expect: &["field \"latency.interval\"", "invalid duration \"-5ms\""],
    },
    Case {
        name: "unparsable_cost",
        yaml: "name: bad
sources:
  gen:
    type: generator
    count: 10
operators:
  work:
    type: map
    input: gen
    cost: fast
sinks:
  out:
    type: discard
    input: work
",
        at: Some("10:5"),
        expect: &[
            "operator \"work\"",
            "cost",
            "invalid duration \"fast\"",
            "expected a duration like",
        ],
    },
    Case {
        name: "unknown_granularity",
        yaml: "name: bad
latency:
  interval: 5ms
  granularity: opertor
sources:
  gen:
    type: generator
    count: 10
sinks:
  out:
    type: discard
    input: gen
",
        at: Some("4:3"),
        expect: &[
            "field \"latency.granularity\"",
            "unknown latency granularity \"opertor\"",
            "expected one of single, operator, subtask",
        ],
    },
    Case {
        name: "history_size_zero",
        yaml: "name: bad
latency:
  interval: 5ms
  history_size: 0
sources:
  gen:
    type: generator
    count: 10
sinks:
  out:
    type: discard
    input: gen
",
        at: Some("4:3"),
        expect: &[
            "field \"latency.history_size\"",
            "invalid latency history size \"0\"",
            "expected a whole number of at least 1",
        ],
    },
];

/// Checks one error message: the file (and line:col), then every expected part.
fn check_message(case: &Case, file: &str, stderr: &str) {
    let prefix = match case.at {
        Some(at) => format!("{file}:{at}: "),
        None => format!("{file}:"),
    };
    let line = stderr
        .lines()
        .find(|l| l.starts_with("error: ") && l.contains(&prefix))
        .unwrap_or_else(|| {
            panic!(
                "{}: no error line naming {prefix:?} on stderr:\n{stderr}",
                case.name
            )
        });
    for part in case.expect {
        assert!(
            line.contains(part),
            "{}: the error should contain {part:?}:\n{line}",
            case.name
        );
    }
}

#[test]
fn each_bad_job_file_fails_validate_with_exit_2_and_a_precise_message() {
    let dir = TempDir::new("bad-validate");
    for case in CASES {
        let file = format!("{}.yaml", case.name);
        let path = dir.write(&file, case.yaml);
        let out = tidemark(dir.path(), ["validate".as_ref(), path.as_os_str()]);
        assert_eq!(
            out.code(),
            2,
            "{}: validate exit code; stdout:\n{}\nstderr:\n{}",
            case.name,
            out.stdout,
            out.stderr
        );
        check_message(case, &file, &out.stderr);
        assert!(
            !out.stdout.lines().any(|l| l.trim() == "ok"),
            "{}: validate printed ok for a bad file",
            case.name
        );
    }
}

#[test]
fn each_bad_job_file_fails_run_with_exit_2_before_it_starts() {
    let dir = TempDir::new("bad-run");
    for case in CASES {
        let file = format!("{}.yaml", case.name);
        dir.write(&file, case.yaml);
        let out = tidemark(
            dir.path(),
            ["run", file.as_str(), "--metrics-addr", "127.0.0.1:0"],
        );
        assert_eq!(
            out.code(),
            2,
            "{}: run exit code; stderr:\n{}",
            case.name,
            out.stderr
        );
        check_message(case, &file, &out.stderr);
        assert!(
            !out.stderr.contains(" running ("),
            "{}: the job started:\n{}",
            case.name,
            out.stderr
        );
    }
}

const GOOD: &str = "name: good
latency:
  interval: 5ms
  granularity: subtask
  history_size: 16
sources:
  gen:
    type: generator
    count: 10
    parallelism: 2
operators:
  work:
    type: map
    input: gen
    cost: 1us
sinks:
  out:
    type: discard
    input: work
";

#[test]
fn validate_accepts_a_good_file() {
    let dir = TempDir::new("good-validate");
    let path = dir.write("good.yaml", GOOD);
    let out = tidemark(dir.path(), ["validate".as_ref(), path.as_os_str()]);
    assert_eq!(out.code(), 0, "stderr:\n{}", out.stderr);
    assert_eq!(
        out.stdout.lines().last().map(str::trim),
        Some("ok"),
        "stdout:\n{}",
        out.stdout
    );
    assert!(out.stdout.contains("work+out"), "the plan: {}", out.stdout);
}

#[test]
fn validate_accepts_the_example_jobs() {
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(&examples).expect("docs/examples") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            seen += 1;
            let out = tidemark(&examples, ["validate".as_ref(), path.as_os_str()]);
            assert_eq!(out.code(), 0, "{}: stderr:\n{}", path.display(), out.stderr);
        }
    }
    assert!(seen >= 2, "example jobs in {}", examples.display());
}

#[test]
fn all_errors_are_reported_at_once_in_file_order() {
    let dir = TempDir::new("two-errors");
    let yaml = "name: bad
sources:
  gen:
    type: generator
    count: 10
operators:
  work:
    type: map
    input: gen
    cots: 2us
sinks:
  out:
    type: discard
    input: wrok
";
    dir.write("two.yaml", yaml);
    let out = tidemark(dir.path(), ["validate", "two.yaml"]);
    assert_eq!(out.code(), 2, "stderr:\n{}", out.stderr);
    let errors: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 2, "stderr:\n{}", out.stderr);
    assert!(errors[0].contains("two.yaml:10:5:") && errors[0].contains("\"cots\""));
    assert!(errors[1].contains("two.yaml:14:5:") && errors[1].contains("\"wrok\""));
    assert!(
        out.stderr.contains("2 errors"),
        "a count of the errors:\n{}",
        out.stderr
    );
}

/// Invalid setting values on the command line (rule 7): exit 2 before the job starts, the
/// message naming the setting and what is expected.
#[test]
fn bad_settings_on_the_command_line_exit_2() {
    let dir = TempDir::new("bad-settings");
    dir.write("good.yaml", GOOD);
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["-D", "metrics.latency.granularity=opertor"],
            &["opertor", "single, operator, subtask"],
        ),
        (&["--latency-granularity", "opertor"], &["opertor"]),
        (
            // Every -D is checked, even when a flag overrides it.
            &[
                "--latency-granularity",
                "single",
                "-D",
                "metrics.latency.granularity=opertor",
            ],
            &["opertor"],
        ),
        (&["--latency-history-size", "0"], &["history"]),
        (
            &["-D", "metrics.latency.history-size=0"],
            &["metrics.latency.history-size", "at least 1"],
        ),
        (&["--latency-interval=-5ms"], &["-5ms"]),
        (&["--latency-interval", "fast"], &["fast"]),
        (
            &["-D", "metrics.latency.interval=fast"],
            &["metrics.latency.interval", "fast"],
        ),
        (
            &["-D", "metrics.latency.intervall=5ms"],
            &[
                "unknown setting",
                "metrics.latency.granularity",
                "did you mean \"metrics.latency.interval\"",
            ],
        ),
    ];
    for (args, expect) in cases {
        let mut all = vec!["run", "good.yaml", "--metrics-addr", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let out = tidemark(dir.path(), &all);
        assert_eq!(
            out.code(),
            2,
            "{args:?}: exit code; stderr:\n{}",
            out.stderr
        );
        for part in *expect {
            assert!(
                out.stderr.contains(part),
                "{args:?}: stderr should contain {part:?}:\n{}",
                out.stderr
            );
        }
        assert!(
            !out.stderr.contains(" running ("),
            "{args:?}: the job started:\n{}",
            out.stderr
        );
    }
}
