//! Tests of what only one backend promises, or of how it is built.

use super::*;

/// DDR-34 on PostgreSQL: the loop's exit and an event insert race; after
/// both, an item is never parked (not actionable) while an event is pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_park_never_strands_a_racing_event() {
    let db = TestDb::postgres().await;
    let store = db.store();
    let now = t0();
    let (mut parked_first, mut event_first) = (0, 0);
    for round in 0..200 {
        let id = insert(store.as_ref(), TYPE_A, now).await.id;
        let lease = claim(store.as_ref(), id, now).await;
        let barrier = Arc::new(Barrier::new(2));
        let parker = {
            let store = store.clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                store.item_park(lease, now).await.expect("park")
            })
        };
        let inserter = {
            let store = store.clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                add_event(store.as_ref(), id, "note", now).await
            })
        };
        let park = parker.await.unwrap();
        inserter.await.unwrap();

        let item = get(store.as_ref(), id).await;
        let pending = store.event_next(id).await.unwrap();
        assert!(pending.is_some(), "round {round}: the event is stored");
        assert!(
            item.actionable,
            "round {round}: parked ({park:?}) with an event pending"
        );
        match park {
            Park::Parked => {
                parked_first += 1;
                assert_eq!(item.leased_until, None, "round {round}");
            }
            Park::EventsPending => {
                event_first += 1;
                assert_eq!(item.leased_until, Some(lease.until), "round {round}");
            }
        }
    }
    eprintln!("park-vs-event race: parked first {parked_first}, event first {event_first}");
    db.finish().await;
}

/// The same race on SQLite, where the write lock serialises the two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_park_never_strands_a_racing_event() {
    let db = TestDb::sqlite().await;
    let store = db.store();
    let now = t0();
    for round in 0..50 {
        let id = insert(store.as_ref(), TYPE_A, now).await.id;
        let lease = claim(store.as_ref(), id, now).await;
        let barrier = Arc::new(Barrier::new(2));
        let parker = {
            let store = store.clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                store.item_park(lease, now).await.expect("park")
            })
        };
        let inserter = {
            let store = store.clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                add_event(store.as_ref(), id, "note", now).await
            })
        };
        let park = parker.await.unwrap();
        inserter.await.unwrap();
        let item = get(store.as_ref(), id).await;
        assert!(
            item.actionable,
            "round {round}: parked ({park:?}) with an event pending"
        );
    }
    db.finish().await;
}

/// `sqlite::memory:` is one database shared by every pool connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_memory_database_is_shared_by_the_pool() {
    let store: Arc<dyn Store> = wq_store::connect("sqlite::memory:", 8).await.unwrap();
    store.migrate().await.unwrap();
    let now = t0();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            insert(store.as_ref(), TYPE_A, now).await.id
        }));
    }
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.unwrap());
    }
    for id in &ids {
        get(store.as_ref(), *id).await;
    }
    assert_eq!(
        store.item_count_by_phase().await.unwrap()[0].count,
        8,
        "every connection sees every write"
    );
    // A second in-memory store is a different database.
    let other = wq_store::connect("sqlite::memory:", 2).await.unwrap();
    other.migrate().await.unwrap();
    assert!(other.item_get(ids[0]).await.unwrap().is_none());
}

/// Group commit: many concurrent writers, each claiming and parking its own
/// items (with reads in between), all succeed; on a file database and on
/// `sqlite::memory:`, whose single connection serves reads and the batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_concurrent_writers_share_batches() {
    let file = TestDb::sqlite().await;
    let memory: Arc<dyn Store> = wq_store::connect("sqlite::memory:", 4).await.unwrap();
    memory.migrate().await.unwrap();
    for store in [file.store(), memory] {
        let now = t0();
        let mut tasks = Vec::new();
        for _ in 0..50 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let mut ids = Vec::new();
                for _ in 0..3 {
                    let id = insert(store.as_ref(), TYPE_A, now).await.id;
                    let lease = claim(store.as_ref(), id, now).await;
                    assert!(get(store.as_ref(), id).await.leased_until.is_some());
                    assert_eq!(store.item_park(lease, now).await.unwrap(), Park::Parked);
                    ids.push(id);
                }
                ids
            }));
        }
        let mut ids = Vec::new();
        for task in tasks {
            ids.extend(task.await.unwrap());
        }
        assert_eq!(ids.len(), 150);
        for id in ids {
            let item = get(store.as_ref(), id).await;
            assert!(!item.actionable, "parked");
            assert_eq!(item.leased_until, None);
        }
    }
}

