//! One attempt lifecycle for every rail: a fake rail without nonces (signed bytes valid until a block height) and a fake rail without signed bytes (a provider request with an idempotency key), each paid end to end on both stores through the same engine.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use payoutd_domain::asset::TokenKind;
use payoutd_domain::{
    Amount, Asset, AssetRegistry, Attempt, AttemptSlot, AttemptStatus, AttemptTx, DepositKey,
    Destination, EvmAddress, Metadata, Payout, PayoutId, PayoutKey, PayoutRequest, PayoutStatus,
    SolanaExpiry, TxKind, TxRef,
};
use payoutd_engine::rail::ReadError;
use payoutd_engine::standalone::{
    PrepareError, Prepared, StandaloneRail, StandaloneStatus, SubmitOutcome,
};
use payoutd_engine::{Clock, Engine, Pipeline, PipelineConfig, PipelineStore, StandaloneLine};
use payoutd_testkit::TestDb;

/// Blocks a fake expiring transaction stays valid for after it is prepared.
const VALIDITY_BLOCKS: u64 = 4;
/// Blocks on top of a landed transaction's block before it is final.
const FINAL_DEPTH: u64 = 2;
const ROUNDS_MAX: usize = 60;
const AMOUNT: u128 = 4_200;

struct FakeClock(AtomicI64);

impl Clock for FakeClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

fn reference(text: &str) -> TxRef {
    TxRef::parse(text).unwrap()
}

/// A transaction of the expiring rail as its bytes carry it.
#[derive(Clone)]
struct ExpiringTx {
    signature: TxRef,
    destination: String,
    amount: Amount,
    last_valid: u64,
}

#[derive(Default)]
struct ExpiringChain {
    height: u64,
    pool: Vec<ExpiringTx>,
    /// Signature -> (the transaction, the height it landed at).
    landed: HashMap<TxRef, (ExpiringTx, u64)>,
    /// The next submissions that never reach the chain (an RPC that drops them).
    lose_next_submits: u32,
    /// The next submissions a node holds back and sends on at the last moment they can land (their
    /// last valid height), answering the sender with a timeout.
    delay_next_submits: u32,
    late: Vec<ExpiringTx>,
}

/// Like Solana with a recent blockhash: no nonce; signed bytes land until their last valid height.
#[derive(Default)]
struct ExpiringRail(Mutex<ExpiringChain>);

impl ExpiringRail {
    /// One block: the valid transactions in the pool land, expired ones are dropped.
    fn produce_block(&self) {
        let mut chain = self.0.lock().unwrap();
        chain.height += 1;
        let height = chain.height;
        let (due, later): (Vec<ExpiringTx>, Vec<ExpiringTx>) =
            std::mem::take(&mut chain.late).into_iter().partition(|tx| tx.last_valid == height);
        chain.late = later;
        chain.pool.extend(due);
        for tx in std::mem::take(&mut chain.pool) {
            if tx.last_valid >= height && !chain.landed.contains_key(&tx.signature) {
                chain.landed.insert(tx.signature.clone(), (tx, height));
            }
        }
    }

    fn landed_to(&self, destination: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .landed
            .values()
            .filter(|(tx, _)| tx.destination == destination)
            .count()
    }
}

fn decode(raw: &[u8]) -> ExpiringTx {
    let text = std::str::from_utf8(raw).unwrap();
    let parts: Vec<&str> = text.split('|').collect();
    ExpiringTx {
        signature: reference(parts[0]),
        destination: parts[1].to_owned(),
        amount: Amount::parse(parts[2]).unwrap(),
        last_valid: parts[3].parse().unwrap(),
    }
}

#[async_trait]
impl StandaloneRail for ExpiringRail {
    fn name(&self) -> &str {
        "fake-expiring"
    }

    fn first_send_within_ms(&self) -> i64 {
        10_000
    }

    fn owns(&self, slot: &AttemptSlot) -> bool {
        matches!(slot, AttemptSlot::Solana { .. })
    }

