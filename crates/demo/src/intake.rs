//! The business events the demo pays, and their submission through the API: every request twice, some as bursts of identical concurrent requests.

use std::collections::BTreeSet;
use std::sync::Arc;

use payoutd_domain::{Amount, EvmAddress};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::api::{Api, As};
use crate::chain::{Coin, Signature};

/// Payouts submitted at once; SQLite has one writer, more only queue.
pub const SUBMIT_CONCURRENCY: usize = 8;
/// Pause between starting two payouts: traffic arrives over time (about 15 s for 300), so the
/// mid-way kill lands while merchants are still submitting and must retry.
pub const SUBMIT_PACE_MS: u64 = 50;
/// The demo's pacing (SQLite, one process).
pub const DEMO_PACING: Pacing = Pacing { concurrency: SUBMIT_CONCURRENCY, pace_ms: SUBMIT_PACE_MS };
/// Identical requests sent at the same instant for a burst payout.
pub const BURST_SIZE: usize = 16;
/// Payouts the demo submits as bursts (spread through the run).
pub const BURSTS: usize = 4;

/// How fast business events arrive: at most `concurrency` in flight, a new one every `pace_ms`.
#[derive(Debug, Clone, Copy)]
pub struct Pacing {
    pub concurrency: usize,
    pub pace_ms: u64,
}
/// 0.001 ETH plus the payout's index in wei: unique, and cheap for the hot wallet.
pub const ETH_AMOUNT_BASE_WEI: u128 = 1_000_000_000_000_000;
/// 1 USDC (6 decimals) plus the payout's index.
pub const USDC_AMOUNT_BASE: u128 = 1_000_000;

/// How a payout's request is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Copies {
    /// Sent, then sent again after the answer: a client retrying after a timeout.
    Twice,
    /// [`BURST_SIZE`] identical requests at once: a retry storm.
    Burst,
}

/// One business event.
#[derive(Debug, Clone)]
pub struct Planned {
    pub key: String,
    pub coin: Coin,
    pub asset: String,
    pub amount: Amount,
    pub destination: EvmAddress,
    pub copies: Copies,
    pub user: String,
}

impl Planned {
    pub fn body(&self) -> Value {
        json!({
            "asset": self.asset,
            "amount": self.amount.to_string(),
            "destination": self.destination.to_string(),
            "idempotency_key": self.key,
            "metadata": {"user": self.user},
        })
    }

    pub fn signature(&self) -> Signature {
        (self.coin, self.destination, self.amount)
    }
}

/// An address no one else pays in this run: a run tag keeps reruns against one node apart.
pub fn destination(run_tag: u32, index: u32) -> EvmAddress {
    let mut bytes = [0u8; 20];
    bytes[0] = 0xDE;
    bytes[1] = 0x30;
    bytes[2..6].copy_from_slice(&run_tag.to_be_bytes());
    bytes[16..].copy_from_slice(&index.to_be_bytes());
    EvmAddress::from_bytes(bytes)
}

/// `count` payouts alternating ETH and USDC, each to its own address, `bursts` of them as bursts.
pub fn plan(
    count: usize,
    run_tag: u32,
    eth: &str,
    usdc: &str,
    first_index: u32,
    bursts: usize,
) -> Vec<Planned> {
    let burst_every = (count / bursts.max(1)).max(1);
    (0..count)
        .map(|n| {
            let i = first_index + n as u32;
            let (coin, asset, amount) = if n % 2 == 0 {
                (Coin::Eth, eth, ETH_AMOUNT_BASE_WEI + u128::from(i))
            } else {
                (Coin::Usdc, usdc, USDC_AMOUNT_BASE + u128::from(i))
            };
            let burst = n % burst_every == burst_every / 2 && n / burst_every < bursts;
            Planned {
                key: format!("withdrawal-{run_tag:08x}-{i:05}"),
                coin,
                asset: asset.to_owned(),
                amount: Amount::from_u128(amount),
                destination: destination(run_tag, i),
                copies: if burst { Copies::Burst } else { Copies::Twice },
                user: format!("u{i}"),
            }
        })
        .collect()
}