/// Group commit: a write that fails inside a batch (stale lease, missing
/// item, duplicate key) is rolled back alone; the batch's other writes
/// commit, and each caller gets its own result. The writes are shown to
/// have shared one batch by the store's write log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_failing_write_does_not_roll_back_its_batch() {
    let db = TestDb::sqlite().await;
    let Backend::Sqlite(sqlite) = &db.backend else {
        unreachable!()
    };
    let store = db.store();
    let now = t0();
    let later = now + LEASE + Duration::seconds(1);
    let mut leases = Vec::new();
    for _ in 0..10 {
        let id = insert(store.as_ref(), TYPE_A, now).await.id;
        leases.push(claim(store.as_ref(), id, now).await);
    }
    let contested = insert(store.as_ref(), TYPE_A, now).await.id;
    let stale = claim(store.as_ref(), contested, now).await;
    let current = claim(store.as_ref(), contested, later).await;
    store
        .item_insert(new_item(TYPE_A, Some("taken"), now))
        .await
        .unwrap();

    // Hold the writer connection so the writes below queue up and run as one
    // batch once it is released: the blocker is taken alone and waits for
    // the connection, and the task takes nothing else meanwhile.
    let mut log = sqlite.write_log();
    let before = log.borrow_and_update().clone();
    assert_eq!(before.waiting(), 0, "the setup writes are done");
    let held = sqlite.begin_write().await.unwrap();
    let blocker = {
        let store = store.clone();
        tokio::spawn(async move { insert(store.as_ref(), TYPE_B, now).await })
    };
    log.wait_for(|log| log.taken.len() == before.taken.len() + 1)
        .await
        .unwrap();
    let mut good = Vec::new();
    let mut bad = Vec::new();
    for (n, lease) in leases.iter().copied().enumerate() {
        let writer = store.clone();
        good.push(tokio::spawn(async move {
            writer
                .item_apply_outcome(ApplyOutcome {
                    lease,
                    now: later,
                    phase: Some(Phase::Completed),
                    error: None,
                    dimensions: vec![DimensionUpdate::new("needs_mr", false)],
                    action: None,
                    records: Vec::new(),
                })
                .await
        }));
        let store = store.clone();
        bad.push(tokio::spawn(async move {
            let result = match n % 3 {
                0 => store
                    .item_apply_outcome(ApplyOutcome {
                        lease: stale,
                        now: later,
                        phase: Some(Phase::Cancelled),
                        error: Some("stale".into()),
                        dimensions: vec![DimensionUpdate::new("stale", true)],
                        action: None,
                        records: Vec::new(),
                    })
                    .await
                    .map(|_| ()),
                1 => store
                    .event_insert(NewEvent {
                        item_id: ItemId::new_v7(),
                        event_type: "push".into(),
                        body: serde_json::json!({}),
                        now,
                        origin: None,
                    })
                    .await
                    .map(|_| ()),
                _ => store
                    .item_insert(new_item(TYPE_A, Some("taken"), now))
                    .await
                    .map(|_| ()),
            };
            (n, result)
        }));
    }
    let writes = good.len() + bad.len();
    log.wait_for(|log| log.waiting() == writes).await.unwrap();
    held.commit().await.unwrap();
    blocker.await.unwrap();

    for task in good {
        let item = task.await.unwrap().expect("the good writes commit");
        assert_eq!(item.phase, Phase::Completed);
    }
    for task in bad {
        match task.await.unwrap() {
            (n, Err(StoreError::LeaseLost(id))) if n % 3 == 0 => assert_eq!(id, contested),
            (n, Err(StoreError::NotFound(_))) if n % 3 == 1 => {}
            (n, Err(StoreError::Duplicate(_))) if n % 3 == 2 => {}
            other => panic!("unexpected result {other:?}"),
        }
    }
    for lease in &leases {
        assert_eq!(get(store.as_ref(), lease.id).await.phase, Phase::Completed);
        assert_eq!(store.dimension_list(lease.id).await.unwrap().len(), 1);
    }
    let contested_item = get(store.as_ref(), contested).await;
    assert_eq!(
        contested_item.phase,
        Phase::Active,
        "the stale write left nothing"
    );
    assert_eq!(contested_item.error, None);
    assert_eq!(contested_item.leased_until, Some(current.until));
    assert!(store.dimension_list(contested).await.unwrap().is_empty());
    let committed = log.borrow().committed[before.committed.len()..].to_vec();
    assert_eq!(
        committed,
        [1, writes],
        "the blocker alone, then every queued write in one batch"
    );
    db.finish().await;
}

/// A file database survives reopening, and `synchronous=normal` is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_file_database_survives_reopening() {
    let url = fresh_sqlite_url();
    let id = {
        let store = SqliteStore::connect(&url, 2).await.unwrap();
        store.migrate().await.unwrap();
        let id = insert(&store, TYPE_A, t0()).await.id;
        store.pool().close().await;
        id
    };
    let store = SqliteStore::connect(&format!("{url}?synchronous=normal"), 2)
        .await
        .unwrap();
    store.migrate().await.unwrap();
    assert_eq!(get(&store, id).await.phase, Phase::Active);
    let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(synchronous, 1, "NORMAL");
    let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(journal, "wal");
    let default = SqliteStore::connect(&url, 1).await.unwrap();
    let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
        .fetch_one(default.pool())
        .await
        .unwrap();
    assert_eq!(synchronous, 2, "FULL by default");
    assert!(
        SqliteStore::connect(&format!("{url}?synchronous=off"), 1)
            .await
            .is_err()
    );
}

