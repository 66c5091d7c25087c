//! `tidemark run`: build the job, serve its metrics, run it to its end (or `--duration`, or a
//! signal), stop it hard past `--drain-timeout`, print and write the report whatever the
//! outcome, linger, and say how it went.

use crate::args::RunArgs;
use crate::endpoint::{Limits, MetricsServer, Role, Site, WebConfig};
use crate::error::{self, JobFailed, RunError, EXIT_INTERRUPTED, EXIT_JOB_FAILED, EXIT_OK};
use crate::health::{Health, Phase};
use crate::live::{settings_json, ComponentInfo, LiveJob, QueueShape};
use crate::progress::Progress;
use crate::report::{plural, FailureReport, NotStarted, Report, RunSummary};
use crate::restore;
use crate::settings::Settings;
use crate::signals;
use crate::{LoadedJob, Loader};
use anyhow::Context as _;
use std::fs::File;
use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tidemark_markers::format_duration;
use tidemark_runtime::{DropReason, JobHandle, JobOutcome, StartError};

/// How often the wait loop looks at the job, the clock and the signals.
const POLL: Duration = Duration::from_millis(50);

/// How long a hard stop waits for the tasks to end. Tasks notice a hard stop within
/// milliseconds unless user code or a broker call keeps them busy (a long sleep in a `delay`
/// step, a Kafka commit to brokers that are gone); the report is written without them after
/// this long, naming them.
const HARD_STOP_GRACE: Duration = Duration::from_secs(1);

use crate::deadline::EXIT_WITHIN;

/// What `run` knows so far, for the report of a run that fails before its job runs.
#[derive(Default)]
struct Known {
    job_name: Option<String>,
    /// This process's name among the job's instances (`--instance-id`, else host and pid).
    instance: String,
    settings: Option<Settings>,
    failure: Option<FailureReport>,
}

/// Runs the job of `args`; returns the exit code, or an error whose kind sets it. With
/// `--report-file`, the report is written whatever happens once the file is created.
pub fn run(args: RunArgs) -> anyhow::Result<u8> {
    let started = SystemTime::now();
    // Fail first if the report cannot be written: then there is nowhere to say anything.
    let mut report_file = match &args.report_file {
        Some(path) => Some(ReportFile::create(path)?),
        None => None,
    };
    let mut known = Known {
        instance: crate::instance::resolve(args.instance_id.as_deref()),
        ..Known::default()
    };
    let result = run_job(&args, &mut known, report_file.as_mut());
    if let (Err(e), Some(file)) = (&result, report_file.as_mut()) {
        if !file.written {
            let report = Report::not_started(&NotStarted {
                job_name: known.job_name.as_deref(),
                instance: Some(&known.instance),
                settings: known.settings.as_ref(),
                started,
                error: format!("{e:#}"),
                exit_code: error::exit_code(e),
                failure: known.failure.take(),
            });
            if let Err(write_error) = file.write(&report) {
                eprintln!("error: {write_error:#}");
            }
        }
    }
    result
}

