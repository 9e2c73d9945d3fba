//! The merchant's side of webhooks in the demo and the chaos run: a local receiver registered for
//! `payout.paid`, and the check that every paid payout was announced under one id, signed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Context;
use payoutd_testkit::webhooks::{Receiver, verify_with_reference};
use serde_json::json;

use crate::api::{Api, As};

/// How long the end of a run waits for the last `payout.paid` deliveries.
pub const WEBHOOK_DRAIN_SECS: u64 = 60;

/// A registered receiver and the secret its deliveries must verify with.
pub struct PaidWebhooks {
    receiver: Receiver,
    secret: String,
}

/// What the receiver got, against the payouts the API says are paid.
#[derive(Debug)]
pub struct WebhookReport {
    pub paid_payouts: usize,
    /// Paid payouts whose `payout.paid` arrived (answered 2xx) at least once.
    pub announced: usize,
    /// Requests received, failed tries and redeliveries included.
    pub requests: usize,
    /// Paid payouts announced under more than one webhook-id (must be none).
    pub with_several_ids: usize,
    /// `payout.paid` for payouts the API does not show as paid (must be none).
    pub strays: usize,
    /// Every request checked by the reference Standard Webhooks verifier.
    pub verified: Result<(), String>,
}

impl WebhookReport {
    pub fn line(&self) -> String {
        format!(
            "webhooks: paid={} announced={} requests={} several_ids={} strays={} signatures={}",
            self.paid_payouts,
            self.announced,
            self.requests,
            self.with_several_ids,
            self.strays,
            if self.verified.is_ok() { "valid" } else { "INVALID" }
        )
    }

    pub fn ok(&self) -> bool {
        self.announced == self.paid_payouts
            && self.with_several_ids == 0
            && self.strays == 0
            && self.verified.is_ok()
    }
}

impl PaidWebhooks {
    /// Starts a receiver and registers it, as the merchant, for `payout.paid`.
    pub async fn register(api: &Api) -> anyhow::Result<PaidWebhooks> {
        let receiver = Receiver::start().await;
        let body = json!({"url": receiver.url, "event_types": ["payout.paid"]});
        let reply = api.post("/v1/webhook_endpoints", &body, As::Merchant).await?;
        anyhow::ensure!(
            reply.status.as_u16() == 201,
            "register the webhook endpoint: {} {}",
            reply.status,
            reply.body
        );
        let secret = reply.body["secret"].as_str().context("the endpoint's secret")?.to_owned();
        Ok(PaidWebhooks { receiver, secret })
    }

    pub fn url(&self) -> &str {
        &self.receiver.url
    }

    /// Payout id -> the webhook-ids its accepted `payout.paid` deliveries carried.
    fn announced(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut by_payout: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for r in self.receiver.accepted() {
            let body = r.json();
            if body["type"] == "payout.paid"
                && let Some(id) = body["data"]["id"].as_str()
            {
                by_payout.entry(id.to_owned()).or_default().insert(r.webhook_id.clone());
            }
        }
        by_payout
    }

    /// Waits until every payout in `paid` was announced, or the drain time is over.
    pub async fn wait_for(&self, paid: &BTreeSet<String>) {
        let deadline = Instant::now() + Duration::from_secs(WEBHOOK_DRAIN_SECS);
        while Instant::now() < deadline {
            let announced = self.announced();
            if paid.iter().all(|p| announced.contains_key(p)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub fn report(&self, paid: &BTreeSet<String>) -> WebhookReport {
        let announced = self.announced();
        let requests = self.receiver.received();
        WebhookReport {
            paid_payouts: paid.len(),
            announced: paid.iter().filter(|p| announced.contains_key(*p)).count(),
            requests: requests.len(),
            with_several_ids: announced.values().filter(|ids| ids.len() > 1).count(),
            strays: announced.keys().filter(|p| !paid.contains(*p)).count(),
            verified: verify_with_reference(&self.secret, &requests),
        }
    }
}
