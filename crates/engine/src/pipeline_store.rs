//! The store port of the pipeline workers: hot wallets, signing sessions, attempts, settlement, incidents.

use async_trait::async_trait;
use payoutd_domain::{
    Amount, AssetCode, Attempt, AttemptId, AttemptStatus, AttemptTx, Destination, EventId,
    EventType, Incident, IncidentId, IncidentKind, Journal, MerchantId, Payout, PayoutId,
    PayoutStatus, TxRef,
};

use crate::store::{NewEvent, PayoutTransition, Store, StoreError, TransitionOutcome};

/// An open incident whose books wait for what it is about to be final.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwaitingBooks {
    pub incident: Incident,
    /// What the incident is about, as it was opened once for (a transfer's id or hash).
    pub subject: TxRef,
}

/// Where a reading of incidents awaiting their books resumes: after this (opened at, id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BooksCursor {
    pub created_at_ms: i64,
    pub incident_id: String,
}

impl BooksCursor {
    /// Before every incident.
    pub fn start() -> BooksCursor {
        BooksCursor { created_at_ms: i64::MIN, incident_id: String::new() }
    }

    /// Where the pass after one that read `read` (asked for `limit`) resumes: after its last, or
    /// from the start again once a pass reached the end, so every incident is judged in turn and
    /// none that never becomes final keeps the ones after it waiting.
    pub fn after_pass(read: &[AwaitingBooks], limit: u32) -> BooksCursor {
        match read.last() {
            Some(last) if read.len() >= limit as usize => BooksCursor {
                created_at_ms: last.incident.created_at_ms,
                incident_id: last.incident.id.to_string(),
            },
            _ => BooksCursor::start(),
        }
    }
}

/// An incident to open, with its `incident.opened` event, in the same transaction as what caused it.
#[derive(Debug, Clone)]
pub struct NewIncident {
    pub id: IncidentId,
    pub kind: IncidentKind,
    pub merchant_id: Option<MerchantId>,
    pub payout_id: Option<PayoutId>,
    pub attempt_id: Option<AttemptId>,
    pub detail: String,
    /// `incident.opened`, naming the merchant concerned (none for a transfer out of a hot wallet that
    /// no payout explains); delivered to operator endpoints only: incidents are the platform's business.
    pub event: NewEvent,
    pub at_ms: i64,
}

impl NewIncident {
    /// An incident and its `incident.opened` event.
    pub fn new(
        kind: IncidentKind,
        subject: IncidentSubject,
        detail: String,
        at_ms: i64,
    ) -> NewIncident {
        let id = IncidentId::new();
        let IncidentSubject { merchant_id, payout_id, attempt_id } = subject;
        let payload = serde_json::json!({"id": id.as_str(), "object": "incident", "kind": kind.as_str(), "status": "open",
            "merchant_id": merchant_id.as_ref().map(MerchantId::as_str), "payout_id": payout_id.as_ref().map(PayoutId::as_str),
            "attempt_id": attempt_id.as_ref().map(AttemptId::as_str), "detail": detail, "created_at_ms": at_ms});
        NewIncident {
            event: NewEvent {
                id: EventId::derive(EventType::IncidentOpened, id.as_str()),
                event_type: EventType::IncidentOpened,
                entity_id: id.as_str().to_owned(),
                merchant_id: merchant_id.clone(),
                payload_json: payload.to_string(),
                at_ms,
            },
            id,
            kind,
            merchant_id,
            payout_id,
            attempt_id,
            detail,
            at_ms,
        }
    }
}

/// The hourly ceilings (I8) a first attempt must fit in as it is made, on every rail: built by
/// the core from the asset's caps, read against by the store under its locks, decided by `breach`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapCheck {
    pub per_destination_per_hour: Amount,
    /// Out of one hot wallet (EVM) or the rail's account (a standalone rail pays its assets alone:
    /// an asset is configured on one rail, so the asset's volume is its account's).
    pub per_account_per_hour: Amount,
    /// Attempts made since this moment (not dead) count.
    pub since_ms: i64,
    /// The event a person's approval after a review writes: once it exists, no cap holds the payout.
    pub review_event: EventId,
}

