//! The optional send guard on Redis: `SET key value NX EX` records which attempt of a payout went out.

use async_trait::async_trait;
use payoutd_engine::rail::{ReadError, SendGuard};
use redis::aio::ConnectionManager;

/// Records outlive any provider/mempool window many times over: 30 days.
pub const GUARD_TTL_SECONDS: u64 = 30 * 24 * 3_600;

pub struct RedisGuard {
    connection: ConnectionManager,
}

impl RedisGuard {
    pub async fn connect(url: &str) -> anyhow::Result<RedisGuard> {
        let client = redis::Client::open(url)?;
        let connection = ConnectionManager::new(client).await?;
        Ok(RedisGuard { connection })
    }
}

#[async_trait]
impl SendGuard for RedisGuard {
    async fn record_or_get(&self, attempt_key: &str, value: &str) -> Result<String, ReadError> {
        let mut conn = self.connection.clone();
        let set: Option<String> = redis::cmd("SET")
            .arg(attempt_key)
            .arg(value)
            .arg("NX")
            .arg("EX")
            .arg(GUARD_TTL_SECONDS)
            .query_async(&mut conn)
            .await
            .map_err(|e| ReadError(e.to_string()))?;
        if set.is_some() {
            return Ok(value.to_owned());
        }
        let existing: Option<String> = redis::cmd("GET")
            .arg(attempt_key)
            .query_async(&mut conn)
            .await
            .map_err(|e| ReadError(e.to_string()))?;
        existing.ok_or_else(|| {
            ReadError(format!("guard key {attempt_key} vanished between SET NX and GET"))
        })
    }

    async fn get(&self, attempt_key: &str) -> Result<Option<String>, ReadError> {
        let mut conn = self.connection.clone();
        redis::cmd("GET")
            .arg(attempt_key)
            .query_async(&mut conn)
            .await
            .map_err(|e| ReadError(e.to_string()))
    }
}
