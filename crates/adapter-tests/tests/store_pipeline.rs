//! The pipeline port on both stores: every test runs on a fresh PostgreSQL database and a fresh SQLite file.

use std::sync::Arc;
use std::time::Duration;

use payoutd_domain::{
    Amount, AssetCode, AssetRegistry, Attempt, AttemptId, AttemptSlot, AttemptStatus, AttemptTx,
    DepositKey, Destination, EventId, EventType, EvmAddress, EvmSlot, FeeBid, HotWallet,
    IncidentId, IncidentKind, Journal, MerchantId, Metadata, Payout, PayoutKey, PayoutRequest,
    PayoutStatus, SolanaExpiry, TxKind, TxRef,
};
use payoutd_engine::pipeline_store::{CapCheck, NextAttempt, PayoutEffect};
use payoutd_engine::store::{NewEvent, PayoutTransition, TransitionOutcome};
use payoutd_engine::{
    AttemptSettlement, Engine, EvmLineStore, IncidentSubject, NewIncident, PipelineStore,
    SigningSession, StoreError, SystemClock,
};
use payoutd_testkit::{EvmAttemptExt, TestDb};

const DEST_A: &str = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed";
const DEST_B: &str = "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359";
const WALLET_1: &str = "0xdbF03B407c01E7cD3CBea99509d93f8DDDC8C6FB";
const WALLET_2: &str = "0xD1220A0cf47c7B9Be7A2E6BA89F429762e7b9aDb";
const WALLET_3: &str = "0x90F79bf6EB2c4f870365E785982E1f101E93b906";
const CHAIN_ID: u64 = 31337;
/// How long a waiter is given to prove it is really waiting (and not merely slow to start).
const BLOCKED_PROBE: Duration = Duration::from_millis(300);
/// Bound on retrying `begin_signing` while a dropped session's rollback reaches PostgreSQL.
const SESSION_RETRIES_MAX: u32 = 500;

fn usdc() -> AssetCode {
    AssetCode::parse("evm:31337/USDC").unwrap().0
}

fn eth() -> AssetCode {
    AssetCode::parse("evm:31337/ETH").unwrap().0
}

fn dest(text: &str) -> Destination {
    Destination::Evm(EvmAddress::parse(text).unwrap())
}

/// A distinct 32-byte hash; `lead` fixes its first byte so tests can choose the hash order.
fn hash(lead: u8) -> TxRef {
    let tail = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
    TxRef::parse(&format!("0x{lead:02x}{}", &tail[2..])).unwrap()
}

fn tx(kind: TxKind, lead: u8, fees: (u128, u128), at_ms: i64) -> AttemptTx {
    AttemptTx {
        hash: hash(lead),
        kind,
        raw: vec![0x02, lead, 0xde, 0xad, 0xbe, 0xef],
        fees: Some(FeeBid { max_fee_per_gas: fees.0, max_priority_fee_per_gas: fees.1 }),
        created_at_ms: at_ms,
    }
}

struct World {
    db: TestDb,
    engine: Engine,
    store: Arc<dyn PipelineStore>,
    lines: Arc<dyn EvmLineStore>,
    m: MerchantId,
}

impl World {
    async fn new(db: TestDb) -> World {
        let engine =
            Engine::new(db.store(), Arc::new(SystemClock), AssetRegistry::local_development());
        let (m, _key) = engine.create_merchant("acme", [1u8; 32]).await.unwrap();
        let (store, lines) = (db.pipeline(), db.evm_lines());
        World { db, engine, store, lines, m }
    }

    async fn fund(&self, merchant: &MerchantId, asset: &AssetCode, amount: u128) {
        let key = DepositKey::parse(&format!("fund-{}", uuid::Uuid::new_v4().simple())).unwrap();
        self.engine.deposit(merchant, asset, Amount::from_u128(amount), key).await.unwrap();
    }

    async fn create(
        &self,
        merchant: &MerchantId,
        asset: &AssetCode,
        amount: u128,
        to: &str,
    ) -> Payout {
        let key = PayoutKey::parse(&format!("order-{}", uuid::Uuid::new_v4().simple())).unwrap();
        let request = PayoutRequest::new(
            key,
            asset.clone(),
            Amount::from_u128(amount),
            dest(to),
            Metadata::empty(),
        );
        self.engine.create_payout(merchant, request).await.unwrap().0
    }

    /// A payout of the default merchant in USDC, moved to `approved` as the policy step would.
    async fn approved(&self, amount: u128, to: &str) -> Payout {
        let p = self.create(&self.m, &usdc(), amount, to).await;
        self.approve(p).await
    }

    async fn approve(&self, p: Payout) -> Payout {
        let mut after = p.clone();
        after.status = PayoutStatus::Approved;
        after.version += 1;
        let t = PayoutTransition {
            payout_id: p.id.clone(),
            merchant_id: p.merchant_id.clone(),
            from: PayoutStatus::Requested,
            from_version: p.version,
            to: PayoutStatus::Approved,
            journals: vec![],
            event: NewEvent::for_payout(EventType::PayoutApproved, &after, 0),
            at_ms: 0,
        };
        match self.store.transition_payout(&t).await.unwrap() {
            TransitionOutcome::Applied(p) => p,
            TransitionOutcome::Stale => panic!("a fresh payout is requested"),
        }
    }

    async fn wallet(&self, address: &str) -> HotWallet {
        self.lines
            .ensure_hot_wallet(CHAIN_ID, &EvmAddress::parse(address).unwrap(), 0)
            .await
            .unwrap()
    }

    async fn balance(&self) -> (Amount, Amount) {
        let b = self.engine.balances(&self.m).await.unwrap();
        b.iter().find(|b| b.asset == usdc()).map(|b| (b.available, b.held)).unwrap_or_default()
    }

    async fn now(&self, p: &Payout) -> Payout {
        self.store.payout_by_id(&p.id).await.unwrap().expect("payout exists")
    }

    async fn only_attempt(&self, p: &Payout) -> Attempt {
        let mut attempts = self.store.attempts_of(&p.id).await.unwrap();
        assert_eq!(attempts.len(), 1, "payout {} has exactly one attempt", p.id);
        attempts.pop().unwrap()
    }

    async fn assert_ledger_clean(&self) {
        let audit = self.store.audit_ledger().await.unwrap();
        assert!(audit.is_clean(), "ledger audit failed: {audit:?}");
    }

    /// Settles `attempt` and moves its payout from where it is now, as the resolver would.
    async fn settle(
        &self,
        attempt: &Attempt,
        from: AttemptStatus,
        to: AttemptStatus,
        evidence: impl std::fmt::Display,
        payout_to: PayoutStatus,
        incident: Option<NewIncident>,
    ) -> Result<TransitionOutcome, StoreError> {
        let p = self
            .store
            .payout_by_id(&attempt.payout_id)
            .await
            .unwrap()
            .expect("the attempt's payout exists");
        self.store
            .settle_attempt(&settlement(&p, attempt, from, to, evidence, payout_to, incident))
            .await
    }
}

fn settlement(
    p: &Payout,
    attempt: &Attempt,
    from: AttemptStatus,
    to: AttemptStatus,
    evidence: impl std::fmt::Display,
    payout_to: PayoutStatus,
    incident: Option<NewIncident>,
) -> AttemptSettlement {
    let (journals, event_type) = match payout_to {
        PayoutStatus::Paid => (
            vec![Journal::settle(&p.merchant_id, &p.asset, p.id.as_str(), p.amount)],
            EventType::PayoutPaid,
        ),
        PayoutStatus::Failed => (
            vec![Journal::release(&p.merchant_id, &p.asset, p.id.as_str(), p.amount)],
            EventType::PayoutFailed,
        ),
        PayoutStatus::NeedsAttention => (vec![], EventType::PayoutNeedsAttention),
        other => panic!("a settlement does not move a payout to {other}"),
    };
    let mut after = p.clone();
    after.status = payout_to;
    after.version += 1;
    AttemptSettlement {
        attempt_id: attempt.id.clone(),
        attempt_from: from,
        attempt_to: to,
        evidence: evidence.to_string(),
        mined: None,
        payout: PayoutEffect::Transition(PayoutTransition {
            payout_id: p.id.clone(),
            merchant_id: p.merchant_id.clone(),
            from: p.status,
            from_version: p.version,
            to: payout_to,
            journals,
            event: NewEvent::for_payout(event_type, &after, 5_000),
            at_ms: 5_000,
        }),
        incident,
        attempt_created_at_ms: attempt.created_at_ms,
    }
}

/// The transition inside a settlement built by `settlement`.
fn transition_of(s: &mut AttemptSettlement) -> &mut PayoutTransition {
    match &mut s.payout {
        PayoutEffect::Transition(t) => t,
        PayoutEffect::AwaitNextAttempt(_) => panic!("built as a transition"),
    }
}

fn incident(
    kind: IncidentKind,
    p: Option<&Payout>,
    attempt: Option<&Attempt>,
    detail: &str,
    at_ms: i64,
) -> NewIncident {
    let subject = IncidentSubject {
        merchant_id: p.map(|p| p.merchant_id.clone()),
        payout_id: p.map(|p| p.id.clone()),
        attempt_id: attempt.map(|a| a.id.clone()),
    };
    NewIncident::new(kind, subject, detail.to_owned(), at_ms)
}

