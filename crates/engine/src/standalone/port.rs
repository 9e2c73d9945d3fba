//! The port of rails whose attempts stand alone (Solana with a blockhash or a durable nonce, provider APIs with an idempotency key): what the rail answers, never what it means for the money.

use async_trait::async_trait;
use payoutd_domain::{
    Amount, Asset, Attempt, AttemptSlot, AttemptTx, ChainReference, Payout, TxRef,
};

pub use crate::pipeline::CarriedReference;
use crate::rail::{ATTEMPTS_PER_PAYOUT_MAX_DEFAULT, ReadError};

/// Attempt n of a payout as a standalone rail prepares it: its slot and the one transaction or
/// request stored before anything is sent (I4).
#[derive(Debug, Clone)]
pub struct Prepared {
    pub slot: AttemptSlot,
    pub tx: AttemptTx,
}

/// What a standalone rail said to a submission of stored bytes or a stored request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubmitOutcome {
    /// Taken; the rail's reference for it when it gives one (a provider's transfer id).
    Accepted { reference: Option<TxRef> },
    /// Anything else: a timeout, a lost answer, a refusal. An earlier copy of the same bytes or
    /// request may still have been taken, so a refusal proves nothing here: the resolver asks the
    /// rail (`status`) before anything is decided.
    NotAccepted(String),
    /// Only from `submit_first`: the rail's answer proves this call created nothing (a provider's
    /// validation refusal), and no other call with the attempt's bytes or key can have been made
    /// (the resolver re-sends only once the first send's outcome is recorded). The engine ends
    /// the attempt at once, before anyone could send it again.
    Refused { proof: String },
    /// Not taken, and no call with the attempt's key can create anything any more (a provider
    /// replayed an error it saved for the key): the engine records when, on the database's clock,
    /// and the rail's lookups decide the attempt from a margin after it.
    KeySpent(String),
}

/// Where a standalone rail says an attempt stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StandaloneStatus {
    /// Not landed, and still able to.
    Pending,
    /// Landed; `final_` once no reorg or reversal can take it back. `transfer_matches`: it moved
    /// the payout's amount to its destination, or that amount less what the rail tolerates being
    /// withheld on the way (a provider's gas taken from the amount). `moved`: what arrived, read
    /// from the transfer or the chain (the payout's amount where the rail cannot say: never
    /// presumed zero); a matching transfer that moved less is booked paid with the difference
    /// withheld.
    /// `fee_paid`: what it cost the rail's hot wallet beyond the payout itself, in the rail's native
    /// asset (network fee, rent of an account it created); zero on rails whose source the ledger
    /// does not hold.
    Landed {
        reference: TxRef,
        final_: bool,
        transfer_matches: bool,
        moved: Amount,
        fee_paid: Amount,
    },
    /// Proven never to land (an expired blockhash with a final status check finding nothing, a
    /// provider's failed transfer that moved nothing), with the proof. `cancel_fee_paid`: what the
    /// attempt's landed cancel cost the hot wallet (zero when none landed).
    Dead { proof: String, cancel_fee_paid: Amount },
    /// Landed at the rail's finality and failed there (a Solana transaction with an error): nothing
    /// but its fee moved, and the same bytes can never land again. Like an EVM revert, the payout
    /// waits for a person with a `reverted` incident; this is the proof a `failed` or `retry`
    /// verdict rests on.
    Reverted { reference: TxRef, detail: String, fee_paid: Amount },
    /// Not landed and still able to, but waiting on something only a person can change (a
    /// provider holding the transfer until its source is funded): an `attempt_unresolved`
    /// incident opens once, the attempt stays live and the hold stays.
    Stalled { reference: TxRef, detail: String },
    /// The rail answered something it cannot map onto the lifecycle (a provider state it does not
    /// know): the payout needs a person, with an incident; the hold stays.
    Unrecognised { reference: TxRef, detail: String },
}

/// The hot wallet a standalone rail pays from, when the ledger holds it: its payouts and fees
/// leave that wallet's account, and the balance check compares it with the rail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RailWallet {
    /// The hot wallet id (`hot_wallets.id`).
    pub id: String,
    /// Its address on the rail, for logs and incidents.
    pub address: String,
    /// The rail's native asset: what fees are paid in.
    pub native: Asset,
}

#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// Nothing was produced and nothing can be (no key, invalid destination for the rail).
    #[error("refused: {0}")]
    Refused(String),
    /// What preparing needs could not be read (a recent blockhash); try again later.
    #[error(transparent)]
    Unavailable(#[from] ReadError),
}