fn run_job(
    args: &RunArgs,
    known: &mut Known,
    mut report_file: Option<&mut ReportFile>,
) -> anyhow::Result<u8> {
    let mut loader = Loader::new()
        .flags(args.settings.clone())
        .metrics_addr(args.metrics_addr.clone())
        .seed(args.seed);
    for (k, v) in &args.defines {
        loader = loader.define(k, v);
    }
    #[cfg(feature = "kafka")]
    let kafka = loader.kafka().clone();
    #[cfg(feature = "kafka")]
    kafka.set_timeout(args.kafka_timeout);
    let LoadedJob {
        job,
        settings,
        graph,
        config,
    } = loader.load_file(&args.job)?;
    for warning in crate::exchange::order_warnings(&graph) {
        eprintln!("tidemark: warning: {warning}");
    }
    known.job_name = Some(job.name.clone());
    known.settings = Some(settings.clone());
    // The endpoint first, secured as the web config says: a bad file or a taken address stops
    // us before anything runs, and the probes answer (`starting`, `restoring`) from now on.
    let web = match args
        .web_config_file
        .clone()
        .or_else(|| (job.web_config_file.as_ref()).map(|f| job.resolve(f)))
    {
        Some(path) => WebConfig::load(&path)?,
        None => WebConfig::default(),
    };
    let web = Arc::new(web);
    let health = Health::new(&job.name, &known.instance);
    let site = Site::new(health.clone());
    let server = MetricsServer::serve(
        &settings.metrics_addr,
        site.clone(),
        web.clone(),
        Role::All,
        Limits::default(),
    )?;
    let _probes = match &args.probe_addr {
        Some(addr) => Some(
            MetricsServer::serve(
                addr,
                site.clone(),
                Arc::new(WebConfig::default()),
                Role::Probes,
                Limits::default(),
            )
            .map_err(|e| anyhow::anyhow!("--probe-addr: {e}"))?,
        ),
        None => None,
    };
    if web.client_cert_required && args.probe_addr.is_none() {
        eprintln!(
            "tidemark: warning: the web config requires client certificates: kubelets and \
             load balancers cannot probe /livez and /readyz; serve them with --probe-addr"
        );
    }
    if args.restore.is_some() {
        health.set_phase(Phase::Restoring, "reading the checkpoint to restore from");
    }
    // Checkpoints to a directory, and what to start from: the checkpoint is read whole and
    // checked here, before anything is written or cut.
    let checkpoint_dir = settings.checkpoint_dir.clone();
    if checkpoint_dir.is_some() && settings.checkpoint_interval.is_none() {
        anyhow::bail!(
            "checkpoint.dir is set but checkpoints are off: set checkpoint.interval (or -D {}=1s)",
            crate::settings::CHECKPOINT_INTERVAL_KEY
        );
    }
    let (job, graph, mut config, restored) =
        match restore::resolve(args.restore.as_ref(), &job.name, checkpoint_dir.as_deref())? {
            restore::Start::Finished(message) => {
                eprintln!("tidemark: {message}");
                return Ok(EXIT_OK);
            }
            restore::Start::Fresh => {
                health.set_phase(Phase::Starting, "");
                if args.restore.is_some() {
                    eprintln!(
                        "tidemark: --restore auto: no complete checkpoint of job \"{}\" yet; \
                         starting fresh",
                        job.name
                    );
                }
                (job, graph, config, None)
            }
            restore::Start::Restore(loaded) => {
                let kept = restore::kept_parallelism(&loaded);
                for (id, p) in &kept {
                    if let Some(v) = graph.find(id).map(|v| graph.vertex(v)) {
                        if v.parallelism() != p.get() {
                            // A keyed vertex is kept only behind a Kafka exchange, whose
                            // partitions are its key groups (`crate::exchange`).
                            let why = match v.is_keyed() {
                                true => "its keys are kept per subtask behind its Kafka exchange",
                                false => "only keyed vertices rescale",
                            };
                            eprintln!(
                                "tidemark: {} \"{id}\" keeps the parallelism {p} it had in the \
                                 checkpoint (not {}): {why}",
                                v.kind().as_str(),
                                v.parallelism()
                            );
                        }
                    }
                }
                let LoadedJob {
                    job, graph, config, ..
                } = loader
                    .clone()
                    .parallelism_overrides(kept)
                    .load_file(&args.job)?;
                for note in restore::check(&loaded, &graph, args.allow_non_restored_state)? {
                    eprintln!("tidemark: {note}");
                }
                health.set_phase(
                    Phase::Restoring,
                    &format!(
                        "restoring checkpoint {} from {}",
                        loaded.metadata.id,
                        loaded.path.display()
                    ),
                );
                (job, graph, config, Some(loaded))
            }
        };
    let job_dir = checkpoint_dir
        .as_deref()
        .map(|d| tidemark_runtime::checkpoint_store::job_dir(d, &job.name));
    if let Some(job_dir) = &job_dir {
        if restored.is_none() {
            restore::clear_finished(job_dir);
        }
        config.checkpoint_storage = Some(tidemark_runtime::checkpoint::CheckpointStorage {
            job_dir: job_dir.clone(),
            retain: settings.checkpoint_retain,
            last_id: restore::last_id(job_dir, restored.as_ref().map(|r| r.metadata.id)),
        });
        let removed = tidemark_runtime::checkpoint_store::remove_incomplete(job_dir);
        if removed > 0 {
            eprintln!(
                "tidemark: removed {removed} incomplete checkpoint folder(s) an earlier run left in {}",
                job_dir.display()
            );
        }
    }
    let restored_from = restored.as_ref().map(|r| crate::live::RestoredFrom {
        id: r.metadata.id,
        path: r.path.display().to_string(),
    });
    config.restore = restored.map(|r| Arc::new(*r));
    let queue = QueueShape {
        channel_capacity: config.channel_capacity,
        batch_size: config.batch_size,
    };
    let signals = signals::install(args.drain_timeout)?;

    // Named before the subtasks are made: exchange writers name their watermarks with it.
    #[cfg(feature = "kafka")]
    kafka.set_instance(&known.instance);
    // A state topic whose committed state was grouped by the old key hash is refused before
    // anything runs (exit 2), not when its partition is first assigned.
    #[cfg(feature = "kafka")]
    kafka
        .check_state_topics()
        .map_err(|e| anyhow::anyhow!("cannot start: {e}"))?;
    // Make and wire every subtask first, so the endpoint serves the job's registry before the
    // first record flows; a taken address stops us before any thread runs.
    let prepared = tidemark_runtime::prepare(graph, config).map_err(|e| match e {
        StartError::Graph(e) => anyhow::Error::new(e),
        // The checkpoint does not fit the job as it is now (an input file changed): refused
        // before anything runs, as a usage error.
        e @ StartError::Restore { .. } => match &restored_from {
            Some(r) => anyhow::Error::new(e).context(format!(
                "cannot restore checkpoint {} from {}",
                r.id, r.path
            )),
            None => anyhow::Error::new(e),
        },
        other => {
            if let StartError::Factory {
                vertex,
                subtask,
                message,
            } = &other
            {
                known.failure = Some(FailureReport {
                    vertex_id: vertex.clone(),
                    subtask: *subtask,
                    message: message.clone(),
                });
            }
            RunError(anyhow::Error::new(other).context("the job could not start")).into()
        }
    })?;
    if let Some(r) = &restored_from {
        eprintln!("tidemark: restoring checkpoint {} from {}", r.id, r.path);
    }
    let registry = prepared.metrics().clone();
    registry.set_instance(&known.instance);
    #[cfg(feature = "kafka")]
    registry.register_series(kafka.metrics().clone());
    #[cfg(feature = "kafka")]
    let mut clock = crate::kafka_clock::start(&job, &registry, &known.instance, &kafka);
    let components: Vec<ComponentInfo> = job
        .vertices
        .iter()
        .map(|v| ComponentInfo {
            id: v.id.clone(),
            type_name: v.type_name.clone(),
            config: serde_json::Value::Object(v.config.clone()),
        })
        .collect();
    let live = Arc::new(LiveJob::new(
        registry.clone(),
        prepared.plan(),
        settings_json(&settings),
        &components,
        queue,
    ));
    live.set_checkpoints(prepared.checkpoints().clone());
    // Whether a vertex keeps its state with its exchange's partitions: then a stop (SIGTERM)
    // hands the partitions over with a last checkpoint instead of firing open windows.
    #[cfg(feature = "kafka")]
    let keeps_state = kafka.keeps_state();
    #[cfg(not(feature = "kafka"))]
    let keeps_state = false;
    #[cfg(feature = "kafka")]
    if keeps_state {
        let metrics = kafka.metrics().clone();
        live.set_state_restores(Arc::new(move || state_restores(&metrics)));
    }
    if let Some(restored) = restored_from {
        live.set_restored_from(restored);
    }
    registry.register_series(health.clone());
    live.set_health(health.clone());
    #[cfg(feature = "kafka")]
    {
        let metrics = kafka.metrics().clone();
        health.set_source_check(Box::new(move || crate::health::kafka_readiness(&metrics)));
    }
    site.set_job(live.clone());
    let handle = prepared
        .start()
        .map_err(|e| RunError(anyhow::Error::new(e).context("the job could not start")))?;
    health.set_phase(Phase::Running, "");
    // Partitions with unread messages that nobody here reads: asked of the brokers on a
    // thread of their own, judged by the watchdog.
    #[cfg(feature = "kafka")]
    let _group_watch = (!settings.stall_timeout.is_zero()).then(|| {
        let every =
            (settings.stall_timeout / 5).clamp(Duration::from_secs(1), Duration::from_secs(10));
        let watch = Arc::new(kafka.start_group_watch(every));
        // Weak: the watch ends with the run, whoever holds the health.
        let judged = Arc::downgrade(&watch);
        health.set_group_check(Box::new(move |timeout| {
            judged.upgrade().and_then(|w| w.unread(timeout))
        }));
        watch
    });
    let watchdog = crate::health::watch(&health, registry.clone(), settings.stall_timeout);
    let threads = handle.thread_count();
    eprintln!(
        "tidemark: job \"{}\" running ({threads} {}); metrics at {}",
        job.name,
        if threads == 1 { "thread" } else { "threads" },
        server.url()
    );
    eprintln!("tidemark: live view at {}", server.page_url());

    let ending = wait(
        &handle,
        &health,
        &signals,
        args.duration,
        args.drain_timeout,
        // With a checkpoint directory a stop keeps state for a restore, unless --drain; so
        // does one whose keyed state moves with its Kafka exchange's partitions (the other
        // instances take the partitions over from the state topic).
        (job_dir.is_some() || keeps_state) && !args.drain,
        Progress::new(registry.clone()),
    );
    let result = match ending.hard {
        Some(_) => {
            // Leave the report time to be written before the exit deadline.
            let left = ending.deadline.map_or(HARD_STOP_GRACE, |d| {
                d.saturating_duration_since(Instant::now())
                    .saturating_sub(EXIT_WITHIN / 2)
            });
            handle.wait_at_most(HARD_STOP_GRACE.min(left))
        }
        None => handle.wait(),
    };
    drop(watchdog);
    let ended = SystemTime::now();
    live.set_outcome(&result.outcome);
    match &result.outcome {
        JobOutcome::Failed(failure) => health.set_phase(Phase::Failed, &failure.to_string()),
        JobOutcome::Aborted => health.set_phase(Phase::Ended, "the job was stopped hard"),
        JobOutcome::Finished => health.set_phase(Phase::Ended, "the job has finished"),
        JobOutcome::Stopped => health.set_phase(Phase::Ended, "the job has stopped"),
    }
    // Broker calls a hard stop cut short (a Kafka commit to brokers that are gone, say).
    #[cfg(feature = "kafka")]
    let cut_short: Vec<String> = if ending.hard.is_some() {
        kafka
            .metrics()
            .closing_steps()
            .into_iter()
            .map(|(id, subtask, step)| format!("kafka source \"{id}\" subtask {subtask} {step}"))
            .collect()
    } else {
        Vec::new()
    };
    #[cfg(not(feature = "kafka"))]
    let cut_short: Vec<String> = Vec::new();
    let cut_short_text = if cut_short.is_empty() {
        String::new()
    } else {
        format!("; cut short: {}", cut_short.join(", "))
    };
    if let Some(job_dir) = &job_dir {
        let last = result.checkpoints.last_completed();
        match (&result.outcome, &last) {
            (JobOutcome::Finished, _) => {
                restore::write_finished(job_dir, last.as_ref().map_or(0, |c| c.id))
                    .map_err(RunError)?;
            }
            (JobOutcome::Stopped, Some(c)) if !args.drain => eprintln!(
                "tidemark: stopped with checkpoint {} in {}; open windows are in it: continue \
                 with --restore latest",
                c.id,
                c.path.display()
            ),
            _ => {}
        }
    }

    let in_flight: u64 = result
        .metrics
        .vertices()
        .iter()
        .flat_map(|v| v.subtasks.iter())
        .map(|s| s.records_dropped(DropReason::InFlight))
        .sum();
    let left = plural(in_flight, "record", "records");
    // What the command will say and return.
    let (error, exit_code, stop_reason) = match (&result.outcome, &ending.hard) {
        (JobOutcome::Failed(failure), _) => (
            Some(format!("job \"{}\" failed: {failure}", job.name)),
            EXIT_JOB_FAILED,
            ending.stop_reason.clone(),
        ),
        (JobOutcome::Aborted, Some(HardStop::DrainTimeout)) => (
            Some(format!(
                "job \"{}\" did not drain within --drain-timeout {}: stopped hard, {left} left \
                 in flight (undelivered){cut_short_text}",
                job.name,
                format_duration(args.drain_timeout)
            )),
            EXIT_JOB_FAILED,
            Some(format!(
                "{}, then --drain-timeout {} passed",
                ending.stop_reason.as_deref().unwrap_or("stop"),
                format_duration(args.drain_timeout)
            )),
        ),
        (JobOutcome::Aborted, hard) => (
            Some(format!(
                "job \"{}\" stopped hard by a second signal: {left} left in flight \
                 (undelivered){cut_short_text}",
                job.name
            )),
            EXIT_INTERRUPTED,
            Some(format!(
                "{}, then {} again",
                ending.stop_reason.as_deref().unwrap_or("stop"),
                match hard {
                    Some(HardStop::SecondSignal(name)) => name,
                    _ => "a signal",
                }
            )),
        ),
        (JobOutcome::Stopped, _) => (
            None,
            EXIT_OK,
            Some(
                ending
                    .stop_reason
                    .clone()
                    .unwrap_or_else(|| "a sink's output was closed (broken pipe)".to_string()),
            ),
        ),
        (JobOutcome::Finished, _) => (None, EXIT_OK, None),
    };
    let mut tasks_not_ended = result.tasks_not_ended.clone();
    tasks_not_ended.sort();

    let mut report = Report::collect(
        &result.metrics,
        &RunSummary {
            outcome: &result.outcome,
            elapsed: result.elapsed,
            ended,
            settings: &settings,
            stop_reason,
            error: error.clone(),
            exit_code,
            tasks_not_ended: tasks_not_ended.clone(),
        },
    );
    report.checkpoint = crate::report::CheckpointReport::of(&result.checkpoints);
    #[cfg(feature = "kafka")]
    {
        report.state_restores = state_restores(kafka.metrics());
    }
    if args.summary || std::io::stderr().is_terminal() {
        eprint!("{}", report.table());
    }
    for warning in report.warnings() {
        eprintln!("tidemark: warning: {warning}");
    }
    if !tasks_not_ended.is_empty() {
        eprintln!(
            "tidemark: {} had not ended after the hard stop (user code or a broker call still busy): {}; the \
             batch each was working on is counted as in flight, its partly filled output \
             batches are not",
            plural(tasks_not_ended.len() as u64, "task", "tasks"),
            tasks_not_ended.join(", ")
        );
    }
    if let Some(file) = report_file.as_mut() {
        file.write(&report).map_err(RunError)?;
    }

    if !ending.interrupted && ending.hard.is_none() && !args.linger.is_zero() {
        eprintln!(
            "tidemark: job ended; serving {} for {} more",
            server.url(),
            format_duration(args.linger)
        );
        let until = Instant::now() + args.linger;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            match signals.recv_timeout(left.min(POLL)) {
                Ok(_) => break,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => std::thread::sleep(left.min(POLL)),
            }
        }
    }
    server.shutdown();
    // On the way out after a signal the clock exchange's Kafka clients close in the
    // background: the process does not wait for brokers that may not answer.
    #[cfg(feature = "kafka")]
    if let Some(clock) = clock.take().filter(|_| ending.deadline.is_some()) {
        let _ = std::thread::Builder::new()
            .name("tidemark-clock-close".into())
            .spawn(move || drop(clock));
    }

    match result.outcome {
        JobOutcome::Failed(failure) => Err(JobFailed {
            job: job.name,
            failure,
        }
        .into()),
        JobOutcome::Aborted if exit_code == EXIT_INTERRUPTED => {
            eprintln!("tidemark: {}", error.unwrap_or_default());
            Ok(EXIT_INTERRUPTED)
        }
        JobOutcome::Aborted => Err(RunError(anyhow::anyhow!(error.unwrap_or_default())).into()),
        JobOutcome::Finished | JobOutcome::Stopped => Ok(EXIT_OK),
    }
}

