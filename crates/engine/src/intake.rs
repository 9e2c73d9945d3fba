//! Intake use cases: merchants, deposits, payout creation with the three-layer race guard, reads and cancel.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use payoutd_domain::secret::API_KEY_RANDOM_BYTES;
use payoutd_domain::{
    Amount, ApiKey, ApiKeyId, AssetCode, AssetRegistry, DepositId, DepositKey, Destination,
    EventId, EventType, Journal, MerchantId, Payout, PayoutId, PayoutRequest, PayoutStatus,
};

use crate::clock::Clock;
use crate::intake_rate::{
    IntakeRate, PAYOUTS_PER_MERCHANT_PER_HOUR_DEFAULT, PAYOUTS_PER_MERCHANT_PER_MINUTE_DEFAULT,
};
use crate::pipeline::Guard;
use crate::rail::SendGuard;
use crate::store::{
    ApiKeyInfo, Balance, Deposit, DepositOutcome, INTAKE_HOUR_MS, InsertPayoutOutcome,
    LIST_LIMIT_MAX, NewDeposit, NewEvent, NewPayout, PayoutQuery, PayoutTransition, Store,
    StoreError, TransitionOutcome, intake_hour_ms,
};

/// Bound on re-reading a payout whose conditional transition lost a race.
pub const TRANSITION_RETRIES_MAX: u32 = 8;
pub const MERCHANT_NAME_MAX_LEN: usize = 128;

#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    #[error("this idempotency key was already used with different parameters")]
    KeyReused,
    #[error("insufficient available balance")]
    InsufficientFunds,
    #[error("not found")]
    NotFound,
    /// The presented API key is unknown or revoked.
    #[error("unknown or revoked API key")]
    UnknownApiKey,
    #[error("unknown merchant")]
    UnknownMerchant,
    #[error("payout is {0} and can no longer be canceled before signing")]
    NotCancelable(PayoutStatus),
    /// The database shows no attempt, but the send guard remembers one that went out: the
    /// database lost it, and its transfer may still land (SPEC 4 step 3).
    #[error(
        "the send guard remembers an attempt of this payout that may have gone out; it waits for a person"
    )]
    AttemptRemembered,
    /// The send guard could not be asked whether an attempt went out: nothing was changed.
    #[error("the send guard cannot be asked: {0}")]
    GuardUnavailable(String),
    #[error("invalid: {0}")]
    Invalid(String),
    #[error("the payout kept changing under this request; retry")]
    Contended,
    /// No rail of this deployment pays the asset: accepted, the payout would wait forever.
    #[error("{0}")]
    AssetNotPayable(String),
    #[error("the amount is below {asset}'s minimum payout of {min_amount} base units")]
    BelowMinimum { asset: AssetCode, min_amount: Amount },
    /// The merchant created its minute's worth of payouts; the next may come in `retry_after_ms`.
    #[error("too many new payouts for this merchant; retry in {retry_after_ms} ms")]
    RateLimited { retry_after_ms: u64 },
    /// The destination is one of this deployment's own hot wallets.
    #[error(
        "the destination is one of this deployment's own hot wallets: pay the recipient's address"
    )]
    OwnWallet,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A page of a listing.
#[derive(Debug, Clone)]
pub struct PayoutPage {
    pub payouts: Vec<Payout>,
    pub has_more: bool,
}

/// Whether an answer is the first one or a replay of an earlier identical request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    Created,
    Replayed,
}

/// The use cases, over a store and a clock.
#[derive(Clone)]
pub struct Engine {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    assets: Arc<AssetRegistry>,
    payable: Arc<Payable>,
    /// Asked before a cancel releases a hold, when one is configured.
    guard: Arc<Guard>,
    /// This deployment's own hot wallets: never a payout's destination.
    own_wallets: Arc<Vec<Destination>>,
    /// New payouts per merchant per minute, in this process.
    rate: Arc<IntakeRate>,
    /// New payouts per merchant per clock hour, counted in the store across processes.
    payouts_per_hour_max: u32,
}

