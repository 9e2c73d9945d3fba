//! A seeded provider behind the provider rail's `ProviderApi` port: a key window, outages, creates whose answer is lost, retries refused before the key is looked at, lists that lag their creates, failed lookups, scans a busy account cuts short, transfers that fail over time, and creates made past the contract; every fault a pure function of the seed.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use payoutd_domain::{Amount, Payout};
use payoutd_engine::Clock;
use payoutd_rail_provider::{
    CallError, Created, ProviderApi, ProviderState, ProviderTransfer, TransferPage,
};

use crate::chain::CRASH_MESSAGE;

mod faults;
pub use faults::ProviderFaults;
use faults::hash_per_mille;

pub const SIM_PROVIDER: &str = "sim";
/// The provider a route gives a payout's next attempt once its attempt at `SIM_PROVIDER` is proven
/// dead: the same money to the same account, through another provider with faults of its own.
pub const SIM_NEXT_PROVIDER: &str = "simnext";
/// The provider a route gives a Solana payout's next attempt once its attempt on the cluster is
/// proven dead: a route whose first rail is a chain.
pub const SIM_SOL_PROVIDER: &str = "simsol";
/// The provider's key window: short, so seeds cross it (the rail is configured with the same).
pub const KEY_WINDOW_MS: i64 = 30_000;
/// How long after its attempt began the rail still sends creates: less than the key window less
/// its margin (19 s), as the production default (15 min) is far less than a day.
pub const RESEND_HORIZON_MS: i64 = 8_000;
/// The rail's request timeout: there is no HTTP here, it sizes the rail's margins.
pub const REQUEST_TIMEOUT_MS: u64 = 1_000;
/// A transfer completes (or fails) this long after the provider made it.
pub const COMPLETES_AFTER_MS: i64 = 4_000;
/// Lists and lookups by reference show a transfer at most this long after it was made: longer than
/// the resolver's lease (so a lookup a sweep later can still miss it), shorter than twice the rail's
/// margin (2 x (1 s + 10 s)): the last create goes out a margin before the window ends and the first
/// lookup that can prove death comes a margin after it.
pub const LOOKUP_LAG_MS_MAX: i64 = 20_000;
/// A transfer in a state the adapter does not know shows it this long past its completion time,
/// then completes (or fails) as it would have.
pub const ODD_STATE_MS: i64 = 15_000;
/// Per cent of late creates that move less than asked: a second payment of another amount must be
/// booked at what it moved and stay open for a person.
const SHORT_LATE_PERCENT: u32 = 75;
/// Of the late creates whose key a retry used meanwhile, those the provider makes all the same.
const SECOND_BEHIND_KEY_PER_MILLE: u32 = 500;
/// A create the provider queues past its contract (`ProviderFaults::late`) is made this long after
/// it was sent: past the key window and the rail's margins, so the rail has proven the attempt dead
/// (and may have paid the payout with a next attempt) by the time it lands.
pub const LATE_CREATE_AFTER_MS: i64 = 2 * KEY_WINDOW_MS + LOOKUP_LAG_MS_MAX;
/// Outages come and go in stretches of this length: every create inside one fails before the
/// provider does anything, so retries can run up to the end of the key window.
pub const OUTAGE_STRETCH_MS: i64 = 20_000;

/// Circle's unknown error, as its API sends it (developers.circle.com/wallets/error-codes).
const UNKNOWN_ERROR_BODY: &str = r#"{"code":-1,"message":"Something went wrong."}"#;
const UNKNOWN_ERROR_STATUS: u16 = 400;

/// A paying transfer under suspicion: made past the provider's contract, or carrying the same
/// reference as one that was.
#[derive(Debug, Clone)]
pub struct Suspect {
    pub id: String,
    pub reference: String,
    /// Made past the contract (a late create).
    pub late: bool,
}

