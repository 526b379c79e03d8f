//! Every store operation written once, for both backends.
//!
//! The statements live in one `.sql` file per backend (`sqlite/queries/`,
//! `postgres/queries/`) and bind the same parameters in the same order
//! through the [`crate::codec`] types, so the Rust around them is the same
//! text. `include_str!` needs a literal path, resolved from the file that
//! invokes the macro, so the bodies are macros: each backend module invokes
//! [`building_blocks!`] and [`impl_store!`] and so picks its own `queries/`.
//!
//! What really differs stays in the backend module as named hooks:
//!
//! - `write(closure)`: a transaction (SQLite: group commit; PostgreSQL:
//!   begin, run, commit);
//! - `autocommit(closure)`: a write that needs no transaction of its own
//!   (SQLite: group commit; PostgreSQL: a pooled connection);
//! - `read_transaction()`: a read of one snapshot;
//! - `lock_for_event(conn, id)`: what serialises an event insert with the
//!   loop's exit (PostgreSQL: the item's advisory lock; SQLite: nothing, the
//!   write lock already does);
//! - `hint_work(conn, id)`: tells other processes the item was made due
//!   once the transaction commits (PostgreSQL: a notification,
//!   [`crate::Store::work_hints`], sent after the commit of a
//!   `PgStore::write`; SQLite: nothing, one process);
//! - `handled_types(&[String])`: the bind parameter of a type filter;
//! - `append_audit_records(conn, records)`: audit appends, chained to their
//!   heads (PostgreSQL: one call of `wq_audit_append`, migrations 0008 and
//!   0016, or of `wq_audit_append_record` for a single record, migration
//!   0018; SQLite: inserts under the write lock after the head the
//!   process remembers, checked in the insert, else after the head read);
//! - the methods passed to [`impl_store!`]: `migrate`, `item_snapshot`,
//!   `item_park_with` and, on PostgreSQL, the one-statement
//!   `item_claim_snapshot`.