/// An item type adds its own table with its own migrator, then creates its
/// item and detail row in one transaction; a failed detail insert leaves no
/// item behind. Re-running the generic migrator ignores the type's version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_item_type_extends_the_schema_in_one_transaction() {
    use sqlx::SqlSafeStr;
    use sqlx::migrate::{Migration, MigrationType, Migrator};

    let store = SqliteStore::connect(&fresh_sqlite_url(), 2).await.unwrap();
    store.migrate().await.unwrap();
    let mut type_migrator = Migrator::with_migrations(vec![Migration::new(
        1000,
        "demo_details".into(),
        MigrationType::Simple,
        "CREATE TABLE demo_details (
             work_item_id TEXT NOT NULL PRIMARY KEY REFERENCES work_items (id) ON DELETE CASCADE,
             title TEXT NOT NULL CHECK (title <> '')
         ) STRICT"
            .into_sql_str(),
        false,
    )]);
    type_migrator.set_ignore_missing(true);
    type_migrator.run(store.pool()).await.unwrap();
    store
        .migrate()
        .await
        .expect("the generic migrator ignores version 1000");

    let now = t0();
    let item = new_item(TYPE_A, Some("demo"), now);
    let mut tx = store.begin_write().await.unwrap();
    let created = wq_store::sqlite::insert_item(&mut tx, &item).await.unwrap();
    wq_store::sqlite::upsert_dimension(
        &mut tx,
        created.id,
        &DimensionUpdate::new("needs_x", true),
        now,
    )
    .await
    .unwrap();
    sqlx::query("INSERT INTO demo_details (work_item_id, title) VALUES (?1, ?2)")
        .bind(created.id.0.hyphenated().to_string())
        .bind("hello")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(store.dimension_list(created.id).await.unwrap().len(), 1);

    let failing = new_item(TYPE_A, Some("demo-2"), now);
    let mut tx = store.begin_write().await.unwrap();
    wq_store::sqlite::insert_item(&mut tx, &failing)
        .await
        .unwrap();
    let bad = sqlx::query("INSERT INTO demo_details (work_item_id, title) VALUES (?1, '')")
        .bind(failing.id.0.hyphenated().to_string())
        .execute(&mut *tx)
        .await;
    assert!(bad.is_err());
    tx.rollback().await.unwrap();
    assert!(store.item_get(failing.id).await.unwrap().is_none());
}

/// The same extension path on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_item_type_extends_the_schema_in_one_transaction() {
    use sqlx::SqlSafeStr;
    use sqlx::migrate::{Migration, MigrationType, Migrator};

    let db = TestDb::postgres().await;
    let Backend::Postgres(store) = &db.backend else {
        unreachable!()
    };
    let mut type_migrator = Migrator::with_migrations(vec![Migration::new(
        1000,
        "demo_details".into(),
        MigrationType::Simple,
        "CREATE TABLE demo_details (
             work_item_id uuid NOT NULL PRIMARY KEY REFERENCES work_items (id) ON DELETE CASCADE,
             title text NOT NULL CHECK (title <> '')
         )"
        .into_sql_str(),
        false,
    )]);
    type_migrator.set_ignore_missing(true);
    type_migrator.run(store.pool()).await.unwrap();
    store
        .migrate()
        .await
        .expect("the generic migrator ignores version 1000");

    let now = t0();
    let item = new_item(TYPE_A, Some("demo"), now);
    let mut tx = store.pool().begin().await.unwrap();
    let created = wq_store::postgres::insert_item(&mut tx, &item)
        .await
        .unwrap();
    wq_store::postgres::upsert_dimension(
        &mut tx,
        created.id,
        &DimensionUpdate::new("needs_x", true),
        now,
    )
    .await
    .unwrap();
    sqlx::query("INSERT INTO demo_details (work_item_id, title) VALUES ($1, $2)")
        .bind(created.id.0)
        .bind("hello")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(store.dimension_list(created.id).await.unwrap().len(), 1);

    let failing = new_item(TYPE_A, Some("demo-2"), now);
    let mut tx = store.pool().begin().await.unwrap();
    wq_store::postgres::insert_item(&mut tx, &failing)
        .await
        .unwrap();
    let bad = sqlx::query("INSERT INTO demo_details (work_item_id, title) VALUES ($1, '')")
        .bind(failing.id.0)
        .execute(&mut *tx)
        .await;
    assert!(bad.is_err());
    tx.rollback().await.unwrap();
    assert!(store.item_get(failing.id).await.unwrap().is_none());
    db.finish().await;
}

/// `wq_store::connect` picks the backend from the URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_picks_the_backend_from_the_url() {
    let sqlite = wq_store::connect(&fresh_sqlite_url(), 1).await.unwrap();
    assert_eq!(sqlite.backend(), BackendKind::Sqlite);
    let url = fresh_postgres_url().await;
    let postgres = wq_store::connect(&url, 1).await.unwrap();
    assert_eq!(postgres.backend(), BackendKind::Postgres);
    postgres.ping().await.unwrap();
    drop(postgres);
    drop_postgres_database(&url).await;
    assert!(wq_store::connect("mysql://x", 1).await.is_err());
}

