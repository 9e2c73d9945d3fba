//! Each provider rail against its provider's simulator (real HTTP) through the engine's lifecycle, on both stores: the world the scenarios share, and which scenario runs for which provider (the scenarios by theme below).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use payoutd_domain::{
    Amount, Asset, AssetRegistry, AttemptSlot, AttemptStatus, DepositKey, Destination, EvmAddress,
    IncidentKind, Metadata, PayoutId, PayoutKey, PayoutRequest, PayoutStatus,
};
use payoutd_engine::clock::Clock;
use payoutd_engine::standalone::{StandaloneRail, StandaloneStatus, SubmitOutcome};
use payoutd_engine::store::StoreError;
use payoutd_engine::{
    Caps, DatabaseClock, DatabaseTime, Engine, Pipeline, PipelineConfig, PipelineError,
    PipelineStore, StandaloneLine, Verdict,
};
use payoutd_provider_sim::{Fault, ProviderKind, ProviderSim};
use payoutd_rail_provider::{
    AWAITING_FUNDS_INCIDENT_AFTER_MS_DEFAULT, BridgeApi, BridgeConfig, CoinbaseApi, CoinbaseConfig,
    KEY_WINDOW_MS_DEFAULT, ProviderApi, ProviderRail, ProviderRailConfig, TravelRuleConfig,
    our_reference,
};
use payoutd_testkit::TestDb;

use crate::support::{FakeClock, Setup, api_of, asset_of, destination_of, kind_name};

mod accounts;
mod clocks;
mod documented;
mod ends;
mod key_window;
use self::accounts::*;
use self::clocks::*;
use self::documented::*;
use self::ends::*;
use self::key_window::*;

/// The client gives up on an answer after this long; the simulator's delayed answers come later.
const CLIENT_TIMEOUT_MS: u64 = 600;
const DELAY_PAST_TIMEOUT_MS: u64 = 1_000;
/// The simulated provider's list shows a transfer this long after its creation (provider time):
/// several rounds, so a lookup that trusts the list too early is seen.
const LOOKUP_LAG_MS: u64 = 5_000;
/// Rounds of the pipeline a test runs at most before it fails.
const ROUNDS_MAX: u32 = 60;
/// Both clocks move this much per round: past `rebroadcast_after_ms`, and a provider state step.
const ROUND_MS: i64 = 1_500;
const FUNDED_BASE_UNITS: u128 = 1_000_000_000;
/// CDP list limits small enough for a test to fall behind them: one pass reads 4 transfers at most.
const CDP_TRANSFERS_PER_PAGE_SMALL: u32 = 2;
const CDP_PAGES_PER_CALL_SMALL: u32 = 2;
/// Transfers made by hand on the CDP account while reconciliation is behind: several passes' worth.
const CDP_BY_HAND_COUNT: usize = 11;
/// Where a busy account's other transfers go.
const BUSY_ELSEWHERE: &str = "0x00000000000000000000000000000000000b0b01";
/// Steps a Circle transaction shows STUCK unless accelerated: longer than any test runs.
const STUCK_FOR_GOOD_STEPS: u64 = 1_000_000;
/// Transfers a busy Circle wallet makes to other addresses: past what one lookup reads at two a page.
const CIRCLE_BUSY_COUNT: usize = 85;
/// The CDP account `support::api_of` pays from.
const CDP_ACCOUNT: &str = "account_af2937b0-9846-4fe7-bfe9-ccc22d935114";
/// How far apart (provider time) the transfers made by hand are created.
const CDP_BY_HAND_APART_MS: u64 = 3_000;

struct World {
    kind: ProviderKind,
    sim: ProviderSim,
    store: Arc<dyn PipelineStore>,
    engine: Engine,
    pipeline: Pipeline,
    clock: Arc<FakeClock>,
    merchant: payoutd_domain::MerchantId,
    asset: Asset,
    db: TestDb,
}

async fn world(db: TestDb, kind: ProviderKind) -> World {
    world_with(db, kind, Setup::Working).await
}

async fn world_with(db: TestDb, kind: ProviderKind, setup: Setup) -> World {
    let sim = ProviderSim::start(kind).await;
    let api = api_of(kind, &sim, setup, CLIENT_TIMEOUT_MS);
    world_on(db, kind, sim, api).await
}

/// The world around an adapter the test configured itself.
async fn world_on(
    db: TestDb,
    kind: ProviderKind,
    sim: ProviderSim,
    api: Arc<dyn ProviderApi>,
) -> World {
    world_on_rail(db, kind, sim, api, ProviderRailConfig::default()).await
}

