use super::*;

#[test]
fn readiness_follows_the_phase_of_the_run() {
    let health = Health::new("job", "a");
    let reason = |h: &Health| h.ready().err().map(|(r, _)| r);
    assert_eq!(reason(&health), Some(Reason::Starting));
    health.set_phase(Phase::Restoring, "restoring checkpoint 3 from /c/chk-3");
    assert_eq!(
        health.ready(),
        Err((
            Reason::Restoring,
            "restoring checkpoint 3 from /c/chk-3".to_owned()
        ))
    );
    health.set_phase(Phase::Running, "");
    assert_eq!(health.ready(), Ok(()));
    assert_eq!(health.live(), Ok(()));
    health.set_phase(Phase::Stopping, "SIGTERM: the sources stopped");
    assert_eq!(reason(&health), Some(Reason::Stopping));
    health.set_phase(Phase::Failed, "vertex \"m\" subtask 0 failed: boom");
    assert_eq!(reason(&health), Some(Reason::Failed));
    assert_eq!(
        health.live(),
        Err("failed: vertex \"m\" subtask 0 failed: boom".to_owned())
    );
}

#[test]
fn the_sources_and_the_watchdog_hold_a_running_job_back() {
    let health = Health::new("job", "a");
    health.set_phase(Phase::Running, "");
    health.set_source_check(Box::new(|| {
        Some((
            Reason::Rebalancing,
            "kafka source \"in\" subtask 1".to_owned(),
        ))
    }));
    assert_eq!(health.ready().unwrap_err().0, Reason::Rebalancing);
    health.set_source_check(Box::new(|| None));
    health.judge(Some("sink \"out\" subtask 0 has 10 records".to_owned()));
    assert!(health.stalled());
    let (status, body) = health.readyz();
    assert_eq!(status, 503);
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        body,
        serde_json::json!({"ready": false, "reason": "stalled",
                           "detail": "sink \"out\" subtask 0 has 10 records"})
    );
    health.judge(None);
    assert_eq!(health.readyz().0, 200);
}

#[test]
fn metrics_before_the_job_hold_the_two_gauges_labelled_as_the_registry_does() {
    let health = Health::new("my-job", "host-1");
    let text = health.metrics_text();
    assert!(
        text.contains("tidemark_job_ready{job_name=\"my-job\",tidemark_instance=\"host-1\"} 0\n"),
        "{text}"
    );
    assert!(
        text.contains("tidemark_job_stalled{job_name=\"my-job\",tidemark_instance=\"host-1\"} 0\n"),
        "{text}"
    );
    assert!(text.contains("# TYPE tidemark_job_ready gauge\n"), "{text}");
}