struct SimTransfer {
    id: String,
    reference: String,
    amount: Amount,
    destination: String,
    created_ms: i64,
    listed_ms: i64,
    fails: bool,
    /// Made past the contract (a late create).
    late: bool,
    /// Shows a state the adapter does not know before its end state.
    odd: bool,
    /// The second of two transfers one create made (`ProviderFaults::twin`).
    twin: bool,
    /// Moved less than asked (`SHORT_LATE_PERCENT`).
    short: bool,
}

impl SimTransfer {
    /// When the transfer shows its end state.
    fn ends_ms(&self) -> i64 {
        self.created_ms + COMPLETES_AFTER_MS + if self.odd { ODD_STATE_MS } else { 0 }
    }
}

/// A create the provider took and will make later (`ProviderFaults::late`).
struct Queued {
    key: String,
    body: Vec<u8>,
    due_ms: i64,
}

#[derive(Default)]
struct Account {
    transfers: Vec<SimTransfer>,
    /// Idempotency key -> (the transfer it made, when it was first seen).
    keys: HashMap<String, (usize, i64)>,
    queued: Vec<Queued>,
    /// Keys whose first create's error the provider saved, with when: replayed to every later create.
    saved_errors: HashMap<String, i64>,
    faults_on: bool,
    crash_armed: bool,
    roll_counts: HashMap<String, u64>,
    faults_injected: u64,
}

pub struct SimProvider {
    /// The provider's name in asset codes and attempt slots; its transfer ids start with it.
    name: &'static str,
    account_name: String,
    seed: u64,
    faults: ProviderFaults,
    clock: Arc<dyn Clock>,
    account: Mutex<Account>,
    /// The deliberate defect: an unknown error read as any 4xx (a refusal), not by the adapter.
    unknown_error_is_refusal: bool,
}

impl SimProvider {
    /// A provider named `name` (its own keys, ids and account), with faults drawn from `seed`.
    pub fn named(
        name: &'static str,
        seed: u64,
        faults: ProviderFaults,
        clock: Arc<dyn Clock>,
    ) -> SimProvider {
        SimProvider {
            name,
            account_name: format!("acct_{name}_platform"),
            seed,
            faults,
            clock,
            account: Mutex::new(Account::default()),
            unknown_error_is_refusal: false,
        }
    }

    pub fn set_faults(&self, on: bool) {
        self.account.lock().unwrap().faults_on = on;
    }

    pub fn faults_injected(&self) -> u64 {
        self.account.lock().unwrap().faults_injected
    }

    /// The next create that makes a transfer panics as a crashed worker would, after making it.
    pub fn arm_crash(&self) {
        self.account.lock().unwrap().crash_armed = true;
    }

    pub fn disarm_crash(&self) {
        self.account.lock().unwrap().crash_armed = false;
    }

    /// Every transfer that moved or will move money (not failed): (its id, our reference, destination, amount).
    pub fn paying(&self) -> Vec<(String, String, String, Amount)> {
        let a = self.account.lock().unwrap();
        a.transfers
            .iter()
            .filter(|t| !t.fails)
            .map(|t| (t.id.clone(), t.reference.clone(), t.destination.clone(), t.amount))
            .collect()
    }

    /// Transfers that moved or will move money and were made past the provider's contract, with
    /// every other paying transfer carrying the same reference: which of them is the attempt's
    /// own and which the second payment is the order the rail saw them in.
    pub fn suspects(&self) -> Vec<Suspect> {
        let a = self.account.lock().unwrap();
        let late_refs: HashSet<&str> = a
            .transfers
            .iter()
            .filter(|t| t.late && !t.fails)
            .map(|t| t.reference.as_str())
            .collect();
        a.transfers
            .iter()
            .filter(|t| !t.fails && late_refs.contains(t.reference.as_str()))
            .map(|t| Suspect { id: t.id.clone(), reference: t.reference.clone(), late: t.late })
            .collect()
    }

    /// Creates still queued, and transfers not yet completed, failed or listed.
    pub fn in_flight(&self) -> usize {
        let now = self.clock.now_ms();
        let mut a = self.account.lock().unwrap();
        self.make_due(&mut a, now);
        a.queued.len() + a.transfers.iter().filter(|t| now < t.ends_ms().max(t.listed_ms)).count()
    }

