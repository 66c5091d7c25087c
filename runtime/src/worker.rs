//! Threads: what each of a job's threads runs — one task subtask, or a source task subtask
//! together with the channel task subtask it feeds.
//!
//! One thread per task is simple, but when a source task feeds a channel task of the same
//! parallelism over a hash edge (say `gen+map` ×P → hash → `sum+out` ×P) it runs twice as many
//! threads as there are subtasks to keep busy, and the cores take turns between them: every
//! batch costs context switches, and the records each consumer reads were written on another
//! core. As timely's workers do, such a pair shares one thread (a [`Worker::Pair`]): the thread
//! runs the source's loop, and after each batch, and whenever the source would wait (for its
//! next record, for room in a full queue, for its last checkpoint), the channel task takes
//! what its queue holds. The channels, their order and what travels on them do not change, so
//! markers and barriers queue behind records as before.
//!
//! **The rule** ([`crate::plan::ExecutionPlan::thread_pairs`]): an exchange edge over hash
//! partitioning from a task whose head is a source to a task of the same parallelism (at least
//! 2), the source task's only output and the channel task's only input, and a source that
//! never waits inside its poll ([`crate::component::Source::polls_without_waiting`]). Every
//! other task runs alone in its thread.
//!
//! Why the rule keeps the job free of deadlocks: a sender whose queue is full runs the channel
//! task sharing its thread, so of two such threads each sending to the other's queue, each
//! drains its own. The channel task may itself wait for room in a queue further down (say a
//! window's results to a sink of parallelism 1, behind a rebalance edge). Every task down
//! there runs alone (it has an input from a task not headed by a source, so it is in no
//! pair), and it takes from its queue whenever it does not wait for room itself, barrier
//! alignment included (held messages are kept, not left in the queue): those threads get on
//! without the pair's, so the wait ends.

use crate::chain::ChainError;
use crate::channel::{Aborted, Assist, Message, Served};
use crate::task::{ChannelLoop, Holding, Task, TaskEnd};
use crossbeam_channel::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What one thread of a job runs.
pub(crate) enum Worker {
    /// A task subtask alone in its thread. (Held by value, as before threads could be
    /// shared: the task then lives in its thread's closure, and a generator → map → reduce job
    /// at parallelism 1 ran 15% slower with the same instructions when it was boxed.)
    Alone(Task),
    /// A source task subtask and the channel task subtask it feeds.
    Pair {
        producer: Task,
        consumer: Box<Consumer>,
    },
}

/// The channel task of a [`Worker::Pair`], run by its producer.
pub(crate) struct Consumer {
    task: Task,
    state: ChannelLoop,
    /// When the thread last left this task: the time since is its idle time.
    left: Instant,
    /// This task's code runs now: a panic is its own.
    running: bool,
    /// How this task ended inside one of its producer's calls (its own error, or an abort),
    /// reported once the producer returns.
    failed: Option<ChainError>,
    /// Most messages one call takes, so that the producer gets its turn again.
    most: usize,
    /// Calls of [`Assist::serve`] that found the queue empty since the last full turn.
    empty_serves: u32,
}

/// Every how many calls that find its queue empty a consumer still takes a full turn (its
/// operators' timers, its metrics). A busy producer calls once per batch, a few microseconds
/// apart; the rest return without reading the clock.
const LOOK_EVERY: u32 = 64;

/// A failure to report: the vertex and what went wrong.
pub(crate) type Failure = (usize, String);

impl Worker {
    /// A source task and the channel task it feeds, in one thread.
    pub(crate) fn pair(producer: Task, mut consumer: Task) -> Worker {
        let state = consumer.channel_loop();
        let most = consumer.input_queue().capacity().unwrap_or(1).max(1);
        Worker::Pair {
            producer,
            consumer: Box::new(Consumer {
                task: consumer,
                state,
                left: Instant::now(),
                running: false,
                failed: None,
                most,
                empty_serves: 0,
            }),
        }
    }

    /// Each task's share of what the thread holds, for a hard stop, in the order they run.
    pub(crate) fn holdings(&self) -> Vec<Arc<Holding>> {
        match self {
            Worker::Alone(task) => vec![task.holding.clone()],
            Worker::Pair { producer, consumer } => {
                vec![producer.holding.clone(), consumer.task.holding.clone()]
            }
        }
    }

