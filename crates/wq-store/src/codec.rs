//! How values are stored, for both backends: one newtype per stored shape,
//! each an sqlx `Type`/`Encode`/`Decode` for SQLite and PostgreSQL, so a
//! statement binds and a row decoder reads the same Rust text on both.
//!
//! | type | SQLite | PostgreSQL |
//! |---|---|---|
//! | [`DbId`] | TEXT, hyphenated lowercase | `uuid` |
//! | [`DbTime`] | INTEGER microseconds since the Unix epoch | `timestamptz` |
//! | [`DbJson`] | TEXT | `jsonb` (the audit records' fields: `json`, read alike) |
//!
//! Times are truncated to whole microseconds here, on encoding, and
//! nowhere else ([`to_micros`]).

use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgRow, PgTypeInfo, PgValueRef};
use sqlx::sqlite::{SqliteArgumentsBuffer, SqliteRow, SqliteTypeInfo, SqliteValueRef};
use sqlx::{Decode, Encode, Postgres, Row, Sqlite, Type};
use time::OffsetDateTime;
use uuid::Uuid;
use wq_core::ItemId;

use crate::{StoreError, StoreResult};

/// JSON: TEXT on SQLite, `jsonb` on PostgreSQL (sqlx's own wrapper does
/// both, and reads `json` too).
pub use sqlx::types::Json as DbJson;

/// An item id as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DbId(pub ItemId);

/// A time as stored, truncated to microseconds on encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DbTime(pub OffsetDateTime);

/// Truncates to whole microseconds, the precision both backends store.
pub fn to_micros(at: OffsetDateTime) -> OffsetDateTime {
    let nanos = at.nanosecond();
    at.replace_nanosecond(nanos - nanos % 1_000)
        .expect("truncating nanoseconds stays in range")
}

/// Microseconds since the Unix epoch; truncates like [`to_micros`].
pub fn micros(at: OffsetDateTime) -> i64 {
    let micros = at.unix_timestamp_nanos().div_euclid(1_000);
    i64::try_from(micros).expect("a representable OffsetDateTime fits in i64 microseconds")
}

/// The time `micros` microseconds after the Unix epoch.
pub fn from_micros(micros: i64) -> StoreResult<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(micros) * 1_000)
        .map_err(|error| StoreError::Corrupt(format!("timestamp {micros}: {error}")))
}

// --- SQLite ------------------------------------------------------------------

impl Type<Sqlite> for DbId {
    fn type_info() -> SqliteTypeInfo {
        <String as Type<Sqlite>>::type_info()
    }
    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <String as Type<Sqlite>>::compatible(ty)
    }
}

impl Encode<'_, Sqlite> for DbId {
    fn encode_by_ref(&self, buf: &mut SqliteArgumentsBuffer) -> Result<IsNull, BoxDynError> {
        Encode::<Sqlite>::encode(self.0.0.hyphenated().to_string(), buf)
    }
}

impl<'r> Decode<'r, Sqlite> for DbId {
    fn decode(value: SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
        let text = <&str as Decode<Sqlite>>::decode(value)?;
        let id = text
            .parse()
            .map_err(|error| format!("work item id {text:?}: {error}"))?;
        Ok(DbId(id))
    }
}

impl Type<Sqlite> for DbTime {
    fn type_info() -> SqliteTypeInfo {
        <i64 as Type<Sqlite>>::type_info()
    }
    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <i64 as Type<Sqlite>>::compatible(ty)
    }
}

impl Encode<'_, Sqlite> for DbTime {
    fn encode_by_ref(&self, buf: &mut SqliteArgumentsBuffer) -> Result<IsNull, BoxDynError> {
        Encode::<Sqlite>::encode(micros(self.0), buf)
    }
}

impl<'r> Decode<'r, Sqlite> for DbTime {
    fn decode(value: SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(DbTime(from_micros(<i64 as Decode<Sqlite>>::decode(
            value,
        )?)?))
    }
}

// --- PostgreSQL --------------------------------------------------------------

impl Type<Postgres> for DbId {
    fn type_info() -> PgTypeInfo {
        <Uuid as Type<Postgres>>::type_info()
    }
}

impl Encode<'_, Postgres> for DbId {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        Encode::<Postgres>::encode_by_ref(&self.0.0, buf)
    }
}

impl<'r> Decode<'r, Postgres> for DbId {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(DbId(ItemId(<Uuid as Decode<Postgres>>::decode(value)?)))
    }
}

impl Type<Postgres> for DbTime {
    fn type_info() -> PgTypeInfo {
        <OffsetDateTime as Type<Postgres>>::type_info()
    }
}

impl Encode<'_, Postgres> for DbTime {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        Encode::<Postgres>::encode(to_micros(self.0), buf)
    }
}

impl<'r> Decode<'r, Postgres> for DbTime {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(DbTime(<OffsetDateTime as Decode<Postgres>>::decode(value)?))
    }
}

// --- rows --------------------------------------------------------------------

/// A value both backends decode.
pub trait Column:
    for<'r> Decode<'r, Sqlite> + Type<Sqlite> + for<'r> Decode<'r, Postgres> + Type<Postgres>
{
}

impl<T> Column for T where
    T: for<'r> Decode<'r, Sqlite> + Type<Sqlite> + for<'r> Decode<'r, Postgres> + Type<Postgres>
{
}

/// A row of either backend, so one decoder serves both.
pub trait DbRow: Row {
    /// The named column; a value that does not decode is
    /// [`StoreError::Corrupt`].
    fn decode<T: Column>(&self, name: &str) -> StoreResult<T>;
}

impl DbRow for SqliteRow {
    fn decode<T: Column>(&self, name: &str) -> StoreResult<T> {
        self.try_get(name).map_err(corrupt_or_database)
    }
}

impl DbRow for PgRow {
    fn decode<T: Column>(&self, name: &str) -> StoreResult<T> {
        self.try_get(name).map_err(corrupt_or_database)
    }
}

/// A stored value that does not decode is corrupt data, not a database
/// failure.
fn corrupt_or_database(error: sqlx::Error) -> StoreError {
    match error {
        sqlx::Error::ColumnDecode { index, source } => {
            StoreError::Corrupt(format!("{index}: {source}"))
        }
        other => StoreError::Database(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micros_round_trip_and_truncate_like_to_micros() {
        let at = OffsetDateTime::from_unix_timestamp_nanos(1_750_000_000_123_456_789).unwrap();
        assert_eq!(from_micros(micros(at)).unwrap(), to_micros(at));
        let before_epoch = OffsetDateTime::from_unix_timestamp_nanos(-1_500).unwrap();
        assert_eq!(
            from_micros(micros(before_epoch)).unwrap(),
            to_micros(before_epoch)
        );
    }
}