/// What the store counts for one payout's `CapCheck`, read inside the transaction that creates
/// its first attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapReading {
    /// The check's `review_event` exists.
    pub reviewed: bool,
    /// Made since `since_ms` towards the payout's destination in its asset (any wallet or account).
    pub to_destination: Amount,
    /// Made since `since_ms` out of the wallet or account the attempt pays from, in the asset.
    pub of_account: Amount,
}

/// Whether `amount` on top of `volume` goes past `cap` (a sum that overflows goes past any cap).
pub fn exceeds(volume: Amount, amount: Amount, cap: Amount) -> bool {
    volume.checked_add(amount).is_none_or(|total| total > cap)
}

impl CapCheck {
    /// Why `amount` on top of this reading breaks a cap, or `None` when it fits or a person
    /// reviewed the payout. The one place every rail's signing decides I8.
    pub fn breach(&self, amount: Amount, reading: &CapReading) -> Option<String> {
        if reading.reviewed {
            return None;
        }
        if exceeds(reading.to_destination, amount, self.per_destination_per_hour) {
            return Some(format!(
                "{} already sent to the destination this hour; the cap is {}",
                reading.to_destination, self.per_destination_per_hour
            ));
        }
        if exceeds(reading.of_account, amount, self.per_account_per_hour) {
            return Some(format!(
                "{} already sent from the paying account this hour; the cap is {}",
                reading.of_account, self.per_account_per_hour
            ));
        }
        None
    }
}

/// What `create_first_attempt_within_caps` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstAttempt {
    Created,
    /// Another worker moved the payout first: nothing written.
    Stale,
    /// The attempt would break a cap: nothing written; the payout waits for a person.
    OverCap(String),
}

/// What an incident is about: a merchant's payout (and its attempt), or only an attempt or nothing
/// the database knows (a hot wallet's own trouble).
#[derive(Debug, Clone, Default)]
pub struct IncidentSubject {
    pub merchant_id: Option<MerchantId>,
    pub payout_id: Option<PayoutId>,
    pub attempt_id: Option<AttemptId>,
}

/// The `incident.resolved` event of an incident closed with `resolution`; the store writes it in
/// the transaction that closes the incident.
pub fn incident_resolved_event(
    incident: &IncidentId,
    kind: IncidentKind,
    subject: &IncidentSubject,
    resolution: &str,
    at_ms: i64,
) -> NewEvent {
    let payload = serde_json::json!({"id": incident.as_str(), "object": "incident", "kind": kind.as_str(), "status": "resolved",
        "merchant_id": subject.merchant_id.as_ref().map(MerchantId::as_str), "payout_id": subject.payout_id.as_ref().map(PayoutId::as_str),
        "attempt_id": subject.attempt_id.as_ref().map(AttemptId::as_str), "resolution": resolution, "resolved_at_ms": at_ms});
    NewEvent {
        id: EventId::derive(EventType::IncidentResolved, incident.as_str()),
        event_type: EventType::IncidentResolved,
        entity_id: incident.as_str().to_owned(),
        merchant_id: subject.merchant_id.clone(),
        payload_json: payload.to_string(),
        at_ms,
    }
}

/// An attempt reaching a final state together with what it means for its payout (and maybe an
/// incident), all or nothing: the attempt must still be at `attempt_from`, the payout at its
/// expected state and version.
#[derive(Debug, Clone)]
pub struct AttemptSettlement {
    pub attempt_id: AttemptId,
    pub attempt_from: AttemptStatus,
    pub attempt_to: AttemptStatus,
    /// Why the attempt can never land (required for `dead`), or the landed hash (for `confirmed`).
    pub evidence: String,
    /// The transaction that was mined and final, recorded on the attempt (`confirmed`, `reverted`,
    /// or a cancel that proved death); `None` when no transaction of the attempt was mined.
    pub mined: Option<(u64, TxRef)>,
    pub payout: PayoutEffect,
    pub incident: Option<NewIncident>,
    /// When the attempt was created (its bytes stored): what `payoutd_attempt_seconds` measures
    /// from. Not written by the store.
    pub attempt_created_at_ms: i64,
}

