//! The Store port on PostgreSQL (production, many processes) and SQLite (the embedded default).

mod batches;
mod cursors;
mod detection;
mod evm_line_port;
mod merchants;
mod operator_views;
mod pg;
pub mod pg_claim;
mod pg_intake_batch;
mod pg_pipeline;
mod pg_settle;
mod pg_sweep_sql;
mod pipeline_port;
mod pipeline_rows;
mod rows;
mod sealed;
mod shared_incidents;
mod shared_reads;
mod shared_sql;
mod sqlite;
mod sqlite_intake_batch;
mod sqlite_pipeline;
mod sqlite_process;
mod sqlite_sweep_sql;
mod store_port;
mod wallet_books;
mod webhooks;

/// Deliberately broken behaviours for the simulator's self-test; compiled only with `defects`.
#[cfg(feature = "defects")]
pub mod defects {
    use std::sync::atomic::{AtomicBool, Ordering};

    static UNCONDITIONAL: AtomicBool = AtomicBool::new(false);

    /// Process-wide: SQLite payout transitions drop their expected-state guard (I5 broken).
    pub fn set_unconditional_transitions(on: bool) {
        UNCONDITIONAL.store(on, Ordering::SeqCst);
    }

    pub fn unconditional_transitions() -> bool {
        UNCONDITIONAL.load(Ordering::SeqCst)
    }
}

use std::sync::Arc;

pub use pg::PgStore;
pub use sealed::{SECRETS_KEY_BYTES, SecretsKey};
pub use sqlite::SqliteStore;

use payoutd_engine::{PipelineStore, Store, StoreError, WebhookStore};

/// Opens the store named by a URL (`postgres://...` or `sqlite://path` / `sqlite::memory:`) and migrates it.
pub async fn open(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    Ok(open_pipeline(url).await?)
}

/// [`open`], for the workers: the same store with the pipeline port as well.
pub async fn open_pipeline(url: &str) -> Result<Arc<dyn PipelineStore>, StoreError> {
    Ok(open_stores(url).await?.pipeline)
}

/// One opened store through each of its ports.
#[derive(Clone)]
pub struct Stores {
    pub pipeline: Arc<dyn PipelineStore>,
    /// The EVM family's own port of the same store.
    pub evm_lines: Arc<dyn payoutd_engine::EvmLineStore>,
    pub webhooks: Arc<dyn WebhookStore>,
    pub operator_views: Arc<dyn payoutd_engine::OperatorViewStore>,
    /// The database server's clock, which every worker measures its windows on.
    pub time: Arc<dyn payoutd_engine::DatabaseTime>,
    /// What the database server's settings put at risk (`serve` and `worker` log them at start;
    /// one-shot commands keep their output clean).
    pub warnings: Vec<&'static str>,
}

impl Stores {
    /// Every port of one store.
    fn of<S>(store: Arc<S>) -> Stores
    where
        S: PipelineStore
            + payoutd_engine::EvmLineStore
            + WebhookStore
            + payoutd_engine::OperatorViewStore
            + payoutd_engine::DatabaseTime
            + 'static,
    {
        Stores {
            pipeline: store.clone(),
            evm_lines: store.clone(),
            webhooks: store.clone(),
            operator_views: store.clone(),
            time: store,
            warnings: Vec::new(),
        }
    }
}

/// Opens and migrates the store named by `url`, for every port.
pub async fn open_stores(url: &str) -> Result<Stores, StoreError> {
    open_stores_with(url, None).await
}

/// `open_stores`, sealing webhook secrets at rest with `secrets_key` when one is given.
pub async fn open_stores_with(
    url: &str,
    secrets_key: Option<Arc<SecretsKey>>,
) -> Result<Stores, StoreError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let mut store = PgStore::connect(url).await?;
        store.secrets_key = secrets_key;
        store.migrate().await?;
        let warnings = store.settings_warnings().await;
        Ok(Stores { warnings, ..Stores::of(Arc::new(store)) })
    } else if url.starts_with("sqlite:") {
        let mut store = SqliteStore::connect(url).await?;
        store.secrets_key = secrets_key;
        store.migrate().await?;
        Ok(Stores::of(Arc::new(store)))
    } else {
        Err(StoreError::Unavailable(format!(
            "unsupported database URL scheme in {:?}: use postgres://... or sqlite://FILE",
            url.split(':').next().unwrap_or("")
        )))
    }
}

/// Seals every webhook secret in the database at `url` under `current` (`payoutd webhooks reseal`):
/// those stored in clear before a key was set, and those sealed under `previous` when the key is
/// rotated. How many were rewritten; nothing is when any opens with neither key.
pub async fn reseal_webhook_secrets(
    url: &str,
    current: &SecretsKey,
    previous: Option<&SecretsKey>,
) -> Result<u64, StoreError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let store = PgStore::connect(url).await?;
        store.migrate().await?;
        store.reseal_webhook_secrets(current, previous).await
    } else if url.starts_with("sqlite:") {
        let store = SqliteStore::connect(url).await?;
        store.migrate().await?;
        store.reseal_webhook_secrets(current, previous).await
    } else {
        Err(StoreError::Unavailable(
            "unsupported database URL scheme: use postgres://... or sqlite://FILE".into(),
        ))
    }
}

/// Every backend error becomes a store error the engine can act on by variant.
pub(crate) fn classify(err: sqlx::Error) -> StoreError {
    match &err {
        sqlx::Error::Database(db)
            if db.is_check_violation()
                || db.is_foreign_key_violation()
                || db.is_unique_violation() =>
        {
            StoreError::Invariant(db.message().to_owned())
        }
        sqlx::Error::Database(db) if db.message().contains("append-only") => {
            StoreError::Invariant(db.message().to_owned())
        }
        sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::Decode(_)
        | sqlx::Error::ColumnNotFound(_) => StoreError::Corrupt(err.to_string()),
        _ => StoreError::Unavailable(err.to_string()),
    }
}

pub(crate) fn is_unique_violation(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.is_unique_violation())
}