/// The building blocks an item type's own store module uses, on the
/// caller's connection, and the pieces the `Store` methods share.
macro_rules! building_blocks {
    ($Conn:ty) => {
        /// Inserts an active, actionable work item and its initial
        /// dimensions on the caller's connection (inside the caller's write
        /// transaction, so an item type can add its detail row atomically).
        /// A live idempotency key yields [`StoreError::Duplicate`].
        pub async fn insert_item(
            conn: &mut $Conn,
            item: &$crate::NewItem,
        ) -> $crate::StoreResult<wq_core::WorkItem> {
            let row = sqlx::query(sql!("items/insert.sql"))
                .bind(DbId(item.id))
                .bind(&item.item_type)
                .bind(&item.idempotency_key)
                .bind(&item.caller_identity)
                .bind(DbTime(item.now))
                .bind(item.place.as_ref().map(|(forge, _)| forge))
                .bind(item.place.as_ref().map(|(_, project)| project))
                .fetch_one(&mut *conn)
                .await
                .map_err(|error| {
                    common::duplicate_or_database(error, || {
                        common::duplicate_key_message(item.idempotency_key.as_deref())
                    })
                })?;
            let work_item = common::item_from_row(&row)?;
            for update in &item.dimensions {
                upsert_dimension(&mut *conn, item.id, update, item.now).await?;
            }
            hint_work(&mut *conn, item.id).await?;
            Ok(work_item)
        }

        /// Upserts one dimension row on the caller's connection: status
        /// replaced, detail replaced or kept (`None`; `{}` for a new row),
        /// `pending_until` replaced. A missing item yields
        /// [`StoreError::NotFound`].
        pub async fn upsert_dimension(
            conn: &mut $Conn,
            id: wq_core::ItemId,
            update: &wq_core::DimensionUpdate,
            now: time::OffsetDateTime,
        ) -> $crate::StoreResult<()> {
            sqlx::query(sql!("dimensions/upsert.sql"))
                .bind(DbId(id))
                .bind(&update.dimension)
                .bind(&update.variant)
                .bind(update.status.as_str())
                .bind(update.detail.as_ref().map(DbJson))
                .bind(update.pending_until.map(DbTime))
                .bind(DbTime(now))
                .execute(&mut *conn)
                .await
                .map_err(|error| common::not_found_or_database(error, id))?;
            Ok(())
        }

        /// Stores a raw event and sets `actionable = true` on the caller's
        /// transaction, serialised with the loop's exit (DDR-30, DDR-34,
        /// DDR-49; on PostgreSQL by the item's transaction-scoped advisory
        /// lock, so call it inside a transaction). A missing item yields
        /// [`StoreError::NotFound`].
        pub async fn insert_event(
            conn: &mut $Conn,
            event: &$crate::NewEvent,
        ) -> $crate::StoreResult<i64> {
            lock_for_event(&mut *conn, event.item_id).await?;
            let woken = sqlx::query(sql!("items/wake_for_event.sql"))
                .bind(DbId(event.item_id))
                .execute(&mut *conn)
                .await?;
            if woken.rows_affected() == 0 {
                return Err($crate::StoreError::NotFound(event.item_id));
            }
            hint_work(&mut *conn, event.item_id).await?;
            let origin = event.origin.as_ref();
            let raw = origin
                .and_then(|origin| origin.raw.as_deref())
                .map(|raw| $crate::audit::bounded(raw, $crate::audit::MAX_RAW_BYTES).0);
            Ok(sqlx::query_scalar(sql!("events/insert.sql"))
                .bind(DbId(event.item_id))
                .bind(&event.event_type)
                .bind(DbJson(&event.body))
                .bind(DbTime(event.now))
                .bind(origin.and_then(|origin| origin.delivery_id.as_deref()))
                .bind(raw)
                .fetch_one(&mut *conn)
                .await?)
        }

        /// Appends an audit record on the caller's transaction, chained to
        /// the item's last one ([`crate::audit`]); call it last in the
        /// transaction, and log the record once it committed
        /// ([`crate::audit::log`]).
        pub async fn append_audit(
            conn: &mut $Conn,
            record: $crate::audit::NewAudit,
        ) -> $crate::StoreResult<$crate::audit::AuditRecord> {
            let mut records = append_audits(conn, vec![record]).await?;
            Ok(records.remove(0))
        }

        /// [`insert_item`], and the proof that the item's audit chain starts
        /// in this transaction, which [`append_first_audit`] takes.
        pub async fn insert_new_item(
            conn: &mut $Conn,
            item: &$crate::NewItem,
        ) -> $crate::StoreResult<(wq_core::WorkItem, $crate::audit::NewChain)> {
            let work_item = insert_item(conn, item).await?;
            Ok((work_item, $crate::audit::NewChain::new(item.id)))
        }

        /// Appends the first record of the item [`insert_new_item`] inserted
        /// on this transaction (`chain`), last in the transaction as
        /// [`append_audits`]. The chain is new and no other transaction
        /// can see the item yet, so the record needs no chain lock and no
        /// head read: its previous hash is empty (on PostgreSQL one plain
        /// insert instead of `wq_audit_append_record`). A record of another
        /// item is refused ([`StoreError::Conflict`](crate::StoreError)).
        pub async fn append_first_audit(
            conn: &mut $Conn,
            chain: $crate::audit::NewChain,
            record: $crate::audit::NewAudit,
        ) -> $crate::StoreResult<$crate::audit::AuditRecord> {
            if record.item_id != chain.item() {
                return Err($crate::StoreError::Conflict(format!(
                    "the first audit record of item {} was given for item {}",
                    chain.item(),
                    record.item_id
                )));
            }
            #[cfg(feature = "testing")]
            if !$crate::testing::audit_enabled() {
                return Ok(record.chained(String::new()));
            }
            append_first_record(conn, record).await
        }

        /// Appends audit records, in order, on the caller's transaction, each
        /// chained to its item's last one (PostgreSQL: in one round trip);
        /// call it last in the transaction.
        pub async fn append_audits(
            conn: &mut $Conn,
            records: Vec<$crate::audit::NewAudit>,
        ) -> $crate::StoreResult<Vec<$crate::audit::AuditRecord>> {
            // Benchmarks measure the trail's cost by turning it off.
            #[cfg(feature = "testing")]
            if !$crate::testing::audit_enabled() {
                return Ok(records
                    .into_iter()
                    .map(|record| record.chained(String::new()))
                    .collect());
            }
            append_audit_records(conn, records).await
        }

        /// Failed or cancelled → active, actionable, attempts 0, error
        /// cleared, on the caller's connection. Other phases:
        /// [`StoreError::Conflict`].
        pub async fn retry_item(
            conn: &mut $Conn,
            id: wq_core::ItemId,
            now: time::OffsetDateTime,
        ) -> $crate::StoreResult<wq_core::WorkItem> {
            let row = sqlx::query(sql!("items/retry.sql"))
                .bind(DbId(id))
                .bind(DbTime(now))
                .fetch_optional(&mut *conn)
                .await
                .map_err(|error| {
                    common::duplicate_or_database(error, || {
                        format!(
                            "work item {id} cannot be retried: a newer item holds its idempotency key"
                        )
                    })
                })?;
            if let Some(row) = row {
                hint_work(&mut *conn, id).await?;
                return common::item_from_row(&row);
            }
            let phase: Option<String> = sqlx::query_scalar(sql!("items/phase.sql"))
                .bind(DbId(id))
                .fetch_optional(&mut *conn)
                .await?;
            match phase {
                None => Err($crate::StoreError::NotFound(id)),
                Some(phase) => Err(common::retry_conflict(common::parse_phase(&phase)?)),
            }
        }

        /// Ends an active item under the caller's lease (the claim `epoch`
        /// names, `leased_until` after `now`) with a terminal `phase` and
        /// `error`, on the caller's connection: for an executor that must
        /// end its item in the same transaction as another write (a
        /// successor item). `actionable` is left alone (the park step clears
        /// it); the executor's own outcome, written under the lease, repeats
        /// the phase. `false` when the item is no longer active, or its
        /// lease expired or is another claim's.
        pub async fn finish_leased(
            conn: &mut $Conn,
            id: wq_core::ItemId,
            epoch: wq_core::LeaseEpoch,
            phase: wq_core::Phase,
            error: Option<&str>,
            now: time::OffsetDateTime,
        ) -> $crate::StoreResult<bool> {
            Ok(sqlx::query(sql!("items/finish_leased.sql"))
                .bind(DbId(id))
                .bind(DbTime(now))
                .bind(phase.as_str())
                .bind(error)
                .bind(epoch.0)
                .fetch_optional(&mut *conn)
                .await?
                .is_some())
        }

        /// Whether the run that claimed `id` as `epoch` still holds it at
        /// `now` (its lease not expired), on the caller's connection: a
        /// type's write that must not outlive the run's lease (one that
        /// decides a forge write) is made in the same transaction only when
        /// this answers `true`. No lock is taken: another claim needs the
        /// lease expired, which is time, not a row's state.
        pub async fn lease_held(
            conn: &mut $Conn,
            id: wq_core::ItemId,
            epoch: wq_core::LeaseEpoch,
            now: time::OffsetDateTime,
        ) -> $crate::StoreResult<bool> {
            Ok(sqlx::query(sql!("items/lease_held.sql"))
                .bind(DbId(id))
                .bind(DbTime(now))
                .bind(epoch.0)
                .fetch_optional(&mut *conn)
                .await?
                .is_some())
        }

        /// The item and its dimensions, on the caller's (read) transaction.
        async fn read_view(
            conn: &mut $Conn,
            id: wq_core::ItemId,
            now: time::OffsetDateTime,
        ) -> $crate::StoreResult<Option<wq_core::ItemView>> {
            let Some(row) = sqlx::query(sql!("items/get.sql"))
                .bind(DbId(id))
                .fetch_optional(&mut *conn)
                .await?
            else {
                return Ok(None);
            };
            let item = common::item_from_row(&row)?;
            let rows = sqlx::query(sql!("dimensions/list.sql"))
                .bind(DbId(id))
                .fetch_all(&mut *conn)
                .await?;
            let dimensions = rows
                .iter()
                .map(common::dimension_from_row)
                .collect::<$crate::StoreResult<_>>()?;
            Ok(Some(wq_core::ItemView {
                item,
                dimensions,
                now: $crate::to_micros(now),
                lease: None,
            }))
        }

        /// A successful executor's changes under the lease: attempts 0,
        /// error, phase if given, dimension upserts, `updated_at`. The
        /// UPDATE takes the row lock before the dimension writes.
        async fn apply_outcome(
            conn: &mut $Conn,
            lease: $crate::Lease,
            now: time::OffsetDateTime,
            phase: Option<wq_core::Phase>,
            error: Option<&str>,
            dimensions: &[wq_core::DimensionUpdate],
        ) -> $crate::StoreResult<wq_core::WorkItem> {
            let row = sqlx::query(sql!("items/apply_outcome.sql"))
                .bind(DbId(lease.id))
                .bind(DbTime(lease.until))
                .bind(phase.map(wq_core::Phase::as_str))
                .bind(error)
                .bind(DbTime(now))
                .fetch_optional(&mut *conn)
                .await?
                .ok_or($crate::StoreError::LeaseLost(lease.id))?;
            let item = common::item_from_row(&row)?;
            for update in dimensions {
                upsert_dimension(&mut *conn, lease.id, update, now).await?;
            }
            Ok(item)
        }

        /// The item row as `event_apply` needs it, if the lease is held.
        async fn lease_state(
            conn: &mut $Conn,
            lease: $crate::Lease,
        ) -> $crate::StoreResult<common::EventTarget> {
            let row = sqlx::query(sql!("items/lease_state.sql"))
                .bind(DbId(lease.id))
                .bind(DbTime(lease.until))
                .fetch_optional(&mut *conn)
                .await?
                .ok_or($crate::StoreError::LeaseLost(lease.id))?;
            common::event_target_from_row(&row)
        }

        /// Applies a handled event and deletes it, inside the caller's
        /// write transaction.
        async fn apply_event(
            conn: &mut $Conn,
            apply: &$crate::ApplyEvent,
        ) -> $crate::StoreResult<$crate::EventApplied> {
            let id = apply.lease.id;
            let now = $crate::to_micros(apply.now);
            let target = lease_state(&mut *conn, apply.lease).await?;
            let outcome = if target.phase == wq_core::Phase::Active {
                for update in &apply.result.dimensions {
                    upsert_dimension(&mut *conn, id, update, now).await?;
                }
                let write = common::decide_event(&target, &apply.result, now);
                sqlx::query(sql!("items/update_from_event.sql"))
                    .bind(DbId(id))
                    .bind(write.phase.as_str())
                    .bind(write.error.as_deref())
                    .bind(DbTime(write.last_event_at))
                    .bind(DbTime(now))
                    .execute(&mut *conn)
                    .await?;
                write.applied
            } else {
                // DDR-37: only active items accept events; discard it.
                $crate::EventApplied::ItemNotActive
            };
            sqlx::query(sql!("events/delete.sql"))
                .bind(apply.event_id)
                .bind(DbId(id))
                .execute(&mut *conn)
                .await?;
            Ok(outcome)
        }
    };
}