    /// Makes the queued creates that are due. When their key made a transfer meanwhile (a retry of
    /// the key), the provider drops the queued request as a replay, or, past its contract again
    /// (`SECOND_BEHIND_KEY_PER_MILLE`), makes it all the same: two transfers behind one reference
    /// of one attempt, which payoutd must report as a second payment.
    fn make_due(&self, account: &mut Account, now: i64) {
        let (due, waiting): (Vec<Queued>, Vec<Queued>) =
            std::mem::take(&mut account.queued).into_iter().partition(|q| q.due_ms <= now);
        account.queued = waiting;
        for q in due {
            let retried = account.keys.get(&q.key).copied();
            if retried.is_some()
                && hash_per_mille(&format!("{}:second:{}", self.seed, q.key))
                    >= SECOND_BEHIND_KEY_PER_MILLE
            {
                continue;
            }
            let index = self.make(account, &q.key, &q.body, q.due_ms);
            account.transfers[index].late = true;
            if hash_per_mille(&format!("{}:short:{}", self.seed, q.key)) < SHORT_LATE_PERCENT * 10 {
                let made = &mut account.transfers[index];
                made.amount = short_of(made.amount);
                made.short = true;
            }
            if let Some(first) = retried {
                account.keys.insert(q.key.clone(), first); // a replay of the key still answers the first
            }
        }
    }

    /// A fault decision that is a pure function of (seed, what is asked, how often it was asked).
    fn roll(&self, account: &mut Account, key: &str, per_mille: u32) -> bool {
        if !account.faults_on {
            return false;
        }
        let count = account.roll_counts.entry(key.to_owned()).or_insert(0);
        *count += 1;
        let hit = hash_per_mille(&format!("{}:provider:{key}:{count}", self.seed)) < per_mille;
        account.faults_injected += u64::from(hit);
        hit
    }

    fn in_outage(&self, account: &mut Account, now: i64) -> bool {
        let stretch = now / OUTAGE_STRETCH_MS;
        account.faults_on
            && hash_per_mille(&format!("{}:outage:{stretch}", self.seed)) < self.faults.outage
    }

    fn view(&self, t: &SimTransfer, now: i64) -> ProviderTransfer {
        let state = match (now >= t.ends_ms(), t.fails) {
            (false, _) if t.odd && now >= t.created_ms + COMPLETES_AFTER_MS => {
                ProviderState::Unrecognised("in_review".to_owned())
            }
            (false, _) => ProviderState::Processing,
            (true, false) => ProviderState::Completed,
            (true, true) => ProviderState::Failed {
                proof: "state failed: insufficient funds at the provider".to_owned(),
            },
        };
        // The simulated provider charges no fee: its account is not kept in the ledger here.
        let fee = Amount::ZERO;
        ProviderTransfer {
            id: t.id.clone(),
            reference: Some(t.reference.clone()),
            state,
            amount: Some(t.amount),
            debited: None,
            destination: Some(t.destination.clone()),
            withheld: Amount::ZERO,
            fee,
        }
    }

    /// A new transfer for `key`, shown in lists after a seeded lag.
    fn make(&self, account: &mut Account, key: &str, body: &[u8], now: i64) -> usize {
        let text = String::from_utf8(body.to_vec()).expect("simulated requests are text");
        let parts: Vec<&str> = text.split('|').collect();
        assert_eq!(parts.len(), 3, "simulated provider request: {text}");
        let index = account.transfers.len();
        let lag = if self.roll(account, &format!("lag:{key}"), self.faults.lag) {
            i64::from(hash_per_mille(&format!("{}:lag-ms:{key}", self.seed))) * LOOKUP_LAG_MS_MAX
                / 1000
        } else {
            0
        };
        let fails = self.roll(account, &format!("fails:{key}"), self.faults.fails);
        let odd = self.roll(account, &format!("odd:{key}"), self.faults.odd);
        account.transfers.push(SimTransfer {
            id: format!("{}tr_{index:06}", self.name),
            reference: parts[0].to_owned(),
            destination: parts[1].to_owned(),
            amount: Amount::parse(parts[2]).expect("amount"),
            created_ms: now,
            listed_ms: now + lag,
            fails,
            late: false,
            odd,
            twin: false,
            short: false,
        });
        account.keys.insert(key.to_owned(), (index, now));
        index
    }

