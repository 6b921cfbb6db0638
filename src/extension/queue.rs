//! A work queue with the semantics controllers rely on (like client-go's workqueue):
//!
//! - a key is queued at most once, however often it is added;
//! - a key is never processed by two workers at once: adding a key that is being processed
//!   marks it dirty, and [`WorkQueue::done`] queues it again;
//! - [`WorkQueue::add_after`] schedules a key; a later immediate add or reschedule supersedes
//!   the pending timer, so a stale retry never fires after the key was handled.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

#[derive(Debug)]
struct State<K> {
    queue: VecDeque<K>,
    queued: HashSet<K>,
    processing: HashSet<K>,
    dirty: HashSet<K>,
    scheduled: HashMap<K, Instant>,
    shut_down: bool,
}

/// The queue; share it as `Arc<WorkQueue<K>>`.
#[derive(Debug)]
pub struct WorkQueue<K> {
    state: Mutex<State<K>>,
    notify: Notify,
}

/// Queue slots kept when the queue runs empty.
const SPARE_ROOM: usize = 64;

impl<K: Clone + Eq + Hash + Send + 'static> Default for WorkQueue<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> WorkQueue<K> {
    /// An empty queue.
    pub fn new() -> Self {
        WorkQueue {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                queued: HashSet::new(),
                processing: HashSet::new(),
                dirty: HashSet::new(),
                scheduled: HashMap::new(),
                shut_down: false,
            }),
            notify: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        // A poisoned lock only means another worker panicked while holding it; the state is
        // a set of keys and stays consistent, so keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `key` now (no-op if already queued; marks it dirty if being processed).
    pub fn add(&self, key: K) {
        let mut state = self.lock();
        state.scheduled.remove(&key);
        Self::enqueue(&mut state, key);
        drop(state);
        self.notify.notify_one();
    }

    fn enqueue(state: &mut State<K>, key: K) {
        if state.shut_down {
            return;
        }
        if state.processing.contains(&key) {
            state.dirty.insert(key);
        } else if state.queued.insert(key.clone()) {
            state.queue.push_back(key);
        }
    }

    /// Queues `key` after `delay`, replacing any earlier schedule for it.
    pub fn add_after(self: &Arc<Self>, key: K, delay: Duration) {
        let at = Instant::now() + delay;
        self.lock().scheduled.insert(key.clone(), at);
        let queue = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let mut state = queue.lock();
            if state.scheduled.get(&key) == Some(&at) {
                state.scheduled.remove(&key);
                Self::enqueue(&mut state, key);
                drop(state);
                queue.notify.notify_one();
            }
        });
    }

    /// Waits for the next key and marks it as being processed; `None` once shut down.
    pub async fn next(&self) -> Option<K> {
        loop {
            let notified = self.notify.notified();
            {
                let mut state = self.lock();
                if state.shut_down {
                    return None;
                }
                if let Some(key) = state.queue.pop_front() {
                    state.queued.remove(&key);
                    state.processing.insert(key.clone());
                    // Wake another worker if more work is waiting.
                    if !state.queue.is_empty() {
                        self.notify.notify_one();
                    } else if state.queue.capacity() > SPARE_ROOM {
                        // A burst (a seed's first list, thousands of deletions) is through:
                        // give its room back.
                        state.queue.shrink_to_fit();
                        state.queued.shrink_to_fit();
                    }
                    return Some(key);
                }
            }
            notified.await;
        }
    }

    /// Marks `key` as processed; queues it again if it was added meanwhile.
    pub fn done(&self, key: &K) {
        let mut state = self.lock();
        state.processing.remove(key);
        if state.dirty.remove(key) {
            Self::enqueue(&mut state, key.clone());
            drop(state);
            self.notify.notify_one();
        }
    }

    /// Stops handing out keys; waiting workers get `None`.
    pub fn shut_down(&self) {
        self.lock().shut_down = true;
        self.notify.notify_waiters();
    }

    /// Number of keys waiting (not counting those being processed or scheduled).
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// Whether no key is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn deduplicates_queued_keys() {
        let q = WorkQueue::new();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.len(), 2);
        assert_eq!(q.next().await, Some("a"));
        assert_eq!(q.next().await, Some("b"));
        assert!(q.is_empty());
    }

    #[tokio::test]
    async fn a_key_added_while_processing_runs_again_after_done() {
        let q = WorkQueue::new();
        q.add("a");
        let key = q.next().await.unwrap();
        q.add("a");
        assert!(q.is_empty(), "not handed out twice at once");
        q.done(&key);
        assert_eq!(q.next().await, Some("a"));
        q.done(&"a");
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_fires_once_and_is_superseded_by_an_immediate_add() {
        let q = Arc::new(WorkQueue::new());
        q.add_after("a", Duration::from_secs(10));
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert_eq!(q.len(), 1);
        let key = q.next().await.unwrap();
        q.done(&key);

        q.add_after("a", Duration::from_secs(10));
        q.add("a");
        assert_eq!(q.next().await, Some("a"));
        q.done(&"a");
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert!(q.is_empty(), "the superseded timer must not fire");
    }

    #[tokio::test]
    async fn shut_down_releases_waiting_workers() {
        let q = Arc::new(WorkQueue::<&str>::new());
        let waiter = {
            let q = Arc::clone(&q);
            tokio::spawn(async move { q.next().await })
        };
        tokio::task::yield_now().await;
        q.shut_down();
        assert_eq!(waiter.await.unwrap(), None);
    }
}