/// A session on the wallet; on PostgreSQL another worker (or a dropped session whose ROLLBACK
/// has not reached the server yet) may hold it for a moment.
async fn session(store: &Arc<dyn EvmLineStore>, wallet_id: &str) -> Box<dyn SigningSession> {
    for _ in 0..SESSION_RETRIES_MAX {
        if let Some(s) = store.begin_signing(wallet_id).await.unwrap() {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("wallet {wallet_id} stayed locked");
}

/// Records `p` as signed in the session with the session's next nonce; returns the stored attempt.
async fn sign(s: &mut Box<dyn SigningSession>, p: &Payout, wallet_id: &str, at_ms: i64) -> Attempt {
    let attempt = Attempt {
        id: AttemptId::new(),
        payout_id: p.id.clone(),
        attempt_no: 1,
        status: AttemptStatus::Signed,
        slot: AttemptSlot::Evm(EvmSlot { wallet_id: wallet_id.to_owned(), nonce: s.next_nonce() }),
        txs: vec![tx(TxKind::Original, 0x80, (2_000_000_000, 1_000_000_000), at_ms)],
        mined: None,
        last_sent_at_ms: 0,
        created_at_ms: at_ms,
        updated_at_ms: at_ms,
    };
    let mut after = p.clone();
    after.status = PayoutStatus::Processing;
    after.version += 1;
    s.record_signed(p, &attempt, &NewEvent::for_payout(EventType::PayoutProcessing, &after, at_ms))
        .await
        .unwrap();
    attempt
}

fn ids(payouts: &[Payout]) -> Vec<String> {
    payouts.iter().map(|p| p.id.to_string()).collect()
}

async fn nonces_are_contiguous_and_a_dropped_session_leaves_no_gap(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let mut payouts = Vec::new();
    for _ in 0..4 {
        payouts.push(w.approved(10, DEST_A).await);
    }
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    assert_eq!(s.next_nonce(), 0);
    let claimed = s.claim_approved(&[usdc()], 3).await.unwrap();
    assert_eq!(ids(&claimed), ids(&payouts[..3]), "oldest first, at most the limit");
    for p in &claimed {
        sign(&mut s, p, &wallet.id, 1_000).await;
    }
    assert_eq!(s.next_nonce(), 3);
    s.commit().await.unwrap();
    let nonces: Vec<u64> =
        futures::future::join_all(payouts[..3].iter().map(|p| w.only_attempt(p)))
            .await
            .iter()
            .map(|a| a.nonce())
            .collect();
    assert_eq!(nonces, vec![0, 1, 2]);
    assert_eq!(w.lines.hot_wallet(&wallet.id).await.unwrap().unwrap().next_nonce, 3);

    // 8.12: a crash between nonce allocation and commit.
    let mut s = session(&w.lines, &wallet.id).await;
    let claimed = s.claim_approved(&[usdc()], 10).await.unwrap();
    assert_eq!(ids(&claimed), ids(&payouts[3..]));
    sign(&mut s, &claimed[0], &wallet.id, 2_000).await;
    assert_eq!(s.next_nonce(), 4);
    drop(s);
    let mut s = session(&w.lines, &wallet.id).await;
    assert_eq!(s.next_nonce(), 3, "the dropped session's nonce is handed out again: no gap");
    assert!(
        w.store.attempts_of(&payouts[3].id).await.unwrap().is_empty(),
        "no attempt row survived"
    );
    assert_eq!(w.now(&payouts[3]).await.status, PayoutStatus::Approved);
    assert_eq!(w.store.count_events(&w.m, EventType::PayoutProcessing).await.unwrap(), 3);
    let claimed = s.claim_approved(&[usdc()], 10).await.unwrap();
    assert_eq!(ids(&claimed), ids(&payouts[3..]), "the payout is claimable again");
    assert_eq!(sign(&mut s, &claimed[0], &wallet.id, 3_000).await.nonce(), 3);
    s.commit().await.unwrap();
    assert_eq!(w.lines.hot_wallet(&wallet.id).await.unwrap().unwrap().next_nonce, 4);
    assert_eq!(w.db.scalar_raw("SELECT count(*) FROM attempts").await, 4);
}

/// Payouts with metadata near the limit make PostgreSQL's batched commit split the batch into many
/// statements; the batch must still land whole, in nonce order, or not at all.
#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn a_large_signing_batch_is_stored_whole_and_one_refusal_stores_none_of_it(db: TestDb) {
    const BATCH: usize = 40;
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 1_000_000).await;
    let metadata =
        Metadata::from_canonical_json(format!("{{\"note\":\"{}\"}}", "x".repeat(3_000))).unwrap();
    let mut payouts = Vec::new();
    for i in 0..2 * BATCH {
        let key = PayoutKey::parse(&format!("big-batch-{i:04}")).unwrap();
        let request = PayoutRequest::new(
            key,
            usdc(),
            Amount::from_u128(10 + i as u128),
            dest(DEST_A),
            metadata.clone(),
        );
        payouts.push(w.approve(w.engine.create_payout(&w.m, request).await.unwrap().0).await);
    }
    let wallet = w.wallet(WALLET_1).await;

    let mut s = session(&w.lines, &wallet.id).await;
    let claimed = s.claim_approved(&[usdc()], BATCH as u32).await.unwrap();
    assert_eq!(claimed.len(), BATCH);
    let mut signed = Vec::new();
    for p in &claimed {
        signed.push(sign(&mut s, p, &wallet.id, 1_000).await);
    }
    s.commit().await.unwrap();
    for (p, attempt) in claimed.iter().zip(&signed) {
        assert_eq!(
            &w.only_attempt(p).await,
            attempt,
            "stored exactly as signed, raw bytes included"
        );
        let now = w.now(p).await;
        assert_eq!((now.status, now.version), (PayoutStatus::Processing, p.version + 1));
    }
    assert_eq!(
        signed.iter().map(|a| a.nonce()).collect::<Vec<_>>(),
        (0..BATCH as u64).collect::<Vec<_>>()
    );
    assert_eq!(
        w.store.count_events(&w.m, EventType::PayoutProcessing).await.unwrap(),
        BATCH as u64
    );
    assert_eq!(w.lines.hot_wallet(&wallet.id).await.unwrap().unwrap().next_nonce, BATCH as u64);

    // A stale copy in the middle of the next batch (a version that is not the stored one, I5).
    let mut s = session(&w.lines, &wallet.id).await;
    let mut claimed = s.claim_approved(&[usdc()], BATCH as u32).await.unwrap();
    assert_eq!(claimed.len(), BATCH);
    claimed[BATCH / 2].version += 7;
    let mut refusal = None;
    for p in &claimed {
        let attempt = Attempt {
            id: AttemptId::new(),
            payout_id: p.id.clone(),
            attempt_no: 1,
            status: AttemptStatus::Signed,
            slot: AttemptSlot::Evm(EvmSlot { wallet_id: wallet.id.clone(), nonce: s.next_nonce() }),
            txs: vec![tx(TxKind::Original, 0x80, (2_000_000_000, 1_000_000_000), 2_000)],
            mined: None,
            last_sent_at_ms: 0,
            created_at_ms: 2_000,
            updated_at_ms: 2_000,
        };
        let mut after = p.clone();
        after.status = PayoutStatus::Processing;
        after.version += 1;
        if let Err(e) = s
            .record_signed(
                p,
                &attempt,
                &NewEvent::for_payout(EventType::PayoutProcessing, &after, 2_000),
            )
            .await
        {
            refusal = Some(e);
            break;
        }
    }
    // SQLite refuses at once, PostgreSQL when the batch is written at commit.
    let refusal = match refusal {
        Some(e) => Err(e),
        None => s.commit().await,
    };
    match refusal {
        Err(StoreError::Invariant(message)) => {
            assert!(message.contains("not approved at version"), "{message}")
        }
        other => panic!("a stale payout in the batch must refuse the session, got {other:?}"),
    }
    for p in &payouts[BATCH..] {
        assert!(
            w.store.attempts_of(&p.id).await.unwrap().is_empty(),
            "no attempt of the refused batch survived"
        );
        assert_eq!(w.now(p).await.status, PayoutStatus::Approved);
    }
    assert_eq!(
        w.store.count_events(&w.m, EventType::PayoutProcessing).await.unwrap(),
        BATCH as u64
    );
    assert_eq!(
        w.lines.hot_wallet(&wallet.id).await.unwrap().unwrap().next_nonce,
        BATCH as u64,
        "no nonce consumed"
    );
    w.assert_ledger_clean().await;
}

async fn concurrent_sessions_on_one_wallet_never_share_a_nonce(db: TestDb) {
    const PAYOUTS: u64 = 40;
    const WORKERS: usize = 8;
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), u128::from(PAYOUTS)).await;
    let mut payouts = Vec::new();
    for _ in 0..PAYOUTS {
        payouts.push(w.approved(1, DEST_A).await);
    }
    let wallet = w.wallet(WALLET_1).await;
    let tasks: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (store, wallet_id) = (w.lines.clone(), wallet.id.clone());
            tokio::spawn(async move {
                let (mut signed, mut skipped) = (0u64, 0u64);
                loop {
                    let Some(mut s) = store.begin_signing(&wallet_id).await.unwrap() else {
                        skipped += 1;
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        continue;
                    };
                    let claimed = s.claim_approved(&[usdc()], 3).await.unwrap();
                    if claimed.is_empty() {
                        return (signed, skipped);
                    }
                    for p in &claimed {
                        sign(&mut s, p, &wallet_id, 1_000).await;
                        signed += 1;
                    }
                    s.commit().await.unwrap();
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    let results: Vec<(u64, u64)> =
        futures::future::join_all(tasks).await.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        results.iter().map(|r| r.0).sum::<u64>(),
        PAYOUTS,
        "every payout signed once across the workers"
    );
    let mut nonces = Vec::new();
    for p in &payouts {
        nonces.push(w.only_attempt(p).await.nonce());
        assert_eq!(w.now(p).await.status, PayoutStatus::Processing);
    }
    nonces.sort_unstable();
    assert_eq!(nonces, (0..PAYOUTS).collect::<Vec<_>>(), "contiguous from 0, no duplicate");
    assert_eq!(w.lines.hot_wallet(&wallet.id).await.unwrap().unwrap().next_nonce, PAYOUTS);
    assert_eq!(w.store.count_events(&w.m, EventType::PayoutProcessing).await.unwrap(), PAYOUTS);
    w.assert_ledger_clean().await;
}

async fn two_sessions_never_claim_the_same_payout(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let mut payouts = Vec::new();
    for _ in 0..5 {
        payouts.push(w.approved(10, DEST_A).await);
    }
    let (w1, w2) = (w.wallet(WALLET_1).await, w.wallet(WALLET_2).await);
    let mut s1 = session(&w.lines, &w1.id).await;
    let first = s1.claim_approved(&[usdc()], 3).await.unwrap();
    assert_eq!(ids(&first), ids(&payouts[..3]));
    let second: Vec<Payout> = if w.db.is_postgres() {
        // Both sessions are open at once; FOR UPDATE SKIP LOCKED passes over s1's rows.
        let mut s2 = session(&w.lines, &w2.id).await;
        let second = s2.claim_approved(&[usdc()], 10).await.unwrap();
        for p in &second {
            sign(&mut s2, p, &w2.id, 1_000).await;
        }
        s2.commit().await.unwrap();
        for p in &first {
            sign(&mut s1, p, &w1.id, 1_000).await;
        }
        s1.commit().await.unwrap();
        second
    } else {
        // SQLite: the second session waits for the first to finish, then sees only what is left.
        let (store, w2_id) = (w.lines.clone(), w2.id.clone());
        let other = tokio::spawn(async move {
            let mut s2 = session(&store, &w2_id).await;
            let second = s2.claim_approved(&[usdc()], 10).await.unwrap();
            for p in &second {
                sign(&mut s2, p, &w2_id, 1_000).await;
            }
            s2.commit().await.unwrap();
            second
        });
        tokio::time::sleep(BLOCKED_PROBE).await;
        assert!(!other.is_finished(), "a second session waits while the first is open");
        for p in &first {
            sign(&mut s1, p, &w1.id, 1_000).await;
        }
        s1.commit().await.unwrap();
        other.await.unwrap()
    };
    assert_eq!(ids(&second), ids(&payouts[3..]), "the second session got exactly the rest");
    for p in &payouts {
        let a = w.only_attempt(p).await;
        let expected = if first.iter().any(|f| f.id == p.id) { &w1.id } else { &w2.id };
        assert_eq!(a.wallet_id(), expected.as_str());
    }
    assert_eq!(w.lines.hot_wallet(&w1.id).await.unwrap().unwrap().next_nonce, 3);
    assert_eq!(w.lines.hot_wallet(&w2.id).await.unwrap().unwrap().next_nonce, 2);
}

async fn raise_nonce_floor_never_lowers(db: TestDb) {
    let w = World::new(db).await;
    let address = EvmAddress::parse(&WALLET_1.to_lowercase()).unwrap();
    let wallet = w.lines.ensure_hot_wallet(CHAIN_ID, &address, 5).await.unwrap();
    assert_eq!(wallet.id, HotWallet::id_for(CHAIN_ID, &address));
    assert_eq!((wallet.chain_id, wallet.address, wallet.next_nonce), (CHAIN_ID, address, 5));
    assert_eq!(
        w.db.scalar_raw(&format!("SELECT count(*) FROM hot_wallets WHERE address = '{WALLET_1}'"))
            .await,
        1,
        "stored EIP-55"
    );
    let again = w.lines.ensure_hot_wallet(CHAIN_ID, &address, 0).await.unwrap();
    assert_eq!(again, wallet, "registering again changes nothing, not even the counter");
    // 8.13: a resync that reads a lower (stale, failed) count never lowers the counter.
    assert_eq!(w.lines.raise_nonce_floor(&wallet.id, 3).await.unwrap(), 5);
    assert_eq!(w.lines.raise_nonce_floor(&wallet.id, 9).await.unwrap(), 9);
    assert_eq!(w.lines.raise_nonce_floor(&wallet.id, 0).await.unwrap(), 9);
    assert_eq!(w.lines.hot_wallet(&wallet.id).await.unwrap().unwrap().next_nonce, 9);
    assert!(w.lines.hot_wallet("hw_31337_missing").await.unwrap().is_none());
    assert!(matches!(
        w.lines.raise_nonce_floor("hw_31337_missing", 1).await,
        Err(StoreError::Invariant(_))
    ));
    assert!(matches!(
        w.lines.begin_signing("hw_31337_missing").await,
        Err(StoreError::Invariant(_))
    ));

    // A floor raised while a session signs waits for it, then keeps the higher of the two.
    w.fund(&w.m, &usdc(), 100).await;
    for _ in 0..3 {
        w.approved(10, DEST_A).await;
    }
    for (floor, expected) in [(10u64, 12u64), (20, 20)] {
        let mut s = session(&w.lines, &wallet.id).await;
        for p in s.claim_approved(&[usdc()], 10).await.unwrap() {
            sign(&mut s, &p, &wallet.id, 1_000).await;
        }
        let (store, id) = (w.lines.clone(), wallet.id.clone());
        let raise = tokio::spawn(async move { store.raise_nonce_floor(&id, floor).await.unwrap() });
        tokio::time::sleep(BLOCKED_PROBE).await;
        assert!(!raise.is_finished(), "the floor waits for the open session");
        s.commit().await.unwrap();
        assert_eq!(raise.await.unwrap(), expected);
        assert_eq!(w.lines.hot_wallet(&wallet.id).await.unwrap().unwrap().next_nonce, expected);
    }
    assert_eq!(session(&w.lines, &wallet.id).await.next_nonce(), 20);
}

async fn one_live_attempt_per_payout_is_enforced(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let p = w.approved(10, DEST_A).await;
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let first = sign(&mut s, &p, &wallet.id, 1_000).await;
    s.commit().await.unwrap();

    // A worker with a stale copy of the payout (still approved) tries a second attempt.
    let mut s = session(&w.lines, &wallet.id).await;
    let mut second = first.clone();
    second.id = AttemptId::new();
    second.attempt_no = 2;
    second.slot = AttemptSlot::Evm(EvmSlot {
        wallet_id: first.wallet_id().to_owned(),
        nonce: s.next_nonce(),
    });
    second.txs = vec![tx(TxKind::Original, 0x81, (3_000_000_000, 1_000_000_000), 2_000)];
    let mut after = p.clone();
    after.status = PayoutStatus::Processing;
    // A store may refuse at once (SQLite) or when the batch is written at commit (PostgreSQL).
    let refused = match s
        .record_signed(
            &p,
            &second,
            &NewEvent::for_payout(EventType::PayoutProcessing, &after, 2_000),
        )
        .await
    {
        Ok(()) => s.commit().await,
        Err(e) => {
            drop(s);
            Err(e)
        }
    };
    match refused {
        Err(StoreError::Invariant(message)) => assert!(
            message.contains("attempts_one_live") || message.contains("attempts.payout_id"),
            "refused by the one-live-attempt index: {message}"
        ),
        other => panic!("a second live attempt must be refused, got {other:?}"),
    }
    assert_eq!(w.only_attempt(&p).await, first);
    assert_eq!(
        w.lines.hot_wallet(&wallet.id).await.unwrap().unwrap().next_nonce,
        1,
        "the refused nonce was not consumed"
    );
    assert_eq!(w.now(&p).await.status, PayoutStatus::Processing);
}

#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn settle_attempt_confirm_pays_and_settles_once(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let p = w.approved(40, DEST_A).await;
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let attempt = sign(&mut s, &p, &wallet.id, 1_000).await;
    s.commit().await.unwrap();
    assert!(w.store.mark_broadcast(&attempt.id, 1_500).await.unwrap());
    let landed = attempt.txs[0].hash.clone();

    // The payout moved on since the resolver read it: nothing is written, not even the attempt.
    let processing = w.now(&p).await;
    let mut stale = settlement(
        &processing,
        &attempt,
        AttemptStatus::Broadcast,
        AttemptStatus::Confirmed,
        &landed,
        PayoutStatus::Paid,
        None,
    );
    transition_of(&mut stale).from_version -= 1;
    assert!(matches!(w.store.settle_attempt(&stale).await.unwrap(), TransitionOutcome::Stale));
    assert_eq!(
        w.only_attempt(&p).await.status,
        AttemptStatus::Broadcast,
        "the attempt update rolled back"
    );

    let confirm = settlement(
        &processing,
        &attempt,
        AttemptStatus::Broadcast,
        AttemptStatus::Confirmed,
        &landed,
        PayoutStatus::Paid,
        None,
    );
    let TransitionOutcome::Applied(paid) = w.store.settle_attempt(&confirm).await.unwrap() else {
        panic!("the first confirmation applies");
    };
    assert_eq!((paid.status, paid.version), (PayoutStatus::Paid, processing.version + 1));
    assert!(
        matches!(w.store.settle_attempt(&confirm).await.unwrap(), TransitionOutcome::Stale),
        "a second settle is stale"
    );

    assert_eq!(w.only_attempt(&p).await.status, AttemptStatus::Confirmed);
    assert_eq!(
        w.db.scalar_raw(&format!("SELECT count(*) FROM attempts WHERE evidence = '{landed}'"))
            .await,
        1
    );
    assert_eq!(
        w.balance().await,
        (Amount::from_u128(60), Amount::ZERO),
        "held back to 0, the 40 left"
    );
    assert_eq!(w.db.scalar_raw("SELECT count(*) FROM journals WHERE kind = 'settle'").await, 1);
    assert_eq!(w.store.count_events(&w.m, EventType::PayoutPaid).await.unwrap(), 1);
    let amount_40 = if w.db.is_postgres() {
        "40".to_owned()
    } else {
        format!("'{}'", Amount::from_u128(40).to_padded())
    };
    let out = format!(
        "SELECT count(*) FROM ledger_entries WHERE account = 'world:payouts' AND direction = 1 AND amount = {amount_40}"
    );
    assert_eq!(w.db.scalar_raw(&out).await, 1, "the money left via world:payouts");
    assert_eq!(
        w.db.scalar_raw("SELECT count(*) FROM ledger_entries WHERE account = 'world:payouts'")
            .await,
        1
    );
    assert!(w.store.live_attempts(10).await.unwrap().is_empty());
    w.assert_ledger_clean().await;
}

