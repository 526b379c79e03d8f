//! Coalescing of concurrent calls into batches: how the PostgreSQL store
//! claims and parks many items in one statement (one round trip, one commit)
//! while every caller still asks for one item.
//!
//! A [`Coalescer`] owns a task. A caller hands it a request and waits for
//! its answer. The task takes the first queued request, waits for a free
//! batch slot (at most `in_flight` batches run at once), drains whatever
//! else is queued by then (up to `max_batch`) and runs the batch on its own
//! task. Alone, a request runs at once, as a batch of one: no timer, no added
//! latency. Under load, requests queue while the slots are busy and the next
//! batch takes them all, so batches grow with the load.
//!
//! The batch function answers each request in order. It decides what a
//! failure of the whole batch means (the PostgreSQL store runs the requests
//! again one by one, since the batch's transaction rolled back).
//!
//! The task starts on the first call, on the caller's runtime, and ends when
//! the last clone of its store is dropped. A call that finds the task gone
//! (its runtime shut down) runs its request alone.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::common::BoxFuture;
use crate::{StoreError, StoreResult};

/// Runs a batch of requests, answering each in order.
pub(crate) type RunBatch<Req, Resp> =
    Arc<dyn Fn(Vec<Req>) -> BoxFuture<'static, Vec<StoreResult<Resp>>> + Send + Sync>;

type Queued<Req, Resp> = (Req, oneshot::Sender<StoreResult<Resp>>);

/// See the module docs.
pub(crate) struct Coalescer<Req, Resp> {
    max_batch: usize,
    in_flight: usize,
    run: RunBatch<Req, Resp>,
    queue: OnceLock<mpsc::UnboundedSender<Queued<Req, Resp>>>,
    largest: Arc<AtomicUsize>,
    /// Requests and batches run so far: (requests, batches).
    counts: Arc<(AtomicUsize, AtomicUsize)>,
}

impl<Req, Resp> std::fmt::Debug for Coalescer<Req, Resp> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalescer")
            .field("max_batch", &self.max_batch)
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

impl<Req: Send + 'static, Resp: Send + 'static> Coalescer<Req, Resp> {
    pub(crate) fn new(max_batch: usize, in_flight: usize, run: RunBatch<Req, Resp>) -> Self {
        Self {
            max_batch: max_batch.max(1),
            in_flight: in_flight.max(1),
            run,
            queue: OnceLock::new(),
            largest: Arc::new(AtomicUsize::new(0)),
            counts: Arc::default(),
        }
    }

    /// The largest batch run so far.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn largest_batch(&self) -> usize {
        self.largest.load(Ordering::Relaxed)
    }

    /// The requests and the batches run so far.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn counts(&self) -> (usize, usize) {
        (
            self.counts.0.load(Ordering::Relaxed),
            self.counts.1.load(Ordering::Relaxed),
        )
    }

    /// The answer to `request`, run in a batch with whatever else is queued.
    pub(crate) async fn call(&self, request: Req) -> StoreResult<Resp> {
        let (reply, answer) = oneshot::channel();
        let queue = self.queue.get_or_init(|| self.start());
        if let Err(mpsc::error::SendError((request, _))) = queue.send((request, reply)) {
            return self.alone(request).await;
        }
        answer.await.unwrap_or_else(|_| {
            Err(StoreError::Corrupt(
                "the batch task ended before it answered".to_owned(),
            ))
        })
    }

    async fn alone(&self, request: Req) -> StoreResult<Resp> {
        (self.run)(vec![request])
            .await
            .pop()
            .unwrap_or_else(|| Err(StoreError::Corrupt("a batch answered nothing".to_owned())))
    }

    fn start(&self) -> mpsc::UnboundedSender<Queued<Req, Resp>> {
        let (queue, requests) = mpsc::unbounded_channel();
        tokio::spawn(drive(
            requests,
            self.max_batch,
            Arc::new(Semaphore::new(self.in_flight)),
            Arc::clone(&self.run),
            Arc::clone(&self.largest),
            Arc::clone(&self.counts),
        ));
        queue
    }
}