/// The sweep reads only its small indexes on SQLite, even without ANALYZE
/// statistics (which would otherwise steer it to every item of a type).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_sweep_plan_never_walks_idle_items() {
    let db = TestDb::sqlite().await;
    let Backend::Sqlite(store) = &db.backend else {
        unreachable!()
    };
    let rows: Vec<(i64, i64, i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "EXPLAIN QUERY PLAN {}",
        include_str!("../../src/sqlite/queries/sweep/candidates.sql")
    )))
    .bind(r#"["type_a"]"#)
    .bind(0_i64)
    .bind(10_i64)
    .fetch_all(store.pool())
    .await
    .unwrap();
    let plan: Vec<&str> = rows.iter().map(|row| row.3.as_str()).collect();
    let on_items: Vec<&&str> = plan.iter().filter(|line| line.contains(" w ")).collect();
    assert_eq!(on_items.len(), 3, "{plan:#?}");
    for line in on_items {
        assert!(
            line.contains("USING INDEX work_items_actionable") || line.ends_with("(id=?)"),
            "work_items must be read through the actionable index or by id: {plan:#?}"
        );
    }
    assert!(
        plan.iter()
            .any(|line| line.contains("work_item_statuses_pending_until (pending_until")),
        "{plan:#?}"
    );
    assert!(
        plan.iter()
            .any(|line| line.contains("SCAN e USING COVERING INDEX pending_events_work_item_id")),
        "{plan:#?}"
    );
    db.finish().await;
}

/// 200k items (a quarter of each phase, every active one with a timer 30
/// minutes out, `actionable` of the active ones actionable), analyzed, on a
/// connection that plans prepared statements generically (what a prepared
/// statement may switch to after its first runs).
async fn postgres_idle_items(
    store: &wq_store::postgres::PgStore,
    actionable: u32,
) -> sqlx::pool::PoolConnection<sqlx::Postgres> {
    let mut conn = store.pool().acquire().await.unwrap();
    for statement in [
        "INSERT INTO work_items (id, item_type, phase, actionable, created_at, updated_at)
         SELECT gen_random_uuid(), 'type_a',
                (ARRAY['active', 'completed', 'failed', 'cancelled'])[1 + g % 4],
                false, now(), now()
         FROM generate_series(1, 200000) AS g",
        "INSERT INTO work_item_statuses (work_item_id, dimension, status, pending_until, updated_at)
         SELECT id, 'needs_reconcile', 'false', now() + interval '30 minutes', now()
         FROM work_items WHERE phase = 'active'",
        &format!(
            "UPDATE work_items SET actionable = true
             WHERE id IN (SELECT id FROM work_items WHERE phase = 'active' LIMIT {actionable})"
        ),
        "ANALYZE",
        "SET plan_cache_mode = force_generic_plan",
    ] {
        sqlx::query(sqlx::AssertSqlSafe(statement.to_owned()))
            .execute(&mut *conn)
            .await
            .unwrap();
    }
    conn
}

/// The sweep's PostgreSQL plan with 200k idle items, as a generic plan:
/// every branch reads its small index and looks items up by id; nothing
/// scans or joins all of work_items.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sweep_plan_never_walks_idle_items() {
    let db = TestDb::postgres().await;
    let Backend::Postgres(store) = &db.backend else {
        unreachable!()
    };
    let mut conn = postgres_idle_items(store, 20).await;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "PREPARE sweep (text[], timestamptz, bigint) AS {}",
        include_str!("../../src/postgres/queries/sweep/candidates.sql")
    )))
    .execute(&mut *conn)
    .await
    .unwrap();
    let plan: Vec<String> =
        sqlx::query_scalar("EXPLAIN (COSTS OFF) EXECUTE sweep (ARRAY['type_a'], now(), 100)")
            .fetch_all(&mut *conn)
            .await
            .unwrap();
    let plan = plan.join("\n");
    assert!(!plan.contains("Seq Scan on work_items"), "{plan}");
    assert!(
        !plan.contains("Hash Join") && !plan.contains("Merge Join"),
        "{plan}"
    );
    assert!(plan.contains("work_items_actionable"), "{plan}");
    assert!(plan.contains("work_item_statuses_pending_until"), "{plan}");
    drop(conn);
    db.finish().await;
}

/// The engine's batch claim (items/claim_due.sql) with 200k idle items, as
/// a generic plan: its expired timers come from their partial index, never
/// from a scan of every dimension row (which took 136 ms a claim with a
/// million parked items), a backlog is read in the order of the actionable
/// index, never sorted whole, and items are looked up by id: nothing scans
/// or joins all of work_items.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_claim_plan_never_walks_idle_items() {
    let db = TestDb::postgres().await;
    let Backend::Postgres(store) = &db.backend else {
        unreachable!()
    };
    // A backlog: 20,000 actionable items among them.
    let mut conn = postgres_idle_items(store, 20_000).await;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "PREPARE claim (text[], timestamptz, bigint, timestamptz, uuid) AS {}",
        include_str!("../../src/postgres/queries/items/claim_due.sql")
    )))
    .execute(&mut *conn)
    .await
    .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN (COSTS OFF) EXECUTE claim \
         (ARRAY['type_a'], now(), 500, now() + interval '1 minute', NULL)",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    let plan = plan.join("\n");
    assert!(!plan.contains("Seq Scan on work_item_statuses"), "{plan}");
    assert!(!plan.contains("Seq Scan on work_items"), "{plan}");
    assert!(
        !plan.contains("Hash Join") && !plan.contains("Merge Join"),
        "{plan}"
    );
    assert!(
        plan.contains("Index Only Scan using work_item_statuses_pending_until"),
        "{plan}"
    );
    assert!(
        plan.contains("Index Scan using work_items_actionable"),
        "{plan}"
    );
    assert!(!plan.contains("Sort Key: w.id"), "{plan}");
    drop(conn);
    db.finish().await;
}