async fn settle_attempt_dead_fails_and_releases_only_with_proof(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let p = w.approved(40, DEST_A).await;
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let attempt = sign(&mut s, &p, &wallet.id, 1_000).await;
    s.commit().await.unwrap();

    // I6: no proof, no release.
    for no_proof in ["", "  "] {
        let refused = w
            .settle(
                &attempt,
                AttemptStatus::Signed,
                AttemptStatus::Dead,
                no_proof,
                PayoutStatus::Failed,
                None,
            )
            .await;
        assert!(
            matches!(refused, Err(StoreError::Invariant(_))),
            "dead without proof must be refused: {refused:?}"
        );
    }
    assert_eq!(w.only_attempt(&p).await.status, AttemptStatus::Signed);
    assert_eq!(w.now(&p).await.status, PayoutStatus::Processing);
    assert_eq!(
        w.balance().await,
        (Amount::from_u128(60), Amount::from_u128(40)),
        "the hold stands"
    );

    let proof = "cancel 0xabc confirmed in block 7 at nonce 0";
    let outcome = w
        .settle(
            &attempt,
            AttemptStatus::Signed,
            AttemptStatus::Dead,
            proof,
            PayoutStatus::Failed,
            None,
        )
        .await
        .unwrap();
    let TransitionOutcome::Applied(failed) = outcome else { panic!("a proven death applies") };
    assert_eq!(failed.status, PayoutStatus::Failed);
    assert_eq!(w.only_attempt(&p).await.status, AttemptStatus::Dead);
    let stored = format!(
        "SELECT count(*) FROM attempts WHERE death_proof = '{proof}' AND evidence = '{proof}'"
    );
    assert_eq!(w.db.scalar_raw(&stored).await, 1, "the proof is kept with the attempt");
    assert_eq!(w.balance().await, (Amount::from_u128(100), Amount::ZERO), "released exactly once");
    let again = w
        .settle(
            &attempt,
            AttemptStatus::Signed,
            AttemptStatus::Dead,
            proof,
            PayoutStatus::Failed,
            None,
        )
        .await;
    assert!(matches!(again, Ok(TransitionOutcome::Stale)));
    assert_eq!(w.db.scalar_raw("SELECT count(*) FROM journals WHERE kind = 'release'").await, 1);
    assert_eq!(w.store.count_events(&w.m, EventType::PayoutFailed).await.unwrap(), 1);
    w.assert_ledger_clean().await;
}

#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn settle_attempt_reverted_needs_attention_keeps_the_hold_and_opens_an_incident(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let p = w.approved(30, DEST_A).await;
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let attempt = sign(&mut s, &p, &wallet.id, 1_000).await;
    s.commit().await.unwrap();
    assert!(w.store.mark_broadcast(&attempt.id, 1_500).await.unwrap());
    let reverted = attempt.txs[0].hash.clone();

    // A stale payout version: the incident is not written either.
    let processing = w.now(&p).await;
    let opened =
        incident(IncidentKind::Reverted, Some(&p), Some(&attempt), "status 0 receipt", 5_000);
    let mut stale = settlement(
        &processing,
        &attempt,
        AttemptStatus::Broadcast,
        AttemptStatus::Reverted,
        &reverted,
        PayoutStatus::NeedsAttention,
        Some(opened.clone()),
    );
    transition_of(&mut stale).from_version += 1;
    assert!(matches!(w.store.settle_attempt(&stale).await.unwrap(), TransitionOutcome::Stale));
    assert!(w.store.open_incidents(10).await.unwrap().is_empty());
    assert_eq!(w.store.count_events(&w.m, EventType::IncidentOpened).await.unwrap(), 0);

    let settle = settlement(
        &processing,
        &attempt,
        AttemptStatus::Broadcast,
        AttemptStatus::Reverted,
        &reverted,
        PayoutStatus::NeedsAttention,
        Some(opened.clone()),
    );
    let TransitionOutcome::Applied(after) = w.store.settle_attempt(&settle).await.unwrap() else {
        panic!("applies")
    };
    assert_eq!(after.status, PayoutStatus::NeedsAttention);
    assert_eq!(w.only_attempt(&p).await.status, AttemptStatus::Reverted);
    assert_eq!(
        w.balance().await,
        (Amount::from_u128(70), Amount::from_u128(30)),
        "ambiguity keeps the hold"
    );
    let open = w.store.open_incidents(10).await.unwrap();
    assert_eq!(open.len(), 1);
    let i = &open[0];
    assert_eq!(
        (&i.id, i.kind, i.payout_id.as_ref(), i.attempt_id.as_ref()),
        (&opened.id, IncidentKind::Reverted, Some(&p.id), Some(&attempt.id))
    );
    assert_eq!(
        (i.detail.as_str(), i.resolution.as_ref(), i.created_at_ms),
        ("status 0 receipt", None, 5_000)
    );
    assert_eq!(w.store.count_events(&w.m, EventType::IncidentOpened).await.unwrap(), 1);
    assert!(w.store.event_exists(&opened.event.id).await.unwrap());

    // A standalone incident (nothing to pin it to) sorts after the older one.
    let unmatched =
        incident(IncidentKind::UnmatchedTransfer, None, None, "0xdef from the hot wallet", 6_000);
    w.store.open_incident(&unmatched).await.unwrap();
    let open: Vec<IncidentId> =
        w.store.open_incidents(10).await.unwrap().into_iter().map(|i| i.id).collect();
    assert_eq!(open, vec![opened.id.clone(), unmatched.id.clone()]);
    assert!(
        w.store.resolve_incident(&opened.id, "operator: refunded off-chain", 7_000).await.unwrap()
    );
    assert!(!w.store.resolve_incident(&opened.id, "again", 8_000).await.unwrap(), "resolves once");
    assert!(!w.store.resolve_incident(&IncidentId::new(), "ghost", 8_000).await.unwrap());
    let open: Vec<IncidentId> =
        w.store.open_incidents(10).await.unwrap().into_iter().map(|i| i.id).collect();
    assert_eq!(open, vec![unmatched.id.clone()]);
    w.assert_ledger_clean().await;
}

async fn add_attempt_tx_only_on_live_attempts(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let p = w.approved(10, DEST_A).await;
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let attempt = sign(&mut s, &p, &wallet.id, 1_000).await;
    s.commit().await.unwrap();
    let replacement = tx(TxKind::Replacement, 0x10, (2_500_000_000, 1_250_000_000), 2_000);
    w.store.add_attempt_tx(&attempt.id, &replacement).await.unwrap();
    assert!(w.store.mark_broadcast(&attempt.id, 2_100).await.unwrap());
    let cancel = tx(TxKind::Cancel, 0x20, (3_000_000_000, 1_500_000_000), 3_000);
    w.store.add_attempt_tx(&attempt.id, &cancel).await.unwrap();
    let duplicate = w.store.add_attempt_tx(&attempt.id, &cancel).await;
    assert!(
        matches!(duplicate, Err(StoreError::Invariant(_))),
        "a hash is stored once: {duplicate:?}"
    );
    let stored = w.only_attempt(&p).await;
    assert_eq!(stored.txs, vec![attempt.txs[0].clone(), replacement, cancel.clone()]);

    let proof = format!("cancel {} confirmed", cancel.hash);
    w.settle(
        &stored,
        AttemptStatus::Broadcast,
        AttemptStatus::Dead,
        &proof,
        PayoutStatus::Failed,
        None,
    )
    .await
    .unwrap();
    let late = w
        .store
        .add_attempt_tx(
            &attempt.id,
            &tx(TxKind::Replacement, 0x30, (9_000_000_000, 2_000_000_000), 4_000),
        )
        .await;
    assert!(
        matches!(late, Err(StoreError::Invariant(_))),
        "a dead attempt takes no new transaction: {late:?}"
    );
    let ghost =
        w.store.add_attempt_tx(&AttemptId::new(), &tx(TxKind::Cancel, 0x40, (1, 1), 4_000)).await;
    assert!(matches!(ghost, Err(StoreError::Invariant(_))), "unknown attempt: {ghost:?}");
    assert_eq!(w.db.scalar_raw("SELECT count(*) FROM attempt_transactions").await, 3);
}