/// The report file, created before anything else so a bad path fails at once (exit 2), and
/// written once.
struct ReportFile {
    path: PathBuf,
    file: File,
    written: bool,
}

impl ReportFile {
    fn create(path: &Path) -> anyhow::Result<ReportFile> {
        let file = File::create(path)
            .with_context(|| format!("cannot create report file {}", path.display()))?;
        Ok(ReportFile {
            path: path.to_path_buf(),
            file,
            written: false,
        })
    }

    fn write(&mut self, report: &Report) -> anyhow::Result<()> {
        self.written = true;
        self.file
            .write_all(report.to_json().as_bytes())
            .and_then(|()| self.file.sync_all())
            .with_context(|| format!("cannot write report file {}", self.path.display()))
    }
}

/// Why the wait loop stopped the job hard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HardStop {
    /// The drain after a stop took longer than `--drain-timeout`.
    DrainTimeout,
    /// A second SIGINT/SIGTERM (its name).
    SecondSignal(&'static str),
}

/// How the wait loop ended.
struct Ending {
    /// A signal arrived.
    interrupted: bool,
    /// What asked the job to stop: `SIGINT`, `SIGTERM`, `--duration 5s`.
    stop_reason: Option<String>,
    /// Set when the job was stopped hard ([`JobHandle::abort`]).
    hard: Option<HardStop>,
    /// When the process must have exited, after a stop by a signal.
    deadline: Option<Instant>,
}

