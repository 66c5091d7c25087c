//! The one rule set for valid graphs: `JobGraph::problems` reports every problem at once.

use tidemark_runtime::testing::{CountingSource, DiscardSink, MapOperator};
use tidemark_runtime::{
    check_parallelism, valid_id, GraphError, JobGraph, ParallelismError, Partitioning,
    MAX_PARALLELISM,
};

fn map(g: &mut JobGraph, id: &str, p: usize) -> tidemark_runtime::VertexId {
    g.add_operator(id, p, |_| Ok(Box::new(MapOperator(|v| v))))
        .unwrap()
}

#[test]
fn every_problem_at_once_with_the_cycle_as_its_path() {
    let mut g = JobGraph::new("bad");
    let src = g
        .add_source("src", 2, |_| Ok(Box::new(CountingSource::new(1))))
        .unwrap();
    let a = map(&mut g, "a", 2);
    let b = map(&mut g, "b", 2);
    let c = map(&mut g, "c", 3);
    let keyed = map(&mut g, "keyed", 2);
    g.set_keyed(keyed, true);
    let sink = g.add_sink("out", 1, |_| Ok(Box::new(DiscardSink))).unwrap();
    let lonely = g
        .add_sink("lonely", 1, |_| Ok(Box::new(DiscardSink)))
        .unwrap();
    let _ = lonely;
    g.add_edge(src, a, Partitioning::Forward);
    g.add_edge(c, a, Partitioning::Rebalance);
    g.add_edge(a, b, Partitioning::Forward);
    g.add_edge(b, c, Partitioning::Forward); // 2 -> 3 forward
    g.add_edge(src, keyed, Partitioning::Rebalance); // not hash into keyed
    g.add_edge(keyed, sink, Partitioning::Rebalance);
    g.add_edge(keyed, sink, Partitioning::Rebalance); // twice
    let problems = g.problems();
    assert!(
        problems.contains(&GraphError::ForwardParallelismMismatch {
            from: "b".into(),
            to: "c".into(),
            from_parallelism: 2,
            to_parallelism: 3
        }),
        "{problems:#?}"
    );
    assert!(
        problems.contains(&GraphError::KeyedNotHashed {
            from: "src".into(),
            to: "keyed".into(),
            partitioning: Partitioning::Rebalance,
            parallelism: 2
        }),
        "{problems:#?}"
    );
    assert!(problems.contains(&GraphError::DuplicateEdge {
        from: "keyed".into(),
        to: "out".into()
    }));
    assert!(problems.contains(&GraphError::MissingInput {
        kind: "sink",
        id: "lonely".into()
    }));
    assert!(problems.contains(&GraphError::Cycle(vec![
        "a".into(),
        "b".into(),
        "c".into(),
        "a".into()
    ])));
    assert_eq!(problems.len(), 5, "{problems:#?}");
    assert_eq!(
        GraphError::Cycle(vec!["a".into(), "b".into(), "a".into()]).to_string(),
        "the inputs form a cycle: a -> b -> a; a job graph must be acyclic"
    );
    // validate() is the first of them; connect() checks one edge at once.
    assert!(g.validate().is_err());
    assert!(matches!(
        g.connect(src, keyed, Partitioning::Broadcast),
        Err(GraphError::KeyedNotHashed { .. })
    ));
}

#[test]
fn keyed_inputs_default_to_hash() {
    let mut g = JobGraph::new("keyed");
    let src = g
        .add_source("src", 1, |_| Ok(Box::new(CountingSource::new(1))))
        .unwrap();
    let keyed = map(&mut g, "keyed", 1);
    let plain = map(&mut g, "plain", 1);
    let wide = map(&mut g, "wide", 3);
    g.set_keyed(keyed, true);
    assert_eq!(g.default_partitioning(src, keyed), Partitioning::Hash);
    assert_eq!(g.default_partitioning(src, plain), Partitioning::Forward);
    assert_eq!(g.default_partitioning(src, wide), Partitioning::Rebalance);
    // At parallelism 1 a keyed vertex may take anything: nothing is split.
    g.connect(src, keyed, Partitioning::Rebalance).unwrap();
}

#[test]
fn one_id_grammar_and_one_parallelism_bound() {
    assert!(valid_id("a.b_c-1"));
    assert!(!valid_id("a b") && !valid_id("") && !valid_id("é"));
    assert_eq!(check_parallelism(0), Err(ParallelismError::Zero));
    assert_eq!(
        check_parallelism(MAX_PARALLELISM as u64),
        Ok(MAX_PARALLELISM)
    );
    assert_eq!(
        check_parallelism(4_294_967_297),
        Err(ParallelismError::TooHigh(4_294_967_297))
    );
    let mut g = JobGraph::new("p");
    let err = g
        .add_source("s", 4_294_967_297, |_| Ok(Box::new(CountingSource::new(1))))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "vertex \"s\": parallelism 4294967297 is more than the maximum of 1024 subtasks per vertex"
    );
    assert!(matches!(
        g.add_sink("bad id", 1, |_| Ok(Box::new(DiscardSink))),
        Err(GraphError::InvalidId(_))
    ));
}