#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn live_attempts_returns_every_hash(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let (p1, p2, p3) =
        (w.approved(10, DEST_A).await, w.approved(20, DEST_B).await, w.approved(30, DEST_A).await);
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let (a1, a2, a3) = (
        sign(&mut s, &p1, &wallet.id, 1_000).await,
        sign(&mut s, &p2, &wallet.id, 1_000).await,
        sign(&mut s, &p3, &wallet.id, 1_000).await,
    );
    s.commit().await.unwrap();

    // Two replacements in the same millisecond, hashes in the opposite order of their fees;
    // the cancel outbids everything, with fees far above 2^64 to check they round trip exactly.
    let bump_1 = tx(TxKind::Replacement, 0xff, (2_500_000_000, 1_250_000_000), 2_000);
    let bump_2 = tx(TxKind::Replacement, 0x00, (3_125_000_000, 1_562_500_000), 2_000);
    let cancel = tx(TxKind::Cancel, 0x01, (u128::MAX - 1, u128::MAX / 3), 3_000);
    for t in [&bump_1, &bump_2, &cancel] {
        w.store.add_attempt_tx(&a1.id, t).await.unwrap();
    }
    w.store.record_checked(std::slice::from_ref(&a1.id), 9_000).await.unwrap();
    w.store.record_checked(std::slice::from_ref(&a2.id), 8_000).await.unwrap();

    let live = w.store.live_attempts(10).await.unwrap();
    let order: Vec<&AttemptId> = live.iter().map(|(a, _)| &a.id).collect();
    assert_eq!(
        order,
        vec![&a1.id, &a2.id, &a3.id],
        "lowest nonce first: the head of the wallet's line blocks the rest"
    );
    for (a, p) in &live {
        assert_eq!(
            (&p.id, p.status),
            (&a.payout_id, PayoutStatus::Processing),
            "each attempt comes with its payout"
        );
    }
    let mut expected = a1.clone();
    expected.txs.extend([bump_1.clone(), bump_2.clone(), cancel.clone()]);
    assert_eq!(live[0].0, expected, "every hash, bytes and fees, oldest first");
    assert_eq!(live[0].0.latest_tx(), &cancel);
    assert_eq!(live[1].0, a2);
    assert_eq!(w.store.live_attempts(1).await.unwrap().len(), 1, "the limit holds");

    assert!(w.store.mark_broadcast(&a2.id, 4_000).await.unwrap());
    assert!(
        !w.store.mark_broadcast(&a2.id, 4_500).await.unwrap(),
        "signed -> broadcast happens once"
    );
    assert!(w.store.record_sent(&a2.id, 5_000).await.unwrap());
    let a2_now = w.only_attempt(&p2).await;
    assert_eq!(
        (a2_now.status, a2_now.last_sent_at_ms, a2_now.updated_at_ms),
        (AttemptStatus::Broadcast, 5_000, 4_000)
    );

    assert!(w.store.record_mined(&a1.id, 77, &bump_2.hash).await.unwrap());
    assert_eq!(w.only_attempt(&p1).await.mined, Some((77, bump_2.hash.clone())));
    assert!(
        !w.store.record_mined(&a1.id, 78, &a2.txs[0].hash).await.unwrap(),
        "only a hash of the attempt itself"
    );
    assert!(w.store.clear_mined(&a1.id).await.unwrap());
    assert_eq!(w.only_attempt(&p1).await.mined, None, "a reorg clears the receipt");
    assert!(matches!(
        w.store.record_checked(&[a1.id.clone(), AttemptId::new()], 1).await,
        Err(StoreError::Invariant(_))
    ));
    assert!(
        !w.store.record_mined(&AttemptId::new(), 1, &hash(0x01)).await.unwrap(),
        "no such attempt: nothing written"
    );

    w.settle(
        &a3,
        AttemptStatus::Signed,
        AttemptStatus::Confirmed,
        &a3.txs[0].hash,
        PayoutStatus::Paid,
        None,
    )
    .await
    .unwrap();
    let live: Vec<AttemptId> =
        w.store.live_attempts(10).await.unwrap().into_iter().map(|(a, _)| a.id).collect();
    assert_eq!(live, vec![a1.id.clone(), a2.id.clone()], "a confirmed attempt is no longer live");
    // Every attempt write is conditional on the attempt being live (I5): an ended one keeps its record.
    assert!(!w.store.record_sent(&a3.id, 9_999).await.unwrap());
    assert!(!w.store.record_mined(&a3.id, 99, &a3.txs[0].hash).await.unwrap());
    assert!(!w.store.clear_mined(&a3.id).await.unwrap());
    let a3_now = w.only_attempt(&p3).await;
    assert_eq!(
        (a3_now.status, a3_now.last_sent_at_ms, a3_now.mined),
        (AttemptStatus::Confirmed, 0, None)
    );
}

/// SPEC 8.10's bookkeeping: the per-wallet cursor starts once and only moves forward from where the
/// mover saw it; an unmatched transfer's incident is opened once per hash, with no merchant event;
/// only stored transaction hashes count as ours.
async fn reconciliation_cursor_incidents_and_known_hashes(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let wallet = w.wallet(WALLET_1).await;
    assert_eq!(w.lines.reconcile_cursor(&wallet.id).await.unwrap(), None, "no pass yet");
    assert_eq!(w.lines.start_reconcile_cursor(&wallet.id, 40).await.unwrap(), 40);
    assert_eq!(
        w.lines.start_reconcile_cursor(&wallet.id, 90).await.unwrap(),
        40,
        "a second start changes nothing"
    );
    assert!(w.lines.advance_reconcile_cursor(&wallet.id, 40, 52).await.unwrap());
    assert!(
        !w.lines.advance_reconcile_cursor(&wallet.id, 40, 60).await.unwrap(),
        "another worker moved it first"
    );
    assert_eq!(w.lines.reconcile_cursor(&wallet.id).await.unwrap(), Some(52));
    assert!(matches!(w.lines.reconcile_cursor("hw_nope").await, Err(StoreError::Invariant(_))));

    let p = w.approved(10, DEST_A).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let ours = sign(&mut s, &p, &wallet.id, 1_000).await;
    s.commit().await.unwrap();
    let stranger = hash(0x99);
    let known = w.store.tx_owners(&[stranger.clone(), ours.txs[0].hash.clone()]).await.unwrap();
    assert_eq!(known, vec![(ours.txs[0].hash.clone(), p.id.clone())]);

    let unmatched =
        incident(IncidentKind::UnmatchedTransfer, None, None, "hot wallet sent a stranger", 5_000);
    assert!(w.store.open_incident_once(&unmatched, stranger.as_str()).await.unwrap());
    let again =
        incident(IncidentKind::UnmatchedTransfer, None, None, "hot wallet sent a stranger", 5_001);
    assert!(
        !w.store.open_incident_once(&again, stranger.as_str()).await.unwrap(),
        "one incident per hash"
    );
    let open = w.store.open_incidents(10).await.unwrap();
    assert_eq!(open.iter().filter(|i| i.kind == IncidentKind::UnmatchedTransfer).count(), 1);
    assert_eq!(
        w.db.scalar_raw(
            "SELECT count(*) FROM events WHERE type = 'incident.opened' AND merchant_id IS NULL"
        )
        .await,
        1,
        "one operator event, concerning no merchant"
    );
    assert!(
        w.store.resolve_incident(&unmatched.id, "operator top-up, known", 6_000).await.unwrap()
    );
    assert!(
        !w.store.resolve_incident(&unmatched.id, "again", 6_001).await.unwrap(),
        "resolved once"
    );
    assert_eq!(
        w.db.scalar_raw(
            "SELECT count(*) FROM events WHERE type = 'incident.resolved' AND merchant_id IS NULL"
        )
        .await,
        1
    );
    assert!(
        !w.store.open_incident_once(&again, stranger.as_str()).await.unwrap(),
        "a resolved one is not opened again"
    );
}

async fn hold_for_review_takes_no_nonce_and_claims_only_the_given_assets(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    w.fund(&w.m, &eth(), 100).await;
    let p_usdc = w.approved(10, DEST_A).await;
    let p_eth = w.create(&w.m, &eth(), 10, DEST_A).await;
    let p_eth = w.approve(p_eth).await;
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    assert_eq!(
        ids(&s.claim_approved(&[usdc()], 10).await.unwrap()),
        ids(std::slice::from_ref(&p_usdc))
    );
    assert_eq!(
        ids(&s.claim_approved(&[eth()], 10).await.unwrap()),
        ids(std::slice::from_ref(&p_eth))
    );
    assert!(s.claim_approved(&[], 10).await.unwrap().is_empty());
    let mut held = p_usdc.clone();
    held.status = PayoutStatus::HeldForReview;
    held.version += 1;
    let to_review = PayoutTransition {
        payout_id: p_usdc.id.clone(),
        merchant_id: p_usdc.merchant_id.clone(),
        from: PayoutStatus::Approved,
        from_version: p_usdc.version,
        to: PayoutStatus::HeldForReview,
        journals: vec![],
        event: NewEvent::for_payout(EventType::PayoutHeldForReview, &held, 1_000),
        at_ms: 1_000,
    };
    s.transition(&to_review).await.unwrap();
    assert!(
        matches!(s.transition(&to_review).await, Err(StoreError::Invariant(_))),
        "a second move from a state left is refused"
    );
    assert_eq!(s.next_nonce(), 0, "holding uses no nonce");
    s.commit().await.unwrap();
    assert_eq!(w.now(&p_usdc).await.status, PayoutStatus::HeldForReview);
    assert_eq!(w.lines.hot_wallet(&wallet.id).await.unwrap().unwrap().next_nonce, 0);
    assert!(
        w.store
            .event_exists(&EventId::derive(EventType::PayoutHeldForReview, p_usdc.id.as_str()))
            .await
            .unwrap()
    );
    assert!(
        !w.store
            .event_exists(&EventId::derive(EventType::PayoutProcessing, p_usdc.id.as_str()))
            .await
            .unwrap()
    );
    assert!(w.store.attempts_of(&p_usdc.id).await.unwrap().is_empty());
    let mut s = session(&w.lines, &wallet.id).await;
    assert_eq!(
        ids(&s.claim_approved(&[usdc(), eth()], 10).await.unwrap()),
        ids(std::slice::from_ref(&p_eth))
    );
    let approved = w.store.payouts_in_status(PayoutStatus::Approved, 10).await.unwrap();
    assert_eq!(ids(&approved), ids(std::slice::from_ref(&p_eth)));
    assert_eq!(
        ids(&w.store.payouts_in_status(PayoutStatus::HeldForReview, 10).await.unwrap()),
        ids(std::slice::from_ref(&p_usdc))
    );
}

async fn similar_payouts_are_counted_within_the_window(db: TestDb) {
    let w = World::new(db).await;
    let (other, _) = w.engine.create_merchant("globex", [2u8; 32]).await.unwrap();
    for m in [&w.m, &other] {
        w.fund(m, &usdc(), 1_000).await;
        w.fund(m, &eth(), 1_000).await;
    }
    let p1 = w.create(&w.m, &usdc(), 10, DEST_A).await;
    let p2 = w.create(&w.m, &usdc(), 10, &DEST_A.to_lowercase()).await;
    let p3 = w.create(&w.m, &usdc(), 11, DEST_A).await;
    w.create(&w.m, &usdc(), 10, DEST_B).await;
    w.create(&w.m, &eth(), 10, DEST_A).await;
    w.create(&other, &usdc(), 10, DEST_A).await;
    let canceled = w.create(&w.m, &usdc(), 10, DEST_A).await;
    w.engine.cancel_payout(&w.m, &canceled.id).await.unwrap();

    assert_eq!(
        w.store.count_similar_payouts(&p1, 0).await.unwrap(),
        1,
        "only p2: not itself, not canceled, not other params"
    );
    assert_eq!(w.store.count_similar_payouts(&p2, 0).await.unwrap(), 1);
    assert_eq!(w.store.count_similar_payouts(&p3, 0).await.unwrap(), 0);
    assert_eq!(
        w.store.count_similar_payouts(&p1, p2.created_at_ms + 1).await.unwrap(),
        0,
        "outside the window"
    );
    assert_eq!(w.store.payout_by_id(&p2.id).await.unwrap().as_ref(), Some(&p2));
    assert!(w.store.payout_by_id(&payoutd_domain::PayoutId::new()).await.unwrap().is_none());
}

