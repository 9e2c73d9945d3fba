//! Fresh databases for tests: one PostgreSQL database or one SQLite file per test. Never skips.

use std::sync::Arc;

use payoutd_engine::{PipelineStore, Store};

use payoutd_store::{PgStore, SqliteStore};

/// The server the tests create their databases on; the test script starts it if needed.
pub const TEST_PG_ADMIN_URL_DEFAULT: &str = "postgres://postgres@127.0.0.1:5432/postgres";
/// Prefix of every test database name, so a test run can drop the leftovers of earlier ones.
pub const TEST_DB_PREFIX: &str = "payoutd_t_";

pub fn pg_admin_url() -> String {
    std::env::var("PAYOUTD_TEST_PG_URL").unwrap_or_else(|_| TEST_PG_ADMIN_URL_DEFAULT.to_owned())
}

/// A store on a fresh database, with a raw SQL door for tests that try to break the schema.
pub enum TestDb {
    Postgres { store: Arc<PgStore>, url: String },
    Sqlite { store: Arc<SqliteStore>, url: String },
}

impl TestDb {
    pub fn store(&self) -> Arc<dyn Store> {
        match self {
            TestDb::Postgres { store, .. } => store.clone(),
            TestDb::Sqlite { store, .. } => store.clone(),
        }
    }

    /// The same store through the pipeline port, as the workers see it.
    pub fn operator_views(&self) -> Arc<dyn payoutd_engine::OperatorViewStore> {
        match self {
            TestDb::Postgres { store, .. } => store.clone(),
            TestDb::Sqlite { store, .. } => store.clone(),
        }
    }

    pub fn pipeline(&self) -> Arc<dyn PipelineStore> {
        match self {
            TestDb::Postgres { store, .. } => store.clone(),
            TestDb::Sqlite { store, .. } => store.clone(),
        }
    }

    /// The same store through the EVM family's port.
    pub fn evm_lines(&self) -> Arc<dyn payoutd_engine::EvmLineStore> {
        match self {
            TestDb::Postgres { store, .. } => store.clone(),
            TestDb::Sqlite { store, .. } => store.clone(),
        }
    }

    /// The same store through the webhook port.
    pub fn webhooks(&self) -> Arc<dyn payoutd_engine::WebhookStore> {
        match self {
            TestDb::Postgres { store, .. } => store.clone(),
            TestDb::Sqlite { store, .. } => store.clone(),
        }
    }

    /// The same store's server clock.
    pub fn time(&self) -> Arc<dyn payoutd_engine::DatabaseTime> {
        match self {
            TestDb::Postgres { store, .. } => store.clone(),
            TestDb::Sqlite { store, .. } => store.clone(),
        }
    }