/// Periodic tasks on PostgreSQL: one process leads a task at a time; the
/// lead passes on when it is released, and when its holder's session dies
/// (the holder sees it lost, another takes it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_one_process_leads_a_periodic_task() {
    let db = TestDb::postgres().await;
    let other = wq_store::connect(&db.url, 2).await.expect("second process");
    let mut first = db
        .store()
        .lead("sync")
        .await
        .unwrap()
        .expect("the first asker leads");
    assert!(first.still_held().await);
    assert!(other.lead("sync").await.unwrap().is_none(), "one leader");
    let mut unrelated = other
        .lead("archive")
        .await
        .unwrap()
        .expect("another task has its own leader");
    assert!(unrelated.still_held().await);
    // The lead is the holding session's: the same process asking again
    // on another connection is refused too.
    assert!(db.store().lead("sync").await.unwrap().is_none());

    first.release().await;
    let mut second = other
        .lead("sync")
        .await
        .unwrap()
        .expect("released: the other process leads");
    assert!(db.store().lead("sync").await.unwrap().is_none());

    // The leader's session dies (a killed process, a lost connection).
    let Backend::Postgres(pg) = &db.backend else {
        unreachable!()
    };
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_locks \
         WHERE locktype = 'advisory' AND classid = 22353 AND objid = hashtext('sync')::oid",
    )
    .fetch_all(pg.pool())
    .await
    .unwrap();
    assert_eq!(killed, vec![true], "one session held the lead");
    // pg_terminate_backend only signals the session: its locks go when it
    // has exited.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let held: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks \
             WHERE locktype = 'advisory' AND classid = 22353 AND objid = hashtext('sync')::oid",
        )
        .fetch_one(pg.pool())
        .await
        .unwrap();
        if held == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the killed session kept its lock"
        );
        tokio::task::yield_now().await;
    }
    assert!(!second.still_held().await, "the holder sees its lead lost");
    let third = db
        .store()
        .lead("sync")
        .await
        .unwrap()
        .expect("taken up after the holder died");
    third.release().await;
    unrelated.release().await;
    db.finish().await;
}

/// SQLite has one process per database: no election.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_always_leads() {
    let db = TestDb::sqlite().await;
    let mut first = db.store().lead("sync").await.unwrap().expect("leads");
    let second = db.store().lead("sync").await.unwrap().expect("leads");
    assert!(first.still_held().await);
    second.release().await;
    first.release().await;
    db.finish().await;
}

/// Migration 0010 rebuilds SQLite's audit table without the UNIQUE index on
/// the record id and archives with a cursor: the records stay as they were,
/// the cursor stops before the first record not archived (what was archived
/// after it is shipped again: at least once), and the sequence goes on
/// from the last number the old table gave, even where its newest records
/// were pruned (a number below the cursor would never be shipped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_audit_upgrade_keeps_records_and_archive_position() {
    let store = SqliteStore::connect(&fresh_sqlite_url(), 2).await.unwrap();
    wq_store::sqlite::MIGRATOR
        .run_to(9, store.writer())
        .await
        .unwrap();
    let item = ItemId::new_v7();
    for (seq, archived) in [
        (1, true),
        (2, true),
        (3, false),
        (4, true),
        (5, false),
        (9, true),
    ] {
        sqlx::query(
            "INSERT INTO audit_records (seq, id, work_item_id, at, actor, kind, metadata,
                                        prev_hash, hash, archived_at)
             VALUES (?1, ?2, ?3, ?4, 'ci-bot', 'submission.created', '{}', 'p', ?5, ?6)",
        )
        .bind(seq)
        .bind(uuid::Uuid::now_v7().hyphenated().to_string())
        .bind(item.to_string())
        .bind(seq * 1_000)
        .bind(format!("h{seq}"))
        .bind(archived.then_some(7_i64))
        .execute(store.writer())
        .await
        .unwrap();
    }
    // Record 9 was archived and pruned: the sequence has given 9.
    sqlx::query("DELETE FROM audit_records WHERE seq = 9")
        .execute(store.writer())
        .await
        .unwrap();

    store.migrate().await.unwrap();

    let unarchived: Vec<(i64, String)> = store
        .audit_unarchived(100)
        .await
        .unwrap()
        .into_iter()
        .map(|record| (record.seq, record.hash))
        .collect();
    assert_eq!(
        unarchived,
        [(3, "h3".into()), (4, "h4".into()), (5, "h5".into())],
        "from the first record not archived on"
    );
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'audit_records'
         ORDER BY name",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(indexes, ["audit_records_at", "audit_records_item"]);

    let next = store
        .audit_append(wq_store::audit::NewAudit::new(
            item,
            t0(),
            "engine",
            "event.received",
        ))
        .await
        .unwrap();
    assert_eq!(next.seq, 10, "numbered after the pruned record 9");
    assert_eq!(next.prev_hash, "h5", "chained to the item's last record");

    // Marking goes over the shipped prefix only.
    store.audit_mark_archived(&[3, 4], t0()).await.unwrap();
    let left: Vec<i64> = store
        .audit_unarchived(100)
        .await
        .unwrap()
        .iter()
        .map(|record| record.seq)
        .collect();
    assert_eq!(left, [5, 10]);
    store.audit_mark_archived(&[10], t0()).await.unwrap();
    assert_eq!(
        store.audit_unarchived_stats().await.unwrap().0,
        2,
        "a batch that is not the oldest records moves nothing"
    );
    store.audit_mark_archived(&[5, 10], t0()).await.unwrap();
    assert!(store.audit_unarchived(100).await.unwrap().is_empty());
}