#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn volumes_count_signed_attempts_except_dead_ones(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 1_000).await;
    let (p1, p2, p3, q1) = (
        w.approved(10, DEST_A).await,
        w.approved(20, DEST_A).await,
        w.approved(5, DEST_B).await,
        w.approved(7, DEST_A).await,
    );
    w.approved(1_000 - 42, DEST_A).await; // approved but never signed: not volume
    let (w1, w2) = (w.wallet(WALLET_1).await, w.wallet(WALLET_2).await);
    let mut s = session(&w.lines, &w1.id).await;
    let a1 = sign(&mut s, &p1, &w1.id, 1_000).await;
    let a2 = sign(&mut s, &p2, &w1.id, 2_000).await;
    sign(&mut s, &p3, &w1.id, 2_000).await;
    s.commit().await.unwrap();
    let mut s = session(&w.lines, &w2.id).await;
    sign(&mut s, &q1, &w2.id, 3_000).await;
    s.commit().await.unwrap();

    let to = |text: &str, since: i64| {
        let store = w.store.clone();
        let destination = dest(text);
        async move { store.destination_volume_since(&usdc(), &destination, since).await.unwrap() }
    };
    // What a signing session on the wallet reads for its cap (then rolled back).
    let of = |id: &str, since: i64| {
        let (lines, id, payout) = (w.lines.clone(), id.to_owned(), p1.clone());
        let caps = CapCheck {
            per_destination_per_hour: Amount::MAX,
            per_account_per_hour: Amount::MAX,
            since_ms: since,
            review_event: payoutd_domain::EventId::derive(
                payoutd_domain::EventType::PayoutReviewApproved,
                payout.id.as_str(),
            ),
        };
        async move { session(&lines, &id).await.cap_reading(&payout, &caps).await.unwrap().of_account }
    };
    let n = Amount::from_u128;
    assert_eq!(to(DEST_A, 0).await, n(37), "across wallets");
    assert_eq!(to(DEST_A, 1_500).await, n(27));
    assert_eq!(to(DEST_A, 3_001).await, n(0));
    assert_eq!(to(DEST_B, 0).await, n(5));
    assert_eq!(
        w.store.destination_volume_since(&eth(), &dest(DEST_A), 0).await.unwrap(),
        n(0),
        "per asset"
    );
    assert_eq!(of(&w1.id, 0).await, n(35));
    assert_eq!(of(&w1.id, 1_500).await, n(25));
    assert_eq!(of(&w2.id, 0).await, n(7));

    w.settle(
        &a2,
        AttemptStatus::Signed,
        AttemptStatus::Dead,
        "cancel confirmed",
        PayoutStatus::Failed,
        None,
    )
    .await
    .unwrap();
    w.settle(
        &a1,
        AttemptStatus::Signed,
        AttemptStatus::Confirmed,
        &a1.txs[0].hash,
        PayoutStatus::Paid,
        None,
    )
    .await
    .unwrap();
    assert_eq!(to(DEST_A, 0).await, n(17), "a dead attempt sent nothing; a confirmed one did");
    assert_eq!(of(&w1.id, 0).await, n(15));
}

/// SPEC I3 and 4.5: a proven death and the wait for attempt n+1 are one write; the payout stays
/// `processing` under the same hold; one signing session creates attempt n+1 at the wallet's next
/// nonce, and only the awaited number.
#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn a_proven_death_awaits_the_next_attempt_and_one_session_creates_it(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let p = w.approved(40, DEST_A).await;
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let first = sign(&mut s, &p, &wallet.id, 1_000).await;
    s.commit().await.unwrap();
    let processing = w.now(&p).await;
    let death = |from_version: i64| AttemptSettlement {
        attempt_id: first.id.clone(),
        attempt_from: AttemptStatus::Signed,
        attempt_to: AttemptStatus::Dead,
        evidence: "nonce 0 used by a final block; no receipt for any stored hash".into(),
        mined: None,
        payout: PayoutEffect::AwaitNextAttempt(NextAttempt {
            payout_id: p.id.clone(),
            from_version,
            next_attempt_no: 2,
            at_ms: 5_000,
        }),
        incident: None,
        attempt_created_at_ms: 1_000,
    };
    assert!(matches!(
        w.store.settle_attempt(&death(processing.version - 1)).await.unwrap(),
        TransitionOutcome::Stale
    ));
    assert_eq!(
        w.only_attempt(&p).await.status,
        AttemptStatus::Signed,
        "a stale payout rolls the attempt back"
    );
    let TransitionOutcome::Applied(waiting) =
        w.store.settle_attempt(&death(processing.version)).await.unwrap()
    else {
        panic!("applies")
    };
    assert_eq!(
        (waiting.status, waiting.version),
        (PayoutStatus::Processing, processing.version + 1)
    );
    assert!(
        matches!(
            w.store.settle_attempt(&death(waiting.version)).await.unwrap(),
            TransitionOutcome::Stale
        ),
        "the attempt is dead already"
    );
    assert_eq!(
        w.balance().await,
        (Amount::from_u128(60), Amount::from_u128(40)),
        "the hold stands for the next attempt"
    );
    assert!(w.store.live_attempts(10).await.unwrap().is_empty());

    let mut s = session(&w.lines, &wallet.id).await;
    assert!(
        s.claim_approved(&[usdc()], 10).await.unwrap().is_empty(),
        "a processing payout is not approved"
    );
    assert!(s.claim_awaiting_next_attempt(&[eth()], 10).await.unwrap().is_empty(), "per asset");
    let claimed = s.claim_awaiting_next_attempt(&[usdc()], 10).await.unwrap();
    assert_eq!(
        claimed.iter().map(|(q, n)| (q.id.clone(), *n)).collect::<Vec<_>>(),
        vec![(p.id.clone(), 2)]
    );
    let (payout, _) = &claimed[0];
    let next = |attempt_no: u32, nonce: u64| Attempt {
        id: AttemptId::new(),
        payout_id: p.id.clone(),
        attempt_no,
        status: AttemptStatus::Signed,
        slot: AttemptSlot::Evm(EvmSlot { wallet_id: wallet.id.clone(), nonce }),
        txs: vec![tx(
            TxKind::Original,
            0x42 + attempt_no as u8,
            (2_000_000_000, 1_000_000_000),
            6_000,
        )],
        mined: None,
        last_sent_at_ms: 0,
        created_at_ms: 6_000,
        updated_at_ms: 6_000,
    };
    let refused = s.record_next_attempt(payout, &next(3, s.next_nonce())).await;
    assert!(
        matches!(refused, Err(StoreError::Invariant(_))),
        "only the awaited number: {refused:?}"
    );
    drop(s);
    let mut s = session(&w.lines, &wallet.id).await;
    let (payout, _) = s.claim_awaiting_next_attempt(&[usdc()], 10).await.unwrap().remove(0);
    let second = next(2, s.next_nonce());
    s.record_next_attempt(&payout, &second).await.unwrap();
    assert_eq!(s.next_nonce(), 2, "attempt 2 took the next nonce");
    s.commit().await.unwrap();
    assert_eq!(w.lines.hot_wallet(&wallet.id).await.unwrap().unwrap().next_nonce, 2);
    let attempts = w.store.attempts_of(&p.id).await.unwrap();
    assert_eq!(
        attempts.iter().map(|a| (a.attempt_no, a.status, a.nonce())).collect::<Vec<_>>(),
        vec![(1, AttemptStatus::Dead, 0), (2, AttemptStatus::Signed, 1)]
    );
    let mut s = session(&w.lines, &wallet.id).await;
    assert!(s.claim_awaiting_next_attempt(&[usdc()], 10).await.unwrap().is_empty(), "created once");
    drop(s);
    let now = w.now(&p).await;
    assert_eq!((now.status, now.version), (PayoutStatus::Processing, waiting.version + 1));
    assert_eq!(
        w.store.count_events(&w.m, EventType::PayoutProcessing).await.unwrap(),
        1,
        "no second processing event"
    );
    w.settle(
        &second,
        AttemptStatus::Signed,
        AttemptStatus::Confirmed,
        &second.txs[0].hash,
        PayoutStatus::Paid,
        None,
    )
    .await
    .unwrap();
    assert_eq!(w.balance().await, (Amount::from_u128(60), Amount::ZERO), "paid once, by attempt 2");
    w.assert_ledger_clean().await;
}

/// The settlement records exactly the transaction that was mined and final on the attempt (SPEC 8.6).
async fn a_settlement_records_the_final_mined_hash(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let p = w.approved(40, DEST_A).await;
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let attempt = sign(&mut s, &p, &wallet.id, 1_000).await;
    s.commit().await.unwrap();
    let bump = tx(TxKind::Replacement, 0x07, (3_000_000_000, 1_500_000_000), 2_000);
    w.store.add_attempt_tx(&attempt.id, &bump).await.unwrap();
    let processing = w.now(&p).await;
    let mut confirm = settlement(
        &processing,
        &attempt,
        AttemptStatus::Signed,
        AttemptStatus::Confirmed,
        &bump.hash,
        PayoutStatus::Paid,
        None,
    );
    confirm.mined = Some((1_234, bump.hash.clone()));
    assert!(matches!(
        w.store.settle_attempt(&confirm).await.unwrap(),
        TransitionOutcome::Applied(_)
    ));
    let stored = w.only_attempt(&p).await;
    assert_eq!(
        (stored.status, stored.mined),
        (AttemptStatus::Confirmed, Some((1_234, bump.hash.clone())))
    );
    assert_ne!(
        bump.hash, attempt.txs[0].hash,
        "the replacement, not the original, is the one recorded"
    );
}

/// I8 across wallets: a session of wallet 2 that pays the same destination reads its volume only
/// after wallet 1's session, which signed towards it, has committed (PostgreSQL: the destination's
/// advisory lock; SQLite: the single writer). Without it both would read 0 and both sign.
async fn racing_sessions_of_two_wallets_read_a_destination_volume_one_after_the_other(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 2_000).await;
    let (p1, p2) = (w.approved(600, DEST_A).await, w.approved(601, DEST_A).await);
    let (w1, w2) = (w.wallet(WALLET_1).await, w.wallet(WALLET_2).await);
    let mut s1 = session(&w.lines, &w1.id).await;
    let claimed = s1.claim_approved(&[usdc()], 1).await.unwrap();
    assert_eq!(ids(&claimed), ids(std::slice::from_ref(&p1)));
    s1.lock_destinations(&[(usdc(), dest(DEST_A))]).await.unwrap();
    sign(&mut s1, &p1, &w1.id, 1_000).await;

    let (lines, store) = (w.lines.clone(), w.store.clone());
    let w2_id = w2.id.clone();
    let second = tokio::spawn(async move {
        let mut s2 = session(&lines, &w2_id).await;
        let claimed = s2.claim_approved(&[usdc()], 1).await.unwrap();
        s2.lock_destinations(&[(usdc(), dest(DEST_A)), (usdc(), dest(DEST_B))]).await.unwrap();
        let volume = store.destination_volume_since(&usdc(), &dest(DEST_A), 0).await.unwrap();
        drop(s2);
        (claimed, volume)
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !second.is_finished(),
        "wallet 2 must wait for wallet 1's session towards the same destination"
    );
    s1.commit().await.unwrap();
    let (claimed, volume) = second.await.unwrap();
    assert_eq!(ids(&claimed), ids(std::slice::from_ref(&p2)));
    assert_eq!(
        volume,
        Amount::from_u128(600),
        "the committed signing of wallet 1 is seen: 600 + 601 is over a cap of 1,000"
    );
}

