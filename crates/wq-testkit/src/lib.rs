//! The one test-support layer of workqueue: the backend matrix
//! ([`Backend`], [`backend_tests!`]) with a fresh database per test, the
//! test item types ([`types`], and [`ping`], which has its own table,
//! webhook and periodic task), static tokens of several standings
//! ([`Tokens`]), database faults ([`FaultyStore`]) and [`TestApp`], the
//! real engine and API on port 0 that proves quiescence before it goes.

pub mod app;
pub mod cpu;
pub mod faults;
pub mod http;
pub mod moto;
pub mod oidc;
pub mod ping;
pub mod python;
pub mod schemathesis;
pub mod tokens;
pub mod types;

pub use app::{Assembled, Assembling, Assembly, Halted, TestApp, TestAppBuilder};
pub use faults::{Faults, FaultyStore};
pub use tokens::{Tokens, bearer, bearer_client};

use std::sync::Arc;

use wq_store::{BackendKind, Store};

/// Which backend a test runs on: the one backend matrix of the tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn kind(self) -> BackendKind {
        match self {
            Backend::Sqlite => BackendKind::Sqlite,
            Backend::Postgres => BackendKind::Postgres,
        }
    }

    /// A URL of a fresh, empty database of this backend.
    pub async fn fresh_url(self) -> String {
        match self {
            Backend::Sqlite => wq_store::testing::fresh_sqlite_url(),
            Backend::Postgres => wq_store::testing::fresh_postgres_url().await,
        }
    }

    /// A migrated store on a fresh database.
    pub async fn fresh_store(self) -> Arc<dyn Store> {
        let url = self.fresh_url().await;
        open_store(&url).await
    }
}

/// Opens and migrates the store at `url`.
pub async fn open_store(url: &str) -> Arc<dyn Store> {
    let store = wq_store::connect(url, 10)
        .await
        .unwrap_or_else(|error| panic!("cannot open test database {url}: {error}"));
    store
        .migrate()
        .await
        .unwrap_or_else(|error| panic!("cannot migrate test database {url}: {error}"));
    store
}

/// Defines `NAME_sqlite` and `NAME_postgres` tests that call
/// `NAME(Backend)`.
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$name($crate::Backend::Sqlite).await;
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$name($crate::Backend::Postgres).await;
                }
            }
        )*
    };
}