    async fn prepare(
        &self,
        payout: &Payout,
        attempt_no: u32,
        _reference: &payoutd_domain::ChainReference,
    ) -> Result<Prepared, PrepareError> {
        let last_valid = self.0.lock().unwrap().height + VALIDITY_BLOCKS;
        let signature = format!("sig-{}-{attempt_no}", payout.id);
        let raw = format!("{signature}|{}|{}|{last_valid}", payout.destination, payout.amount)
            .into_bytes();
        Ok(Prepared {
            slot: AttemptSlot::Solana {
                fee_payer: "fake-payer".into(),
                expiry: SolanaExpiry::LastValidBlockHeight(last_valid),
            },
            tx: AttemptTx {
                hash: reference(&signature),
                kind: TxKind::Original,
                raw,
                fees: None,
                created_at_ms: 0,
            },
        })
    }

    async fn submit(&self, attempt: &Attempt) -> SubmitOutcome {
        let mut chain = self.0.lock().unwrap();
        if chain.delay_next_submits > 0 {
            chain.delay_next_submits -= 1;
            let tx = decode(&attempt.txs[0].raw);
            chain.late.push(tx);
            return SubmitOutcome::NotAccepted("timed out (the node kept it)".into());
        }
        if chain.lose_next_submits > 0 {
            chain.lose_next_submits -= 1;
            return SubmitOutcome::NotAccepted("dropped on the way".into());
        }
        let tx = decode(&attempt.txs[0].raw);
        if tx.last_valid < chain.height {
            return SubmitOutcome::NotAccepted("blockhash not found".into());
        }
        chain.pool.push(tx);
        SubmitOutcome::Accepted { reference: None }
    }

    async fn status(
        &self,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<StandaloneStatus, ReadError> {
        let chain = self.0.lock().unwrap();
        let signature = &attempt.txs[0].hash;
        if let Some((tx, at)) = chain.landed.get(signature) {
            let transfer_matches =
                tx.amount == payout.amount && tx.destination == payout.destination.to_string();
            return Ok(StandaloneStatus::Landed {
                reference: signature.clone(),
                final_: chain.height >= at + FINAL_DEPTH,
                transfer_matches,
                moved: tx.amount,
                fee_paid: Amount::ZERO,
            });
        }
        let AttemptSlot::Solana { expiry: SolanaExpiry::LastValidBlockHeight(last_valid), .. } =
            &attempt.slot
        else {
            return Err(ReadError("not an expiring attempt".into()));
        };
        if chain.height > *last_valid {
            // Past its height, and this status check (after the height) finds none of its signatures.
            return Ok(StandaloneStatus::Dead {
                proof: format!(
                    "height {} passed last valid {last_valid}; {signature} never landed",
                    chain.height
                ),
                cancel_fee_paid: Amount::ZERO,
            });
        }
        Ok(StandaloneStatus::Pending)
    }
}

#[derive(Clone)]
struct ProviderTransfer {
    id: TxRef,
    destination: String,
    amount: Amount,
    settled: bool,
    failed: bool,
}

#[derive(Default)]
struct ProviderBook {
    /// Idempotency key -> the one transfer it created.
    by_key: HashMap<String, ProviderTransfer>,
    /// The next creations whose answer is lost after the transfer was made.
    lose_next_answers: u32,
    /// When set, the next first send waits for a permit, then is refused before the provider made
    /// anything: a first sender that is slow, or that never comes back.
    first_sends_gate: Option<Arc<tokio::sync::Semaphore>>,
}

/// Like a payouts API: no signed bytes; a request with an idempotency key creates at most one
/// transfer, and a lookup by key tells what became of it.
#[derive(Default)]
struct ProviderRail(Mutex<ProviderBook>);

impl ProviderRail {
    /// The next first send waits for a permit of the returned gate (none yet).
    fn hold_first_sends(&self) -> Arc<tokio::sync::Semaphore> {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        self.0.lock().unwrap().first_sends_gate = Some(gate.clone());
        gate
    }

    fn settle_all(&self) {
        for t in self.0.lock().unwrap().by_key.values_mut().filter(|t| !t.failed) {
            t.settled = true;
        }
    }

    fn fail_open(&self) {
        for t in self.0.lock().unwrap().by_key.values_mut().filter(|t| !t.settled) {
            t.failed = true;
        }
    }

    /// Transfers that moved money to `destination`.
    fn paid_to(&self, destination: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .by_key
            .values()
            .filter(|t| t.settled && !t.failed && t.destination == destination)
            .count()
    }

