//! Group commit for the SQLite store's writes: one task owns the write path
//! and commits many callers' writes with one `COMMIT` (one fsync).
//!
//! Callers hand a write job to [`Batcher::write`]. The task takes the first
//! queued job, drains whatever else is queued (up to [`MAX_BATCH`]), takes the
//! writer connection, runs `BEGIN IMMEDIATE`, runs each job inside its own
//! `SAVEPOINT` (a failing job is rolled back to it and the others go on), and
//! commits once.
//!
//! **Invariant: a caller gets its result only after the batch's `COMMIT`
//! succeeded.** A job's result is held back until then; if anything fails at
//! the batch level (`BEGIN`, a savepoint statement, `COMMIT`), every job of
//! the batch gets an error, including those whose statements succeeded, since
//! none of it is durable. A caller therefore never sees a result that is not
//! on disk (under `synchronous = FULL`).
//!
//! The task holds the writer connection only while it runs a batch, never
//! while idle, so other users of the writer pool (an item type's
//! [`super::SqliteStore::begin_write`], migrations, and for `sqlite::memory:`
//! every read) wait at most one batch. It ends when the last
//! [`Batcher`] (i.e. the last clone of the store) is dropped.
//!
//! With the `testing` feature the task keeps a [`WriteLog`]: writes handed
//! over, batches taken and batches committed, which tests wait on to know
//! that writes are queued together instead of sleeping.

use std::fmt;

use sqlx::{SqliteConnection, SqlitePool};
use tokio::sync::{mpsc, oneshot};

use crate::common::BoxFuture;
use crate::{StoreError, StoreResult};

/// At most this many jobs share one transaction.
pub(crate) const MAX_BATCH: usize = 128;

/// Jobs waiting for the task; senders wait beyond this (backpressure).
const QUEUE_CAPACITY: usize = 1024;

/// Hands a job's held-back result to its caller, given how the batch ended.
type Deliver = Box<dyn FnOnce(Result<(), &sqlx::Error>) + Send>;

/// A job after its statements ran: whether they succeeded (keep its
/// savepoint) and how to deliver its result once the batch ends.
struct Ran {
    ok: bool,
    deliver: Deliver,
}

/// One caller's write, type-erased for the queue.
trait WriteJob: Send {
    /// Runs the job's statements on the batch's connection.
    fn run<'c>(self: Box<Self>, conn: &'c mut SqliteConnection) -> BoxFuture<'c, Ran>;
    /// The batch failed before the job ran.
    fn abort(self: Box<Self>, error: &sqlx::Error);
}

struct Job<T, F> {
    statements: F,
    reply: oneshot::Sender<StoreResult<T>>,
}

impl<T, F> WriteJob for Job<T, F>
where
    T: Send + 'static,
    F: for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, StoreResult<T>> + Send + 'static,
{
    fn run<'c>(self: Box<Self>, conn: &'c mut SqliteConnection) -> BoxFuture<'c, Ran> {
        let Job { statements, reply } = *self;
        Box::pin(async move {
            let result = statements(conn).await;
            let ok = result.is_ok();
            let deliver: Deliver = Box::new(move |batch| {
                let result = match batch {
                    Ok(()) => result,
                    Err(error) => Err(batch_failed(error)),
                };
                // The caller may have given up waiting; the write stands.
                let _ = reply.send(result);
            });
            Ran { ok, deliver }
        })
    }

    fn abort(self: Box<Self>, error: &sqlx::Error) {
        let _ = self.reply.send(Err(batch_failed(error)));
    }
}

/// The error every job of a failed batch gets (`sqlx::Error` is not `Clone`).
fn batch_failed(error: &sqlx::Error) -> StoreError {
    StoreError::Database(sqlx::Error::Io(std::io::Error::other(format!(
        "write transaction failed, nothing of it was committed: {error}"
    ))))
}

/// What the writer task has done so far, for tests that need several writes
/// in one batch (`testing` feature): they wait until the writes are queued
/// while the task is busy, then read which batches committed.
#[cfg(feature = "testing")]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteLog {
    /// Writes whose job is in the task's queue or was taken from it.
    pub handed_over: usize,
    /// The size of each batch the task took from its queue, in order.
    pub taken: Vec<usize>,
    /// The size of each batch that committed, in order.
    pub committed: Vec<usize>,
}

#[cfg(feature = "testing")]
impl WriteLog {
    /// Writes in the queue, not yet taken into a batch. Exact while the task
    /// is busy with a batch (it takes the next one only after that one
    /// ended); a write the task takes at once may be missing from it for a
    /// moment, never counted twice.
    pub fn waiting(&self) -> usize {
        self.handed_over
            .saturating_sub(self.taken.iter().sum::<usize>())
    }
}