/// Every rail's slot round-trips through the `attempts` row, and the schema refuses half a slot.
#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn attempt_slots_of_every_rail_round_trip(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let p = w.approved(10, DEST_A).await;
    let wallet = w.wallet(WALLET_1).await;
    let blob = if w.db.is_postgres() { "'\\x02ab'" } else { "X'02ab'" };
    let insert = |no: i32, columns: &str, values: &str| {
        let id = AttemptId::new();
        let attempt = format!(
            "INSERT INTO attempts (id, payout_id, attempt_no, status, death_proof, created_at_ms, updated_at_ms, {columns}) \
             VALUES ('{id}', '{}', {no}, 'dead', 'test', 0, 0, {values})",
            p.id
        );
        let tx = format!(
            "INSERT INTO attempt_transactions (tx_hash, attempt_id, kind, raw, created_at_ms) VALUES ('sig{no}', '{id}', 'original', {blob}, 0)"
        );
        (attempt, tx)
    };
    let rows = [
        insert(1, "rail, hot_wallet_id, nonce", &format!("'evm', '{}', 7", wallet.id)),
        insert(
            2,
            "rail, hot_wallet_id, last_valid_block_height",
            &format!("'solana', '{}', 123456", wallet.id),
        ),
        insert(
            3,
            "rail, hot_wallet_id, nonce_account",
            &format!("'solana', '{}', 'NonceAcct1'", wallet.id),
        ),
        insert(
            4,
            "rail, provider, provider_key, provider_ref, hot_wallet_id, provider_creates_for_ms",
            &format!(
                "'provider', 'circle', 'f3b2c1d0-0000-4000-8000-000000000001', 'tr_9', '{}', 900000",
                wallet.id
            ),
        ),
        insert(5, "rail, provider, provider_key", "'provider', 'stripe', 'key-5'"),
        insert(
            11,
            "rail, hot_wallet_id, nonce_account, nonce_value, signed_at_block_height",
            &format!("'solana', '{}', 'NonceAcct1', 'Value1', 77", wallet.id),
        ),
    ];
    for (attempt, tx) in &rows {
        w.db.exec_raw(attempt).await.unwrap();
        w.db.exec_raw(tx).await.unwrap();
    }
    let slots: Vec<AttemptSlot> =
        w.store.attempts_of(&p.id).await.unwrap().into_iter().map(|a| a.slot).collect();
    assert_eq!(
        slots,
        vec![
            AttemptSlot::Evm(EvmSlot { wallet_id: wallet.id.clone(), nonce: 7 }),
            AttemptSlot::Solana {
                fee_payer: wallet.id.clone(),
                expiry: SolanaExpiry::LastValidBlockHeight(123_456)
            },
            // Stored before the nonce value was kept: the rail reads it from the bytes.
            AttemptSlot::Solana {
                fee_payer: wallet.id.clone(),
                expiry: SolanaExpiry::DurableNonce {
                    account: "NonceAcct1".into(),
                    value: String::new(),
                    signed_at_block_height: 0
                },
            },
            AttemptSlot::Provider {
                provider: "circle".into(),
                idempotency_key: "f3b2c1d0-0000-4000-8000-000000000001".into(),
                reference: Some(TxRef::parse("tr_9").unwrap()),
                wallet: Some(wallet.id.clone()),
                key_spent_at_ms: None,
                creates_for_ms: Some(900_000),
            },
            AttemptSlot::Provider {
                provider: "stripe".into(),
                idempotency_key: "key-5".into(),
                reference: None,
                wallet: None,
                key_spent_at_ms: None,
                creates_for_ms: None,
            },
            AttemptSlot::Solana {
                fee_payer: wallet.id.clone(),
                expiry: SolanaExpiry::DurableNonce {
                    account: "NonceAcct1".into(),
                    value: "Value1".into(),
                    signed_at_block_height: 77
                },
            },
        ]
    );
    // One attempt per durable nonce value, ever: a second on the same value is refused.
    let (twin, _) = insert(
        12,
        "rail, hot_wallet_id, nonce_account, nonce_value, signed_at_block_height",
        &format!("'solana', '{}', 'NonceAcct1', 'Value1', 78", wallet.id),
    );
    assert!(w.db.exec_raw(&twin).await.is_err(), "a second attempt on one nonce value");
    // The dashboard's search finds the payout by the provider's id of its transfer.
    let views = w.db.operator_views();
    assert_eq!(views.payout_by_provider_reference("tr_9").await.unwrap(), Some(p.id.clone()));
    assert_eq!(views.payout_by_provider_reference("tr_10").await.unwrap(), None);
    // One attempt per provider idempotency key, ever (both databases).
    let (same_key, _) = insert(6, "rail, provider, provider_key", "'provider', 'stripe', 'key-5'");
    assert!(w.db.exec_raw(&same_key).await.is_err(), "a provider key names one request");
    if w.db.is_postgres() {
        for (no, columns, values) in [
            (7, "rail, provider", "'provider', 'circle'".to_owned()),
            (
                8,
                "rail, hot_wallet_id, last_valid_block_height, nonce_account",
                format!("'solana', '{}', 1, 'both'", wallet.id),
            ),
            (9, "rail, hot_wallet_id", format!("'solana', '{}'", wallet.id)),
            (10, "rail, hot_wallet_id, nonce", format!("'tron', '{}', 1", wallet.id)),
        ] {
            let (half, _) = insert(no, columns, &values);
            assert!(w.db.exec_raw(&half).await.is_err(), "refused: {values}");
        }
    }
}

/// Settlements of a sweep in one transaction: each applies or is stale on its own (a stale one is
/// rolled back alone), and all that apply commit together.
async fn settlements_written_together_apply_or_stay_stale_one_by_one(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let (p1, p2, p3) =
        (w.approved(10, DEST_A).await, w.approved(20, DEST_B).await, w.approved(30, DEST_A).await);
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let (a1, a2, a3) = (
        sign(&mut s, &p1, &wallet.id, 1_000).await,
        sign(&mut s, &p2, &wallet.id, 1_000).await,
        sign(&mut s, &p3, &wallet.id, 1_000).await,
    );
    s.commit().await.unwrap();
    let confirm = |p: &Payout, a: &Attempt| {
        settlement(
            p,
            a,
            AttemptStatus::Signed,
            AttemptStatus::Confirmed,
            &a.txs[0].hash,
            PayoutStatus::Paid,
            None,
        )
    };
    let (n1, n2, n3) = (w.now(&p1).await, w.now(&p2).await, w.now(&p3).await);
    let mut stale = confirm(&n2, &a2);
    transition_of(&mut stale).from_version -= 1;
    let outcomes =
        w.store.settle_attempts(&[confirm(&n1, &a1), stale, confirm(&n3, &a3)]).await.unwrap();
    let applied: Vec<bool> =
        outcomes.iter().map(|o| matches!(o, TransitionOutcome::Applied(_))).collect();
    assert_eq!(applied, vec![true, false, true]);
    assert_eq!(
        w.only_attempt(&p2).await.status,
        AttemptStatus::Signed,
        "the stale one was rolled back alone"
    );
    assert_eq!(
        (w.now(&p1).await.status, w.now(&p2).await.status, w.now(&p3).await.status),
        (PayoutStatus::Paid, PayoutStatus::Processing, PayoutStatus::Paid)
    );
    assert_eq!(
        w.balance().await,
        (Amount::from_u128(40), Amount::from_u128(20)),
        "10 and 30 left; 20 still held"
    );
    assert!(w.store.settle_attempts(&[]).await.unwrap().is_empty());
    w.assert_ledger_clean().await;
}

/// A sweep mixing every kind of end: paid with a mined hash and a fee journal, failed with its proof,
/// needs_attention with an incident, a stale one and a second settlement of a payout already settled
/// in the sweep. Written together, each lands exactly as it would alone (PostgreSQL writes the plain
/// transitions with one statement per table, the rest one by one, in the same transaction).
#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn a_mixed_sweep_written_together_lands_as_each_would_alone(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let (p1, p2, p3, p4) = (
        w.approved(10, DEST_A).await,
        w.approved(20, DEST_B).await,
        w.approved(30, DEST_A).await,
        w.approved(5, DEST_B).await,
    );
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let mut attempts = Vec::new();
    for p in [&p1, &p2, &p3, &p4] {
        attempts.push(sign(&mut s, p, &wallet.id, 1_000).await);
    }
    s.commit().await.unwrap();
    let (n1, n2, n3, n4) = (w.now(&p1).await, w.now(&p2).await, w.now(&p3).await, w.now(&p4).await);
    let landed = attempts[0].txs[0].hash.clone();
    let mut paid = settlement(
        &n1,
        &attempts[0],
        AttemptStatus::Signed,
        AttemptStatus::Confirmed,
        &landed,
        PayoutStatus::Paid,
        None,
    );
    paid.mined = Some((1_234, landed.clone()));
    transition_of(&mut paid).journals.push(Journal::fee(
        &wallet.id,
        &eth(),
        landed.as_str(),
        Amount::from_u128(7),
    ));
    let proof = "cancel 0xabc final in block 9";
    let failed = settlement(
        &n2,
        &attempts[1],
        AttemptStatus::Signed,
        AttemptStatus::Dead,
        proof,
        PayoutStatus::Failed,
        None,
    );
    let opened =
        incident(IncidentKind::Reverted, Some(&n3), Some(&attempts[2]), "status 0 receipt", 5_000);
    let attention = settlement(
        &n3,
        &attempts[2],
        AttemptStatus::Signed,
        AttemptStatus::Reverted,
        "reverted",
        PayoutStatus::NeedsAttention,
        Some(opened.clone()),
    );
    let mut stale = settlement(
        &n4,
        &attempts[3],
        AttemptStatus::Signed,
        AttemptStatus::Confirmed,
        "x",
        PayoutStatus::Paid,
        None,
    );
    transition_of(&mut stale).from_version -= 1;
    let twice = paid.clone();

    let outcomes = w.store.settle_attempts(&[paid, failed, attention, stale, twice]).await.unwrap();
    let applied: Vec<bool> =
        outcomes.iter().map(|o| matches!(o, TransitionOutcome::Applied(_))).collect();
    assert_eq!(applied, vec![true, true, true, false, false]);
    let TransitionOutcome::Applied(first) = &outcomes[0] else { unreachable!() };
    assert_eq!(
        (first.id.clone(), first.status, first.version),
        (p1.id.clone(), PayoutStatus::Paid, n1.version + 1),
        "the payout as it reads now"
    );
    let statuses = (
        w.now(&p1).await.status,
        w.now(&p2).await.status,
        w.now(&p3).await.status,
        w.now(&p4).await.status,
    );
    assert_eq!(
        statuses,
        (
            PayoutStatus::Paid,
            PayoutStatus::Failed,
            PayoutStatus::NeedsAttention,
            PayoutStatus::Processing
        )
    );
    let a1 = w.only_attempt(&p1).await;
    assert_eq!((a1.status, a1.mined), (AttemptStatus::Confirmed, Some((1_234, landed.clone()))));
    assert_eq!(w.only_attempt(&p2).await.status, AttemptStatus::Dead);
    assert_eq!(
        w.db.scalar_raw(&format!("SELECT count(*) FROM attempts WHERE death_proof = '{proof}'"))
            .await,
        1
    );
    assert_eq!(w.only_attempt(&p3).await.status, AttemptStatus::Reverted);
    assert_eq!(
        w.only_attempt(&p4).await.status,
        AttemptStatus::Signed,
        "the stale one wrote nothing"
    );
    assert_eq!(
        w.balance().await,
        (Amount::from_u128(55), Amount::from_u128(35)),
        "10 paid, 20 released, 30 and 5 still held"
    );
    for (kind, n) in [("settle", 1), ("release", 1), ("fee", 1)] {
        assert_eq!(
            w.db.scalar_raw(&format!("SELECT count(*) FROM journals WHERE kind = '{kind}'")).await,
            n,
            "{kind} journals"
        );
    }
    for (event, n) in [
        (EventType::PayoutPaid, 1),
        (EventType::PayoutFailed, 1),
        (EventType::PayoutNeedsAttention, 1),
        (EventType::IncidentOpened, 1),
    ] {
        assert_eq!(w.store.count_events(&w.m, event).await.unwrap(), n, "{event:?} events");
    }
    let open: Vec<IncidentId> =
        w.store.open_incidents(10).await.unwrap().into_iter().map(|i| i.id).collect();
    assert_eq!(open, vec![opened.id.clone()]);
    w.assert_ledger_clean().await;
}