    fn created(&self) -> usize {
        self.0.lock().unwrap().by_key.len()
    }
}

fn key_of(attempt: &Attempt) -> &str {
    match &attempt.slot {
        AttemptSlot::Provider { idempotency_key, .. } => idempotency_key,
        other => panic!("not a provider attempt: {other:?}"),
    }
}

#[async_trait]
impl StandaloneRail for ProviderRail {
    fn name(&self) -> &str {
        "fake-provider"
    }

    fn first_send_within_ms(&self) -> i64 {
        10_000
    }

    fn owns(&self, slot: &AttemptSlot) -> bool {
        matches!(slot, AttemptSlot::Provider { .. })
    }

    async fn prepare(
        &self,
        payout: &Payout,
        attempt_no: u32,
        _reference: &payoutd_domain::ChainReference,
    ) -> Result<Prepared, PrepareError> {
        // Derived, not random: the same payout and attempt always send the same key.
        let key = format!("{}-{attempt_no}", payout.id);
        let raw = format!("{}|{}", payout.destination, payout.amount).into_bytes();
        Ok(Prepared {
            slot: AttemptSlot::Provider {
                provider: "fakepay".into(),
                idempotency_key: key.clone(),
                reference: None,
                wallet: None,
                key_spent_at_ms: None,
                creates_for_ms: None,
            },
            tx: AttemptTx {
                hash: reference(&key),
                kind: TxKind::Original,
                raw,
                fees: None,
                created_at_ms: 0,
            },
        })
    }

    async fn submit(&self, attempt: &Attempt) -> SubmitOutcome {
        let mut book = self.0.lock().unwrap();
        let key = key_of(attempt).to_owned();
        if let Some(existing) = book.by_key.get(&key) {
            return SubmitOutcome::Accepted { reference: Some(existing.id.clone()) };
        }
        let body = String::from_utf8(attempt.txs[0].raw.clone()).unwrap();
        let (destination, amount) = body.split_once('|').unwrap();
        let id = reference(&format!("tr_{}", book.by_key.len() + 1));
        let transfer = ProviderTransfer {
            id: id.clone(),
            destination: destination.into(),
            amount: Amount::parse(amount).unwrap(),
            settled: false,
            failed: false,
        };
        book.by_key.insert(key, transfer);
        if book.lose_next_answers > 0 {
            book.lose_next_answers -= 1;
            return SubmitOutcome::NotAccepted(
                "timeout after the provider created the transfer".into(),
            );
        }
        SubmitOutcome::Accepted { reference: Some(id) }
    }

    async fn submit_first(&self, attempt: &Attempt) -> SubmitOutcome {
        let gate = self.0.lock().unwrap().first_sends_gate.take();
        let Some(gate) = gate else {
            return self.submit(attempt).await;
        };
        gate.acquire().await.expect("the gate stays open").forget();
        SubmitOutcome::Refused { proof: "refused before anything was made".into() }
    }

    async fn status(
        &self,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<StandaloneStatus, ReadError> {
        let book = self.0.lock().unwrap();
        let Some(t) = book.by_key.get(key_of(attempt)) else {
            return Ok(StandaloneStatus::Pending);
        };
        if t.failed {
            return Ok(StandaloneStatus::Dead {
                proof: format!("provider transfer {} failed; nothing moved", t.id),
                cancel_fee_paid: Amount::ZERO,
            });
        }
        let transfer_matches =
            t.amount == payout.amount && t.destination == payout.destination.to_string();
        Ok(StandaloneStatus::Landed {
            reference: t.id.clone(),
            final_: t.settled,
            transfer_matches,
            moved: t.amount,
            fee_paid: Amount::ZERO,
        })
    }
}

struct World {
    store: Arc<dyn PipelineStore>,
    engine: Engine,
    clock: Arc<FakeClock>,
    merchant: payoutd_domain::MerchantId,
    asset: Asset,
}

const DESTINATION: &str = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed";

async fn world(db: &TestDb, code: &str) -> World {
    let store = db.pipeline();
    let clock = Arc::new(FakeClock(AtomicI64::new(1_800_000_000_000)));
    // The payout's destination is validated for the asset's rail family; these fakes pay EVM-form addresses.
    let asset = Asset::new(code, 6, TokenKind::Native).unwrap();
    let engine =
        Engine::new(store.clone(), clock.clone(), AssetRegistry::new(vec![asset.clone()]).unwrap());
    let (merchant, _) = engine.create_merchant("rails", [3u8; 32]).await.unwrap();
    engine
        .deposit(
            &merchant,
            &asset.code,
            Amount::from_u128(1_000_000),
            DepositKey::parse("fund").unwrap(),
        )
        .await
        .unwrap();
    World { store, engine, clock, merchant, asset }
}

impl World {
    async fn request(&self, key: &str) -> PayoutId {
        let request = PayoutRequest::new(
            PayoutKey::parse(key).unwrap(),
            self.asset.code.clone(),
            Amount::from_u128(AMOUNT),
            Destination::Evm(EvmAddress::parse(DESTINATION).unwrap()),
            Metadata::empty(),
        );
        self.engine.create_payout(&self.merchant, request).await.unwrap().0.id
    }