/// `impl Store` for a backend's store type from the shared bodies and the
/// hooks (see the module docs); `$extra` are the backend's own methods.
macro_rules! impl_store {
    ($Store:ty, $kind:ident, { $($extra:item)* }) => {
        #[async_trait::async_trait]
        impl $crate::Store for $Store {
            fn backend(&self) -> $crate::BackendKind {
                $crate::BackendKind::$kind
            }

            fn handle(&self) -> $crate::Backend {
                $crate::Backend::$kind(self.clone())
            }

            async fn ping(&self) -> $crate::StoreResult<()> {
                sqlx::query(sql!("health/ping.sql")).execute(&self.pool).await?;
                Ok(())
            }

            async fn item_insert(
                &self,
                item: $crate::NewItem,
            ) -> $crate::StoreResult<wq_core::WorkItem> {
                let (work_item, record) = self
                    .write(move |conn| {
                        Box::pin(async move {
                            let (work_item, chain) = insert_new_item(conn, &item).await?;
                            let record =
                                append_first_audit(conn, chain, $crate::audit::created(&item))
                                    .await?;
                            Ok((work_item, record))
                        })
                    })
                    .await?;
                $crate::audit::log(std::slice::from_ref(&record));
                Ok(work_item)
            }

            async fn audit_append(
                &self,
                record: $crate::audit::NewAudit,
            ) -> $crate::StoreResult<$crate::audit::AuditRecord> {
                let record = self
                    .write(move |conn| Box::pin(async move { append_audit(conn, record).await }))
                    .await?;
                $crate::audit::log(std::slice::from_ref(&record));
                Ok(record)
            }

            async fn audit_unarchived(
                &self,
                limit: u32,
            ) -> $crate::StoreResult<Vec<$crate::audit::AuditRecord>> {
                // The horizon in its own transaction, the records in the
                // next: on PostgreSQL the horizon waits for the appends in
                // progress, and the read's snapshot sees each one that ended.
                let horizon: Option<i64> = sqlx::query_scalar(sql!("audit/horizon.sql"))
                    .fetch_one(&self.pool)
                    .await?;
                let Some(horizon) = horizon else {
                    return Ok(Vec::new());
                };
                let rows = sqlx::query(sql!("audit/unarchived.sql"))
                    .bind(horizon)
                    .bind(i64::from(limit.clamp(1, 100_000)))
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter().map($crate::audit::record_from_row).collect()
            }

            async fn audit_mark_archived(
                &self,
                seqs: &[i64],
                now: time::OffsetDateTime,
            ) -> $crate::StoreResult<()> {
                let seqs = serde_json::Value::from(seqs.to_vec());
                self.autocommit(move |conn| {
                    Box::pin(async move {
                        sqlx::query(sql!("audit/mark_archived.sql"))
                            .bind(DbJson(&seqs))
                            .bind(DbTime(now))
                            .execute(&mut *conn)
                            .await?;
                        Ok(())
                    })
                })
                .await
            }

            async fn audit_prune_archived(
                &self,
                before: time::OffsetDateTime,
            ) -> $crate::StoreResult<u64> {
                self.write(move |conn| {
                    Box::pin(async move {
                        sqlx::query(sql!("audit/prune_heads.sql"))
                            .bind(DbTime(before))
                            .execute(&mut *conn)
                            .await?;
                        Ok(sqlx::query(sql!("audit/prune.sql"))
                            .bind(DbTime(before))
                            .execute(&mut *conn)
                            .await?
                            .rows_affected())
                    })
                })
                .await
            }

            async fn audit_unarchived_stats(
                &self,
            ) -> $crate::StoreResult<(i64, Option<time::OffsetDateTime>)> {
                let row = sqlx::query(sql!("audit/unarchived_stats.sql"))
                    .fetch_one(&self.pool)
                    .await?;
                let count: i64 = $crate::codec::DbRow::decode(&row, "count")?;
                let oldest: Option<DbTime> = $crate::codec::DbRow::decode(&row, "oldest")?;
                Ok((count, oldest.map(|DbTime(at)| at)))
            }

            async fn audit_pruned_heads(
                &self,
            ) -> $crate::StoreResult<Vec<(wq_core::ItemId, String)>> {
                let rows = sqlx::query(sql!("audit/pruned_heads.sql"))
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter()
                    .map(|row| {
                        let id: DbId = $crate::codec::DbRow::decode(row, "work_item_id")?;
                        Ok((id.0, $crate::codec::DbRow::decode(row, "hash")?))
                    })
                    .collect()
            }

            async fn audit_horizon(&self, wait: bool) -> $crate::StoreResult<Option<i64>> {
                let statement = if wait {
                    sql!("audit/horizon.sql")
                } else {
                    sql!("audit/horizon_now.sql")
                };
                Ok(sqlx::query_scalar(statement).fetch_one(&self.pool).await?)
            }

            async fn ui_session_insert(
                &self,
                session: $crate::sessions::UiSession,
            ) -> $crate::StoreResult<()> {
                self.autocommit(move |conn| {
                    Box::pin(async move {
                        sqlx::query(sql!("ui_sessions/insert.sql"))
                            .bind(&session.id_hash)
                            .bind(&session.kind)
                            .bind($crate::codec::DbJson(&session.principal))
                            .bind(&session.csrf_token)
                            .bind(DbTime(session.created_at))
                            .bind(DbTime(session.expires_at))
                            .execute(&mut *conn)
                            .await?;
                        Ok(())
                    })
                })
                .await
            }

            async fn ui_session_get(
                &self,
                id_hash: &str,
                kind: &str,
                now: time::OffsetDateTime,
            ) -> $crate::StoreResult<Option<$crate::sessions::UiSession>> {
                let row = sqlx::query(sql!("ui_sessions/get.sql"))
                    .bind(id_hash)
                    .bind(kind)
                    .bind(DbTime(now))
                    .fetch_optional(&self.pool)
                    .await?;
                row.as_ref()
                    .map($crate::sessions::session_from_row)
                    .transpose()
            }

            async fn ui_session_take(
                &self,
                id_hash: &str,
                kind: &str,
                now: time::OffsetDateTime,
            ) -> $crate::StoreResult<Option<$crate::sessions::UiSession>> {
                let id_hash = id_hash.to_owned();
                let kind = kind.to_owned();
                let taken = self
                    .autocommit(move |conn| {
                        Box::pin(async move {
                            let row = sqlx::query(sql!("ui_sessions/take.sql"))
                                .bind(&id_hash)
                                .bind(&kind)
                                .fetch_optional(&mut *conn)
                                .await?;
                            row.as_ref()
                                .map($crate::sessions::session_from_row)
                                .transpose()
                        })
                    })
                    .await?;
                Ok(taken.filter(|session| session.expires_at > now))
            }

            async fn ui_session_prune(
                &self,
                now: time::OffsetDateTime,
            ) -> $crate::StoreResult<u64> {
                self.autocommit(move |conn| {
                    Box::pin(async move {
                        Ok(sqlx::query(sql!("ui_sessions/prune.sql"))
                            .bind(DbTime(now))
                            .execute(&mut *conn)
                            .await?
                            .rows_affected())
                    })
                })
                .await
            }

            async fn audit_list(
                &self,
                query: $crate::audit::AuditQuery,
            ) -> $crate::StoreResult<Vec<$crate::audit::AuditRecord>> {
                let rows = sqlx::query(sql!("audit/list.sql"))
                    .bind(query.after)
                    .bind(query.item_id.map(DbId))
                    .bind(query.since.map(DbTime))
                    .bind(query.actor.as_deref())
                    .bind(query.kind.as_deref())
                    .bind(i64::from(query.limit.clamp(1, 10_000)))
                    .bind(query.until)
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter().map($crate::audit::record_from_row).collect()
            }

            async fn item_get(
                &self,
                id: wq_core::ItemId,
            ) -> $crate::StoreResult<Option<wq_core::WorkItem>> {
                let row = sqlx::query(sql!("items/get.sql"))
                    .bind(DbId(id))
                    .fetch_optional(&self.pool)
                    .await?;
                row.as_ref().map(common::item_from_row).transpose()
            }

            async fn item_view(
                &self,
                id: wq_core::ItemId,
                now: time::OffsetDateTime,
            ) -> $crate::StoreResult<Option<wq_core::ItemView>> {
                // The item and its dimensions from one snapshot.
                let mut tx = self.read_transaction().await?;
                let view = read_view(&mut tx, id, now).await?;
                tx.commit().await?;
                Ok(view)
            }

            async fn item_list_placed(
                &self,
                params: $crate::ItemListParams,
            ) -> $crate::StoreResult<Vec<$crate::ListedItem>> {
                // One phase: its own statement, so that the (phase, id)
                // index is used (a rare phase would be searched for
                // through the whole table otherwise).
                let statement = if params.phase.is_some() {
                    sql!("items/list_phase.sql")
                } else {
                    sql!("items/list.sql")
                };
                let rows = sqlx::query(statement)
                    .bind(params.phase.map(wq_core::Phase::as_str))
                    .bind(params.item_type.as_deref())
                    .bind(params.before.map(DbId))
                    .bind(i64::from(params.limit))
                    .bind(common::visibility_param(&params.visibility))
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter().map(common::listed_from_row).collect()
            }

            async fn item_claim(
                &self,
                params: $crate::ClaimParams,
            ) -> $crate::StoreResult<Option<(wq_core::WorkItem, $crate::Lease)>> {
                if params.handled_types.is_empty() {
                    return Ok(None);
                }
                let handled = handled_types(&params.handled_types);
                let (id, now, lease_until) = (params.id, params.now, params.lease_until);
                let item = self
                    .autocommit(move |conn| {
                        Box::pin(async move {
                            let row = sqlx::query(sql!("items/claim.sql"))
                                .bind(DbId(id))
                                .bind(DbTime(now))
                                .bind(DbTime(lease_until))
                                .bind(handled)
                                .fetch_optional(&mut *conn)
                                .await?;
                            row.as_ref()
                                .map(|row| {
                                    let epoch: i64 = $crate::codec::DbRow::decode(row, "lease_epoch")?;
                                    Ok::<_, $crate::StoreError>((
                                        common::item_from_row(row)?,
                                        wq_core::LeaseEpoch(epoch),
                                    ))
                                })
                                .transpose()
                        })
                    })
                    .await?;
                Ok(item.map(|(item, epoch)| {
                    let lease = $crate::Lease {
                        id: item.id,
                        until: $crate::to_micros(lease_until),
                        epoch,
                    };
                    (item, lease)
                }))
            }

            async fn item_heartbeat(
                &self,
                lease: $crate::Lease,
                until: time::OffsetDateTime,
            ) -> $crate::StoreResult<$crate::Lease> {
                self.autocommit(move |conn| {
                    Box::pin(async move {
                        let result = sqlx::query(sql!("items/heartbeat.sql"))
                            .bind(DbId(lease.id))
                            .bind(DbTime(lease.until))
                            .bind(DbTime(until))
                            .execute(&mut *conn)
                            .await?;
                        common::lease_lost_unless_one_row(result.rows_affected(), lease.id)
                    })
                })
                .await?;
                Ok($crate::Lease {
                    id: lease.id,
                    until: $crate::to_micros(until),
                    epoch: lease.epoch,
                })
            }

            async fn item_release(
                &self,
                lease: $crate::Lease,
                until: Option<time::OffsetDateTime>,
            ) -> $crate::StoreResult<()> {
                self.autocommit(move |conn| {
                    Box::pin(async move {
                        let result = sqlx::query(sql!("items/release.sql"))
                            .bind(DbId(lease.id))
                            .bind(DbTime(lease.until))
                            .bind(until.map(DbTime))
                            .execute(&mut *conn)
                            .await?;
                        common::lease_lost_unless_one_row(result.rows_affected(), lease.id)
                    })
                })
                .await
            }

            async fn item_apply_outcome(
                &self,
                outcome: $crate::ApplyOutcome,
            ) -> $crate::StoreResult<wq_core::WorkItem> {
                let (item, records) = self
                    .write(move |conn| {
                        Box::pin(async move {
                            let item = apply_outcome(
                                conn,
                                outcome.lease,
                                outcome.now,
                                outcome.phase,
                                outcome.error.as_deref(),
                                &outcome.dimensions,
                            )
                            .await?;
                            let audits = $crate::audit::succeeded(
                                outcome.lease.id,
                                outcome.now,
                                outcome.action.as_deref(),
                                outcome.phase,
                                outcome.error.as_deref(),
                                &outcome.dimensions,
                                &outcome.records,
                            );
                            let records = append_audits(conn, audits).await?;
                            Ok((item, records))
                        })
                    })
                    .await?;
                $crate::audit::log(&records);
                Ok(item)
            }

            async fn item_begin_action(
                &self,
                begin: $crate::BeginAction,
            ) -> $crate::StoreResult<()> {
                let records = self
                    .write(move |conn| {
                        Box::pin(async move {
                            let lease = begin.lease;
                            let mut audits = Vec::new();
                            match &begin.outcome {
                                Some(outcome) => {
                                    apply_outcome(
                                        conn,
                                        lease,
                                        begin.now,
                                        outcome.phase,
                                        outcome.error.as_deref(),
                                        &outcome.dimensions,
                                    )
                                    .await?;
                                    audits = $crate::audit::succeeded(
                                        lease.id,
                                        begin.now,
                                        outcome.action.as_deref(),
                                        outcome.phase,
                                        outcome.error.as_deref(),
                                        &outcome.dimensions,
                                        &outcome.records,
                                    );
                                }
                                None => {
                                    lease_state(conn, lease).await?;
                                }
                            }
                            audits.push($crate::audit::started(lease.id, begin.now, &begin.action));
                            let records = append_audits(conn, audits).await?;
                            Ok(records)
                        })
                    })
                    .await?;
                $crate::audit::log(&records);
                Ok(())
            }

            async fn item_record_failure(
                &self,
                failure: $crate::RecordFailure,
            ) -> $crate::StoreResult<wq_core::WorkItem> {
                let (item, record) = self.write(move |conn| {
                    Box::pin(async move {
                        let id = failure.lease.id;
                        let row = sqlx::query(sql!("items/record_failure.sql"))
                            .bind(DbId(id))
                            .bind(DbTime(failure.lease.until))
                            .bind(&failure.error)
                            .bind(DbTime(failure.now))
                            .bind(failure.permanent)
                            .bind(failure.max_attempts)
                            .bind(DbTime(failure.retry_at))
                            .bind(failure.outage)
                            .bind(DbTime(failure.outage_started_before))
                            .fetch_optional(&mut *conn)
                            .await?
                            .ok_or($crate::StoreError::LeaseLost(id))?;
                        let item = common::item_from_row(&row)?;
                        let record = append_audit(conn, $crate::audit::failed(&failure, &item)).await?;
                        Ok((item, record))
                    })
                })
                .await?;
                $crate::audit::log(std::slice::from_ref(&record));
                Ok(item)
            }

            async fn item_retry(
                &self,
                id: wq_core::ItemId,
                now: time::OffsetDateTime,
                actor: &str,
                event_type: Option<&str>,
            ) -> $crate::StoreResult<wq_core::WorkItem> {
                let actor = actor.to_owned();
                let event_type = event_type.map(str::to_owned);
                let (item, records) = self
                    .write(move |conn| {
                        Box::pin(async move {
                            // The type's event first: the item's advisory
                            // lock before its row, as the park takes them.
                            let event = event_type.map(|event_type| $crate::NewEvent {
                                item_id: id,
                                event_type,
                                body: serde_json::json!({ "caller": actor }),
                                now,
                                origin: Some($crate::EventOrigin {
                                    actor: actor.clone(),
                                    ..$crate::EventOrigin::default()
                                }),
                            });
                            let event_id = match &event {
                                Some(event) => Some(insert_event(conn, event).await?),
                                None => None,
                            };
                            let before = sqlx::query_scalar::<_, String>(sql!("items/phase.sql"))
                                .bind(DbId(id))
                                .fetch_optional(&mut *conn)
                                .await?;
                            let item = retry_item(conn, id, now).await?;
                            let mut records = vec![
                                $crate::audit::NewAudit::new(id, now, actor, "item.retried")
                                    .states(
                                        before.map(|phase| serde_json::json!({"phase": phase})),
                                        Some(serde_json::json!({"phase": "active"})),
                                    )
                                    .trigger(serde_json::json!({"source": "api", "action": "retry"})),
                            ];
                            if let (Some(event), Some(event_id)) = (&event, event_id) {
                                records.push($crate::audit::received(event, event_id));
                            }
                            let records = append_audits(conn, records).await?;
                            Ok((item, records))
                        })
                    })
                    .await?;
                $crate::audit::log(&records);
                Ok(item)
            }

            async fn item_mark_actionable(
                &self,
                id: wq_core::ItemId,
                now: time::OffsetDateTime,
            ) -> $crate::StoreResult<()> {
                self.autocommit(move |conn| {
                    Box::pin(async move {
                        let result = sqlx::query(sql!("items/mark_actionable.sql"))
                            .bind(DbId(id))
                            .bind(DbTime(now))
                            .execute(&mut *conn)
                            .await?;
                        if result.rows_affected() == 0 {
                            return Err($crate::StoreError::NotFound(id));
                        }
                        hint_work(&mut *conn, id).await
                    })
                })
                .await
            }

            async fn item_count_by_phase(&self) -> $crate::StoreResult<Vec<$crate::PhaseCount>> {
                let rows = sqlx::query(sql!("items/count_by_phase.sql"))
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter().map(common::phase_count_from_row).collect()
            }

            async fn dimension_list(
                &self,
                id: wq_core::ItemId,
            ) -> $crate::StoreResult<Vec<wq_core::Dimension>> {
                let rows = sqlx::query(sql!("dimensions/list.sql"))
                    .bind(DbId(id))
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter().map(common::dimension_from_row).collect()
            }

            async fn dimension_upsert(
                &self,
                id: wq_core::ItemId,
                update: wq_core::DimensionUpdate,
                now: time::OffsetDateTime,
            ) -> $crate::StoreResult<()> {
                self.autocommit(move |conn| {
                    Box::pin(async move { upsert_dimension(conn, id, &update, now).await })
                })
                .await
            }

            async fn event_insert(&self, event: $crate::NewEvent) -> $crate::StoreResult<i64> {
                // Serialised with item_park_with (DDR-34); the wake-up, the
                // event and its audit record commit together (DDR-49).
                let (id, record) = self
                    .write(move |conn| {
                        Box::pin(async move {
                            let id = insert_event(conn, &event).await?;
                            let record = append_audit(conn, $crate::audit::received(&event, id)).await?;
                            Ok((id, record))
                        })
                    })
                    .await?;
                $crate::audit::log(std::slice::from_ref(&record));
                Ok(id)
            }

            async fn event_next(
                &self,
                id: wq_core::ItemId,
            ) -> $crate::StoreResult<Option<wq_core::PendingEvent>> {
                let row = sqlx::query(sql!("events/next.sql"))
                    .bind(DbId(id))
                    .fetch_optional(&self.pool)
                    .await?;
                row.as_ref().map(common::event_from_row).transpose()
            }

            async fn event_apply(
                &self,
                apply: $crate::ApplyEvent,
            ) -> $crate::StoreResult<$crate::EventApplied> {
                let (outcome, record) = self
                    .write(move |conn| {
                        Box::pin(async move {
                            let outcome = apply_event(conn, &apply).await?;
                            let record = append_audit(conn, $crate::audit::applied(&apply, outcome)).await?;
                            Ok((outcome, record))
                        })
                    })
                    .await?;
                $crate::audit::log(std::slice::from_ref(&record));
                Ok(outcome)
            }

            async fn sweep_candidates(
                &self,
                params: $crate::SweepParams,
            ) -> $crate::StoreResult<Vec<wq_core::ItemId>> {
                if params.handled_types.is_empty() {
                    return Ok(Vec::new());
                }
                let ids: Vec<DbId> = sqlx::query_scalar(sql!("sweep/candidates.sql"))
                    .bind(handled_types(&params.handled_types))
                    .bind(DbTime(params.now))
                    .bind(i64::from(params.limit))
                    .fetch_all(&self.pool)
                    .await?;
                Ok(ids.into_iter().map(|DbId(id)| id).collect())
            }

            $($extra)*
        }
    };
}