/// A sweep in which one journal would draw more than is held writes nothing at all: the ledger is
/// already wrong, and no other settlement of the sweep may hide it.
async fn a_sweep_whose_journal_exceeds_the_hold_writes_nothing(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let (p1, p2) = (w.approved(10, DEST_A).await, w.approved(20, DEST_B).await);
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let (a1, a2) =
        (sign(&mut s, &p1, &wallet.id, 1_000).await, sign(&mut s, &p2, &wallet.id, 1_000).await);
    s.commit().await.unwrap();
    let (n1, n2) = (w.now(&p1).await, w.now(&p2).await);
    let good = settlement(
        &n1,
        &a1,
        AttemptStatus::Signed,
        AttemptStatus::Confirmed,
        &a1.txs[0].hash,
        PayoutStatus::Paid,
        None,
    );
    let mut too_much = settlement(
        &n2,
        &a2,
        AttemptStatus::Signed,
        AttemptStatus::Confirmed,
        &a2.txs[0].hash,
        PayoutStatus::Paid,
        None,
    );
    transition_of(&mut too_much).journals =
        vec![Journal::settle(&w.m, &usdc(), p2.id.as_str(), Amount::from_u128(31))];
    let refused = w.store.settle_attempts(&[good, too_much]).await;
    assert!(
        matches!(refused, Err(StoreError::Invariant(_))),
        "an overdrawn hold is a broken invariant: {refused:?}"
    );
    assert_eq!(
        (w.now(&p1).await.status, w.now(&p2).await.status),
        (PayoutStatus::Processing, PayoutStatus::Processing)
    );
    assert_eq!(
        (w.only_attempt(&p1).await.status, w.only_attempt(&p2).await.status),
        (AttemptStatus::Signed, AttemptStatus::Signed)
    );
    assert_eq!(
        w.balance().await,
        (Amount::from_u128(70), Amount::from_u128(30)),
        "every hold stands"
    );
    assert_eq!(w.db.scalar_raw("SELECT count(*) FROM journals WHERE kind = 'settle'").await, 0);
    assert_eq!(w.store.count_events(&w.m, EventType::PayoutPaid).await.unwrap(), 0);
    w.assert_ledger_clean().await;
}

/// The sweep's order on both stores: each wallet's line in turn, inside a line the lowest nonce
/// first, an attempt whose payout waits for a person after every other of its line; the limit takes
/// the first places of every line, so a long line cannot crowd out a short one.
async fn the_sweep_serves_each_wallets_line_in_turn_and_waiting_payouts_last(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 1_000).await;
    let (one, two) = (w.wallet(WALLET_1).await, w.wallet(WALLET_2).await);
    // Payouts first: on SQLite a signing session holds the one writer until it commits.
    let mut payouts_1 = Vec::new();
    for amount in [1, 2, 3, 4] {
        payouts_1.push(w.approved(amount, DEST_A).await);
    }
    let (p5, p6) = (w.approved(5, DEST_B).await, w.approved(6, DEST_B).await);
    let mut line_1 = Vec::new();
    let mut s = session(&w.lines, &one.id).await;
    for p in &payouts_1 {
        line_1.push(sign(&mut s, p, &one.id, 1_000).await.id);
    }
    s.commit().await.unwrap();
    let mut line_2 = Vec::new();
    let mut s = session(&w.lines, &two.id).await;
    for p in [&p5, &p6] {
        line_2.push(sign(&mut s, p, &two.id, 1_000).await.id);
    }
    s.commit().await.unwrap();
    let waiting = payouts_1[0].id.clone();
    // The payout of wallet 1's head waits for a person: its attempt goes to the back of its line.
    w.db.exec_raw(&format!("UPDATE payouts SET status = 'needs_attention' WHERE id = '{waiting}'"))
        .await
        .unwrap();
    let order = |v: Vec<(Attempt, Payout)>| v.into_iter().map(|(a, _)| a.id).collect::<Vec<_>>();
    // Ties between lines go by wallet id.
    let expected_3 = if one.id < two.id {
        vec![line_1[1].clone(), line_2[0].clone(), line_1[2].clone()]
    } else {
        vec![line_2[0].clone(), line_1[1].clone(), line_2[1].clone()]
    };
    assert_eq!(
        order(w.store.live_attempts(3).await.unwrap()),
        expected_3,
        "the first place of every line, then the second"
    );
    let all = order(w.store.live_attempts(10).await.unwrap());
    assert_eq!(all.len(), 6);
    assert_eq!(
        all.last(),
        Some(&line_1[0]),
        "the waiting payout's attempt comes after every other"
    );
    let places_of = |line: &Vec<AttemptId>| {
        line.iter().map(|id| all.iter().position(|x| x == id).unwrap()).collect::<Vec<_>>()
    };
    let (p1, p2) = (places_of(&line_1), places_of(&line_2));
    assert!(p1[1] < p1[2] && p1[2] < p1[3], "lowest nonce first inside a line: {p1:?}");
    assert!(p2[0] < p2[1], "lowest nonce first inside a line: {p2:?}");
    assert!(
        p2[1] < p1[3],
        "the short line is served in turn, not after the long one: {p1:?} {p2:?}"
    );
    assert_eq!(
        order(w.store.lease_live_attempts(&[usdc()], 3, 2_000, 10_000).await.unwrap()),
        expected_3,
        "leases take the same order"
    );
}

/// Two sweeps at once take different attempts: a lease holds until it is checked, released or
/// expired; a sweep takes only the assets its process pays.
async fn sweeps_lease_different_attempts_until_checked_released_or_expired(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let (p1, p2, p3) =
        (w.approved(10, DEST_A).await, w.approved(20, DEST_B).await, w.approved(30, DEST_A).await);
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let (a1, a2, a3) = (
        sign(&mut s, &p1, &wallet.id, 1_000).await,
        sign(&mut s, &p2, &wallet.id, 1_000).await,
        sign(&mut s, &p3, &wallet.id, 1_000).await,
    );
    s.commit().await.unwrap();
    let ids = |v: Vec<(Attempt, Payout)>| v.into_iter().map(|(a, _)| a.id).collect::<Vec<_>>();
    const LEASE: i64 = 10_000;
    let elsewhere = AssetCode::parse("evm:31337/DAI").unwrap().0;
    assert!(
        w.store.lease_live_attempts(&[elsewhere], 10, 5_000, LEASE).await.unwrap().is_empty(),
        "a worker with no rail for the asset leases none of its attempts (before, it leased and released them every pass, filling its batch)"
    );
    let first = ids(w.store.lease_live_attempts(&[usdc()], 2, 5_000, LEASE).await.unwrap());
    assert_eq!(first, vec![a1.id.clone(), a2.id.clone()], "the head of the line first");
    let second = ids(w.store.lease_live_attempts(&[usdc()], 10, 5_001, LEASE).await.unwrap());
    assert_eq!(second, vec![a3.id.clone()], "a second sweep at once gets only what is free");
    assert!(w.store.lease_live_attempts(&[usdc()], 10, 5_002, LEASE).await.unwrap().is_empty());
    w.store.record_checked(std::slice::from_ref(&a1.id), 6_000).await.unwrap();
    w.store.release_leases(std::slice::from_ref(&a3.id)).await.unwrap();
    let third = ids(w.store.lease_live_attempts(&[usdc()], 10, 6_001, LEASE).await.unwrap());
    assert_eq!(
        third,
        vec![a1.id.clone(), a3.id.clone()],
        "checked and released attempts are free again"
    );
    let after_expiry =
        ids(w.store.lease_live_attempts(&[usdc()], 10, 5_000 + LEASE, LEASE).await.unwrap());
    assert_eq!(
        after_expiry,
        vec![a2.id.clone()],
        "an expired lease (a killed worker's) is free again"
    );
    assert_eq!(
        w.store.live_attempts(10).await.unwrap().len(),
        3,
        "leases hide nothing from plain reads"
    );
}

/// A payout's page reads its events, each ended attempt's evidence (a dead attempt's proof) and the
/// operator actions on it, and nothing of another payout.
async fn a_payouts_history_holds_its_events_the_proof_of_death_and_operator_actions(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let p = w.approved(40, DEST_A).await;
    let other = w.approved(10, DEST_B).await;
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let attempt = sign(&mut s, &p, &wallet.id, 1_000).await;
    sign(&mut s, &other, &wallet.id, 1_000).await;
    s.commit().await.unwrap();
    let proof = "cancel 0xabc confirmed in block 7 at nonce 0";
    w.settle(
        &attempt,
        AttemptStatus::Signed,
        AttemptStatus::Dead,
        proof,
        PayoutStatus::Failed,
        None,
    )
    .await
    .unwrap();
    let views = w.db.operator_views();
    let action = payoutd_engine::OperatorAction {
        at_ms: 6_000,
        actor: "session:abc".into(),
        action: "resolve".into(),
        subject: p.id.to_string(),
        detail: "verdict failed".into(),
    };
    views.record_operator_action(&action).await.unwrap();
    let history = views.payout_history(&p.id, 1).await.unwrap();
    let types: Vec<&str> = history.events.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        types,
        vec!["payout.created", "payout.approved", "payout.processing", "payout.failed"]
    );
    assert_eq!(history.evidence, vec![(1, proof.to_owned())]);
    assert_eq!(history.actions, vec![action]);
    let untouched = views.payout_history(&other.id, 1).await.unwrap();
    assert_eq!(
        (untouched.evidence.len(), untouched.actions.len(), untouched.events.len()),
        (0, 0, 3)
    );
}

/// Two wallets' sessions racing over a long queue: a payout another session committed while this
/// session's claim was reading the queue is not claimed again. On PostgreSQL the lock taken by
/// `FOR UPDATE SKIP LOCKED` re-checks the row it locks, so the filter must stand on the locked row
/// itself, not only on the ranked queue it is joined with.
async fn sessions_of_two_wallets_racing_over_a_long_queue_claim_only_approved_payouts(db: TestDb) {
    const PAYOUTS: u64 = 1_500;
    const CLAIM_MAX: u32 = 16;
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), u128::from(PAYOUTS)).await;
    for _ in 0..PAYOUTS {
        w.approved(1, DEST_A).await;
    }
    let wallets = [w.wallet(WALLET_1).await, w.wallet(WALLET_2).await];
    let tasks: Vec<_> = wallets
        .iter()
        .map(|wallet| {
            let (store, wallet_id) = (w.lines.clone(), wallet.id.clone());
            tokio::spawn(async move {
                let mut signed = 0u64;
                loop {
                    let mut s = session(&store, &wallet_id).await;
                    let claimed = s.claim_approved(&[usdc()], CLAIM_MAX).await.unwrap();
                    if claimed.is_empty() {
                        return signed;
                    }
                    for p in &claimed {
                        assert_eq!(
                            p.status,
                            PayoutStatus::Approved,
                            "claimed {} in status {:?}",
                            p.id,
                            p.status
                        );
                        sign(&mut s, p, &wallet_id, 1_000).await;
                    }
                    s.commit().await.expect("a session commits what it claimed");
                    signed += claimed.len() as u64;
                }
            })
        })
        .collect();
    let signed: u64 = futures::future::join_all(tasks).await.into_iter().map(Result::unwrap).sum();
    assert_eq!(signed, PAYOUTS, "every payout signed once across the two wallets");
    assert_eq!(w.store.count_events(&w.m, EventType::PayoutProcessing).await.unwrap(), PAYOUTS);
    w.assert_ledger_clean().await;
}