async fn drive<Req: Send + 'static, Resp: Send + 'static>(
    mut requests: mpsc::UnboundedReceiver<Queued<Req, Resp>>,
    max_batch: usize,
    slots: Arc<Semaphore>,
    run: RunBatch<Req, Resp>,
    largest: Arc<AtomicUsize>,
    counts: Arc<(AtomicUsize, AtomicUsize)>,
) {
    while let Some(first) = requests.recv().await {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let mut batch = vec![first];
        // Benchmarks measure what batching gains by turning it off.
        #[cfg(feature = "testing")]
        let max_batch = if crate::testing::batching_enabled() {
            max_batch
        } else {
            1
        };
        while batch.len() < max_batch {
            match requests.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        largest.fetch_max(batch.len(), Ordering::Relaxed);
        counts.0.fetch_add(batch.len(), Ordering::Relaxed);
        counts.1.fetch_add(1, Ordering::Relaxed);
        let run = Arc::clone(&run);
        tokio::spawn(answer(batch, run, slot));
    }
}

async fn answer<Req: Send + 'static, Resp: Send + 'static>(
    batch: Vec<Queued<Req, Resp>>,
    run: RunBatch<Req, Resp>,
    slot: tokio::sync::OwnedSemaphorePermit,
) {
    let (requests, replies): (Vec<Req>, Vec<_>) = batch.into_iter().unzip();
    let count = replies.len();
    let mut answers = run(requests).await.into_iter();
    drop(slot);
    for reply in replies {
        let answer = answers.next().unwrap_or_else(|| {
            Err(StoreError::Corrupt(format!(
                "a batch of {count} answered fewer"
            )))
        });
        // The caller may have given up waiting; the write stands.
        let _ = reply.send(answer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn recording(sizes: Arc<Mutex<Vec<usize>>>) -> RunBatch<u32, u32> {
        Arc::new(move |requests: Vec<u32>| {
            let sizes = Arc::clone(&sizes);
            Box::pin(async move {
                sizes.lock().unwrap().push(requests.len());
                tokio::task::yield_now().await;
                requests.into_iter().map(|n| Ok(n * 2)).collect()
            })
        })
    }

    #[tokio::test]
    async fn a_lone_call_runs_as_a_batch_of_one() {
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let coalescer = Coalescer::new(8, 1, recording(Arc::clone(&sizes)));
        assert_eq!(coalescer.call(21).await.unwrap(), 42);
        assert_eq!(coalescer.call(1).await.unwrap(), 2);
        assert_eq!(*sizes.lock().unwrap(), vec![1, 1]);
    }

    #[tokio::test]
    async fn concurrent_calls_share_batches_and_each_gets_its_own_answer() {
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let coalescer = Arc::new(Coalescer::new(8, 1, recording(Arc::clone(&sizes))));
        let calls: Vec<_> = (0..40u32)
            .map(|n| {
                let coalescer = Arc::clone(&coalescer);
                tokio::spawn(async move { (n, coalescer.call(n).await.unwrap()) })
            })
            .collect();
        for call in calls {
            let (n, answer) = call.await.unwrap();
            assert_eq!(answer, n * 2);
        }
        let sizes = sizes.lock().unwrap();
        assert_eq!(sizes.iter().sum::<usize>(), 40);
        assert!(sizes.iter().all(|&size| size <= 8), "{sizes:?}");
        assert!(sizes.len() < 40, "calls were batched: {sizes:?}");
        assert_eq!(coalescer.largest_batch(), *sizes.iter().max().unwrap());
    }

    #[test]
    fn a_call_on_a_runtime_that_is_gone_runs_alone() {
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let coalescer = Coalescer::new(8, 1, recording(Arc::clone(&sizes)));
        let first = tokio::runtime::Runtime::new().unwrap();
        assert_eq!(first.block_on(coalescer.call(1)).unwrap(), 2);
        drop(first);
        let second = tokio::runtime::Runtime::new().unwrap();
        assert_eq!(second.block_on(coalescer.call(2)).unwrap(), 4);
        assert_eq!(*sizes.lock().unwrap(), vec![1, 1]);
    }
}