    fn pipeline(&self, rail: Arc<dyn StandaloneRail>) -> Pipeline {
        let config = PipelineConfig { rebroadcast_after_ms: 1_000, ..PipelineConfig::default() };
        Pipeline::new(self.store.clone(), self.clock.clone(), config)
            .with_standalone_rail(StandaloneLine { rail, assets: vec![self.asset.clone()] })
    }

    async fn status(&self, id: &PayoutId) -> PayoutStatus {
        self.store.payout_by_id(id).await.unwrap().unwrap().status
    }

    async fn held(&self) -> Amount {
        self.engine.balances(&self.merchant).await.unwrap()[0].held
    }
}

/// Signed bytes without a nonce: the first attempt's submission is lost, its height passes, the rail
/// proves it dead, attempt 2 is prepared and lands once.
async fn a_rail_without_nonces_pays_once_after_an_attempt_expires(db: TestDb) {
    let w = world(&db, "evm:7001/FAKE").await;
    // The fee payer is a hot wallet of its chain, like any signing account.
    db.exec_raw("INSERT INTO hot_wallets (id, chain, address, next_nonce) VALUES ('fake-payer', 'solana:fake', 'FakePayer1111', 0)").await.unwrap();
    let rail = Arc::new(ExpiringRail::default());
    rail.0.lock().unwrap().lose_next_submits = 1;
    let p = w.pipeline(rail.clone());
    let id = w.request("expiring-0001").await;
    for _ in 0..ROUNDS_MAX {
        p.tick().await.unwrap();
        if w.status(&id).await == PayoutStatus::Paid {
            break;
        }
        // Resubmissions of the lost bytes are lost too until the chain moves past them.
        rail.0.lock().unwrap().lose_next_submits +=
            u32::from(w.store.attempts_of(&id).await.unwrap().len() == 1);
        rail.produce_block();
        w.clock.0.fetch_add(1_500, Ordering::SeqCst);
    }
    assert_eq!(w.status(&id).await, PayoutStatus::Paid);
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(
        attempts.iter().map(|a| (a.attempt_no, a.status, a.slot.rail())).collect::<Vec<_>>(),
        vec![(1, AttemptStatus::Dead, "solana"), (2, AttemptStatus::Confirmed, "solana")]
    );
    assert_eq!(rail.landed_to(DESTINATION), 1, "paid exactly once");
    assert_eq!(w.held().await, Amount::ZERO);
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// The first attempt's bytes are held back by a node and land at the very last height they can
/// (its last valid height), while every re-send is lost: the rail cannot prove the attempt dead
/// before that height has passed, so no second attempt is signed; the payout is paid once, by
/// attempt 1. (A proof of death taken at the last valid height, not past it, pays twice here.)
async fn a_first_attempt_landing_at_its_last_valid_height_pays_once(db: TestDb) {
    let w = world(&db, "evm:7005/FAKE").await;
    db.exec_raw("INSERT INTO hot_wallets (id, chain, address, next_nonce) VALUES ('fake-payer', 'solana:fake', 'FakePayer1111', 0)").await.unwrap();
    let rail = Arc::new(ExpiringRail::default());
    {
        let mut chain = rail.0.lock().unwrap();
        chain.delay_next_submits = 1;
        chain.lose_next_submits = u32::MAX;
    }
    let p = w.pipeline(rail.clone());
    let id = w.request("expiring-0003").await;
    for _ in 0..ROUNDS_MAX {
        p.tick().await.unwrap();
        if w.status(&id).await == PayoutStatus::Paid {
            break;
        }
        rail.produce_block();
        w.clock.0.fetch_add(1_500, Ordering::SeqCst);
    }
    // Whatever else is still held back lands too before counting.
    for _ in 0..=VALIDITY_BLOCKS + FINAL_DEPTH {
        rail.produce_block();
        p.tick().await.unwrap();
    }
    assert_eq!(w.status(&id).await, PayoutStatus::Paid);
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(
        attempts.iter().map(|a| (a.attempt_no, a.status)).collect::<Vec<_>>(),
        vec![(1, AttemptStatus::Confirmed)]
    );
    assert_eq!(rail.landed_to(DESTINATION), 1, "paid exactly once, by the late copy");
    assert_eq!(w.held().await, Amount::ZERO);
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// No signed bytes at all: the provider creates the transfer but the answer is lost; the retry with
/// the same stored key finds the same transfer; one transfer, paid once, its reference recorded.
async fn a_rail_without_signed_bytes_pays_once_through_a_lost_answer(db: TestDb) {
    let w = world(&db, "evm:7002/FAKE").await;
    let rail = Arc::new(ProviderRail::default());
    rail.0.lock().unwrap().lose_next_answers = 1;
    let p = w.pipeline(rail.clone());
    let id = w.request("provider-0001").await;
    for round in 0..ROUNDS_MAX {
        p.tick().await.unwrap();
        if round == 3 {
            rail.settle_all();
        }
        if w.status(&id).await == PayoutStatus::Paid {
            break;
        }
        w.clock.0.fetch_add(1_500, Ordering::SeqCst);
    }
    assert_eq!(w.status(&id).await, PayoutStatus::Paid);
    assert_eq!(rail.created(), 1, "one request key, one transfer");
    assert_eq!(rail.paid_to(DESTINATION), 1);
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].status, AttemptStatus::Confirmed);
    let AttemptSlot::Provider { reference, .. } = &attempts[0].slot else {
        panic!("a provider slot")
    };
    assert_eq!(
        reference.as_ref().map(TxRef::as_str),
        Some("tr_1"),
        "the reference from the lookup is recorded"
    );
    assert_eq!(w.held().await, Amount::ZERO);
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// A provider transfer that fails moved nothing: the next attempt, with a new key, pays once.
async fn a_failed_provider_transfer_starts_the_next_attempt_under_the_same_hold(db: TestDb) {
    let w = world(&db, "evm:7003/FAKE").await;
    let rail = Arc::new(ProviderRail::default());
    let p = w.pipeline(rail.clone());
    let id = w.request("provider-0002").await;
    p.tick().await.unwrap();
    rail.fail_open();
    assert_eq!(w.held().await, Amount::from_u128(AMOUNT));
    for _ in 0..ROUNDS_MAX {
        p.tick().await.unwrap();
        rail.settle_all();
        if w.status(&id).await == PayoutStatus::Paid {
            break;
        }
        w.clock.0.fetch_add(1_500, Ordering::SeqCst);
    }
    assert_eq!(w.status(&id).await, PayoutStatus::Paid);
    let attempts = w.store.attempts_of(&id).await.unwrap();
    let keys: Vec<&str> = attempts.iter().map(key_of).collect();
    assert_eq!(keys.len(), 2);
    assert_ne!(keys[0], keys[1], "attempt 2 sends a new key: the first one's transfer is dead");
    assert_eq!((rail.created(), rail.paid_to(DESTINATION)), (2, 1), "two requests, one payment");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// Runs `p` until the payout is paid, the provider settling what it made.
async fn paid_through(w: &World, p: &Pipeline, rail: &ProviderRail, id: &PayoutId) {
    for _ in 0..ROUNDS_MAX {
        p.tick().await.unwrap();
        rail.settle_all();
        if w.status(id).await == PayoutStatus::Paid {
            return;
        }
        w.clock.0.fetch_add(1_500, Ordering::SeqCst);
    }
    panic!("not paid: {:?}", w.store.attempts_of(id).await.unwrap());
}

/// A worker (`dying`) that stores the payout's first attempt and goes no further: the task waits
/// until the attempt is committed and hands back the worker, still in its first send.
async fn first_attempt_stored_by(
    w: &World,
    dying: Pipeline,
    id: &PayoutId,
) -> tokio::task::JoinHandle<()> {
    let worker = tokio::spawn(async move {
        dying.tick().await.unwrap();
    });
    while w.store.attempts_of(id).await.unwrap().is_empty() {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    worker
}

/// A worker stores a first attempt and dies before its first send (or loses the database's answer
/// to what it sent): nothing is recorded as sent. Once the longest a first send takes has passed,
/// the resolver sends the stored request itself, with its key: paid once, by attempt 1. (Before,
/// nothing was sent until the rail proved the attempt dead: a day for a provider's key window.)
async fn a_first_attempt_its_worker_never_sent_is_sent_once_its_first_send_is_overdue(db: TestDb) {
    let w = world(&db, "evm:7006/FAKE").await;
    let rail = Arc::new(ProviderRail::default());
    let _never = rail.hold_first_sends();
    let id = w.request("provider-0003").await;
    first_attempt_stored_by(&w, w.pipeline(rail.clone()), &id).await.abort();
    let p = w.pipeline(rail.clone());
    p.tick().await.unwrap();
    assert_eq!(rail.created(), 0, "not before the first send is overdue");
    paid_through(&w, &p, &rail, &id).await;
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(
        attempts.iter().map(|a| (a.attempt_no, a.status)).collect::<Vec<_>>(),
        vec![(1, AttemptStatus::Confirmed)]
    );
    assert_eq!((rail.created(), rail.paid_to(DESTINATION)), (1, 1));
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// The first send is slow and comes back refused after the resolver, its first send overdue, sent
/// the attempt itself: the provider made the transfer and its answer was lost, so nothing but the
/// resolver's claim says the attempt went out. The late refusal ends nothing, and the payout is
/// paid once, by attempt 1. (A refusal that ended the attempt here would start attempt 2 beside a
/// transfer already made: paid twice.)
async fn a_refusal_recorded_after_the_resolver_sent_the_attempt_ends_nothing(db: TestDb) {
    let w = world(&db, "evm:7007/FAKE").await;
    let rail = Arc::new(ProviderRail::default());
    let gate = rail.hold_first_sends();
    let id = w.request("provider-0004").await;
    let slow = first_attempt_stored_by(&w, w.pipeline(rail.clone()), &id).await;
    w.clock.0.fetch_add(rail.first_send_within_ms(), Ordering::SeqCst);
    let p = w.pipeline(rail.clone());
    rail.0.lock().unwrap().lose_next_answers = 1;
    p.tick().await.unwrap();
    assert_eq!(rail.created(), 1, "the resolver sent the overdue first send");
    gate.add_permits(1);
    slow.await.unwrap();
    paid_through(&w, &p, &rail, &id).await;
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(
        attempts.iter().map(|a| (a.attempt_no, a.status)).collect::<Vec<_>>(),
        vec![(1, AttemptStatus::Confirmed)]
    );
    assert_eq!((rail.created(), rail.paid_to(DESTINATION)), (1, 1), "paid once");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// An operator's cancel on a rail whose attempts end by themselves (an expiring blockhash) is
/// refused with a reason, and changes nothing; the rail's own resolution goes on.
async fn an_operator_cancel_on_a_rail_without_nonces_is_refused_and_changes_nothing(db: TestDb) {
    let w = world(&db, "evm:7004/FAKE").await;
    db.exec_raw("INSERT INTO hot_wallets (id, chain, address, next_nonce) VALUES ('fake-payer', 'solana:fake', 'FakePayer1111', 0)").await.unwrap();
    let rail = Arc::new(ExpiringRail::default());
    let p = w.pipeline(rail.clone());
    let id = w.request("expiring-0002").await;
    p.tick().await.unwrap();
    assert_eq!(w.status(&id).await, PayoutStatus::Processing);
    let refused = p.cancel_signed(&id).await.unwrap_err().to_string();
    assert!(refused.contains("cannot cancel"), "{refused}");
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(
        (attempts.len(), attempts[0].txs.len(), w.status(&id).await),
        (1, 1, PayoutStatus::Processing)
    );
}

payoutd_testkit::both_stores!(
    an_operator_cancel_on_a_rail_without_nonces_is_refused_and_changes_nothing,
    a_rail_without_nonces_pays_once_after_an_attempt_expires,
    a_first_attempt_landing_at_its_last_valid_height_pays_once,
    a_rail_without_signed_bytes_pays_once_through_a_lost_answer,
    a_failed_provider_transfer_starts_the_next_attempt_under_the_same_hold,
    a_first_attempt_its_worker_never_sent_is_sent_once_its_first_send_is_overdue,
    a_refusal_recorded_after_the_resolver_sent_the_attempt_ends_nothing,
);