/// Waits until the job ends, stopping it when `duration` passes or a signal arrives, and
/// stopping it hard when the drain takes longer than `drain_timeout` or a second signal comes.
fn wait(
    handle: &JobHandle,
    health: &Health,
    signals: &Receiver<crate::signals::Signal>,
    duration: Option<Duration>,
    drain_timeout: Duration,
    keep_state: bool,
    mut progress: Option<Progress>,
) -> Ending {
    let deadline = duration.map(|d| Instant::now() + d);
    let mut ending = Ending {
        interrupted: false,
        stop_reason: None,
        hard: None,
        deadline: None,
    };
    // When the drain must be over, once a stop was asked for.
    let mut drain_until: Option<Instant> = None;
    while !handle.is_finished() {
        let mut stop = None;
        match signals.recv_timeout(POLL) {
            Ok((name, arrived)) => {
                ending.interrupted = true;
                // The exit deadline the signal thread armed (`crate::signals`).
                let deadline = match drain_until {
                    Some(_) => {
                        ending.hard = Some(HardStop::SecondSignal(name));
                        arrived + EXIT_WITHIN
                    }
                    None => {
                        stop = Some((name.to_string(), arrived));
                        arrived + drain_timeout + EXIT_WITHIN
                    }
                };
                if ending.deadline.is_none_or(|d| deadline < d) {
                    ending.deadline = Some(deadline);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(POLL),
        }
        if drain_until.is_none() && deadline.is_some_and(|d| Instant::now() >= d) {
            stop = Some((
                format!(
                    "--duration {}",
                    format_duration(duration.unwrap_or_default())
                ),
                Instant::now(),
            ));
        }
        // The drain is timed from the stop's cause (a signal that came while the job was
        // still being built waited in the channel).
        if let Some((reason, asked)) = stop {
            if keep_state {
                handle.stop_handle().suspend();
            } else {
                handle.stop();
            }
            health.set_phase(
                Phase::Stopping,
                &format!("{reason}: the sources stopped, records in flight drain"),
            );
            ending.stop_reason = Some(reason);
            drain_until = Some(asked + drain_timeout);
        }
        if ending.hard.is_none() && drain_until.is_some_and(|d| Instant::now() >= d) {
            let msg = format!(
                "tidemark: the job did not drain within --drain-timeout {}: stopping hard",
                format_duration(drain_timeout)
            );
            match progress.as_ref() {
                Some(p) => p.println(&msg),
                None => eprintln!("{msg}"),
            }
            ending.hard = Some(HardStop::DrainTimeout);
        }
        if ending.hard.is_some() {
            handle.abort();
            break;
        }
        if let Some(p) = progress.as_mut() {
            p.tick();
        }
    }
    if let Some(p) = progress {
        p.finish();
    }
    ending
}

/// The restores of keyed state from Kafka state topics so far, for the report and the live
/// view; `None` when there were none.
#[cfg(feature = "kafka")]
fn state_restores(
    metrics: &tidemark_kafka::KafkaMetrics,
) -> Option<crate::report::StateRestoresReport> {
    let restores = metrics.state_restores();
    if restores.last_seconds.is_empty() {
        return None;
    }
    Some(crate::report::StateRestoresReport {
        partitions: restores
            .last_seconds
            .into_iter()
            .map(
                |(operator_id, partition, seconds)| crate::report::PartitionRestore {
                    operator_id,
                    partition,
                    seconds,
                },
            )
            .collect(),
        records: restores.records,
    })
}