    /// The create made twice: the transfer at `index` fails, and a second one carrying the same
    /// reference, listed with it, completes.
    fn make_twin(&self, account: &mut Account, index: usize) {
        let id = format!("{}tr_{:06}", self.name, account.transfers.len());
        let first = &mut account.transfers[index];
        first.fails = true;
        // Failed plainly: beside an own transfer in a state the adapter does not know, a completed
        // twin is booked as a second payment for a person at once (whichever way the own one ends).
        first.odd = false;
        let twin = SimTransfer {
            id,
            reference: first.reference.clone(),
            destination: first.destination.clone(),
            amount: first.amount,
            created_ms: first.created_ms,
            listed_ms: first.listed_ms,
            fails: false,
            late: false,
            odd: false,
            twin: true,
            short: false,
        };
        account.transfers.push(twin);
    }

    /// Transfers that moved, or will move, less than they were asked to.
    pub fn short_transfers(&self) -> usize {
        self.account.lock().unwrap().transfers.iter().filter(|t| t.short && !t.fails).count()
    }

    /// The answer to a create whose transfer is `index` (made by this call when `made_now`), or
    /// none: a lost answer.
    fn answer(
        &self,
        account: &mut Account,
        key: &str,
        index: usize,
        made_now: bool,
        now: i64,
    ) -> Result<Created, CallError> {
        if self.roll(account, &format!("lost:{key}"), self.faults.answer_lost) {
            if made_now {
                self.processed_late(account, index);
            }
            return Err(CallError::Ambiguous("timeout: the answer was lost".into()));
        }
        Ok(Created { transfer: self.view(&account.transfers[index], now) })
    }

    /// A request whose answer never came may have reached the provider, and been processed, any
    /// time within the rail's margin after the worker decided to send it (a worker may act until
    /// its lease ends, a call may take its whole timeout): the transfer's creation time is then.
    fn processed_late(&self, account: &mut Account, index: usize) {
        let margin_ms = i64::try_from(REQUEST_TIMEOUT_MS).expect("a small timeout")
            + payoutd_engine::pipeline::RESOLVE_LEASE_MS;
        let id = &account.transfers[index].id;
        let processed_ms =
            i64::from(hash_per_mille(&format!("{}:processed:{id}", self.seed))) * margin_ms / 1000;
        // The call's transfers, its twin too, were made together.
        for t in &mut account.transfers[index..] {
            t.created_ms += processed_ms;
            t.listed_ms += processed_ms;
        }
    }

    /// The saved error of `key`'s first create, replayed, while the provider keeps the key.
    fn replay_of_saved(account: &Account, key: &str, now: i64) -> Option<CallError> {
        let saved_ms = *account.saved_errors.get(key)?;
        (now - saved_ms <= KEY_WINDOW_MS).then(|| {
            CallError::Replayed("500 replayed for the key (Idempotent-Replayed: true)".into())
        })
    }

    /// Whether a new key's create fails with an error saved for the key before anything is made.
    fn saves_error_before_making(&self, account: &mut Account, key: &str, now: i64) -> bool {
        let saves = !account.keys.contains_key(key)
            && self.roll(account, &format!("saved-error:{key}"), self.faults.saved_error)
            && hash_per_mille(&format!("{}:saved-made:{key}", self.seed)) < 500;
        if saves {
            account.saved_errors.insert(key.to_owned(), now);
        }
        saves
    }