/// The world around an adapter and a rail the test configured itself.
async fn world_on_rail(
    db: TestDb,
    kind: ProviderKind,
    sim: ProviderSim,
    api: Arc<dyn ProviderApi>,
    rail_config: ProviderRailConfig,
) -> World {
    let store = db.pipeline();
    // Our clock starts where the provider's stands (the two agree in production, within skew).
    let clock = Arc::new(FakeClock(AtomicI64::new(i64::try_from(sim.now_ms()).unwrap())));
    let asset = asset_of(kind);
    let engine =
        Engine::new(store.clone(), clock.clone(), AssetRegistry::new(vec![asset.clone()]).unwrap());
    let (merchant, _) = engine.create_merchant(kind_name(kind), [4u8; 32]).await.unwrap();
    engine
        .deposit(
            &merchant,
            &asset.code,
            Amount::from_u128(FUNDED_BASE_UNITS),
            DepositKey::parse("fund-provider").unwrap(),
        )
        .await
        .unwrap();
    let rail = Arc::new(ProviderRail::new(api, clock.clone(), rail_config));
    let config = PipelineConfig { rebroadcast_after_ms: 1_000, ..PipelineConfig::default() };
    let pipeline = Pipeline::new(store.clone(), clock.clone(), config)
        .with_standalone_rail(StandaloneLine { rail, assets: vec![asset.clone()] });
    World { kind, sim, store, engine, pipeline, clock, merchant, asset, db }
}

impl World {
    async fn request(&self, key: &str, amount: u128) -> PayoutId {
        let request = PayoutRequest::new(
            PayoutKey::parse(key).unwrap(),
            self.asset.code.clone(),
            Amount::from_u128(amount),
            destination_of(self.kind),
            Metadata::empty(),
        );
        self.engine.create_payout(&self.merchant, request).await.unwrap().0.id
    }

    async fn status(&self, id: &PayoutId) -> PayoutStatus {
        self.store.payout_by_id(id).await.unwrap().unwrap().status
    }

    /// Runs the pipeline, moving both clocks a round at a time, until the payout is in `status`.
    async fn run_until(&self, id: &PayoutId, status: PayoutStatus) {
        for _ in 0..ROUNDS_MAX {
            self.pipeline.tick().await.unwrap();
            if self.status(id).await == status {
                return;
            }
            self.advance(ROUND_MS);
        }
        panic!(
            "payout {id} is {:?}, not {status:?}: {:?}",
            self.status(id).await,
            self.store.attempts_of(id).await.unwrap()
        );
    }

    /// Moves both clocks, ours and the provider's, past the key window.
    /// Our clock and the provider's move `ms` at once.
    fn advance(&self, ms: i64) {
        self.clock.0.fetch_add(ms, Ordering::SeqCst);
        self.sim.advance(u64::try_from(ms).unwrap());
    }

    /// `n` rounds: a tick, then both clocks a round on.
    async fn rounds(&self, n: usize) {
        for _ in 0..n {
            self.pipeline.tick().await.unwrap();
            self.advance(ROUND_MS);
        }
    }

    fn pass_the_key_window(&self) {
        self.advance(KEY_WINDOW_MS_DEFAULT + 60_000);
    }

    /// The idempotency key of every create the simulator received, in order.
    /// A worker that has just started: the same store, the same provider, nothing in memory.
    fn fresh_pipeline(&self) -> Pipeline {
        let api = api_of(self.kind, &self.sim, Setup::Working, CLIENT_TIMEOUT_MS);
        let rail =
            Arc::new(ProviderRail::new(api, self.clock.clone(), ProviderRailConfig::default()));
        let config = PipelineConfig { rebroadcast_after_ms: 1_000, ..PipelineConfig::default() };
        Pipeline::new(self.store.clone(), self.clock.clone(), config)
            .with_standalone_rail(StandaloneLine { rail, assets: vec![self.asset.clone()] })
    }