/// A write's work hints go out once it committed (after the commit, not
/// inside its transaction), and a write that rolled back sends none: the
/// first hint a listener hears is the committed item's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_work_hints_follow_commits_only() {
    let db = TestDb::postgres().await;
    let Backend::Postgres(store) = &db.backend else {
        unreachable!()
    };
    let mut listener = sqlx::postgres::PgListener::connect_with(store.pool())
        .await
        .unwrap();
    listener.listen(wq_store::HINT_CHANNEL).await.unwrap();

    let now = t0();
    let rolled_back = new_item(TYPE_A, None, now);
    let rolled_back_id = rolled_back.id;
    let failed = store
        .write(move |conn| {
            Box::pin(async move {
                wq_store::postgres::insert_item(conn, &rolled_back).await?;
                Err::<(), _>(StoreError::Conflict("rolled back on purpose".into()))
            })
        })
        .await;
    assert!(failed.is_err());
    let committed = new_item(TYPE_A, None, now);
    let committed_id = committed.id;
    store
        .write(move |conn| {
            Box::pin(async move { wq_store::postgres::insert_item(conn, &committed).await })
        })
        .await
        .unwrap();

    let heard = tokio::time::timeout(std::time::Duration::from_secs(30), listener.recv())
        .await
        .expect("a hint within 30 s")
        .unwrap();
    let payload = heard.payload();
    assert!(
        payload.ends_with(&committed_id.to_string()),
        "the committed item's hint first: {payload}"
    );
    assert!(!payload.contains(&rolled_back_id.to_string()));
    assert!(
        store.item_get(rolled_back_id).await.unwrap().is_none(),
        "the rolled-back item was never stored"
    );
    assert_eq!(get(store, committed_id).await.phase, Phase::Active);
    // The listener's connection goes before its database.
    listener.unlisten_all().await.unwrap();
    drop(listener);
    db.finish().await;
}

/// On PostgreSQL a claim's write of an item's row (its lease) stays on its
/// page (a heap-only update, no new index entries) while a backlog drains
/// in batches: work_items leaves half of each page free (migration 0011).
/// The park changes `actionable`, which the partial index of actionable
/// items reads, so it is never heap-only; at the former 80% fill the
/// parks' new versions also left claims too little room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_claims_stay_on_their_pages() {
    const ITEMS: u64 = 4_000;
    let db = TestDb::postgres().await;
    let store = db.store();
    let Backend::Postgres(pg) = &db.backend else {
        unreachable!()
    };
    wq_store::testing::seed_items(&db.url, TYPE_A, ITEMS, true, false).await;
    let now = t0();
    let mut after = None;
    let mut parked = 0;
    loop {
        let claimed = store
            .item_claim_due(ClaimDueParams {
                now,
                lease_until: now + LEASE,
                handled_types: handled(&[TYPE_A]),
                limit: 500,
                after,
            })
            .await
            .expect("claim due");
        let Some((_, last)) = claimed.last() else {
            break;
        };
        after = Some(last.id);
        let parks: Vec<_> = claimed
            .into_iter()
            .map(|(_, lease)| {
                let store = store.clone();
                tokio::spawn(async move { store.item_park(lease, now).await.expect("park") })
            })
            .collect();
        for park in parks {
            assert_eq!(park.await.unwrap(), Park::Parked);
            parked += 1;
        }
    }
    assert_eq!(parked, ITEMS);
    // Statistics reach pg_stat_user_tables once each connection reports
    // them (at the latest when it has been idle for a few seconds).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let (updates, hot) = loop {
        let (updates, hot): (i64, i64) = sqlx::query_as(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
             WHERE relname = 'work_items'",
        )
        .fetch_one(pg.pool())
        .await
        .unwrap();
        if updates >= 2 * ITEMS as i64 || std::time::Instant::now() > deadline {
            break (updates, hot);
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    };
    assert!(updates >= 2 * ITEMS as i64, "{updates} updates counted");
    // One claim and one park per item; the claims are the updates that can
    // stay on their pages.
    assert!(
        hot * 10 >= ITEMS as i64 * 9,
        "{hot} of {updates} updates of work_items were heap-only, for {ITEMS} claims"
    );
    db.finish().await;
}