    /// The error a create that made its transfer answers, if any: a 5xx saved for the key, or
    /// Circle's unknown error, read by the Circle adapter's own classification.
    fn error_after_making(&self, account: &mut Account, key: &str, now: i64) -> Option<CallError> {
        if self.roll(account, &format!("saved-error-made:{key}"), self.faults.saved_error / 2) {
            account.saved_errors.insert(key.to_owned(), now);
            return Some(CallError::Ambiguous("500 after the transfer was made: saved".into()));
        }
        if !self.roll(account, &format!("unknown-error:{key}"), self.faults.unknown_error) {
            return None;
        }
        Some(if self.unknown_error_is_refusal {
            CallError::Refused(format!("{UNKNOWN_ERROR_STATUS}: {UNKNOWN_ERROR_BODY}"))
        } else {
            payoutd_rail_provider::circle::error_of(UNKNOWN_ERROR_STATUS, UNKNOWN_ERROR_BODY)
        })
    }

    /// The deliberate defect: Circle's unknown error read as any 4xx, a refusal that proves
    /// nothing was made, instead of through the adapter's classification.
    pub fn with_unknown_error_as_refusal(mut self) -> SimProvider {
        self.unknown_error_is_refusal = true;
        self
    }

    /// Creates the provider made twice (`ProviderFaults::twin`).
    pub fn twins(&self) -> usize {
        self.account.lock().unwrap().transfers.iter().filter(|t| t.twin).count()
    }

    /// How many transfers, oldest first, a list shows now: a prefix (the provider lists in order).
    fn listed(account: &Account, now: i64) -> usize {
        account.transfers.iter().take_while(|t| t.listed_ms <= now).count()
    }
}

/// What a short transfer moves of `asked`: a tenth less (at least a unit), as when a provider takes
/// its fee out of the amount or a transfer is reversed in part.
fn short_of(asked: Amount) -> Amount {
    let asked: u128 = asked.to_string().parse().expect("simulated amounts fit in u128");
    Amount::from_u128(asked - (asked / 10).max(1).min(asked))
}