/// Which assets intake accepts payouts in.
#[derive(Debug, Clone)]
pub enum Payable {
    /// Every configured asset (the simulator, tests, a process whose rails run elsewhere).
    Any,
    /// Only these: the assets the configured rails can pay; the rest are refused at intake, each
    /// with the reason an operator can act on.
    Only { assets: BTreeSet<AssetCode>, why_not: BTreeMap<AssetCode, String> },
}

impl Payable {
    /// Why no configured rail pays `asset`; `None` when one does.
    pub fn why_not(&self, asset: &AssetCode) -> Option<String> {
        match self {
            Payable::Any => None,
            Payable::Only { assets, .. } if assets.contains(asset) => None,
            Payable::Only { why_not, .. } => Some(
                why_not
                    .get(asset)
                    .cloned()
                    .unwrap_or_else(|| format!("no configured rail pays {asset}")),
            ),
        }
    }
}

impl Engine {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, assets: AssetRegistry) -> Engine {
        Engine {
            store,
            assets: Arc::new(assets),
            payable: Arc::new(Payable::Any),
            guard: Arc::new(Guard::none()),
            own_wallets: Arc::new(Vec::new()),
            rate: Arc::new(IntakeRate::new(PAYOUTS_PER_MERCHANT_PER_MINUTE_DEFAULT, clock.clone())),
            payouts_per_hour_max: PAYOUTS_PER_MERCHANT_PER_HOUR_DEFAULT,
            clock,
        }
    }

    /// The send guard the workers record attempts in: a cancel is refused when it remembers a
    /// first attempt the database does not show (a failover lost it after it went out).
    pub fn with_guard(mut self, guard: Arc<dyn SendGuard>) -> Engine {
        self.guard = Arc::new(Guard::of(guard));
        self
    }

    /// Intake refuses payouts in assets outside `payable` instead of letting them wait forever.
    pub fn with_payable(mut self, payable: Payable) -> Engine {
        self.payable = Arc::new(payable);
        self
    }

    /// Intake refuses payouts to this deployment's own hot wallets (`Pipeline::own_wallets`): the
    /// merchant would be charged for units that only moved from one of the platform's pockets to
    /// another (a pasted address of the wrong account is the usual cause).
    pub fn with_own_wallets(mut self, wallets: Vec<Destination>) -> Engine {
        self.own_wallets = Arc::new(wallets);
        self
    }

    /// Below the asset's configured minimum, a payout is refused: it would cost the platform more
    /// in fees (and rent) than it moves, and a flood of them would hold up everyone's payouts. An
    /// internal transfer meets the same minimum, so a stolen key cannot scatter a balance over
    /// other merchants in dust either.
    pub(crate) fn check_minimum(
        &self,
        asset_code: &AssetCode,
        amount: Amount,
    ) -> Result<(), IntakeError> {
        match self.assets.get(asset_code.as_str()) {
            Ok(asset) if amount < asset.min_amount => Err(IntakeError::BelowMinimum {
                asset: asset_code.clone(),
                min_amount: asset.min_amount,
            }),
            _ => Ok(()),
        }
    }

    /// A place in the merchant's minute for something new it asks (a payout, a transfer).
    pub(crate) fn take_intake_place(&self, merchant: &MerchantId) -> Result<(), IntakeError> {
        self.rate
            .take(merchant)
            .map_err(|retry_after_ms| IntakeError::RateLimited { retry_after_ms })
    }

    /// At most `per_minute` new payouts per merchant per minute in this process (replays of
    /// existing ones are not counted): one merchant's flood cannot hold up the others' payouts.
    pub fn with_intake_rate(mut self, per_minute: u32) -> Engine {
        self.rate = Arc::new(IntakeRate::new(per_minute, self.clock.clone()));
        self
    }

    /// At most `per_hour` new payouts per merchant per clock hour, counted in the store, so the
    /// limit holds however many API processes take payouts in.
    pub fn with_payouts_per_hour(mut self, per_hour: u32) -> Engine {
        self.payouts_per_hour_max = per_hour;
        self
    }

    fn check_payable(&self, asset: &AssetCode) -> Result<(), IntakeError> {
        match self.payable.why_not(asset) {
            None => Ok(()),
            Some(why) => Err(IntakeError::AssetNotPayable(why)),
        }
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn assets(&self) -> &AssetRegistry {
        &self.assets
    }

    pub(crate) fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Creates a merchant and its first API key; the key in clear is returned this once only.
    pub async fn create_merchant(
        &self,
        name: &str,
        random: [u8; API_KEY_RANDOM_BYTES],
    ) -> Result<(MerchantId, ApiKey), IntakeError> {
        let name = name.trim();
        if name.is_empty()
            || name.len() > MERCHANT_NAME_MAX_LEN
            || name.chars().any(char::is_control)
        {
            return Err(IntakeError::Invalid(format!(
                "merchant name must be 1-{MERCHANT_NAME_MAX_LEN} characters without control characters"
            )));
        }
        let id = MerchantId::new();
        let key = ApiKey::from_random(random);
        self.store.create_merchant(&id, name, &key.hash(), self.clock.now_ms()).await?;
        Ok((id, key))
    }

    /// The merchant a presented key belongs to, asked of the database on every request: a revoked
    /// key must answer 401 at once in every process, which no per-process cache can promise.
    pub async fn authenticate(
        &self,
        presented: &ApiKey,
    ) -> Result<Option<MerchantId>, IntakeError> {
        Ok(self.store.merchant_by_key_hash(&presented.hash()).await?)
    }

    /// Another API key for a merchant; the key in clear is returned this once only.
    pub async fn create_api_key(
        &self,
        merchant: &MerchantId,
        random: [u8; API_KEY_RANDOM_BYTES],
    ) -> Result<(ApiKeyId, ApiKey), IntakeError> {
        let key = ApiKey::from_random(random);
        let hash = key.hash();
        if !self.store.add_api_key(merchant, &hash, self.clock.now_ms()).await? {
            return Err(IntakeError::UnknownMerchant);
        }
        Ok((hash.id(), key))
    }

    /// Revokes a key: every request with it is refused from the moment this returns.
    pub async fn revoke_api_key(&self, id: &ApiKeyId) -> Result<(), IntakeError> {
        match self.store.revoke_api_key(id, self.clock.now_ms()).await? {
            true => Ok(()),
            false => Err(IntakeError::NotFound),
        }
    }

    pub async fn api_keys(&self, merchant: &MerchantId) -> Result<Vec<ApiKeyInfo>, IntakeError> {
        Ok(self.store.api_keys(merchant).await?)
    }

    /// Operator credit, idempotent on (merchant, key); a reused key with other parameters is refused.
    pub async fn deposit(
        &self,
        merchant: &MerchantId,
        asset: &AssetCode,
        amount: Amount,
        key: DepositKey,
    ) -> Result<(Deposit, Replay), IntakeError> {
        assert!(!amount.is_zero(), "deposits are positive by construction");
        let at_ms = self.clock.now_ms();
        let deposit = Deposit {
            id: DepositId::new(),
            merchant_id: merchant.clone(),
            key,
            asset: asset.clone(),
            amount,
            created_at_ms: at_ms,
        };
        let journal = Journal::deposit(merchant, asset, deposit.id.as_str(), amount);
        let event = NewEvent {
            id: EventId::derive(EventType::DepositCreated, deposit.id.as_str()),
            event_type: EventType::DepositCreated,
            entity_id: deposit.id.as_str().to_owned(),
            merchant_id: Some(merchant.clone()),
            payload_json: serde_json::json!({"id": deposit.id.as_str(), "object": "deposit", "merchant_id": merchant.as_str(),
                "asset": deposit.asset.as_str(), "amount": deposit.amount.to_string(), "created_at_ms": at_ms})
            .to_string(),
            at_ms,
        };
        match self.store.record_deposit(&NewDeposit { deposit, journal, event }).await? {
            DepositOutcome::Created(d) => Ok((d, Replay::Created)),
            DepositOutcome::Existing(d) if &d.asset == asset && d.amount == amount => {
                Ok((d, Replay::Replayed))
            }
            DepositOutcome::Existing(_) => Err(IntakeError::KeyReused),
            DepositOutcome::UnknownMerchant => Err(IntakeError::UnknownMerchant),
        }
    }

    /// Intake (SPEC 4.1): pre-check the key, then the store re-checks under a lock, holds, inserts
    /// the payout and its event in one transaction, and resolves a unique-constraint loss to the winner.
    pub async fn create_payout(
        &self,
        merchant: &MerchantId,
        request: PayoutRequest,
    ) -> Result<(Payout, Replay), IntakeError> {
        // Layer 1: the cheap common case, a retry of something that already exists.
        if let Some(existing) = self.store.payout_by_key(merchant, &request.key).await? {
            return replay_of(existing, &request.fingerprint());
        }
        self.create_new_payout(merchant, request).await
    }

    /// Intake for a presented API key (the API's path): the key's merchant and the payout under
    /// the request's key are read in one round trip, so a replay costs one read; a new payout then
    /// goes on as in `create_payout`. An unknown or revoked key changes nothing.
    pub async fn create_payout_with_api_key(
        &self,
        presented: &ApiKey,
        request: PayoutRequest,
    ) -> Result<(Payout, Replay), IntakeError> {
        let found = self.store.merchant_and_payout_by_key(&presented.hash(), &request.key).await?;
        match found {
            None => Err(IntakeError::UnknownApiKey),
            Some((merchant, Some(existing))) => {
                // The read joins on the key's merchant: another merchant's payout here would
                // answer one merchant's retry with another's money.
                assert_eq!(
                    existing.merchant_id, merchant,
                    "a replay answers the key's own merchant"
                );
                replay_of(existing, &request.fingerprint())
            }
            Some((merchant, None)) => self.create_new_payout(&merchant, request).await,
        }
    }

    /// Layers 2 and 3 of intake, once layer 1 found no payout under the key.
    async fn create_new_payout(
        &self,
        merchant: &MerchantId,
        request: PayoutRequest,
    ) -> Result<(Payout, Replay), IntakeError> {
        let at_ms = self.clock.now_ms();
        let new = self.new_payout(merchant, request, at_ms)?;
        // Layers 2 and 3 live in the store: re-check under the lock, unique-constraint catch.
        let outcome = self.store.insert_payout(&new).await?;
        outcome_of(outcome, &new.payout.fingerprint, at_ms)
    }

    /// What every new payout passes after its key was looked up and not found (a retry of a payout
    /// accepted before the rails changed still gets its answer): a payable asset, its minimum, a
    /// destination that is not ours, a place in the merchant's minute; then the payout as intake
    /// writes it, created at `at_ms`.
    pub(crate) fn new_payout(
        &self,
        merchant: &MerchantId,
        request: PayoutRequest,
        at_ms: i64,
    ) -> Result<NewPayout, IntakeError> {
        self.check_payable(&request.asset)?;
        self.check_minimum(&request.asset, request.amount)?;
        if self.own_wallets.contains(&request.destination) {
            return Err(IntakeError::OwnWallet);
        }
        let network_fee = self
            .assets
            .get(request.asset.as_str())
            .map(|asset| asset.network_fee)
            .unwrap_or(Amount::ZERO);
        self.take_intake_place(merchant)?;
        let payout = Payout {
            id: PayoutId::new(),
            merchant_id: merchant.clone(),
            fingerprint: request.fingerprint(),
            key: request.key,
            asset: request.asset,
            amount: request.amount,
            network_fee,
            destination: request.destination,
            metadata: request.metadata,
            status: PayoutStatus::Requested,
            version: 1,
            created_at_ms: at_ms,
            updated_at_ms: at_ms,
        };
        let event = NewEvent::for_payout(EventType::PayoutCreated, &payout, at_ms);
        Ok(NewPayout { payout, event, payouts_per_hour_max: self.payouts_per_hour_max })
    }

    pub async fn payout(
        &self,
        merchant: &MerchantId,
        id: &PayoutId,
    ) -> Result<Payout, IntakeError> {
        self.store.payout(merchant, id).await?.ok_or(IntakeError::NotFound)
    }

    /// One page, newest first; `query.limit` is clamped to 1..=LIST_LIMIT_MAX.
    pub async fn list_payouts(
        &self,
        merchant: &MerchantId,
        mut query: PayoutQuery,
    ) -> Result<PayoutPage, IntakeError> {
        let limit = query.limit.clamp(1, LIST_LIMIT_MAX) as usize;
        // One row more than asked tells whether another page exists.
        query.limit = limit as u32 + 1;
        let mut payouts = self.store.list_payouts(merchant, &query).await?;
        let has_more = payouts.len() > limit;
        payouts.truncate(limit);
        Ok(PayoutPage { payouts, has_more })
    }

    pub async fn balances(&self, merchant: &MerchantId) -> Result<Vec<Balance>, IntakeError> {
        Ok(self.store.balances(merchant).await?)
    }

    /// Cancel before signing: releases the hold in the same transaction. Canceling a canceled payout
    /// answers with it again (a retried cancel is not an error).
    pub async fn cancel_payout(
        &self,
        merchant: &MerchantId,
        id: &PayoutId,
    ) -> Result<(Payout, Replay), IntakeError> {
        for _ in 0..TRANSITION_RETRIES_MAX {
            let payout = self.payout(merchant, id).await?;
            if payout.status == PayoutStatus::Canceled {
                return Ok((payout, Replay::Replayed));
            }
            if !payout.status.is_cancelable_before_signing() {
                return Err(IntakeError::NotCancelable(payout.status));
            }
            // Not signed as far as the database knows; the guard knows what went out.
            match self.guard.remembered(&payout, 1).await {
                Ok(None) => {}
                Ok(Some(_)) => return Err(IntakeError::AttemptRemembered),
                Err(e) => return Err(IntakeError::GuardUnavailable(e.to_string())),
            }
            let at_ms = self.clock.now_ms();
            let journals = payout.release_journals();
            let after = crate::pipeline::transition_after(&payout, PayoutStatus::Canceled, at_ms);
            let transition = PayoutTransition {
                payout_id: payout.id.clone(),
                merchant_id: merchant.clone(),
                from: payout.status,
                from_version: payout.version,
                to: payout
                    .status
                    .transition(PayoutStatus::Canceled)
                    .expect("checked cancelable above"),
                journals,
                event: NewEvent::for_payout(EventType::PayoutCanceled, &after, at_ms),
                at_ms,
            };
            match self.store.transition_payout(&transition).await? {
                TransitionOutcome::Applied(p) => {
                    metrics::counter!("payoutd_payouts_canceled_total").increment(1);
                    return Ok((p, Replay::Created));
                }
                TransitionOutcome::Stale => continue,
            }
        }
        Err(IntakeError::Contended)
    }
}

/// The answer a store's intake outcome gives the request with `fingerprint`, made at `at_ms`.
pub(crate) fn outcome_of(
    outcome: InsertPayoutOutcome,
    fingerprint: &payoutd_domain::Fingerprint,
    at_ms: i64,
) -> Result<(Payout, Replay), IntakeError> {
    match outcome {
        InsertPayoutOutcome::Created(p) => Ok((p, Replay::Created)),
        InsertPayoutOutcome::Existing(p) => replay_of(p, fingerprint),
        InsertPayoutOutcome::InsufficientFunds => Err(IntakeError::InsufficientFunds),
        InsertPayoutOutcome::HourFull => Err(IntakeError::RateLimited {
            retry_after_ms: (intake_hour_ms(at_ms) + INTAKE_HOUR_MS - at_ms).max(1) as u64,
        }),
    }
}

pub(crate) fn replay_of(
    existing: Payout,
    fingerprint: &payoutd_domain::Fingerprint,
) -> Result<(Payout, Replay), IntakeError> {
    if &existing.fingerprint == fingerprint {
        Ok((existing, Replay::Replayed))
    } else {
        Err(IntakeError::KeyReused)
    }
}
