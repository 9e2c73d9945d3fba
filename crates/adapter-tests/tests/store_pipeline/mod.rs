//! The pipeline port on both stores (every test on a fresh PostgreSQL database and a fresh SQLite file): the world, the payouts and settlements the tests build, and the tests by theme below.

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

mod read_bounds;
mod reading;
mod settlement;
mod signing;

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
