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
    Case {
        name: "channel_capacity_too_deep",
        yaml: "name: bad
buffer_timeout: 1ms
channel_capacity: 5000
sources:
  gen:
    type: generator
    count: 10
sinks:
  out:
    type: discard
    input: gen
",
        at: Some("3:1"),
        expect: &[
            "field \"channel_capacity\"",
            "invalid channel capacity \"5000\"",
            "expected a whole number of batches from 1 to 4096",
        ],
    },
    Case {
        name: "channel_capacity_not_a_number",
        yaml: "name: bad
channel_capacity: deep
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
            "field \"channel_capacity\"",
            "expected a whole number of batches from 1 to 4096",
            "\"deep\"",
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
            let uses_kafka = std::fs::read_to_string(&path)
                .unwrap()
                .contains("type: kafka");
            if cfg!(feature = "kafka") || !uses_kafka {
                assert_eq!(out.code(), 0, "{}: stderr:\n{}", path.display(), out.stderr);
            } else {
                // Built without the feature `kafka`: a Kafka job is an error that says so.
                assert_eq!(out.code(), 2, "{}: stderr:\n{}", path.display(), out.stderr);
                assert!(
                    out.stderr.contains("unknown source type \"kafka\""),
                    "{}: stderr:\n{}",
                    path.display(),
                    out.stderr
                );
            }
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
        (
            &["--channel-capacity", "0"],
            &[
                "--channel-capacity",
                "invalid channel capacity \"0\": expected a whole number of batches from 1 to 4096",
            ],
        ),
        (
            &["-D", "execution.channel-capacity=4097"],
            &["-D execution.channel-capacity=4097: invalid channel capacity \"4097\": expected a whole number of batches from 1 to 4096"],
        ),
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

/// The `error: ` lines of a command's standard error.
fn error_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect()
}

/// Issue 8 item 3: two unknown fields and `parallelism: 0` on three lines give three messages in
/// one round, in file order, from `validate` and from `run` (before: only the first).
#[test]
fn three_mistakes_on_three_lines_give_three_messages() {
    let dir = TempDir::new("three");
    dir.write(
        "three.yaml",
        "name: three
sources:
  gen:
    type: generator
    cuont: 10
    scael: 2
    parallelism: 0
sinks:
  out:
    type: discard
    input: gen
",
    );
    for cmd in [
        &["validate", "three.yaml"][..],
        &["run", "three.yaml", "--metrics-addr", "127.0.0.1:0"][..],
    ] {
        let out = tidemark(dir.path(), cmd);
        assert_eq!(out.code(), 2, "{cmd:?}: {}", out.stderr);
        let errors = error_lines(&out.stderr);
        assert_eq!(errors.len(), 3, "{cmd:?}:\n{}", out.stderr);
        assert!(
            errors[0].starts_with("error: three.yaml:5:5: source \"gen\": unknown field \"cuont\""),
            "{}",
            out.stderr
        );
        assert!(
            errors[0].ends_with("did you mean \"count\"?"),
            "{}",
            out.stderr
        );
        assert!(
            errors[1].starts_with("error: three.yaml:6:5: source \"gen\": unknown field \"scael\""),
            "{}",
            out.stderr
        );
        assert!(errors[2].starts_with("error: three.yaml:7:5: source \"gen\": field \"parallelism\": parallelism must be at least 1"), "{}", out.stderr);
        assert!(
            out.stderr.contains("3 errors in the job file"),
            "{}",
            out.stderr
        );
    }
}

/// Several bad settings of one component, a nested one among them: each at its own line.
#[test]
fn every_bad_setting_of_a_component_at_its_line() {
    let dir = TempDir::new("settings");
    dir.write(
        "bad.yaml",
        "name: bad
sources:
  gen:
    type: generator
    count: many
    key_distribution: zipff
    disorder:
      delay: 1s
      fractoin: 0.1
sinks:
  out: {type: discard, input: gen}
",
    );
    let out = tidemark(dir.path(), ["validate", "bad.yaml"]);
    assert_eq!(out.code(), 2, "{}", out.stderr);
    let errors = error_lines(&out.stderr);
    assert_eq!(errors.len(), 3, "{}", out.stderr);
    assert!(
        errors[0].starts_with(
            "error: bad.yaml:5:5: source \"gen\": invalid generator settings: count: invalid type"
        ),
        "{}",
        out.stderr
    );
    assert!(errors[1].starts_with("error: bad.yaml:6:5: source \"gen\": invalid generator settings: key_distribution: unknown value `zipff`"), "{}", out.stderr);
    assert!(
        errors[1].ends_with("did you mean \"zipf\"?"),
        "{}",
        out.stderr
    );
    assert!(errors[2].starts_with("error: bad.yaml:9:7: source \"gen\": invalid generator settings: disorder: unknown field `fractoin`"), "{}", out.stderr);
    assert!(
        errors[2].ends_with("did you mean \"fraction\"?"),
        "{}",
        out.stderr
    );
}

