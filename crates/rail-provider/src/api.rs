//! The port each provider adapter implements: create with a stored key, look up by id or by our reference, list from a cursor.

use async_trait::async_trait;
use payoutd_domain::{Amount, Asset, Destination, Payout};

/// The on-chain address a provider that pays only to chains (Circle, Coinbase, Bridge here) sends
/// `payout` to; the refusal to put in its request when the destination is an account instead.
pub fn chain_destination(provider: &str, payout: &Payout) -> Result<String, String> {
    payout.destination.chain_address().ok_or_else(|| {
        format!("{provider} transfers go to on-chain addresses, not account {}", payout.destination)
    })
}

/// A transfer as the provider describes it, in the terms the rail decides on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderTransfer {
    /// The provider's id (`tr_...`, `transfer_...`, a UUID).
    pub id: String,
    /// Our reference, when the transfer carries one.
    pub reference: Option<String>,
    pub state: ProviderState,
    /// What it moves, in the asset's base units, and where to.
    pub amount: Option<Amount>,
    /// What left the account for it beside `fee`, where that is not `amount` (Bridge takes its
    /// fees out of the amount asked, which leaves the account whole): what a second payment costs.
    pub debited: Option<Amount>,
    pub destination: Option<String>,
    /// What the provider took out of the amount asked before it reached the recipient (Bridge's
    /// receipt `gas_fee`): `amount` is then what arrived, and `amount + withheld` what was asked.
    pub withheld: Amount,
    /// What the transfer cost the account beyond its amount, in the base units of the account's
    /// fee asset (the rail wallet's `native`); zero when the provider reports no fee.
    pub fee: Amount,
}

impl ProviderTransfer {
    /// What left the account for it beside its fee, as the provider says: `debited`, else `amount`.
    pub fn moved(&self) -> Option<Amount> {
        self.debited.or(self.amount)
    }

    /// It moves exactly the payout's amount to the payout's destination.
    pub fn matches(&self, payout: &Payout) -> bool {
        self.goes_to(payout) && self.withheld.is_zero() && self.amount == Some(payout.amount)
    }

    /// It moves the payout's amount to the payout's destination, less a fee the provider took out
    /// of it of at most `withheld_max` (Bridge's gas): the account paid the payout's amount, the
    /// recipient got the rest, and nothing else is wrong with it.
    pub fn matches_less_withheld(&self, payout: &Payout, withheld_max: Amount) -> bool {
        let asked = self.amount.and_then(|a| a.checked_add(self.withheld));
        self.goes_to(payout)
            && self.withheld <= withheld_max
            && asked == Some(payout.amount)
            && self.moved() == Some(payout.amount)
    }

    fn goes_to(&self, payout: &Payout) -> bool {
        let destination = match &payout.destination {
            Destination::Evm(a) => a.to_string().to_lowercase(),
            other => other.to_string(),
        };
        self.destination.as_deref().map(str::to_lowercase) == Some(destination.to_lowercase())
    }
}

/// Where the provider says a transfer stands, mapped by the adapter from the provider's own states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderState {
    /// Accepted, not yet final (pending, processing, sent).
    Processing,
    /// Sent to the chain and not included in a block (Circle `STUCK`): still able to land; the
    /// provider offers to accelerate it (and to cancel it while it is not yet stuck).
    Stuck,
    /// Accepted and held by the provider until its source is funded (Bridge `awaiting_funds`):
    /// nothing moves until someone funds it, which only a person can see to.
    AwaitingFunds,
    /// Completed: the money arrived.
    Completed,
    /// Failed, cancelled or returned, with the provider's own words as proof that nothing moved.
    Failed { proof: String },
    /// Completed, then taken back in full by someone with the account (a Stripe transfer reversal,
    /// a deliberate clawback): nothing stayed with the recipient, but a person decides whether to
    /// pay again; never an automatic next attempt.
    Reversed { detail: String },
    /// A state the adapter does not know: a person decides.
    Unrecognised(String),
}

/// When a transfer an attempt made can have been created, on our clock: from the attempt's start
/// to a margin after the last create it may send. What a lookup by reference reads: at a constant
/// number of transfers per window, the lookup's cost does not grow with the time since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreatedWithin {
    pub from_ms: i64,
    pub until_ms: i64,
}

/// What a create call answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    pub transfer: ProviderTransfer,
}

/// Why a call did not give an answer the rail can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// Timeout, reset, 5xx, 429, a request in flight with the same key: the transfer may or may not
    /// exist. Only a lookup decides.
    #[error("ambiguous: {0}")]
    Ambiguous(String),
    /// A 4xx to a create that proves nothing was created (validation, insufficient balance). With
    /// the same key, a provider that had created the transfer would have replayed its answer.
    #[error("refused by the provider, nothing created: {0}")]
    Refused(String),
    /// The provider answered with an error it saved for this key, again (Stripe marks it
    /// `Idempotent-Replayed: true`): the key is spent, so no call with it can create anything
    /// while the provider keeps it; what the first call did, only a lookup decides.
    #[error("a saved error replayed for this key: {0}")]
    Replayed(String),
    /// The key was used with another request or has expired at the provider: proves nothing either way.
    #[error("idempotency key conflict: {0}")]
    KeyConflict(String),
    /// The provider does not know the id asked for.
    #[error("not found: {0}")]
    NotFound(String),
    /// An answer that does not parse as the provider documents it.
    #[error("bad answer: {0}")]
    BadAnswer(String),
}