/// The rows a PostgreSQL signing claim reads (the turns, then the lock), and the approved read of
/// the rails without signing sessions (the turns, then the rows), do not grow with the approved
/// queue: the same claim and read over a queue twenty-one times longer stay within the bound their
/// limit sets.
/// Ranking the whole queue at every signing session made a 20,000-payout drain's claims cost grow
/// with the square of its backlog; the approved read joined its ids to `payouts` in a plan that
/// hashed the whole queue (56 rows read of the short queue, 853 of the long one).
async fn a_claims_reads_do_not_grow_with_the_approved_queue(db: TestDb) {
    const CLAIM_MAX: u32 = 4;
    const COPIES: i64 = 20;
    let w = World::new(db).await;
    for payout in queue_of_two_merchants(&w).await {
        w.approve(payout).await;
    }
    let pool = sqlx::PgPool::connect(w.db.url()).await.unwrap();
    let short = claim_rows_read(&pool, CLAIM_MAX).await;
    let short_read = approved_read_rows_read(&pool, CLAIM_MAX).await;
    copy_the_queue(&pool, "approved", COPIES).await;
    let long = claim_rows_read(&pool, CLAIM_MAX).await;
    let long_read = approved_read_rows_read(&pool, CLAIM_MAX).await;
    // What the claim may read, whatever the queue's length: one probe per waiting (merchant,
    // asset) pair and one past the last, each USDC pair's first turns (the ranked candidates), and
    // the lock's lookups by key (an entry of the row's earlier version counted too).
    let candidates = i64::from(CLAIM_MAX) * payoutd_store::pg_claim::CLAIM_WINDOW_FIRST;
    let (usdc_pairs, pairs) = (2, 3);
    let bound = usdc_pairs * candidates + (pairs + 1) + 2 * i64::from(CLAIM_MAX);
    assert_reads_within("the claim", short, long, bound);
    // The approved read of the rails without signing sessions (Solana, providers): the ranking
    // with the limit itself as the window, then the rows by key.
    let read_bound = usdc_pairs * i64::from(CLAIM_MAX) + (pairs + 1) + 2 * i64::from(CLAIM_MAX);
    assert_reads_within("the approved read", short_read, long_read, read_bound);
    // And the claim still serves merchants in turn: each merchant's first payout comes first.
    // Three wallets' sessions racing: the third finds every turn of its first window held by the
    // other two and reads the wide one.
    let mut sessions = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for address in [WALLET_1, WALLET_2, WALLET_3] {
        let wallet = w.wallet(address).await;
        let mut s = session(&w.lines, &wallet.id).await;
        let claimed = s.claim_approved(&[usdc()], CLAIM_MAX).await.unwrap();
        assert_eq!(claimed.len(), CLAIM_MAX as usize, "{address} claims a full batch");
        let merchants: std::collections::HashSet<_> =
            claimed[..2].iter().map(|p| p.merchant_id.clone()).collect();
        assert_eq!(merchants.len(), 2, "both merchants take turns in each claim: {claimed:?}");
        for p in &claimed {
            assert!(seen.insert(p.id.clone()), "{} claimed by two racing sessions", p.id);
        }
        sessions.push(s);
    }
}

/// The rows the policy pass's read of requested payouts takes on PostgreSQL do not grow with the
/// requested queue: the same read over a queue twenty-one times longer stays within the bound its
/// limit sets, and merchants still take turns.
/// Ranking the whole requested queue at every pass took 65-190 ms a pass of 256 over 100,000
/// requested payouts (a payroll batch waiting for the policy), growing with the queue.
async fn the_policy_reads_do_not_grow_with_the_requested_queue(db: TestDb) {
    const READ_MAX: u32 = 4;
    const COPIES: i64 = 20;
    let w = World::new(db).await;
    queue_of_two_merchants(&w).await;
    let pool = sqlx::PgPool::connect(w.db.url()).await.unwrap();
    let short = requested_rows_read(&w, &pool, READ_MAX).await;
    copy_the_queue(&pool, "requested", COPIES).await;
    let long = requested_rows_read(&w, &pool, READ_MAX).await;
    // One probe per waiting merchant and one past the last, each merchant's first turns, and the
    // lookups by key of those read (an entry of the row's earlier version counted too).
    let merchants = 2;
    let bound = merchants * i64::from(READ_MAX) + (merchants + 1) + 2 * i64::from(READ_MAX);
    assert_reads_within("the policy's read", short, long, bound);
}

/// The rows PostgreSQL reads from `payouts` for one read of `limit` requested payouts, its
/// statements run as the store runs them (the ranking, then the rows), in one transaction whose
/// own counters are read before and after; and the store's own read of them, merchants in turn.
async fn requested_rows_read(w: &World, pool: &sqlx::PgPool, limit: u32) -> i64 {
    let mut tx = pool.begin().await.unwrap();
    let before = payouts_rows_read(&mut tx).await;
    let queue: Vec<String> = sqlx::query_scalar(payoutd_store::pg_claim::RANK_REQUESTED_SQL)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    let rows = sqlx::query(payoutd_store::pg_claim::READ_REQUESTED_SQL)
        .bind(&queue)
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    assert_eq!(rows.len(), limit as usize, "a full batch of {limit}");
    let after = payouts_rows_read(&mut tx).await;
    tx.rollback().await.unwrap();
    let read = w.store.requested_in_turn(limit).await.unwrap();
    let merchants: std::collections::HashSet<_> =
        read[..2].iter().map(|p| p.merchant_id.clone()).collect();
    assert_eq!(merchants.len(), 2, "both merchants take turns: {read:?}");
    after - before
}

/// `what` read `short` rows of the test's queue and `long` of the same queue 21 times longer:
/// both within `bound`, whatever the queue's length.
fn assert_reads_within(what: &str, short: i64, long: i64, bound: i64) {
    assert!(
        short > 0 && short <= bound,
        "{what} reads {short} rows of a short queue (at most {bound})"
    );
    assert!(
        long <= bound,
        "{what} over 21 times the queue reads {long} rows (at most {bound}; {short} over the queue)"
    );
}

/// Payouts of two merchants, two assets, in the test's queue (created, requested): 40 and 35 USDC
/// of the two merchants, 3 ETH of the first.
async fn queue_of_two_merchants(w: &World) -> Vec<Payout> {
    let (other, _) = w.engine.create_merchant("globex", [2u8; 32]).await.unwrap();
    w.fund(&w.m, &usdc(), 1_000).await;
    w.fund(&w.m, &eth(), 1_000).await;
    w.fund(&other, &usdc(), 1_000).await;
    let mut created = Vec::new();
    for (merchant, asset, count) in [(&w.m, usdc(), 40), (&other, usdc(), 35), (&w.m, eth(), 3)] {
        for _ in 0..count {
            created.push(w.create(merchant, &asset, 1, DEST_A).await);
        }
    }
    created
}

/// The queue of payouts in `status` made `copies` + 1 times longer without the engine: only its
/// length matters to what a read of it takes.
async fn copy_the_queue(pool: &sqlx::PgPool, status: &str, copies: i64) {
    sqlx::query(
        "INSERT INTO payouts (id, merchant_id, idempotency_key, fingerprint, asset, amount, destination, \
         metadata, status, version, created_at_ms, updated_at_ms) \
         SELECT 'po_' || md5(id || '-' || copy), merchant_id, idempotency_key || '-' || copy, fingerprint, asset, amount, \
         destination, metadata, status, version, created_at_ms, updated_at_ms \
         FROM payouts, generate_series(1, $2) AS copy WHERE status = $1",
    )
    .bind(status)
    .bind(copies)
    .execute(pool)
    .await
    .unwrap();
}

/// The rows PostgreSQL reads from `payouts` (its heap and every index of it) for one signing
/// claim of `limit` USDC payouts: the ranking with the claim's first window, then the lock.
async fn claim_rows_read(pool: &sqlx::PgPool, limit: u32) -> i64 {
    let window = i64::from(limit) * payoutd_store::pg_claim::CLAIM_WINDOW_FIRST;
    ranked_rows_read(pool, window, payoutd_store::pg_claim::LOCK_RANKED_SQL, limit).await
}

/// The rows PostgreSQL reads from `payouts` for one approved read of `limit` USDC payouts, as
/// `approved_in` reads them: the ranking with the limit as its window, then the rows.
async fn approved_read_rows_read(pool: &sqlx::PgPool, limit: u32) -> i64 {
    ranked_rows_read(pool, i64::from(limit), payoutd_store::pg_claim::READ_RANKED_SQL, limit).await
}

/// The rows read by the ranking of `window` turns and then `rows_sql` over the ranked ids, run as
/// the store runs them, in one transaction whose own counters are read before and after; the
/// second statement must return a full batch of `limit`.
async fn ranked_rows_read(
    pool: &sqlx::PgPool,
    window: i64,
    rows_sql: &'static str,
    limit: u32,
) -> i64 {
    let assets = vec![usdc().as_str().to_owned()];
    let mut tx = pool.begin().await.unwrap();
    let before = payouts_rows_read(&mut tx).await;
    let queue: Vec<String> = sqlx::query_scalar(payoutd_store::pg_claim::RANK_APPROVED_SQL)
        .bind(&assets)
        .bind(window)
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    let rows = sqlx::query(rows_sql)
        .bind(&queue)
        .bind(&assets)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    assert_eq!(rows.len(), limit as usize, "a full batch of {limit}");
    let after = payouts_rows_read(&mut tx).await;
    tx.rollback().await.unwrap();
    after - before
}

/// The rows this transaction has read from `payouts`: its heap and every index of it.
async fn payouts_rows_read(tx: &mut sqlx::Transaction<'_, sqlx::Postgres>) -> i64 {
    sqlx::query_scalar(
        "SELECT (pg_stat_get_xact_tuples_returned('payouts'::regclass) \
         + (SELECT sum(pg_stat_get_xact_tuples_returned(indexrelid)) FROM pg_index \
            WHERE indrelid = 'payouts'::regclass))::BIGINT",
    )
    .fetch_one(&mut **tx)
    .await
    .unwrap()
}

/// A scope's detection lease is held by one worker until it ends it or it expires; ending an
/// expired lease does not end the lease another worker took since.
async fn a_detection_lease_is_held_by_one_worker_until_released_or_expired(db: TestDb) {
    let store = db.pipeline();
    let (now, lease) = (1_000_i64, 30_000_i64);
    assert!(store.lease_detection("evm:1", now, now + lease).await.unwrap());
    assert!(!store.lease_detection("evm:1", now + 1, now + 1 + lease).await.unwrap(), "held");
    assert!(store.lease_detection("evm:2", now + 1, now + 1 + lease).await.unwrap(), "per scope");
    store.release_detection("evm:1", now + lease).await.unwrap();
    assert!(store.lease_detection("evm:1", now + 2, now + 2 + lease).await.unwrap(), "released");

    // The holder is killed: its lease expires and another worker takes the scope; the killed
    // worker's late release leaves the new lease in place.
    let expired = now + 2 + lease;
    assert!(store.lease_detection("evm:1", expired, expired + lease).await.unwrap(), "expired");
    store.release_detection("evm:1", expired).await.unwrap();
    assert!(!store.lease_detection("evm:1", expired + 1, expired + 1 + lease).await.unwrap());
}

payoutd_testkit::both_stores!(
    a_detection_lease_is_held_by_one_worker_until_released_or_expired,
    sessions_of_two_wallets_racing_over_a_long_queue_claim_only_approved_payouts,
    a_payouts_history_holds_its_events_the_proof_of_death_and_operator_actions,
    sweeps_lease_different_attempts_until_checked_released_or_expired,
    settlements_written_together_apply_or_stay_stale_one_by_one,
    a_mixed_sweep_written_together_lands_as_each_would_alone,
    the_sweep_serves_each_wallets_line_in_turn_and_waiting_payouts_last,
    a_sweep_whose_journal_exceeds_the_hold_writes_nothing,
    attempt_slots_of_every_rail_round_trip,
    racing_sessions_of_two_wallets_read_a_destination_volume_one_after_the_other,
    a_proven_death_awaits_the_next_attempt_and_one_session_creates_it,
    a_settlement_records_the_final_mined_hash,
    nonces_are_contiguous_and_a_dropped_session_leaves_no_gap,
    a_large_signing_batch_is_stored_whole_and_one_refusal_stores_none_of_it,
    concurrent_sessions_on_one_wallet_never_share_a_nonce,
    two_sessions_never_claim_the_same_payout,
    raise_nonce_floor_never_lowers,
    one_live_attempt_per_payout_is_enforced,
    settle_attempt_confirm_pays_and_settles_once,
    settle_attempt_dead_fails_and_releases_only_with_proof,
    settle_attempt_reverted_needs_attention_keeps_the_hold_and_opens_an_incident,
    add_attempt_tx_only_on_live_attempts,
    live_attempts_returns_every_hash,
    hold_for_review_takes_no_nonce_and_claims_only_the_given_assets,
    reconciliation_cursor_incidents_and_known_hashes,
    similar_payouts_are_counted_within_the_window,
    volumes_count_signed_attempts_except_dead_ones,
);

/// PostgreSQL only: what a statement reads is PostgreSQL's own count.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_policy_reads_do_not_grow_with_the_requested_queue_on_postgres() {
    the_policy_reads_do_not_grow_with_the_requested_queue(
        payoutd_testkit::db::fresh_postgres().await,
    )
    .await;
}

/// PostgreSQL only: what a statement reads is PostgreSQL's own count.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claims_reads_do_not_grow_with_the_approved_queue_on_postgres() {
    a_claims_reads_do_not_grow_with_the_approved_queue(payoutd_testkit::db::fresh_postgres().await)
        .await;
}