impl AttemptSettlement {
    /// Records how long a confirmed attempt took from its bytes to a final transfer; called once
    /// the settlement applied (a stale one was counted by the worker that applied it).
    pub fn observe_applied(&self, now_ms: i64) {
        if self.attempt_to == AttemptStatus::Confirmed {
            let secs = (now_ms - self.attempt_created_at_ms).max(0) as f64 / 1_000.0;
            metrics::histogram!("payoutd_attempt_seconds").record(secs);
        }
    }
}

/// What an attempt's end does to its payout.
#[derive(Debug, Clone)]
pub enum PayoutEffect {
    /// The payout moves (paid, failed, needs_attention) with its journals and event.
    Transition(PayoutTransition),
    /// The attempt is proven dead and the payout, still `processing` under the same hold, waits for
    /// attempt `next_attempt_no` (SPEC I3, 4.5); the next signing session of its chain creates it.
    AwaitNextAttempt(NextAttempt),
}

impl PayoutEffect {
    pub fn payout_id(&self) -> &PayoutId {
        match self {
            PayoutEffect::Transition(t) => &t.payout_id,
            PayoutEffect::AwaitNextAttempt(n) => &n.payout_id,
        }
    }

    pub fn at_ms(&self) -> i64 {
        match self {
            PayoutEffect::Transition(t) => t.at_ms,
            PayoutEffect::AwaitNextAttempt(n) => n.at_ms,
        }
    }
}

/// A `processing` payout at `from_version` marked for its next attempt (conditional, I5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextAttempt {
    pub payout_id: PayoutId,
    pub from_version: i64,
    pub next_attempt_no: u32,
    pub at_ms: i64,
}

/// The ledger's side of one hot wallet, for the balance check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalletBooks {
    /// The ledger and the rail at the moment read describe different moments (a settlement is pending
    /// or already past it): compare another time.
    NotComparable,
    Comparable {
        /// Per asset the wallet's account ever moved in: what arrived and what left.
        ledger: Vec<WalletLedger>,
        /// Assets whose opening balance was booked (the first comparison happened).
        opened: Vec<AssetCode>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalletLedger {
    pub asset: AssetCode,
    pub arrived: Amount,
    pub left: Amount,
}

/// Why units arrived in a hot wallet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FundingKind {
    /// What the chain showed beyond the ledger at the wallet's first balance check in an asset.
    Opening,
    /// An operator recorded a funding (a deposit to the hot wallet).
    Funding,
}

impl FundingKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FundingKind::Opening => "opening",
            FundingKind::Funding => "funding",
        }
    }
}

/// A funding to book: `reference` is unique across all fundings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalletFunding {
    pub reference: String,
    pub kind: FundingKind,
    pub wallet_id: String,
    pub asset: AssetCode,
    pub amount: Amount,
    pub at_ms: i64,
}

impl WalletFunding {
    /// The ledger journal of this funding; `None` for zero (an opening that found nothing more).
    pub fn journal(&self) -> Option<payoutd_domain::Journal> {
        (!self.amount.is_zero()).then(|| {
            payoutd_domain::Journal::wallet_funding(
                &self.wallet_id,
                &self.asset,
                &self.reference,
                self.amount,
            )
        })
    }
}

#[async_trait]
pub trait PipelineStore: Store + DetectionStore {
    /// Oldest first, across merchants (workers are not merchant-scoped).
    async fn payouts_in_status(
        &self,
        status: PayoutStatus,
        limit: u32,
    ) -> Result<Vec<Payout>, StoreError>;
    async fn payout_by_id(&self, id: &PayoutId) -> Result<Option<Payout>, StoreError>;
    /// Same merchant, asset, destination and amount, created at or after `since_ms`, other than
    /// `payout` itself, not canceled, rejected or failed.
    async fn count_similar_payouts(
        &self,
        payout: &Payout,
        since_ms: i64,
    ) -> Result<u64, StoreError>;
    /// Sum of amounts of attempts signed since `since_ms` towards `destination` in `asset` (any merchant).
    async fn destination_volume_since(
        &self,
        asset: &AssetCode,
        destination: &Destination,
        since_ms: i64,
    ) -> Result<Amount, StoreError>;