#[async_trait]
impl ProviderApi for SimProvider {
    fn provider(&self) -> &'static str {
        self.name
    }

    fn account(&self) -> &str {
        &self.account_name
    }

    fn request_for(&self, payout: &Payout, reference: &str) -> Result<Vec<u8>, String> {
        Ok(format!("{reference}|{}|{}", payout.destination, payout.amount).into_bytes())
    }

    async fn create(
        &self,
        idempotency_key: &str,
        stored_request: &[u8],
    ) -> Result<Created, CallError> {
        let now = self.clock.now_ms();
        let mut a = self.account.lock().unwrap();
        self.make_due(&mut a, now);
        if self.in_outage(&mut a, now)
            || self.roll(&mut a, &format!("before:{idempotency_key}"), self.faults.ambiguous_before)
        {
            return Err(CallError::Ambiguous("503 before the provider did anything".into()));
        }
        if let Some(replayed) = Self::replay_of_saved(&a, idempotency_key, now) {
            return Err(replayed);
        }
        let known =
            a.keys.get(idempotency_key).copied().filter(|(_, seen)| now - seen <= KEY_WINDOW_MS);
        let made_now = known.is_none();
        let index = match known {
            Some(_)
                if self.roll(
                    &mut a,
                    &format!("refused-retry:{idempotency_key}"),
                    self.faults.refused_retry,
                ) =>
            {
                return Err(CallError::Refused(
                    "400 invalid destination (validated before the key was looked at)".into(),
                ));
            }
            Some((index, _)) => index, // replayed: the transfer the key made
            None if !a.keys.contains_key(idempotency_key)
                && self.roll(
                    &mut a,
                    &format!("refused:{idempotency_key}"),
                    self.faults.refused_first,
                ) =>
            {
                return Err(CallError::Refused(
                    "400 the recipient account cannot receive transfers".into(),
                ));
            }
            None if self.saves_error_before_making(&mut a, idempotency_key, now) => {
                return Err(CallError::Ambiguous(
                    "500 after execution began, nothing made: saved for the key".into(),
                ));
            }
            None if self.roll(&mut a, &format!("late:{idempotency_key}"), self.faults.late) => {
                a.queued.push(Queued {
                    key: idempotency_key.to_owned(),
                    body: stored_request.to_vec(),
                    due_ms: now + LATE_CREATE_AFTER_MS,
                });
                return Err(CallError::Ambiguous("timeout: the provider queued the create".into()));
            }
            // A new key, or one the provider forgot: a new transfer (the rail must never send one then).
            None => {
                let index = self.make(&mut a, idempotency_key, stored_request, now);
                if self.roll(&mut a, &format!("twin:{idempotency_key}"), self.faults.twin) {
                    self.make_twin(&mut a, index);
                }
                if std::mem::take(&mut a.crash_armed) {
                    drop(a);
                    panic!("{CRASH_MESSAGE} (after the provider made the transfer)");
                }
                if let Some(error) = self.error_after_making(&mut a, idempotency_key, now) {
                    return Err(error);
                }
                index
            }
        };
        self.answer(&mut a, idempotency_key, index, made_now, now)
    }

    async fn get(&self, id: &str) -> Result<ProviderTransfer, CallError> {
        let now = self.clock.now_ms();
        let mut a = self.account.lock().unwrap();
        self.make_due(&mut a, now);
        if self.roll(&mut a, &format!("get:{id}"), self.faults.read_error) {
            return Err(CallError::Ambiguous("503 on a lookup".into()));
        }
        let t = a
            .transfers
            .iter()
            .find(|t| t.id == id)
            .ok_or_else(|| CallError::NotFound(id.to_owned()))?;
        Ok(self.view(t, now))
    }

    async fn find_by_reference(
        &self,
        reference: &str,
        _stored_request: &[u8],
        created: payoutd_rail_provider::api::CreatedWithin,
    ) -> Result<Vec<ProviderTransfer>, CallError> {
        let now = self.clock.now_ms();
        let mut a = self.account.lock().unwrap();
        self.make_due(&mut a, now);
        if self.roll(&mut a, &format!("find:{reference}"), self.faults.read_error) {
            return Err(CallError::Ambiguous("503 on a list".into()));
        }
        if self.roll(&mut a, &format!("partial:{reference}"), self.faults.partial_scan) {
            return Err(CallError::Ambiguous(
                "the scan stopped before the end of a busy account".into(),
            ));
        }
        let listed = Self::listed(&a, now);
        // Only what was made in the window the rail asks for, as a provider's time filter reads
        // (this provider's clock is the database's): a window too narrow for the creates the rail
        // sends shows as a second payment.
        let within =
            |t: &&SimTransfer| (created.from_ms..=created.until_ms).contains(&t.created_ms);
        Ok(a.transfers[..listed]
            .iter()
            .filter(|t| t.reference == reference)
            .filter(within)
            .map(|t| self.view(t, now))
            .collect())
    }

    async fn starting_cursor(&self, now_ms: i64) -> Result<String, CallError> {
        let mut a = self.account.lock().unwrap();
        self.make_due(&mut a, now_ms);
        Ok(Self::listed(&a, now_ms).to_string())
    }

    async fn transfers_after(&self, cursor: &str) -> Result<TransferPage, CallError> {
        let now = self.clock.now_ms();
        let mut a = self.account.lock().unwrap();
        self.make_due(&mut a, now);
        if self.roll(&mut a, &format!("list:{cursor}"), self.faults.read_error) {
            return Err(CallError::Ambiguous("503 on a list".into()));
        }
        let from: usize =
            cursor.parse().map_err(|_| CallError::BadAnswer(format!("cursor {cursor}")))?;
        let listed = Self::listed(&a, now);
        let transfers =
            a.transfers[from.min(listed)..listed].iter().map(|t| self.view(t, now)).collect();
        Ok(TransferPage { transfers, cursor: Some(listed.to_string()) })
    }

    /// The simulator's provider rail keeps no wallet in the ledger, so the balance check never asks.
    async fn balances(&self, _assets: &[payoutd_domain::Asset]) -> Result<Vec<Amount>, CallError> {
        Err(CallError::BadAnswer(
            "the simulated provider's account is not kept in the ledger".into(),
        ))
    }
}