    /// The URL a separate process (the binary, a worker) would use for this same database.
    pub fn url(&self) -> &str {
        match self {
            TestDb::Postgres { url, .. } | TestDb::Sqlite { url, .. } => url,
        }
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self, TestDb::Postgres { .. })
    }

    /// Runs one statement outside the store (as an intruder or a careless operator would).
    pub async fn exec_raw(&self, sql: &str) -> Result<u64, String> {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        match self {
            TestDb::Postgres { store, .. } => sqlx::query(sql)
                .execute(store.pool())
                .await
                .map(|r| r.rows_affected())
                .map_err(|e| e.to_string()),
            TestDb::Sqlite { store, .. } => sqlx::query(sql)
                .execute(store.pool())
                .await
                .map(|r| r.rows_affected())
                .map_err(|e| e.to_string()),
        }
    }

    /// A copy of this database as it stands now, on new connections. A test goes on with the copy
    /// and keeps this one as a backup taken now (`reopen` restores it): on PostgreSQL this
    /// database's connections are closed to copy it, so its own store is not used again.
    pub async fn copy(&self) -> TestDb {
        match self {
            TestDb::Postgres { url, .. } => {
                let (base, name) = url.rsplit_once('/').expect("a database URL names its database");
                let copy = format!("{TEST_DB_PREFIX}{}", uuid::Uuid::new_v4().simple());
                let admin = PgStore::connect_with(&pg_admin_url_on(base), 1)
                    .await
                    .expect("connect to the test server's postgres database");
                for sql in [
                    format!(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                         WHERE datname = '{name}' AND pid <> pg_backend_pid()"
                    ),
                    format!("CREATE DATABASE {copy} TEMPLATE {name}"),
                ] {
                    sqlx::query(sqlx::AssertSqlSafe(sql))
                        .execute(admin.pool())
                        .await
                        .expect("copy the test database");
                }
                admin.pool().close().await;
                postgres_at(&format!("{base}/{copy}")).await
            }
            TestDb::Sqlite { store, .. } => {
                let path = std::env::temp_dir()
                    .join(format!("payoutd-test-{}.sqlite3", uuid::Uuid::new_v4().simple()));
                sqlx::query(sqlx::AssertSqlSafe(format!("VACUUM INTO '{}'", path.display())))
                    .execute(store.pool())
                    .await
                    .expect("copy the SQLite test database");
                let url = format!("sqlite://{}", path.display());
                let copy = SqliteStore::connect(&url).await.expect("open the copy");
                copy.migrate().await.expect("migrate the copy");
                TestDb::Sqlite { store: Arc::new(copy), url }
            }
        }
    }

    /// This database on new connections, as a process started on a restored backup opens it.
    pub async fn reopen(&self) -> TestDb {
        match self {
            TestDb::Postgres { url, .. } => postgres_at(url).await,
            TestDb::Sqlite { url, .. } => {
                let store =
                    SqliteStore::connect(url).await.expect("reopen the SQLite test database");
                store.migrate().await.expect("migrate the reopened database");
                TestDb::Sqlite { store: Arc::new(store), url: url.clone() }
            }
        }
    }

    /// Runs a query returning one integer.
    pub async fn scalar_raw(&self, sql: &str) -> i64 {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        match self {
            TestDb::Postgres { store, .. } => sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(store.pool())
                .await
                .expect("scalar query"),
            TestDb::Sqlite { store, .. } => sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(store.pool())
                .await
                .expect("scalar query"),
        }
    }
}

/// Creates and migrates a new PostgreSQL database. Panics (fails the test) when PostgreSQL is not
/// reachable: a missing dependency is a failure, never a skip.
pub async fn fresh_postgres() -> TestDb {
    fresh_postgres_on(&pg_admin_url()).await
}

/// `fresh_postgres` on the server whose `postgres` database `admin` names (a test's own server).
pub async fn fresh_postgres_on(admin: &str) -> TestDb {
    let admin = admin.to_owned();
    let name = format!("{TEST_DB_PREFIX}{}", uuid::Uuid::new_v4().simple());
    let admin_store = PgStore::connect_with(&admin, 1).await.unwrap_or_else(|e| {
        panic!("PostgreSQL is required for this test and is not reachable at {admin}: {e}. Run scripts/test, which starts it.")
    });
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(admin_store.pool())
        .await
        .expect("create test database");
    admin_store.pool().close().await;
    let (base, _) = admin.rsplit_once('/').expect("admin URL has a database path");
    let url = format!("{base}/{name}");
    let store = PgStore::connect_with(&url, 24).await.expect("connect to fresh test database");
    store.migrate().await.expect("migrate test database");
    TestDb::Postgres { store: Arc::new(store), url }
}

/// The admin URL (its `postgres` database) of the server a test database's `base` URL names.
fn pg_admin_url_on(base: &str) -> String {
    format!("{base}/postgres")
}

/// The store on an existing database at `url` (a restored copy of a test's database), migrated.
pub async fn postgres_at(url: &str) -> TestDb {
    let store = PgStore::connect_with(url, 24).await.expect("connect to the restored database");
    store.migrate().await.expect("migrate the restored database");
    TestDb::Postgres { store: Arc::new(store), url: url.to_owned() }
}

/// Creates and migrates a new SQLite file in the temp directory.
pub async fn fresh_sqlite() -> TestDb {
    let path = std::env::temp_dir()
        .join(format!("payoutd-test-{}.sqlite3", uuid::Uuid::new_v4().simple()));
    let url = format!("sqlite://{}", path.display());
    let store = SqliteStore::connect(&url).await.expect("open SQLite test database");
    store.migrate().await.expect("migrate SQLite test database");
    TestDb::Sqlite { store: Arc::new(store), url }
}

/// Turns each listed `async fn name(db: TestDb)` into two tests, `postgres::name` and `sqlite::name`,
/// each on a fresh database: one contract, both stores.
#[macro_export]
macro_rules! both_stores {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::db::fresh_postgres().await).await
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::db::fresh_sqlite().await).await
                }
            )*
        }
    };
}