    /// Live attempts (signed, broadcast) with their payouts, each wallet's line in turn (so one
    /// stuck wallet cannot fill `limit`); inside a line lowest place first (its head blocks everything
    /// behind it), attempts of payouts waiting for a person last, then least recently checked.
    async fn live_attempts(&self, limit: u32) -> Result<Vec<(Attempt, Payout)>, StoreError>;
    /// `live_attempts` of payouts in `assets` (those the caller has a rail for) among those nobody
    /// leases at `now_ms`, each leased to the caller until `now_ms + lease_ms`: two sweeps at once
    /// take different attempts, and a worker never takes (and fills its batch with) attempts it
    /// cannot resolve. `record_checked` and `release_leases` end a lease; a killed worker's leases
    /// expire.
    async fn lease_live_attempts(
        &self,
        assets: &[AssetCode],
        limit: u32,
        now_ms: i64,
        lease_ms: i64,
    ) -> Result<Vec<(Attempt, Payout)>, StoreError>;
    /// Ends these leases without marking the attempts checked (the sweep decided nothing on them).
    async fn release_leases(&self, attempt_ids: &[AttemptId]) -> Result<(), StoreError>;
    async fn attempts_of(&self, payout_id: &PayoutId) -> Result<Vec<Attempt>, StoreError>;
    /// signed -> broadcast (conditional); false if it was not `signed`. Also records the send time.
    async fn mark_broadcast(&self, attempt_id: &AttemptId, at_ms: i64) -> Result<bool, StoreError>;
    /// `mark_broadcast` for many attempts in one statement (one commit); returns how many moved.
    async fn mark_broadcast_many(
        &self,
        attempt_ids: &[AttemptId],
        at_ms: i64,
    ) -> Result<u64, StoreError>;
    /// Records a send time on a live attempt; false if the attempt is no longer live.
    async fn record_sent(&self, attempt_id: &AttemptId, at_ms: i64) -> Result<bool, StoreError>;
    /// Moves these attempts to the back of the sweep's tie order and ends their leases, in one
    /// statement; every id must exist.
    async fn record_checked(&self, attempt_ids: &[AttemptId], at_ms: i64)
    -> Result<(), StoreError>;
    /// Stores a replacement or cancel transaction before it is sent (I4); the attempt must be live.
    async fn add_attempt_tx(
        &self,
        attempt_id: &AttemptId,
        tx: &AttemptTx,
    ) -> Result<(), StoreError>;
    /// A receipt below the finality threshold; only on a live attempt (false otherwise).
    async fn record_mined(
        &self,
        attempt_id: &AttemptId,
        block: u64,
        hash: &TxRef,
    ) -> Result<bool, StoreError>;
    /// The receipt disappeared (reorg): the attempt is plainly broadcast again; only on a live attempt.
    async fn clear_mined(&self, attempt_id: &AttemptId) -> Result<bool, StoreError>;
    async fn settle_attempt(
        &self,
        settlement: &AttemptSettlement,
    ) -> Result<TransitionOutcome, StoreError>;
    /// `settle_attempt` for many, in one database transaction (one commit: the settlements of a sweep
    /// share a merchant's balance rows, which one-by-one commits would take in turn). Each applies or
    /// is stale on its own; an error stores none of them.
    async fn settle_attempts(
        &self,
        settlements: &[AttemptSettlement],
    ) -> Result<Vec<TransitionOutcome>, StoreError>;

    /// A person's "retry" with the chain's proof: needs_attention -> processing (`transition`, with its
    /// event) and the payout awaits attempt `next_attempt_no`, in one transaction; stale if the payout
    /// moved. A number already used is refused by `UNIQUE (payout_id, attempt_no)` when it is signed.
    async fn retry_payout(
        &self,
        transition: &PayoutTransition,
        next_attempt_no: u32,
    ) -> Result<TransitionOutcome, StoreError>;

