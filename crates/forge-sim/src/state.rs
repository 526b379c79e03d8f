//! The simulator's shared state: sim clock, request log, users/tokens, and each forge's state.
//!
//! One `Arc<SimState>` is shared by every handler and background task. Each part has its own
//! `std::sync::Mutex`; a lock is never held across an `.await`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;
use time::OffsetDateTime;
use tokio::sync::watch;

use crate::faults::Faults;
use crate::webhooks::WebhookDispatcher;

/// The state every handler sees.
pub type Shared = Arc<SimState>;

/// Locks a mutex, ignoring poisoning (a panicked handler must not wedge the simulator).
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// All simulator state.
pub struct SimState {
    pub clock: SimClock,
    pub log: RequestLog,
    pub faults: Faults,
    pub rate_limits: crate::ratelimit::RateLimits,
    pub webhooks: WebhookDispatcher,
    pub users: Mutex<Users>,
    pub gitlab: Mutex<crate::gitlab::GitlabState>,
    pub github: Mutex<crate::github::GithubState>,
    /// `http://127.0.0.1:PORT` once bound (used for `web_url` fields).
    base_url: Mutex<String>,
    /// Counts changes, see [`SimState::changed`].
    changes: watch::Sender<u64>,
}

impl SimState {
    /// Fresh state with one known user per configured token.
    pub fn new(tokens: &[(String, String)]) -> SimState {
        let mut users = Users::default();
        for (username, token) in tokens {
            users.add(username, token);
        }
        SimState {
            clock: SimClock::new(),
            log: RequestLog::default(),
            faults: Faults::default(),
            rate_limits: crate::ratelimit::RateLimits::default(),
            webhooks: WebhookDispatcher::new(),
            users: Mutex::new(users),
            gitlab: Mutex::new(crate::gitlab::GitlabState::default()),
            github: Mutex::new(crate::github::GithubState::default()),
            base_url: Mutex::new("http://127.0.0.1".to_string()),
            changes: watch::Sender::new(0),
        }
    }

    /// The server's base URL, e.g. `http://127.0.0.1:41234` (no trailing slash).
    pub fn base_url(&self) -> String {
        lock(&self.base_url).clone()
    }

    pub fn set_base_url(&self, url: &str) {
        *lock(&self.base_url) = url.trim_end_matches('/').to_string();
    }

    /// The user owning a token, if any.
    pub fn user_for_token(&self, token: &str) -> Option<User> {
        lock(&self.users).by_token(token).cloned()
    }

    /// Progresses every forge's asynchronous work (pipelines, trains, queues, checks).
    pub fn tick(&self) {
        let gitlab_moved = crate::gitlab::tick(self);
        let github_moved = crate::github::tick(self);
        if gitlab_moved || github_moved {
            self.changed();
        }
    }

    /// Records that the state may have changed: a tick moved something, or a request that can
    /// change state (any method but GET and HEAD) was handled. Whoever waits for a state to
    /// appear looks again exactly then, instead of polling on a timer.
    pub fn changed(&self) {
        self.changes.send_modify(|count| *count += 1);
    }

    /// A receiver of [`SimState::changed`]: `changed().await` returns after the next change.
    pub fn subscribe_changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

/// Sim time: real time plus an offset that [`SimClock::advance`] increases.
pub struct SimClock {
    started_real: Instant,
    started_wall: OffsetDateTime,
    offset: Mutex<Duration>,
}

impl Default for SimClock {
    fn default() -> Self {
        SimClock::new()
    }
}

impl SimClock {
    pub fn new() -> SimClock {
        SimClock {
            started_real: Instant::now(),
            started_wall: OffsetDateTime::now_utc(),
            offset: Mutex::new(Duration::ZERO),
        }
    }

    /// The current sim time (UTC).
    pub fn now(&self) -> OffsetDateTime {
        let offset = *lock(&self.offset);
        self.started_wall + self.started_real.elapsed() + offset
    }

    /// Moves sim time forward.
    pub fn advance(&self, by: Duration) {
        *lock(&self.offset) += by;
    }

    /// How far sim time is ahead of real time.
    pub fn offset(&self) -> Duration {
        *lock(&self.offset)
    }
}

/// A user known to both forges.
#[derive(Debug, Clone, Serialize)]
pub struct User {
    pub id: u64,
    pub username: String,
    pub name: String,
    pub email: String,
}

/// Users and their API tokens (one token per user here; several tokens may share a user).
#[derive(Debug, Default)]
pub struct Users {
    next_id: u64,
    users: BTreeMap<u64, User>,
    tokens: BTreeMap<String, u64>,
}

impl Users {
    /// Adds (or finds) a user by username and registers a token for it.
    pub fn add(&mut self, username: &str, token: &str) -> User {
        let id = match self.users.values().find(|u| u.username == username) {
            Some(user) => user.id,
            None => {
                self.next_id += 1;
                let id = self.next_id;
                self.users.insert(
                    id,
                    User {
                        id,
                        username: username.to_string(),
                        name: username.to_string(),
                        email: format!("{username}@example.com"),
                    },
                );
                id
            }
        };
        self.tokens.insert(token.to_string(), id);
        self.users[&id].clone()
    }

    pub fn by_token(&self, token: &str) -> Option<&User> {
        self.tokens.get(token).and_then(|id| self.users.get(id))
    }

    pub fn by_username(&self, username: &str) -> Option<&User> {
        self.users.values().find(|u| u.username == username)
    }

    pub fn by_id(&self, id: u64) -> Option<&User> {
        self.users.get(&id)
    }

    /// Every user, by id.
    pub fn all(&self) -> impl Iterator<Item = &User> {
        self.users.values()
    }

    /// Finds or creates a user without a token (e.g. a human pushing commits or approving).
    pub fn ensure(&mut self, username: &str) -> User {
        if let Some(user) = self.by_username(username) {
            return user.clone();
        }
        self.next_id += 1;
        let id = self.next_id;
        let user = User {
            id,
            username: username.to_string(),
            name: username.to_string(),
            email: format!("{username}@example.com"),
        };
        self.users.insert(id, user.clone());
        user
    }
}

/// One handled HTTP request.
#[derive(Debug, Clone, Serialize)]
pub struct RequestLogEntry {
    pub seq: u64,
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub status: u16,
    /// Sim time when the request arrived (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    pub time: OffsetDateTime,
    /// The injected fault, if one was applied.
    pub fault: Option<String>,
    pub duration_ms: u64,
}

/// The most recent requests (bounded).
pub struct RequestLog {
    next_seq: AtomicU64,
    entries: Mutex<VecDeque<RequestLogEntry>>,
}

/// How many request log entries are kept.
pub const REQUEST_LOG_CAPACITY: usize = 100_000;

impl Default for RequestLog {
    fn default() -> Self {
        RequestLog {
            next_seq: AtomicU64::new(1),
            entries: Mutex::new(VecDeque::new()),
        }
    }
}

impl RequestLog {
    pub fn record(&self, mut entry: RequestLogEntry) {
        entry.seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let mut entries = lock(&self.entries);
        if entries.len() >= REQUEST_LOG_CAPACITY {
            entries.pop_front();
        }
        entries.push_back(entry);
    }

    /// All kept entries, oldest first.
    pub fn entries(&self) -> Vec<RequestLogEntry> {
        lock(&self.entries).iter().cloned().collect()
    }

    pub fn clear(&self) {
        lock(&self.entries).clear();
    }
}