/// SQLite appends a record after the chain head it remembers, checked in
/// the insert: a head remembered from a transaction that rolled back is
/// not the item's head, and the record chains to the one that is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_audit_appends_chain_to_the_stored_head_not_a_remembered_one() {
    let store = SqliteStore::connect(&fresh_sqlite_url(), 2).await.unwrap();
    store.migrate().await.unwrap();
    let now = t0();
    let id = insert(&store, TYPE_A, now).await.id;
    let record = |kind: &str| wq_store::audit::NewAudit::new(id, now, "tester", kind);
    let kept = store
        .audit_append(record("submission.created"))
        .await
        .unwrap();

    // Appended, remembered as the head, then rolled back.
    let mut tx = store.begin_write().await.unwrap();
    let undone = wq_store::sqlite::append_audit(&mut tx, record("submission.updated"))
        .await
        .unwrap();
    assert_eq!(undone.prev_hash, kept.hash);
    tx.rollback().await.unwrap();

    let next = store
        .audit_append(record("submission.unchanged"))
        .await
        .unwrap();
    assert_eq!(next.prev_hash, kept.hash, "after the stored head");
    assert!(next.seq > kept.seq);
    // Two records in one transaction: the second after the first.
    let mut tx = store.begin_write().await.unwrap();
    let both = wq_store::sqlite::append_audits(
        &mut tx,
        vec![record("action.started"), record("action.succeeded")],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(both[0].prev_hash, next.hash);
    assert_eq!(both[1].prev_hash, both[0].hash);
    let listed = store
        .audit_list(wq_store::audit::AuditQuery {
            item_id: Some(id),
            limit: 100,
            ..wq_store::audit::AuditQuery::default()
        })
        .await
        .unwrap();
    let kinds: Vec<&str> = listed.iter().map(|record| record.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "item.created",
            "submission.created",
            "submission.unchanged",
            "action.started",
            "action.succeeded"
        ]
    );
    assert_eq!(store.audit_verify().await.unwrap(), (5, None));
}

/// `append_first_audit` takes the first record of the item whose insert
/// gave the chain, and no other item's: the record of another item is
/// refused and nothing of it is written; the item's own starts its chain,
/// which the next append continues and verification accepts.
macro_rules! first_record_case {
    ($name:ident, $variant:ident, $module:ident, $db:expr, |$b:ident| $begin:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let db = $db;
            let store = db.store();
            let Backend::$variant(backend) = &db.backend else {
                unreachable!()
            };
            let now = t0();
            let other = insert(store.as_ref(), TYPE_A, now).await.id;
            let item = new_item(TYPE_A, None, now);

            let mut tx = {
                let $b = backend;
                $begin
            };
            let (_, chain) = wq_store::$module::insert_new_item(&mut tx, &item)
                .await
                .unwrap();
            let refused = wq_store::$module::append_first_audit(
                &mut tx,
                chain,
                wq_store::audit::NewAudit::new(other, now, "tester", "item.created"),
            )
            .await
            .expect_err("another item's record");
            assert!(
                matches!(&refused, StoreError::Conflict(message) if message.contains(&other.to_string())),
                "{refused}"
            );
            tx.rollback().await.unwrap();
            assert!(store.item_get(item.id).await.unwrap().is_none());

            let mut tx = {
                let $b = backend;
                $begin
            };
            let (_, chain) = wq_store::$module::insert_new_item(&mut tx, &item)
                .await
                .unwrap();
            let first = wq_store::$module::append_first_audit(
                &mut tx,
                chain,
                wq_store::audit::NewAudit::new(item.id, now, "tester", "item.created"),
            )
            .await
            .unwrap();
            tx.commit().await.unwrap();
            assert_eq!(first.prev_hash, "", "a chain starts empty");
            let next = store
                .audit_append(wq_store::audit::NewAudit::new(item.id, now, "engine", "step.next"))
                .await
                .unwrap();
            assert_eq!(next.prev_hash, first.hash, "the next record follows it");
            let trail = store
                .audit_list(wq_store::audit::AuditQuery {
                    item_id: Some(item.id),
                    limit: 10,
                    ..wq_store::audit::AuditQuery::default()
                })
                .await
                .unwrap();
            assert_eq!(trail, vec![first, next]);
            let of_other = store
                .audit_list(wq_store::audit::AuditQuery {
                    item_id: Some(other),
                    limit: 10,
                    ..wq_store::audit::AuditQuery::default()
                })
                .await
                .unwrap();
            assert_eq!(of_other.len(), 1, "only its own creation: {of_other:?}");
            assert_eq!(store.audit_verify().await.unwrap(), (3, None));
            db.finish().await;
        }
    };
}

first_record_case!(
    sqlite_a_first_record_starts_its_own_items_chain_only,
    Sqlite,
    sqlite,
    TestDb::sqlite().await,
    |store| store.begin_write().await.unwrap()
);

first_record_case!(
    postgres_a_first_record_starts_its_own_items_chain_only,
    Postgres,
    postgres,
    TestDb::postgres().await,
    |store| store.pool().begin().await.unwrap()
);