    fn creates_sent(&self) -> Vec<String> {
        self.sim
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST" && !r.path.starts_with("/_sim"))
            .map(|r| match self.kind {
                ProviderKind::Stripe | ProviderKind::Bridge => {
                    header(&r.headers, "idempotency-key")
                }
                ProviderKind::Coinbase => header(&r.headers, "x-idempotency-key"),
                ProviderKind::Circle => serde_json::from_str::<serde_json::Value>(&r.body).unwrap()
                    ["idempotencyKey"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            })
            .collect()
    }

    async fn held(&self) -> Amount {
        self.engine.balances(&self.merchant).await.unwrap()[0].held
    }

    async fn provider_id(&self, id: &PayoutId) -> String {
        match &self.store.attempts_of(id).await.unwrap().last().unwrap().slot {
            AttemptSlot::Provider { reference: Some(r), .. } => r.as_str().to_owned(),
            other => panic!("no provider id recorded: {other:?}"),
        }
    }

    /// Attempt 1 proven dead, attempt 2 paid, by the one transfer the provider made.
    async fn assert_paid_by_the_second_attempt(&self, id: &PayoutId) {
        let attempts = self.store.attempts_of(id).await.unwrap();
        assert_eq!(
            attempts.iter().map(|a| (a.attempt_no, a.status)).collect::<Vec<_>>(),
            vec![(1, AttemptStatus::Dead), (2, AttemptStatus::Confirmed)]
        );
        assert_eq!(
            (self.sim.created(), self.sim.created_with_reference(&our_reference(id, 2))),
            (1, 1),
            "one transfer, by the second attempt"
        );
    }

    async fn assert_paid_once(&self, id: &PayoutId) {
        assert_eq!(self.status(id).await, PayoutStatus::Paid);
        assert_eq!(
            self.sim.created_with_reference(&our_reference(id, 1)),
            1,
            "one transfer at the provider for the payout"
        );
        let attempts = self.store.attempts_of(id).await.unwrap();
        assert_eq!(attempts.len(), 1);
        assert_eq!(attempts[0].status, AttemptStatus::Confirmed);
        self.provider_id(id).await; // recorded, also when the answer that carried it was lost
        assert_eq!(self.held().await, Amount::ZERO);
        assert!(self.store.audit_ledger().await.unwrap().is_clean());
    }
}

fn header(headers: &[(String, String)], name: &str) -> String {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
        .unwrap_or_default()
}

/// The common path: one create, answered; the provider's states progress to completed; paid once.
async fn pays_once(db: TestDb, kind: ProviderKind) {
    let w = world(db, kind).await;
    let id = w.request("provider-0001", 12_340_000).await;
    w.run_until(&id, PayoutStatus::Paid).await;
    w.assert_paid_once(&id).await;
    assert_eq!(w.creates_sent().len(), 1);
}

mod circle_only {
    use super::*;
    payoutd_testkit::both_stores!(
        a_denied_or_cancelled_circle_transfer_is_proof_and_the_next_attempt_pays_once,
        a_stuck_circle_transfer_is_accelerated_and_paid_once,
        a_refused_cancel_of_a_stuck_circle_transfer_changes_nothing,
        a_circle_lookup_by_reference_reads_only_the_destinations_transfers,
        a_circle_lookup_reads_past_short_pages,
        a_circle_list_that_pages_backwards_proves_no_absence,
        a_circle_lookup_finds_a_transfer_in_a_token_the_wallet_does_not_monitor,
        a_top_up_into_the_circle_wallet_is_not_an_unmatched_transfer,
    );
}

mod bridge_only {
    use super::*;
    payoutd_testkit::both_stores!(
        another_customers_bridge_transfer_is_none_of_this_rails_business,
        a_bridge_transfer_awaiting_funds_opens_an_incident_past_the_wait,
        a_returned_bridge_transfer_is_final_only_once_its_refund_ends,
        a_bridge_transfer_that_delivers_less_than_the_payout_needs_a_person,
        a_bridge_transfer_is_paid_only_once_its_receipt_shows_what_arrived,
        a_bridge_wallet_holding_usdb_that_requires_initiation_pays_less_a_tolerated_gas_fee,
    );
}

mod stripe_only {
    use super::*;
    payoutd_testkit::both_stores!(
        a_reversed_stripe_transfer_needs_a_person_not_a_second_payment,
        a_stripe_transfer_reversed_in_part_needs_a_person_not_a_second_payment,
        every_stripe_request_pins_the_api_version_its_shapes_follow,
        a_stripe_payout_to_an_account_the_platform_lacks_fails_cleanly,
    );
}

mod unknown_errors {
    use super::*;
    async fn circle(db: TestDb) {
        an_unknown_error_on_a_first_create_proves_nothing(db, ProviderKind::Circle).await;
    }
    async fn coinbase(db: TestDb) {
        an_unknown_error_on_a_first_create_proves_nothing(db, ProviderKind::Coinbase).await;
    }
    async fn stripe(db: TestDb) {
        an_unknown_error_on_a_first_create_proves_nothing(db, ProviderKind::Stripe).await;
    }
    payoutd_testkit::both_stores!(circle, coinbase, stripe);
}

mod narrowed_lookups {
    use super::*;
    async fn coinbase(db: TestDb) {
        a_narrowed_lookup_that_finds_nothing_is_no_absence(db, ProviderKind::Coinbase).await;
    }
    async fn circle(db: TestDb) {
        a_narrowed_lookup_that_finds_nothing_is_no_absence(db, ProviderKind::Circle).await;
    }
    payoutd_testkit::both_stores!(coinbase, circle);
}

mod unknown_accounts {
    use super::*;
    async fn coinbase(db: TestDb) {
        an_account_the_provider_does_not_hold_is_refused_at_once(db, ProviderKind::Coinbase).await;
    }
    async fn circle(db: TestDb) {
        an_account_the_provider_does_not_hold_is_refused_at_once(db, ProviderKind::Circle).await;
    }
    payoutd_testkit::both_stores!(coinbase, circle);
}

mod resend_horizon {
    use super::*;
    async fn kept_by_the_attempt(db: TestDb) {
        an_attempt_keeps_the_resend_horizon_it_was_made_with(db).await;
    }
    async fn coinbase(db: TestDb) {
        past_the_resend_horizon_creates_stop_and_lookups_read_the_window(
            db,
            ProviderKind::Coinbase,
        )
        .await;
    }
    async fn circle(db: TestDb) {
        past_the_resend_horizon_creates_stop_and_lookups_read_the_window(db, ProviderKind::Circle)
            .await;
    }
    payoutd_testkit::both_stores!(coinbase, circle, kept_by_the_attempt);
}

mod saved_errors {
    use super::*;
    async fn stripe(db: TestDb) {
        a_saved_server_error_is_decided_by_lookup_not_by_the_key_window(db, ProviderKind::Stripe)
            .await;
    }
    async fn coinbase(db: TestDb) {
        a_saved_server_error_is_decided_by_lookup_not_by_the_key_window(db, ProviderKind::Coinbase)
            .await;
    }
    async fn stripe_fresh_worker(db: TestDb) {
        a_saved_server_error_one_worker_met_is_known_to_every_worker(db, ProviderKind::Stripe)
            .await;
    }
    async fn coinbase_fresh_worker(db: TestDb) {
        a_saved_server_error_one_worker_met_is_known_to_every_worker(db, ProviderKind::Coinbase)
            .await;
    }
    payoutd_testkit::both_stores!(stripe, coinbase, stripe_fresh_worker, coinbase_fresh_worker);
}

/// Every scenario that applies to one provider, on both stores.
macro_rules! provider_tests {
    ($module:ident, $kind:expr, [$($scenario:ident),* $(,)?]) => {
        mod $module {
            use super::*;
            $(
                async fn $scenario(db: TestDb) {
                    super::$scenario(db, $kind).await
                }
            )*
            payoutd_testkit::both_stores!($($scenario),*);
        }
    };
}

provider_tests!(
    stripe,
    ProviderKind::Stripe,
    [
        pays_once,
        with_each_worker_s_own_clock_the_key_window_splits,
        workers_on_the_database_s_clock_never_split_the_key_window,
        destination_caps_hold_at_signing_under_two_workers,
        account_caps_hold_at_signing_under_two_workers,
        a_call_that_timed_out_is_retried_with_the_same_stored_key,
        retried_past_the_window_is_resolved_by_lookup_not_created_again,
        an_ambiguous_5xx_resolves_by_lookup,
        a_reset_after_the_create_resolves_by_lookup,
        past_the_window_with_nothing_created_the_next_attempt_pays,
        a_refusal_that_created_nothing_fails_cleanly,
        an_account_short_of_funds_is_refused_at_once_and_the_payout_fails_cleanly,
        a_refused_retry_after_an_ambiguous_create_is_not_proof,
        a_create_at_the_end_of_the_window_cannot_race_the_proof_of_death,
        a_dead_attempt_that_lands_later_opens_a_duplicate_transfer_incident,
        an_attempt_unresolved_past_its_age_opens_one_incident,
        a_client_with_a_fresh_key_per_retry_creates_two_transfers_at_the_simulator,
        a_transfer_payoutd_did_not_make_opens_an_incident,
    ]
);

provider_tests!(
    coinbase,
    ProviderKind::Coinbase,
    [
        pays_once,
        with_each_worker_s_own_clock_the_key_window_splits,
        workers_on_the_database_s_clock_never_split_the_key_window,
        a_failed_transfer_beside_another_carrying_our_reference_is_no_proof_of_death,
        a_lookup_that_does_not_list_the_failed_transfer_yet_proves_no_death,
        a_call_that_timed_out_is_retried_with_the_same_stored_key,
        retried_past_the_window_is_resolved_by_lookup_not_created_again,
        an_ambiguous_5xx_resolves_by_lookup,
        a_reset_after_the_create_resolves_by_lookup,
        past_the_window_with_nothing_created_the_next_attempt_pays,
        a_refusal_that_created_nothing_fails_cleanly,
        an_account_short_of_funds_is_refused_at_once_and_the_payout_fails_cleanly,
        a_refused_retry_after_an_ambiguous_create_is_not_proof,
        a_create_at_the_end_of_the_window_cannot_race_the_proof_of_death,
        a_dead_attempt_that_lands_later_opens_a_duplicate_transfer_incident,
        an_attempt_unresolved_past_its_age_opens_one_incident,
        a_provider_reported_failure_starts_the_next_attempt,
        a_client_with_a_fresh_key_per_retry_creates_two_transfers_at_the_simulator,
        a_transfer_payoutd_did_not_make_opens_an_incident,
    ]
);

mod coinbase_far_behind {
    use super::*;
    payoutd_testkit::both_stores!(
        a_coinbase_account_far_behind_is_still_reconciled,
        a_coinbase_lookup_by_reference_reads_only_the_destinations_transfers,
    );
}

mod coinbase_only {
    use super::*;
    payoutd_testkit::both_stores!(
        a_coinbase_payout_at_the_travel_rule_threshold_carries_its_parties,
        a_coinbase_payout_needing_the_travel_rule_without_a_beneficiary_fails_before_any_call,
        a_coinbase_payout_signed_with_an_es256_key_is_paid_once,
    );
}

provider_tests!(
    bridge,
    ProviderKind::Bridge,
    [
        pays_once,
        a_call_that_timed_out_is_retried_with_the_same_stored_key,
        retried_past_the_window_is_resolved_by_lookup_not_created_again,
        an_ambiguous_5xx_resolves_by_lookup,
        a_reset_after_the_create_resolves_by_lookup,
        past_the_window_with_nothing_created_the_next_attempt_pays,
        a_refusal_that_created_nothing_fails_cleanly,
        an_account_short_of_funds_is_refused_at_once_and_the_payout_fails_cleanly,
        a_refused_retry_after_an_ambiguous_create_is_not_proof,
        a_create_at_the_end_of_the_window_cannot_race_the_proof_of_death,
        a_dead_attempt_that_lands_later_opens_a_duplicate_transfer_incident,
        an_attempt_unresolved_past_its_age_opens_one_incident,
        an_unrecognised_provider_state_needs_a_person,
        a_client_with_a_fresh_key_per_retry_creates_two_transfers_at_the_simulator,
        a_transfer_payoutd_did_not_make_opens_an_incident,
    ]
);

provider_tests!(
    circle,
    ProviderKind::Circle,
    [
        pays_once,
        a_failed_transfer_beside_another_carrying_our_reference_is_no_proof_of_death,
        a_lookup_that_does_not_list_the_failed_transfer_yet_proves_no_death,
        a_call_that_timed_out_is_retried_with_the_same_stored_key,
        retried_past_the_window_is_resolved_by_lookup_not_created_again,
        an_ambiguous_5xx_resolves_by_lookup,
        a_reset_after_the_create_resolves_by_lookup,
        past_the_window_with_nothing_created_the_next_attempt_pays,
        a_refusal_that_created_nothing_fails_cleanly,
        an_account_short_of_funds_is_refused_at_once_and_the_payout_fails_cleanly,
        a_refused_retry_after_an_ambiguous_create_is_not_proof,
        a_create_at_the_end_of_the_window_cannot_race_the_proof_of_death,
        a_dead_attempt_that_lands_later_opens_a_duplicate_transfer_incident,
        an_attempt_unresolved_past_its_age_opens_one_incident,
        a_provider_reported_failure_starts_the_next_attempt,
        a_client_with_a_fresh_key_per_retry_creates_two_transfers_at_the_simulator,
        a_transfer_payoutd_did_not_make_opens_an_incident,
    ]
);
