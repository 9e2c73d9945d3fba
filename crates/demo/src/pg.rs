//! A fresh PostgreSQL database for one run, created and dropped with `psql` on the server the tests use.

use std::time::Duration;

use anyhow::{Context, bail};
use tokio::process::Command;

/// The same server, and the same variable, as the store's tests (`payoutd_testkit::db`).
pub const PG_ADMIN_URL_ENV: &str = "PAYOUTD_TEST_PG_URL";
pub const PG_ADMIN_URL_DEFAULT: &str = "postgres://postgres@127.0.0.1:5432/postgres";
/// The chaos run's databases: `scripts/test` drops leftovers of interrupted runs (`payoutd_t_*`).
pub const CHAOS_DB_PREFIX: &str = "payoutd_t_chaos_";
/// The memory benchmark's databases: outside `payoutd_t_*`, so a test run started beside an hour
/// of benchmark cannot drop its database; the benchmark drops its own leftovers at its start.
pub const BENCH_DB_PREFIX: &str = "payoutd_bench_";
pub const PSQL_TIMEOUT_SECS: u64 = 30;
/// How often [`Database::analyze_in_place_of_autovacuum`] analyzes the database.
pub const ANALYZE_EVERY_SECS: u64 = 30;

/// One database on the server; dropped by [`Database::drop_now`], never implicitly.
pub struct Database {
    admin_url: String,
    pub name: String,
    /// What payoutd connects to.
    pub url: String,
}

/// Runs one statement; returns the rows unaligned, `|`-separated, one a line.
async fn psql(url: &str, sql: &str) -> anyhow::Result<String> {
    let mut command = Command::new("psql");
    command
        .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql])
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(PSQL_TIMEOUT_SECS), command.output())
        .await
        .with_context(|| format!("psql did not finish within {PSQL_TIMEOUT_SECS} s: {sql}"))?
        .context("run psql (the PostgreSQL client)")?;
    if !output.status.success() {
        bail!("psql {sql:?} failed: {}", String::from_utf8_lossy(&output.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Runs `sql` on the database at `url` (a probe's write): its rows, as [`psql`] gives them.
pub async fn execute(url: &str, sql: &str) -> anyhow::Result<String> {
    psql(url, sql).await
}

fn admin_url() -> String {
    std::env::var(PG_ADMIN_URL_ENV).unwrap_or_else(|_| PG_ADMIN_URL_DEFAULT.to_owned())
}

impl Database {
    /// `CREATE DATABASE payoutd_t_chaos_<tag>` on `$PAYOUTD_TEST_PG_URL` (default: local, user postgres).
    pub async fn create_for_chaos(tag: &str) -> anyhow::Result<Database> {
        Database::create(CHAOS_DB_PREFIX, tag).await
    }

    /// `CREATE DATABASE payoutd_bench_<tag>` after dropping what an interrupted benchmark left.
    pub async fn create_for_a_benchmark(tag: &str) -> anyhow::Result<Database> {
        let admin_url = admin_url();
        let leftovers = psql(
            &admin_url,
            &format!("SELECT datname FROM pg_database WHERE datname LIKE '{BENCH_DB_PREFIX}%'"),
        )
        .await?;
        for name in leftovers.lines().map(str::trim).filter(|name| !name.is_empty()) {
            psql(&admin_url, &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await?;
        }
        Database::create(BENCH_DB_PREFIX, tag).await
    }

    async fn create(prefix: &str, tag: &str) -> anyhow::Result<Database> {
        let admin_url = admin_url();
        anyhow::ensure!(
            tag.chars().all(|c| c.is_ascii_alphanumeric()),
            "database tag {tag:?} must be alphanumeric"
        );
        let name = format!("{prefix}{tag}");
        psql(&admin_url, &format!("CREATE DATABASE {name}")).await.with_context(|| {
            format!("PostgreSQL at {admin_url} is required (scripts/chaos starts it)")
        })?;
        let (base, _) = admin_url.rsplit_once('/').context("the admin URL has no database path")?;
        let url = format!("{base}/{name}");
        Ok(Database { admin_url, name, url })
    }

    /// Reads payoutd's own records, for diagnostics only (the verdict comes from the node).
    pub async fn query(&self, sql: &str) -> anyhow::Result<String> {
        psql(&self.url, sql).await
    }

    /// Whether the server runs autovacuum (`SHOW autovacuum`).
    pub async fn autovacuum_runs(&self) -> anyhow::Result<bool> {
        Ok(psql(&self.url, "SHOW autovacuum").await?.trim() == "on")
    }

    /// `ANALYZE` every `ANALYZE_EVERY_SECS` until the returned guard is dropped: the statistics
    /// autovacuum keeps on a server that runs it. Without them PostgreSQL keeps the plans it made
    /// for the empty tables, and a payout's key lookup walks its merchant's payouts.
    pub fn analyze_in_place_of_autovacuum(&self) -> Analyzing {
        let url = self.url.clone();
        Analyzing(tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(ANALYZE_EVERY_SECS)).await;
                if let Err(e) = psql(&url, "ANALYZE").await {
                    crate::report::say(format!("ANALYZE in place of autovacuum failed: {e:#}"));
                }
            }
        }))
    }

    /// Drops the database, cutting any connection still open.
    pub async fn drop_now(self) -> anyhow::Result<()> {
        psql(&self.admin_url, &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name))
            .await
            .map(drop)
    }
}

/// The periodic `ANALYZE` of [`Database::analyze_in_place_of_autovacuum`]; stops when dropped.
pub struct Analyzing(tokio::task::JoinHandle<()>);

impl Drop for Analyzing {
    fn drop(&mut self) {
        self.0.abort();
    }
}