/// A store module's row and its record in one call on SQLite
/// (`execute_then_append_audit`): the statement runs once and the record
/// chains after the item's last one, also where the head this process
/// remembers for the item is not stored (its append was rolled back), and
/// a statement that ends with a comment is still a statement of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_row_and_its_record_in_one_call_chain_after_a_stale_head() {
    use sqlx::Arguments as _;
    use wq_store::audit::NewAudit;

    let db = TestDb::sqlite().await;
    let Backend::Sqlite(sqlite) = &db.backend else {
        unreachable!()
    };
    let store = db.store();
    let now = t0();
    let id = insert(store.as_ref(), TYPE_A, now).await.id;
    let bump = "UPDATE work_items SET attempts = attempts + $2 WHERE id = $1 -- the item";
    let call = |kind: &'static str| {
        let mut arguments = sqlx::sqlite::SqliteArguments::default();
        arguments.add(wq_store::sqlite::id_text(id)).unwrap();
        arguments.add(1_i64).unwrap();
        (arguments, NewAudit::new(id, now, "tester", kind))
    };

    let mut tx = sqlite.begin_write().await.unwrap();
    let (arguments, record) = call("test.rolled_back");
    wq_store::sqlite::execute_then_append_audit(&mut tx, bump, arguments, record)
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let mut appended = Vec::new();
    for kind in ["test.first", "test.second"] {
        let mut tx = sqlite.begin_write().await.unwrap();
        let (arguments, record) = call(kind);
        appended.push(
            wq_store::sqlite::execute_then_append_audit(&mut tx, bump, arguments, record)
                .await
                .unwrap(),
        );
        tx.commit().await.unwrap();
    }
    assert_eq!(store.item_get(id).await.unwrap().unwrap().attempts, 2);
    let trail = store
        .audit_list(wq_store::audit::AuditQuery {
            item_id: Some(id),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    let kinds: Vec<&str> = trail.iter().map(|record| record.kind.as_str()).collect();
    assert_eq!(kinds, ["item.created", "test.first", "test.second"]);
    for pair in trail.windows(2) {
        assert_eq!(pair[1].prev_hash, pair[0].hash);
    }
    assert_eq!(trail[1..], appended[..], "stored as answered");
    assert_eq!(store.audit_verify().await.unwrap(), (3, None));
    db.finish().await;
}

/// SQLite plans a statement once, whatever its parameters: the trail's
/// list (`audit/list.sql`) reads an item's records through the item's
/// index, the records since a time from the first one at or after it
/// (among the next numbers by range, else through the index on times),
/// and stops at its last sequence number by range. With one plan for every query it read the trail in
/// sequence order from the start and tested each record.
#[tokio::test]
async fn sqlite_audit_list_reads_through_its_indexes() {
    let db = TestDb::sqlite().await;
    let Backend::Sqlite(sqlite) = &db.backend else {
        unreachable!()
    };
    let statement = include_str!("../../src/sqlite/queries/audit/list.sql");
    let plan: Vec<(i64, i64, i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "EXPLAIN QUERY PLAN {statement}"
    )))
    .bind(0_i64)
    .bind(None::<String>)
    .bind(None::<i64>)
    .bind(None::<String>)
    .bind(None::<String>)
    .bind(100_i64)
    .bind(None::<i64>)
    .fetch_all(sqlite.pool())
    .await
    .unwrap();
    let details: Vec<&str> = plan.iter().map(|(.., detail)| detail.as_str()).collect();
    for expected in [
        "SEARCH audit_records USING INDEX audit_records_item (work_item_id=? AND seq>? AND seq<?)",
        "SEARCH audit_records USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)",
        "SEARCH s USING COVERING INDEX audit_records_at (at>?)",
    ] {
        assert!(
            details.contains(&expected),
            "the plan has {expected:?}: {details:#?}"
        );
    }
    assert!(
        !details
            .iter()
            .any(|detail| detail.starts_with("SCAN audit_records")),
        "no arm reads the whole trail: {details:#?}"
    );
    db.finish().await;
}

/// The SQLite list's records since a time, where sequence numbers and
/// times disagree and the first matching record is beyond the next 1,000
/// numbers (so the statement finds it through the index on times), and
/// where it is among them: every record at or after the time, in order,
/// and no other.
#[tokio::test]
async fn sqlite_audit_list_since_a_time_finds_each_record_at_or_after_it() {
    let db = TestDb::sqlite().await;
    let Backend::Sqlite(sqlite) = &db.backend else {
        unreachable!()
    };
    let store = db.store();
    let item = ItemId::new_v7();
    let start = t0();
    // Record n at start + n s, but two written late: number 10 at
    // start + 2,000 s and number 1,100 at start + 5,000 s.
    let at = |seq: i64| match seq {
        10 => start + Duration::seconds(2_000),
        1_100 => start + Duration::seconds(5_000),
        n => start + Duration::seconds(n),
    };
    let mut tx = sqlite.begin_write().await.unwrap();
    for seq in 1..=1_500_i64 {
        sqlx::query(
            "INSERT INTO audit_records (seq, id, work_item_id, at, actor, kind, metadata, \
             prev_hash, hash) VALUES (?1, ?2, ?3, ?4, 'tester', 'test', '{}', '', '')",
        )
        .bind(seq)
        .bind(uuid::Uuid::now_v7().to_string())
        .bind(wq_store::sqlite::id_text(item))
        .bind((at(seq).unix_timestamp_nanos() / 1_000) as i64)
        .execute(&mut *tx)
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();

    for (since, after) in [
        (1_400, 0),
        (1_400, 20),
        (1_400, 1_050),
        (1_400, 1_450),
        (6_000, 0),
    ] {
        let since = start + Duration::seconds(since);
        let listed: Vec<i64> = store
            .audit_list(wq_store::audit::AuditQuery {
                since: Some(since),
                after,
                limit: 10_000,
                ..wq_store::audit::AuditQuery::default()
            })
            .await
            .unwrap()
            .into_iter()
            .map(|record| record.seq)
            .collect();
        let expected: Vec<i64> = (after + 1..=1_500)
            .filter(|&seq| at(seq) >= since)
            .collect();
        assert_eq!(listed, expected, "since {since}, after {after}");
    }
    db.finish().await;
}