const KEYED_JOB: &str = "name: keyed
sources:
  gen: {type: generator, count: 4000, keys: 8, parallelism: 2}
operators:
  counts:
    type: reduce
    input: gen
    aggregate: count
    parallelism: 2
sinks:
  out: {type: file, input: counts, path: out.jsonl, parallelism: 1}
";

/// Issue 8 item 2: a reduce at parallelism 2 without `partition` gets `hash`, so each key's count
/// is whole: the last count of every key adds up to every record (with the old rebalance default
/// each subtask counted about half of each key). An explicit rebalance is a validation error.
#[test]
fn keyed_operators_default_to_hash_and_refuse_other_partitionings() {
    let dir = TempDir::new("keyed");
    dir.write("keyed.yaml", KEYED_JOB);
    let plan = tidemark(dir.path(), ["plan", "keyed.yaml"]);
    assert_eq!(plan.code(), 0, "{}", plan.stderr);
    assert!(
        plan.stdout.contains("gen -> counts: hash"),
        "{}",
        plan.stdout
    );
    let out = tidemark(
        dir.path(),
        ["run", "keyed.yaml", "--metrics-addr", "127.0.0.1:0"],
    );
    assert_eq!(out.code(), 0, "{}", out.stderr);
    let mut last = std::collections::BTreeMap::new();
    for line in dir.read("out.jsonl").lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let key = v["key"].as_u64().unwrap();
        let count = v["value"].as_f64().unwrap();
        let e = last.entry(key).or_insert(0.0f64);
        *e = e.max(count);
    }
    assert_eq!(last.len(), 8, "{last:?}");
    assert_eq!(last.values().sum::<f64>(), 4000.0, "{last:?}");

    for p in ["rebalance", "forward", "broadcast"] {
        dir.write(
            "explicit.yaml",
            &KEYED_JOB.replace(
                "    aggregate: count\n",
                &format!("    aggregate: count\n    partition: {p}\n"),
            ),
        );
        let out = tidemark(dir.path(), ["validate", "explicit.yaml"]);
        assert_eq!(out.code(), 2, "{p}: {}", out.stderr);
        assert!(
            out.stderr.contains(&format!("explicit.yaml:9:5: operator \"counts\": edge \"gen\" -> \"counts\": \"counts\" groups records by key, so its input must be partitioned by hash, not {p}")),
            "{p}: {}",
            out.stderr
        );
    }
}