/// The writer task's [`WriteLog`], shared by the handles and the task.
#[cfg(feature = "testing")]
type Log = std::sync::Arc<tokio::sync::watch::Sender<WriteLog>>;

/// The handle to the writer task. Cloning shares the task.
#[derive(Clone)]
pub(crate) struct Batcher {
    jobs: mpsc::Sender<Box<dyn WriteJob>>,
    #[cfg(feature = "testing")]
    log: Log,
}

impl fmt::Debug for Batcher {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Batcher")
            .field("queued", &(QUEUE_CAPACITY - self.jobs.capacity()))
            .finish()
    }
}

impl Batcher {
    /// Spawns the writer task on the current Tokio runtime.
    pub(crate) fn spawn(writer: SqlitePool) -> Self {
        let (jobs, queue) = mpsc::channel(QUEUE_CAPACITY);
        #[cfg(feature = "testing")]
        let log = Log::new(tokio::sync::watch::Sender::new(WriteLog::default()));
        tokio::spawn(run_writer(
            writer,
            queue,
            #[cfg(feature = "testing")]
            log.clone(),
        ));
        Self {
            jobs,
            #[cfg(feature = "testing")]
            log,
        }
    }

    /// Follows the task's [`WriteLog`].
    #[cfg(feature = "testing")]
    pub(crate) fn log(&self) -> tokio::sync::watch::Receiver<WriteLog> {
        self.log.subscribe()
    }

    /// Runs `statements` in the next batch's transaction and returns their
    /// result once that transaction has committed. `statements` must not
    /// touch the store's writer pool (it already runs on its connection).
    pub(crate) async fn write<T, F>(&self, statements: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, StoreResult<T>>
            + Send
            + 'static,
    {
        let (reply, result) = oneshot::channel();
        self.jobs
            .send(Box::new(Job { statements, reply }))
            .await
            .map_err(|_| StoreError::Database(sqlx::Error::WorkerCrashed))?;
        // Counted once the job is in the queue, so a test that saw it
        // counted knows the next batch the task takes can include it.
        #[cfg(feature = "testing")]
        self.log.send_modify(|log| log.handed_over += 1);
        // A dropped reply: the batch's task panicked; nothing was committed
        // that the caller was told about.
        result
            .await
            .map_err(|_| StoreError::Database(sqlx::Error::WorkerCrashed))?
    }
}

async fn run_writer(
    writer: SqlitePool,
    mut queue: mpsc::Receiver<Box<dyn WriteJob>>,
    #[cfg(feature = "testing")] log: Log,
) {
    // Ends when every sender (every clone of the store) is gone.
    while let Some(first) = queue.recv().await {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        #[cfg(feature = "testing")]
        log.send_modify(|log| log.taken.push(batch.len()));
        // Its own task, so a panicking job fails its batch, not the writer.
        let running = run_batch(
            writer.clone(),
            batch,
            #[cfg(feature = "testing")]
            log.clone(),
        );
        if let Err(error) = tokio::spawn(running).await {
            tracing::error!(%error, "an SQLite write batch panicked; its writes were rolled back");
        }
    }
}

/// One transaction for the whole batch. Results are delivered only after
/// `COMMIT` succeeded (see the module docs).
async fn run_batch(
    writer: SqlitePool,
    batch: Vec<Box<dyn WriteJob>>,
    #[cfg(feature = "testing")] log: Log,
) {
    #[cfg(feature = "testing")]
    let size = batch.len();
    let mut ran: Vec<Deliver> = Vec::with_capacity(batch.len());
    let mut waiting = batch.into_iter();
    let outcome: Result<(), sqlx::Error> = async {
        // The connection is taken here and returned when `tx` ends.
        let mut tx = writer.begin_with("BEGIN IMMEDIATE").await?;
        for job in waiting.by_ref() {
            sqlx::query("SAVEPOINT wq_job").execute(&mut *tx).await?;
            let done = job.run(&mut tx).await;
            if !done.ok {
                sqlx::query("ROLLBACK TO wq_job").execute(&mut *tx).await?;
            }
            sqlx::query("RELEASE wq_job").execute(&mut *tx).await?;
            ran.push(done.deliver);
        }
        tx.commit().await
    }
    .await;
    match outcome {
        Ok(()) => {
            // Logged before any caller hears of it.
            #[cfg(feature = "testing")]
            log.send_modify(|log| log.committed.push(size));
            for deliver in ran {
                deliver(Ok(()));
            }
        }
        Err(error) => {
            tracing::warn!(%error, jobs = ran.len() + waiting.len(), "an SQLite write batch failed");
            for deliver in ran {
                deliver(Err(&error));
            }
            for job in waiting {
                job.abort(&error);
            }
        }
    }
}
