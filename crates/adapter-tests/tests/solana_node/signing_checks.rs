//! What signing refuses or holds on Solana: destinations that would swallow a payout, and the caps under two workers.

use super::*;

/// Destinations that would swallow a payout or make it fail on chain are refused before anything
/// is signed: the payout fails with no attempt and its hold is released. An SPL payout to a token
/// account (the hot wallet's own, pasted instead of a wallet: a token account created for it as
/// "owner" could never be spent) and a SOL payout too small to open a new account are refused; the
/// same small amount to an account that exists is paid. (Before, the first paid into an account
/// nobody can sign for, and the second landed as an on-chain failure waiting for a person.)
async fn destinations_that_would_swallow_or_fail_a_payout_are_refused_before_signing(db: TestDb) {
    let w = world(db).await;
    let token_account =
        payoutd_rail_solana::associated_token_account(&w.rail.hot_wallet_address(), &w.usd_mint);
    let to_token_account = w.request("usd-0040", USD, 1_000_000, &token_account).await;
    let fresh = Pubkey::new_unique();
    let below_rent = w.request("sol-0040", SOL, SMALL_LAMPORTS, &fresh).await;
    let existing = Pubkey::new_unique();
    airdrop(&w.direct, &existing, 1_000_000_000).await;
    let to_existing = w.request("sol-0041", SOL, SMALL_LAMPORTS, &existing).await;
    w.run_until(&[&to_token_account, &below_rent], PayoutStatus::Failed).await;
    for id in [&to_token_account, &below_rent] {
        assert!(w.store.attempts_of(id).await.unwrap().is_empty(), "nothing was signed for {id}");
    }
    w.run_until_paid(&[&to_existing]).await;
    assert_eq!(w.lamports(&existing).await, 1_000_000_000 + SMALL_LAMPORTS);
    assert_eq!(w.lamports(&fresh).await, 0);
    let held = w
        .engine
        .balances(&w.merchant)
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.held)
        .fold(Amount::ZERO, |a, b| a.checked_add(b).unwrap());
    assert_eq!(held, Amount::ZERO, "the refused payouts' holds are released");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// The caps (I8) hold at signing on Solana, under two workers signing at once: of four approved
/// payouts of 0.03 to 0.06 SOL, with an hourly cap of 0.1 SOL (per destination, or per hot
/// wallet), exactly two get an attempt and two wait for a person; a person's approval lets one
/// through past the cap.
async fn destination_caps_hold_at_signing_on_solana_under_two_workers(db: TestDb) {
    caps_hold_at_signing_under_two_workers(
        db,
        payoutd_engine::Caps {
            per_destination_per_hour: Amount::from_u128(CAP_LAMPORTS),
            per_wallet_per_hour: Amount::from_u128(1_000 * CAP_LAMPORTS),
        },
    )
    .await;
}

async fn wallet_caps_hold_at_signing_on_solana_under_two_workers(db: TestDb) {
    caps_hold_at_signing_under_two_workers(
        db,
        payoutd_engine::Caps {
            per_destination_per_hour: Amount::from_u128(1_000 * CAP_LAMPORTS),
            per_wallet_per_hour: Amount::from_u128(CAP_LAMPORTS),
        },
    )
    .await;
}

/// An hourly cap of 0.1 SOL in the caps tests.
const CAP_LAMPORTS: u128 = 100_000_000;

async fn caps_hold_at_signing_under_two_workers(db: TestDb, caps: payoutd_engine::Caps) {
    let w = world(db).await;
    let config = PipelineConfig {
        rebroadcast_after_ms: 300,
        balance_check_interval_ms: 0,
        caps: [(payoutd_domain::AssetCode::parse(SOL).unwrap().0, caps)].into(),
        ..PipelineConfig::default()
    };
    let ((_, first), (_, second)) = (w.worker(config.clone()), w.worker(config));
    let to = Pubkey::new_unique();
    let mut ids = Vec::new();
    // Any three of them break the cap: whatever order the two workers take them in, two fit.
    for tenths in 3..=6u64 {
        ids.push(w.request(&format!("sol-capped-{tenths}"), SOL, tenths * 10_000_000, &to).await);
    }
    let (a, b) = tokio::join!(first.tick(), second.tick());
    a.unwrap();
    b.unwrap();
    let mut statuses = Vec::new();
    for id in &ids {
        statuses.push(w.status(id).await);
    }
    let held: Vec<&PayoutId> = ids
        .iter()
        .zip(&statuses)
        .filter(|(_, s)| **s == PayoutStatus::HeldForReview)
        .map(|(id, _)| id)
        .collect();
    assert_eq!(held.len(), 2, "{statuses:?}");
    let mut signed = 0;
    for id in &ids {
        signed += w.store.attempts_of(id).await.unwrap().len();
    }
    assert_eq!(signed, 2, "two transfers fit under the cap");
    first.approve(held[0]).await.unwrap();
    let paid: Vec<&PayoutId> = ids.iter().filter(|id| *id != held[1]).collect();
    let deadline = Instant::now() + Duration::from_millis(PAID_WITHIN_MS);
    loop {
        first.tick().await.unwrap();
        let mut done = true;
        for id in &paid {
            done &= w.status(id).await == PayoutStatus::Paid;
        }
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the payouts under the cap and the approved one were not paid"
        );
        tokio::time::sleep(Duration::from_millis(TICK_INTERVAL_MS)).await;
    }
    assert_eq!(w.status(held[1]).await, PayoutStatus::HeldForReview, "still waiting for a person");
    let expected: u64 = ids
        .iter()
        .zip(3..=6u64)
        .filter(|(id, _)| *id != held[1])
        .map(|(_, tenths)| tenths * 10_000_000)
        .sum();
    assert_eq!(
        w.lamports(&to).await,
        expected,
        "the two under the cap and the one a person approved, once each"
    );
}

payoutd_testkit::both_stores!(
    destinations_that_would_swallow_or_fail_a_payout_are_refused_before_signing,
    destination_caps_hold_at_signing_on_solana_under_two_workers,
    wallet_caps_hold_at_signing_on_solana_under_two_workers,
);