/// Every answer for one business event.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    pub requests: usize,
    /// Payout ids named by the answers: exactly one is the promise.
    pub ids: BTreeSet<String>,
    pub created: usize,
    pub replayed: usize,
    /// Answers that were neither 201 nor a 200 replay, and requests that got no answer.
    pub unexpected: Vec<String>,
}

impl Outcome {
    fn record(&mut self, answer: anyhow::Result<crate::api::Reply>) {
        self.requests += 1;
        match answer {
            Ok(reply) if reply.status == StatusCode::CREATED => {
                self.created += 1;
                self.ids.insert(reply.str_field("id").to_owned());
            }
            Ok(reply) if reply.status == StatusCode::OK && reply.replayed => {
                self.replayed += 1;
                self.ids.insert(reply.str_field("id").to_owned());
            }
            Ok(reply) => self.unexpected.push(format!("{} {}", reply.status, reply.problem_slug())),
            Err(e) => self.unexpected.push(format!("{e:#}")),
        }
    }

    /// The promise at intake: one payout for the event, created once. No 201 at all is
    /// allowed only when the answer to the first request was lost to the kill.
    pub fn is_clean(&self) -> bool {
        self.ids.len() == 1 && self.created <= 1 && self.unexpected.is_empty()
    }

    pub fn id(&self) -> Option<&str> {
        self.ids.iter().next().map(String::as_str)
    }

    /// What broke the promise for the event keyed `key`, if anything did.
    pub fn anomaly(&self, key: &str) -> Option<String> {
        (!self.is_clean()).then(|| {
            format!(
                "{key}: ids={:?} created={} unexpected={:?}",
                self.ids, self.created, self.unexpected
            )
        })
    }
}

/// Sends one payout's requests as its plan says.
pub async fn submit(api: &Arc<Api>, planned: &Planned) -> Outcome {
    let body = planned.body();
    let mut outcome = Outcome::default();
    match planned.copies {
        Copies::Twice => {
            for _ in 0..2 {
                outcome.record(api.post("/v1/payouts", &body, As::Merchant).await);
            }
        }
        Copies::Burst => {
            let tasks: Vec<_> = (0..BURST_SIZE)
                .map(|_| {
                    let (api, body) = (Arc::clone(api), body.clone());
                    tokio::spawn(async move { api.post("/v1/payouts", &body, As::Merchant).await })
                })
                .collect();
            for task in tasks {
                outcome
                    .record(task.await.unwrap_or_else(|e| Err(anyhow::anyhow!("burst task: {e}"))));
            }
        }
    }
    outcome
}

/// Submits every planned payout as `pacing` says; outcomes in plan order.
pub async fn submit_all(api: Arc<Api>, plan: Arc<Vec<Planned>>, pacing: Pacing) -> Vec<Outcome> {
    let gate = Arc::new(Semaphore::new(pacing.concurrency.max(1)));
    let mut tasks = Vec::with_capacity(plan.len());
    for index in 0..plan.len() {
        let permit =
            Arc::clone(&gate).acquire_owned().await.expect("the semaphore is never closed");
        let (api, plan) = (Arc::clone(&api), Arc::clone(&plan));
        tasks.push(tokio::spawn(async move {
            let _permit = permit;
            submit(&api, &plan[index]).await
        }));
        tokio::time::sleep(std::time::Duration::from_millis(pacing.pace_ms)).await;
    }
    let mut outcomes = Vec::with_capacity(tasks.len());
    for task in tasks {
        outcomes.push(task.await.unwrap_or_else(|e| Outcome {
            unexpected: vec![format!("task: {e}")],
            ..Outcome::default()
        }));
    }
    outcomes
}