    /// Runs the thread's tasks to their end; returns the first failure.
    pub(crate) fn run(&mut self) -> Option<Failure> {
        match self {
            Worker::Alone(task) => {
                let end = task.run();
                failure(end)
            }
            Worker::Pair { producer, consumer } => {
                let started = Instant::now();
                consumer.task.start_clock(started);
                consumer.left = started;
                let end = producer.run_assisted(&mut **consumer);
                let first = failure(end);
                if first.is_some() {
                    // The consumer waits for this producer's end of input, which never comes.
                    producer.flags.request_abort();
                }
                consumer.task.add_idle(consumer.left.elapsed());
                consumer.running = true;
                let result = match consumer.failed.take() {
                    Some(e) => Err(e),
                    None => consumer.task.run_channel_from(&mut consumer.state),
                };
                let end = consumer.task.conclude(result);
                consumer.running = false;
                first.or_else(|| failure(end))
            }
        }
    }

    /// The vertex whose code ran when the thread panicked.
    pub(crate) fn running_vertex(&self) -> usize {
        let task = match self {
            Worker::Alone(task) => task,
            Worker::Pair { consumer, .. } if consumer.running => &consumer.task,
            Worker::Pair { producer, .. } => producer,
        };
        match task.chain.current_vertex {
            usize::MAX => task.head_vertex,
            v => v,
        }
    }
}

fn failure(end: TaskEnd) -> Option<Failure> {
    match end {
        TaskEnd::Done | TaskEnd::Aborted => None,
        TaskEnd::Failed { vertex, message } => Some((vertex, message)),
    }
}

impl Consumer {
    /// Takes `first`, if given, then what the queue holds, up to [`Consumer::most`] messages;
    /// with `look`, takes a turn even if there is nothing (for the operators' timers).
    fn turns(&mut self, mut first: Option<Message>, mut look: bool) -> Result<Served, Aborted> {
        if self.failed.is_some() {
            return Err(Aborted);
        }
        let entered = Instant::now();
        self.task
            .add_idle(entered.saturating_duration_since(self.left));
        self.running = true;
        let mut took = false;
        let mut result = Ok(());
        for _ in 0..self.most {
            let nothing = !look && self.task.input_queue().is_empty();
            if first.is_none() && (nothing || !self.task.inputs_open()) {
                break;
            }
            look = false;
            match self.task.channel_turn(&mut self.state, first.take(), false) {
                Ok(true) => took = true,
                Ok(false) => break,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.running = false;
        self.left = Instant::now();
        match result {
            Ok(()) => Ok(Served {
                took,
                spent: self.left.saturating_duration_since(entered),
            }),
            Err(e) => {
                if matches!(e, ChainError::User { .. }) {
                    // Failed: every task ends, as when a thread of its own fails.
                    self.task.flags.request_abort();
                }
                self.failed = Some(e);
                Err(Aborted)
            }
        }
    }
}

impl Assist for Consumer {
    fn serve(&mut self) -> Result<Served, Aborted> {
        if !self.task.input_queue().is_empty() {
            return self.turns(None, false);
        }
        self.empty_serves += 1;
        if self.empty_serves < LOOK_EVERY {
            return Ok(Served::default());
        }
        self.empty_serves = 0;
        self.turns(None, true)
    }

    fn wait(&mut self, wait: Duration, wake: Option<&Receiver<()>>) -> Result<Served, Aborted> {
        let deadline = Instant::now() + wait;
        let never = crossbeam_channel::never();
        let wake = wake.unwrap_or(&never);
        let mut all = self.turns(None, true)?;
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Ok(all);
            }
            let got = crossbeam_channel::select! {
                recv(self.task.input_queue()) -> m => Some(m),
                recv(wake) -> _ => None,
                default(deadline - now) => None,
            };
            let Some(got) = got else {
                return Ok(all);
            };
            // Disconnected: every writer is gone, which only a hard stop does before the end.
            let served = self.take(got.map_err(|_| Aborted)?)?;
            all.took = true;
            all.spent += served.spent;
        }
    }

    fn input(&self) -> &Receiver<Message> {
        self.task.input_queue()
    }

    fn take(&mut self, message: Message) -> Result<Served, Aborted> {
        self.turns(Some(message), false)
    }
}