/// Issue 8 item 10: `x-` keys hold anchors; a huge parallelism is one bounded error that does not
/// stop the other checks; 4294967297 is refused at validation; plan and DOT name the types.
#[test]
fn x_keys_parallelism_bounds_and_types_in_the_plan() {
    let dir = TempDir::new("smaller");
    dir.write(
        "anchors.yaml",
        "x-gen: &gen {type: generator, count: 10}
name: anchors
sources:
  a: {<<: *gen, parallelism: 2}
  b: *gen
sinks:
  out: {type: discard, input: [a, b]}
",
    );
    let out = tidemark(dir.path(), ["plan", "anchors.yaml"]);
    assert_eq!(out.code(), 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("source a (generator)"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("sink out (discard)"), "{}", out.stdout);
    let dot = tidemark(dir.path(), ["plan", "anchors.yaml", "--format", "dot"]);
    assert!(
        dot.stdout
            .contains("\"a\" [label=\"a\\nsource generator x2\"]"),
        "{}",
        dot.stdout
    );

    dir.write(
        "huge.yaml",
        "name: huge
sources:
  gen:
    type: generator
    parallelism: 99999999999999999999
    cuont: 1
  other:
    type: generator
    parallelism: 4294967297
sinks:
  out: {type: discard, input: [gen, other]}
",
    );
    let out = tidemark(dir.path(), ["validate", "huge.yaml"]);
    assert_eq!(out.code(), 2, "{}", out.stderr);
    let errors = error_lines(&out.stderr);
    assert_eq!(errors.len(), 3, "{}", out.stderr);
    assert_eq!(errors[0], "error: huge.yaml:5:5: source \"gen\": field \"parallelism\": parallelism 99999999999999999999 is more than the maximum of 1024 subtasks per vertex");
    assert!(
        errors[1].contains("huge.yaml:6:5:") && errors[1].contains("\"cuont\""),
        "{}",
        out.stderr
    );
    assert!(
        errors[2].contains("huge.yaml:9:5:")
            && errors[2].contains("parallelism 4294967297 is more than the maximum of 1024"),
        "{}",
        out.stderr
    );
}

/// Issue 8 item 10: `validate` takes `-D` and `--parallelism`, and fails for a missing input file.
#[test]
fn validate_takes_settings_and_checks_input_files() {
    let dir = TempDir::new("validate-flags");
    dir.write(
        "good.yaml",
        GOOD.replace("    parallelism: 2\n", "").as_str(),
    );
    let out = tidemark(
        dir.path(),
        ["validate", "good.yaml", "-D", "parallelism.default=3"],
    );
    assert_eq!(out.code(), 0, "{}", out.stderr);
    assert!(out.stdout.contains("x3"), "{}", out.stdout);
    assert!(
        out.stdout.contains("parallelism.default = 3"),
        "{}",
        out.stdout
    );
    let out = tidemark(
        dir.path(),
        [
            "validate",
            "good.yaml",
            "-D",
            "parallelism.default=3",
            "--parallelism",
            "4",
        ],
    );
    assert!(
        out.stdout.contains("parallelism.default = 4"),
        "{}",
        out.stdout
    );
    let out = tidemark(
        dir.path(),
        ["validate", "good.yaml", "-D", "parallelism.defualt=3"],
    );
    assert_eq!(out.code(), 2, "{}", out.stderr);

    dir.write(
        "input.yaml",
        "name: input
sources:
  in: {type: file, path: missing.jsonl}
sinks:
  out: {type: discard, input: in}
",
    );
    let out = tidemark(dir.path(), ["validate", "input.yaml"]);
    assert_eq!(out.code(), 2, "{}", out.stderr);
    // At `path` in the flow mapping (not 3:3, the vertex).
    assert!(
        out.stderr
            .contains("input.yaml:3:20: source \"in\": invalid file settings: path: no such file:"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("missing.jsonl"), "{}", out.stderr);
    dir.write("missing.jsonl", "{\"key\": 1}\n");
    let out = tidemark(dir.path(), ["validate", "input.yaml"]);
    assert_eq!(out.code(), 0, "{}", out.stderr);
}

/// Issue 8 item 11: `${VAR}` and `${VAR:-default}` come from the environment; an unset one is an
/// error naming it and its line.
#[test]
fn environment_variables_in_the_job_file() {
    let dir = TempDir::new("vars");
    dir.write(
        "vars.yaml",
        "name: ${JOB_NAME:-vars}
sources:
  gen: {type: generator, count: ${TIDEMARK_IT_COUNT}}
sinks:
  out: {type: file, input: gen, path: ${TIDEMARK_IT_OUT:-out}.jsonl}
",
    );
    let run = |vars: &[(&str, &str)]| {
        let mut cmd = std::process::Command::new(common::tidemark_bin());
        cmd.current_dir(dir.path())
            .args(["run", "vars.yaml", "--metrics-addr", "127.0.0.1:0"])
            .env_remove("TIDEMARK_IT_COUNT")
            .env_remove("TIDEMARK_IT_OUT")
            .env_remove("JOB_NAME");
        for (k, v) in vars {
            cmd.env(k, v);
        }
        common::run_command(
            cmd,
            std::time::Duration::from_secs(60),
            "tidemark run vars.yaml",
        )
    };
    let out = run(&[]);
    assert_eq!(out.code(), 2, "{}", out.stderr);
    assert_eq!(
        error_lines(&out.stderr),
        ["error: vars.yaml:3:33: environment variable TIDEMARK_IT_COUNT is not set: set it, or write ${TIDEMARK_IT_COUNT:-default} for a default"]
    );
    let out = run(&[("TIDEMARK_IT_COUNT", "25"), ("TIDEMARK_IT_OUT", "records")]);
    assert_eq!(out.code(), 0, "{}", out.stderr);
    assert_eq!(dir.read("records.jsonl").lines().count(), 25);
}

/// Issue 8 item 6: durations on the command line need a unit; a negative one says so; the marker
/// interval by `-D` is milliseconds as in Flink.
#[test]
fn command_line_durations_need_a_unit() {
    let dir = TempDir::new("durations");
    dir.write("good.yaml", GOOD);
    for (args, needle) in [
        (
            &["--duration", "1.5"][..],
            "duration \"1.5\" has no unit: write 1.5s for seconds or 1.5ms for milliseconds",
        ),
        (&["--duration", "-1s"][..], "negative duration \"-1s\""),
        (&["--linger", "2"][..], "duration \"2\" has no unit"),
        (
            &["--latency-interval", "200"][..],
            "duration \"200\" has no unit",
        ),
        (
            &["-D", "execution.buffer-timeout=5"][..],
            "-D execution.buffer-timeout=5: duration \"5\" has no unit",
        ),
    ] {
        let mut all = vec!["run", "good.yaml", "--metrics-addr", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let out = tidemark(dir.path(), &all);
        assert_eq!(out.code(), 2, "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
    }
    let out = tidemark(
        dir.path(),
        [
            "validate",
            "good.yaml",
            "-D",
            "metrics.latency.interval=200",
        ],
    );
    assert_eq!(out.code(), 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("metrics.latency.interval = 200ms"),
        "{}",
        out.stdout
    );
}

/// Issue 8 item 11: a secret setting (here Kafka's `sasl.password`, from the environment) is
/// printed as `***` by `plan` and `validate`, and an error about it does not show its value.
#[cfg(feature = "kafka")]
#[test]
fn secrets_are_never_shown() {
    let dir = TempDir::new("secrets");
    let job = "name: secrets
sources:
  in:
    type: kafka
    brokers: [localhost:9092]
    topics: [t]
    group: g
    properties:
      security.protocol: SASL_SSL
      sasl.password: ${TIDEMARK_IT_PASSWORD}
sinks:
  out: {type: discard, input: in}
";
    dir.write("secrets.yaml", job);
    dir.write(
        "bad.yaml",
        &job.replace(
            "${TIDEMARK_IT_PASSWORD}",
            "{nested: ${TIDEMARK_IT_PASSWORD}}",
        ),
    );
    for args in [
        &["plan", "secrets.yaml"][..],
        &["validate", "secrets.yaml"][..],
        &["validate", "bad.yaml"][..],
    ] {
        let mut cmd = std::process::Command::new(common::tidemark_bin());
        cmd.current_dir(dir.path())
            .args(args)
            .env("TIDEMARK_IT_PASSWORD", "hunter2-secret-value");
        let out = common::run_command(cmd, std::time::Duration::from_secs(60), "tidemark");
        assert!(!out.stdout.contains("hunter2"), "{args:?}: {}", out.stdout);
        assert!(!out.stderr.contains("hunter2"), "{args:?}: {}", out.stderr);
        if args[1] == "bad.yaml" {
            assert_eq!(out.code(), 2, "{}", out.stderr);
            assert!(
                out.stderr.contains(
                    "properties.sasl.password: invalid value (not shown: the setting is secret)"
                ),
                "{}",
                out.stderr
            );
        } else {
            assert_eq!(out.code(), 0, "{args:?}: {}", out.stderr);
            assert!(
                out.stdout.contains("\"sasl.password\":\"***\""),
                "{args:?}: {}",
                out.stdout
            );
        }
    }
}

/// Issue 18: a key written in flow style (`{type: generator, kyes: 4}`) is located at its own
/// line and column, not at the vertex that holds it (before: `3:3`, the vertex's id).
#[test]
fn flow_style_keys_are_located_at_their_column() {
    let dir = TempDir::new("flow");
    dir.write(
        "flow.yaml",
        "name: flow
sources:
  gen: {type: generator, kyes: 4}
sinks:
  out: {type: discard, input: gen, partiton: rebalance}
",
    );
    let out = tidemark(dir.path(), ["validate", "flow.yaml"]);
    assert_eq!(out.code(), 2, "stderr:\n{}", out.stderr);
    let errors = error_lines(&out.stderr);
    assert_eq!(errors.len(), 2, "stderr:\n{}", out.stderr);
    assert!(
        errors[0].starts_with("error: flow.yaml:3:26: source \"gen\": unknown field \"kyes\""),
        "{}",
        out.stderr
    );
    assert!(
        errors[0].ends_with("did you mean \"keys\"?"),
        "{}",
        out.stderr
    );
    assert!(
        errors[1].starts_with("error: flow.yaml:5:36: sink \"out\": unknown field \"partiton\""),
        "{}",
        out.stderr
    );
}

/// Issue 18: mistakes in different vertices (and sections) all come out in one round, in file
/// order, each at its line and column: a parse error, a component's unknown field, an unknown
/// type and an unknown input.
#[test]
fn mistakes_in_several_vertices_come_out_together() {
    let dir = TempDir::new("several");
    dir.write(
        "several.yaml",
        "name: several
sources:
  gen:
    type: generator
    parallelism: 0
  more: {type: generator, rat: 5}
operators:
  work:
    type: mpa
    input: gen
sinks:
  out: {type: discard, input: wrok}
",
    );
    for cmd in [
        &["validate", "several.yaml"][..],
        &["run", "several.yaml", "--metrics-addr", "127.0.0.1:0"][..],
    ] {
        let out = tidemark(dir.path(), cmd);
        assert_eq!(out.code(), 2, "{cmd:?}: {}", out.stderr);
        let errors = error_lines(&out.stderr);
        let starts = [
            "error: several.yaml:5:5: source \"gen\": field \"parallelism\"",
            "error: several.yaml:6:27: source \"more\": unknown field \"rat\"",
            "error: several.yaml:9:5: operator \"work\": unknown operator type \"mpa\"",
            "error: several.yaml:12:24: sink \"out\": unknown input \"wrok\"",
        ];
        assert_eq!(errors.len(), starts.len(), "{cmd:?}:\n{}", out.stderr);
        for (line, start) in errors.iter().zip(starts) {
            assert!(line.starts_with(start), "{cmd:?}: {start}\n{}", out.stderr);
        }
        assert!(
            out.stderr.contains("4 errors in the job file"),
            "{}",
            out.stderr
        );
    }
}

/// Issue 18: a secret's value is not echoed by an error about it, in flow style too, and the
/// error points at the secret's key.
#[test]
fn a_secret_in_flow_style_is_located_and_not_shown() {
    let dir = TempDir::new("flow-secret");
    dir.write(
        "secret.yaml",
        "name: secret
sources:
  in:
    type: kafka
    brokers: [localhost:9092]
    topics: [t]
    group: g
    properties: {security.protocol: SASL_SSL, sasl.password: {nested: hunter2-flow}}
sinks:
  out: {type: discard, input: in}
",
    );
    let out = tidemark(dir.path(), ["validate", "secret.yaml"]);
    assert_eq!(out.code(), 2, "stderr:\n{}", out.stderr);
    assert!(!out.stderr.contains("hunter2"), "{}", out.stderr);
    assert!(!out.stdout.contains("hunter2"), "{}", out.stdout);
    let errors = error_lines(&out.stderr);
    assert_eq!(errors.len(), 1, "stderr:\n{}", out.stderr);
    assert!(
        errors[0].starts_with("error: secret.yaml:8:47: source \"in\": "),
        "{}",
        out.stderr
    );
    assert!(
        errors[0].ends_with(
            "properties.sasl.password: invalid value (not shown: the setting is secret)"
        ),
        "{}",
        out.stderr
    );
}

/// Issue 18 (item 8): a `file` sink writing into a folder that does not exist fails `validate`
/// and `run` before the job starts, naming the vertex, the field and the folder.
#[test]
fn a_file_sink_into_a_missing_folder_is_an_error() {
    let dir = TempDir::new("sink-folder");
    dir.write(
        "sink.yaml",
        "name: sink
sources:
  gen:
    type: generator
    count: 1
sinks:
  out:
    type: file
    input: gen
    path: nowhere/out.jsonl
",
    );
    for cmd in [
        &["validate", "sink.yaml"][..],
        &["run", "sink.yaml", "--metrics-addr", "127.0.0.1:0"][..],
    ] {
        let out = tidemark(dir.path(), cmd);
        assert_eq!(out.code(), 2, "{cmd:?}: {}", out.stderr);
        let errors = error_lines(&out.stderr);
        assert_eq!(errors.len(), 1, "{cmd:?}:\n{}", out.stderr);
        assert!(
            errors[0].starts_with(
                "error: sink.yaml:10:5: sink \"out\": invalid file settings: path: no such folder: "
            ),
            "{cmd:?}: {}",
            out.stderr
        );
        assert!(errors[0].contains("nowhere"), "{cmd:?}: {}", out.stderr);
        assert!(!dir.path().join("nowhere").exists(), "the folder was made");
    }
}