/// A rail whose attempts are not lined up one behind another (Solana with a blockhash or a durable nonce,
/// provider APIs with an idempotency key): each attempt stands alone. The engine runs the same
/// attempt lifecycle as for EVM (stored before sent, re-sent unchanged, resolved from the rail,
/// settled by `AttemptEnd`); this port only says what the rail answers.
#[async_trait]
pub trait StandaloneRail: Send + Sync + 'static {
    /// For logs and metrics.
    fn name(&self) -> &str;
    /// Attempts one payout may have on this rail: past it, a proven death fails the payout.
    fn attempts_max(&self) -> u32 {
        ATTEMPTS_PER_PAYOUT_MAX_DEFAULT
    }
    /// The longest a first send takes, from its attempt's storing to the rail's answer (the
    /// rail's request timeout and a margin): past it, a first send whose outcome nobody recorded
    /// was lost with its worker or with the database's answer, and the resolver sends it instead.
    fn first_send_within_ms(&self) -> i64;
    /// Attempt `attempt_no` of `payout`, before any database transaction (reads only). What it
    /// makes carries `reference` where the rail has room for it (a Solana memo; a provider's
    /// request names the payout by its idempotency key instead).
    async fn prepare(
        &self,
        payout: &Payout,
        attempt_no: u32,
        reference: &ChainReference,
    ) -> Result<Prepared, PrepareError>;
    /// Sends the attempt's stored transaction or request, unchanged: a re-send, after an earlier
    /// call whose answer may have been lost. A refusal here proves nothing (the earlier call may
    /// have been taken).
    async fn submit(&self, attempt: &Attempt) -> SubmitOutcome;
    /// The first send of an attempt, made by the process that just stored it and before any other
    /// call with its bytes or key could have been made: only this call's refusal can prove that
    /// nothing was created (`SubmitOutcome::Refused`).
    async fn submit_first(&self, attempt: &Attempt) -> SubmitOutcome {
        self.submit(attempt).await
    }
    /// The attempt `prepare` made was not stored (another worker stored the payout's attempt
    /// first): whatever the rail set aside for it (a durable nonce value) is free again.
    fn discarded(&self, attempt: &Attempt) {
        let _ = attempt;
    }
    /// Looks the attempt up. An error is "unknown", never "absent".
    async fn status(
        &self,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<StandaloneStatus, ReadError>;

    /// Whether an attempt in `slot` was made on this rail (its kind, its fee payer, its provider).
    fn owns(&self, slot: &AttemptSlot) -> bool;

    /// The hot wallet whose account the ledger keeps for this rail; `None` for a rail paying from
    /// an account held elsewhere (a provider's), whose payouts settle to the world account.
    fn hot_wallet(&self) -> Option<&RailWallet> {
        None
    }
    /// The hot wallet's balance of each of `assets`, in the order asked, at the commitment payouts
    /// are paid at (what the balance check compares with the ledger).
    async fn wallet_balances(&self, assets: &[Asset]) -> Result<Vec<Amount>, ReadError> {
        let _ = assets;
        Err(ReadError(format!("{} keeps no hot wallet in the ledger", self.name())))
    }

    /// A transaction that, once it lands, proves none of the attempt's transfers ever can (a
    /// durable nonce's advance); stored with the attempt and sent like it. Rails whose attempts end
    /// by themselves (an expiring blockhash) refuse.
    async fn cancel(&self, attempt: &Attempt) -> Result<AttemptTx, PrepareError> {
        Err(PrepareError::Refused(format!(
            "{} cannot cancel attempt {}: it ends by itself (expiry) or by its provider's answer",
            self.name(),
            attempt.id
        )))
    }

    /// The name of this rail's reconciliation cursor (one per account it pays from); `None` when
    /// the rail cannot list what left its account, and then nothing is reconciled on it.
    fn reconcile_cursor_name(&self) -> Option<String> {
        None
    }
    /// References that appeared on the rail's account after `cursor`, at finality, oldest first,
    /// and the cursor after them. Without a cursor the rail names its starting point (what is
    /// there now) and judges nothing before it.
    async fn outgoing_since(&self, cursor: Option<&str>) -> Result<OutgoingSince, ReadError> {
        let _ = cursor;
        Ok(OutgoingSince::default())
    }
    /// A transfer by the rail's own id (one listed in `OutgoingSince::carried`), judged against
    /// the attempt whose reference it carries. Rails that name no transfer apart from the
    /// attempt's reference list none, and cannot be asked.
    async fn transfer_status(
        &self,
        transfer_id: &TxRef,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<StandaloneStatus, ReadError> {
        let _ = (attempt, payout);
        Err(ReadError(format!(
            "{} names no transfer apart from its attempt's reference ({transfer_id})",
            self.name()
        )))
    }
    /// Every reference on the rail's account after what reconciliation judged (`cursor`), final or
    /// not yet (Solana: at `confirmed`), for the check before signing; an error when the rail
    /// cannot list them all (then nothing is signed). Rails without a cursor list none.
    async fn listed_since(&self, cursor: &str) -> Result<Vec<TxRef>, ReadError> {
        let _ = cursor;
        Ok(Vec::new())
    }
    /// Of `refs` (none of them stored by payoutd), those that moved money out of the rail's
    /// account, each with what it names; the others brought money in. A reference whose
    /// transaction is not final yet cannot be judged: an error.
    async fn outgoing_of(&self, refs: &[TxRef]) -> Result<Vec<Foreign>, ReadError> {
        Ok(refs.iter().map(|r| Foreign::naming_nothing(r.clone())).collect())
    }
}

/// A transfer out of the rail's account that no stored attempt made, as the rail read it.
#[derive(Debug, Clone)]
pub struct Foreign {
    pub reference: TxRef,
    /// The business event it names (a Solana memo), for a transaction of ours whose attempt the
    /// database lost: then also the attempt it was, rebuilt from the chain (its slot and bytes).
    pub names: Option<(ChainReference, Prepared)>,
}

impl Foreign {
    pub fn naming_nothing(reference: TxRef) -> Foreign {
        Foreign { reference, names: None }
    }
}

/// One read of what appeared on a rail's account since a cursor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutgoingSince {
    /// Oldest first.
    pub refs: Vec<TxRef>,
    /// Where the next read starts; `None` leaves the cursor where it is.
    pub cursor: Option<String>,
    /// Of the listed transfers that carry a reference, the rail's own id of each, on rails that
    /// name a transfer apart from the reference (a provider's transfer id): two ids behind one
    /// reference are two payments.
    pub carried: Vec<CarriedReference>,
}