    /// Rail-neutral creation of attempt 1 (standalone rails): the attempt with its one
    /// transaction, and the payout approved -> processing with `event`, in one transaction. False
    /// when the payout moved first (another worker created it: I3, I5); nothing is written then.
    async fn create_first_attempt(
        &self,
        payout: &Payout,
        attempt: &Attempt,
        event: &NewEvent,
    ) -> Result<bool, StoreError>;
    /// Rail-neutral creation of attempt n+1 for a payout awaiting it (standalone rails). False
    /// when the payout moved first; nothing is written then.
    async fn create_next_attempt(
        &self,
        payout: &Payout,
        attempt: &Attempt,
    ) -> Result<bool, StoreError>;
    /// `create_first_attempt` on a standalone rail, once the payout's attempt fits the hourly
    /// caps (I8): the payout's destination and its asset's account are locked, their volume read
    /// and compared in the transaction that creates the attempt, so concurrent workers cannot
    /// each fit under a cap that their sum breaks.
    async fn create_first_attempt_within_caps(
        &self,
        payout: &Payout,
        attempt: &Attempt,
        event: &NewEvent,
        caps: &CapCheck,
    ) -> Result<FirstAttempt, StoreError>;
    /// The policy pass's batch: requested payouts, merchants taking turns, oldest first within a
    /// merchant (no lock: every transition names the state it leaves). Read as far as `limit`
    /// reaches, whatever the queue's length (a payroll batch waits here).
    async fn requested_in_turn(&self, limit: u32) -> Result<Vec<Payout>, StoreError>;
    /// Approved payouts in these assets, oldest first (no lock: creation is conditional).
    async fn approved_in(
        &self,
        assets: &[AssetCode],
        limit: u32,
    ) -> Result<Vec<Payout>, StoreError>;
    /// Payouts awaiting their next attempt within one of `turns` (an asset and a range of attempt
    /// numbers), with its number, oldest first (no lock).
    async fn awaiting_next_attempt_in(
        &self,
        turns: &[payoutd_domain::AttemptTurn],
        limit: u32,
    ) -> Result<Vec<(Payout, u32)>, StoreError>;
    /// Records the rail's reference for a live provider attempt (the response that carries it);
    /// false if the attempt is no longer live or already has another reference.
    async fn record_reference(
        &self,
        attempt_id: &AttemptId,
        reference: &TxRef,
    ) -> Result<bool, StoreError>;
    /// Records when a provider first replayed a saved error for a live attempt's key (the database's
    /// clock, `at_ms`); false if the attempt is no longer live or the time is already recorded.
    async fn record_key_spent(
        &self,
        attempt_id: &AttemptId,
        at_ms: i64,
    ) -> Result<bool, StoreError>;
    /// The deployment's reference key (made by the first process to ask), under which every
    /// transaction names the business event it pays (`ChainReference`).
    async fn reference_key(&self) -> Result<payoutd_domain::ReferenceKey, StoreError>;
    /// Registers the signing wallet of a standalone rail (a Solana fee payer) if new and returns
    /// its id, which its attempts name.
    async fn ensure_signing_wallet(&self, chain: &str, address: &str)
    -> Result<String, StoreError>;
    /// The id of that wallet when it is registered (a worker ran with its key), else `None`.
    async fn signing_wallet(
        &self,
        chain: &str,
        address: &str,
    ) -> Result<Option<String>, StoreError>;
    /// Whether the outbox holds this event (ids are derived from type and entity, so this asks
    /// "did entity X ever emit type T").
    async fn event_exists(&self, id: &payoutd_domain::EventId) -> Result<bool, StoreError>;
}