/// One page of the provider account's transfers after a cursor, oldest first.
#[derive(Debug, Clone, Default)]
pub struct TransferPage {
    pub transfers: Vec<ProviderTransfer>,
    /// Where the next read starts; `None` leaves the cursor.
    pub cursor: Option<String>,
}

/// A provider's API as the rail needs it. Each adapter speaks its provider's own paths, headers,
/// bodies and states; the rail above it holds the lifecycle and never looks inside a request.
#[async_trait]
pub trait ProviderApi: Send + Sync + 'static {
    /// `stripe`, `circle`, `coinbase`, `bridge`.
    fn provider(&self) -> &'static str;
    /// The account payouts leave from (names the reconciliation cursor).
    fn account(&self) -> &str;
    /// The request body of a transfer for `payout` with our reference, as stored with the attempt
    /// before any call; per-call secrets (Circle's ciphertext) are added by `create`.
    fn request_for(&self, payout: &Payout, reference: &str) -> Result<Vec<u8>, String>;
    /// Sends the stored request with the stored key.
    async fn create(
        &self,
        idempotency_key: &str,
        stored_request: &[u8],
    ) -> Result<Created, CallError>;
    /// The transfer with the provider's id.
    async fn get(&self, id: &str) -> Result<ProviderTransfer, CallError>;
    /// The transfers carrying our reference, created within `created` (the provider's clock may
    /// differ from ours: each adapter widens the window by the skew it allows). `stored_request`
    /// is the attempt's request as `request_for` made it: an adapter may narrow its lookup with
    /// what it holds (Coinbase asks first for transfers to its destination address).
    async fn find_by_reference(
        &self,
        reference: &str,
        stored_request: &[u8],
        created: CreatedWithin,
    ) -> Result<Vec<ProviderTransfer>, CallError>;
    /// Where reconciliation starts: after what exists at `now_ms` (nothing before it is judged).
    async fn starting_cursor(&self, now_ms: i64) -> Result<String, CallError>;
    /// The account's transfers after `cursor`, oldest first.
    async fn transfers_after(&self, cursor: &str) -> Result<TransferPage, CallError>;
    /// Asks the provider to speed up transfer `id`, stuck on its way, with its own idempotency key
    /// `key` (derived from the attempt's, so a retry asks the same): Circle's `accelerate`.
    /// Providers without stuck transfers refuse.
    async fn accelerate(&self, id: &str, key: &str) -> Result<(), CallError> {
        let _ = (id, key);
        Err(CallError::Refused(format!("{} has no transfers to accelerate", self.provider())))
    }
    /// Asks the provider to cancel transfer `id` (best effort: it may still land), with `key`
    /// derived likewise: Circle's `cancel`. Providers without it refuse.
    async fn cancel(&self, id: &str, key: &str) -> Result<(), CallError> {
        let _ = (id, key);
        Err(CallError::Refused(format!("{} has no transfers to cancel", self.provider())))
    }
    /// The account's balance of each of `assets` (the asset it pays and the one its fees are
    /// charged in), in the order asked, in base units: what the balance check compares with the
    /// ledger. An asset the provider lists no balance of has none (zero).
    async fn balances(&self, assets: &[Asset]) -> Result<Vec<Amount>, CallError>;
}

/// The reconciliation cursor of a list paged back with `ending_before` (Stripe's, Bridge's) before
/// the account made any transfer.
pub(crate) const CURSOR_FROM_START: &str = "start";

/// A page of a list the provider gives newest first, and whether a full page says more may follow.
pub(crate) struct NewestFirst<T> {
    pub items: Vec<T>,
    pub more: bool,
}

/// A list the provider gives newest first and pages back with `ending_before` (Stripe's, Bridge's):
/// what came after `cursor`, oldest first, and the cursor after it (the newest id read). From the
/// start only the newest page is read: the cursor then starts at the account's newest transfer. At
/// most `pages_max` pages a call; the next call carries on from the cursor.
pub(crate) async fn newer_than<T, Page>(
    cursor: &str,
    pages_max: u32,
    page: impl Fn(Option<String>) -> Page,
    id_of: fn(&T) -> &str,
) -> Result<(Vec<T>, String), CallError>
where
    Page: Future<Output = Result<NewestFirst<T>, CallError>>,
{
    let mut oldest_first = Vec::new();
    let mut at = cursor.to_owned();
    for _ in 0..pages_max {
        let read = page((at != CURSOR_FROM_START).then(|| at.clone())).await?;
        let Some(newest) = read.items.first() else { break };
        at = id_of(newest).to_owned();
        oldest_first.extend(read.items.into_iter().rev());
        if !read.more || cursor == CURSOR_FROM_START {
            break;
        }
    }
    Ok((oldest_first, at))
}

/// The cursor of a list paged back with `ending_before` at the account's newest transfer now, given
/// the newest page of one (or the very start).
pub(crate) fn newest_cursor(newest_id: Option<&str>) -> String {
    newest_id.unwrap_or(CURSOR_FROM_START).to_owned()
}