/// What reconciliation and the balance check read and write: the cursors of what has been read,
/// the lease that lets one worker at a time read a scope, the incidents they open and the books
/// they compare with a wallet.
#[async_trait]
pub trait DetectionStore: Send + Sync {
    /// The reconciliation cursor of a rail without block numbers, by its name.
    async fn rail_cursor(&self, name: &str) -> Result<Option<String>, StoreError>;
    /// Moves the cursor from `from` (`None`: never set) to `to`; false if another worker moved it first.
    async fn advance_rail_cursor(
        &self,
        name: &str,
        from: Option<&str>,
        to: &str,
    ) -> Result<bool, StoreError>;
    /// Leases reconciliation of `scope` (a chain, an account) to the caller until `until_ms`,
    /// unless another worker's lease on it runs past `now_ms`; true when the caller holds it.
    async fn lease_detection(
        &self,
        scope: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<bool, StoreError>;
    /// Ends the caller's lease on `scope` taken until `until_ms` (not a later one of another worker).
    async fn release_detection(&self, scope: &str, until_ms: i64) -> Result<(), StoreError>;

    /// What the ledger says a standalone rail's hot wallet (Solana) holds: comparable only while
    /// none of its attempts is live, so every transaction it ever sent is settled in the ledger.
    async fn settled_wallet_books(&self, wallet_id: &str) -> Result<WalletBooks, StoreError>;
    /// Records units that arrived in a hot wallet, with its `deposit` journal (none for zero), once
    /// per reference: false if the reference was booked before (nothing written).
    async fn book_wallet_funding(&self, funding: &WalletFunding) -> Result<bool, StoreError>;

    async fn open_incident(&self, incident: &NewIncident) -> Result<(), StoreError>;
    /// Opens `incident` unless one of the same kind about the same `subject` (a transaction hash)
    /// exists, open or resolved: two workers scanning the same block open it once. True if opened.
    async fn open_incident_once(
        &self,
        incident: &NewIncident,
        subject: &str,
    ) -> Result<bool, StoreError>;
    /// `open_incident_once`, and with the incident, in the same write, `journals` (what the
    /// incident's event cost the books): both or neither. True if opened.
    async fn open_incident_with_journals(
        &self,
        incident: &NewIncident,
        subject: &str,
        journals: &[Journal],
    ) -> Result<bool, StoreError>;
    /// `open_incident_once`, its books left until what it is about is final (a transfer that may
    /// still fail): it is listed by `incidents_awaiting_books` until `book_awaited`. True if opened.
    async fn open_incident_awaiting_books(
        &self,
        incident: &NewIncident,
        subject: &str,
    ) -> Result<bool, StoreError>;
    /// Incidents whose books wait that come after `after` in (opened at, id) order, oldest first,
    /// each with its subject: a pass resumes where the last one stopped.
    async fn incidents_awaiting_books(
        &self,
        after: &BooksCursor,
        limit: u32,
    ) -> Result<Vec<AwaitingBooks>, StoreError>;
    /// For an incident awaiting its books: `journals` booked and `note` appended to its detail, in
    /// one write, once; false (nothing written) when it awaits nothing any more.
    async fn book_awaited(
        &self,
        id: &IncidentId,
        journals: &[Journal],
        note: &str,
        at_ms: i64,
    ) -> Result<bool, StoreError>;
    /// Which of these hashes belong to a stored attempt transaction (original, replacement or cancel),
    /// each with the payout it was made for; hashes payoutd never stored are absent.
    async fn tx_owners(&self, hashes: &[TxRef]) -> Result<Vec<(TxRef, PayoutId)>, StoreError>;
    /// Which of these hashes are payout transfers (originals or replacements, not cancels) of an
    /// attempt already declared dead, each with its payout: any of them landing is a second payment.
    async fn dead_attempt_transfers(
        &self,
        hashes: &[TxRef],
    ) -> Result<Vec<(TxRef, PayoutId)>, StoreError>;
    async fn open_incidents(&self, limit: u32) -> Result<Vec<Incident>, StoreError>;
    /// The oldest open incident of `kind` opened once (`open_incident_once`) about a subject that
    /// begins with `subject_prefix`: the one open incident about a thing whose subjects name it first.
    async fn open_incident_about(
        &self,
        kind: IncidentKind,
        subject_prefix: &str,
    ) -> Result<Option<IncidentId>, StoreError>;
    /// False if it was already resolved or does not exist.
    async fn resolve_incident(
        &self,
        id: &IncidentId,
        resolution: &str,
        at_ms: i64,
    ) -> Result<bool, StoreError>;
}
