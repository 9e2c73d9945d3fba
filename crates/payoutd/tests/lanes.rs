//! The worker's two lanes against a real anvil, on PostgreSQL and SQLite: what is on the chain settles while signing waits.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::{ETH, RECIPIENTS, World};
use async_trait::async_trait;
use payoutd_domain::{Asset, ChainReference, EvmAddress, FeeBid, HotWallet, PayoutStatus, TxRef};
use payoutd_engine::PipelineConfig;
use payoutd_engine::evm::{
    EvmRail, ExpectedTransfer, FinalView, OutgoingScan, Receipt, SendOutcome, SignError,
    SignedBytes, WalletAtBlock,
};
use payoutd_engine::rail::ReadError;
use payoutd_rail_evm::{EvmNode, Finality};
use payoutd_testkit::{AnvilOptions, TestDb};

/// Waiting for a state the lanes should reach in well under a second; past this it is a failure.
const REACHED_WITHIN_SECS: u64 = 30;
const POLL_MS: u64 = 25;

/// The node client, except that every fee quote waits for the gate: a signing pass (which quotes
/// its fees first, before any database transaction) then waits as long as the test wants, as one
/// waiting on a slow node or a remote signer would.
struct HeldQuotes {
    inner: EvmNode,
    gate: Arc<tokio::sync::Semaphore>,
    waiting: Arc<AtomicUsize>,
}

#[async_trait]
impl EvmRail for HeldQuotes {
    fn chain_id(&self) -> u64 {
        self.inner.chain_id()
    }
    fn max_fee_per_gas_cap(&self) -> u128 {
        self.inner.max_fee_per_gas_cap()
    }
    async fn sign_transfer(
        &self,
        wallet: &HotWallet,
        transfer: &ExpectedTransfer,
        reference: &ChainReference,
        nonce: u64,
        fees: FeeBid,
    ) -> Result<SignedBytes, SignError> {
        self.inner.sign_transfer(wallet, transfer, reference, nonce, fees).await
    }
    async fn sign_cancel(
        &self,
        wallet: &HotWallet,
        nonce: u64,
        fees: FeeBid,
    ) -> Result<SignedBytes, SignError> {
        self.inner.sign_cancel(wallet, nonce, fees).await
    }
    async fn fee_quote(&self) -> Result<FeeBid, ReadError> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        drop(self.gate.acquire().await.expect("the gate stays open once opened"));
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        self.inner.fee_quote().await
    }
    async fn send(&self, raw: &[u8]) -> SendOutcome {
        self.inner.send(raw).await
    }
    async fn send_batch(&self, raws: &[&[u8]]) -> Vec<SendOutcome> {
        self.inner.send_batch(raws).await
    }
    async fn receipt(
        &self,
        hash: &TxRef,
        expected: &ExpectedTransfer,
    ) -> Result<Option<Receipt>, ReadError> {
        self.inner.receipt(hash, expected).await
    }
    async fn receipts(
        &self,
        queries: &[(TxRef, ExpectedTransfer)],
    ) -> Vec<Result<Option<Receipt>, ReadError>> {
        self.inner.receipts(queries).await
    }
    async fn mined_nonce(&self, address: &EvmAddress) -> Result<u64, ReadError> {
        self.inner.mined_nonce(address).await
    }
    async fn pending_nonce(&self, address: &EvmAddress) -> Result<u64, ReadError> {
        self.inner.pending_nonce(address).await
    }
    async fn final_nonce(&self, address: &EvmAddress) -> Result<u64, ReadError> {
        self.inner.final_nonce(address).await
    }
    async fn final_view(
        &self,
        address: &EvmAddress,
        queries: &[(TxRef, ExpectedTransfer)],
    ) -> Result<FinalView, ReadError> {
        self.inner.final_view(address, queries).await
    }
    async fn final_block(&self) -> Result<Option<u64>, ReadError> {
        self.inner.final_block().await
    }
    async fn outgoing(
        &self,
        senders: &[EvmAddress],
        from_block: u64,
        to_block: u64,
    ) -> Result<OutgoingScan, ReadError> {
        self.inner.outgoing(senders, from_block, to_block).await
    }
    async fn wallet_at(
        &self,
        address: &EvmAddress,
        block: u64,
        assets: &[Asset],
    ) -> Result<WalletAtBlock, ReadError> {
        self.inner.wallet_at(address, block, assets).await
    }
}

/// Polls `reached` until it holds; panics with `what` past `REACHED_WITHIN_SECS`.
async fn wait_until(what: &str, mut reached: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(REACHED_WITHIN_SECS);
    while !reached().await {
        assert!(Instant::now() < deadline, "not within {REACHED_WITHIN_SECS} s: {what}");
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

async fn a_sent_payout_is_paid_while_the_signing_lane_waits(db: TestDb) {
    let config = PipelineConfig {
        rebroadcast_after_ms: 0,
        replace_after_ms: 3_600_000,
        idle_sleep_ms: 20,
        ..PipelineConfig::default()
    };
    let w = World::new(db, AnvilOptions::default(), config).await;
    // The first payout is signed and sent (anvil mines it at once), not yet settled.
    let sent = w.request("lanes-0001", ETH, 1_000, RECIPIENTS[0]).await;
    let first = w.pipeline().await;
    first.policy_pass().await.unwrap();
    assert_eq!(first.sign_pass().await.unwrap().signed, 1);
    assert_eq!(w.payout(&sent).await.status, PayoutStatus::Processing);
    let waiting_payout = w.request("lanes-0002", ETH, 2_000, RECIPIENTS[1]).await;

    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let waiting = Arc::new(AtomicUsize::new(0));
    let rail = HeldQuotes {
        inner: w.node(w.anvil.url(), Finality::Depth(1)),
        gate: gate.clone(),
        waiting: waiting.clone(),
    };
    let worker = Arc::new(w.pipeline_on(Arc::new(rail)).await);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn({
        let worker = worker.clone();
        async move {
            worker
                .run(async {
                    let _ = stopped.await;
                })
                .await
        }
    });

    wait_until("the signing lane waits on its fee quote", async || {
        waiting.load(Ordering::SeqCst) == 1
    })
    .await;
    wait_until("the sent payout is paid while signing waits", async || {
        w.payout(&sent).await.status == PayoutStatus::Paid
    })
    .await;
    assert_eq!(
        waiting.load(Ordering::SeqCst),
        1,
        "signing was still waiting when the sent payout was paid"
    );
    assert_eq!(w.payout(&waiting_payout).await.status, PayoutStatus::Approved);

    gate.add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
    wait_until("the waiting payout is paid once signing goes on", async || {
        w.payout(&waiting_payout).await.status == PayoutStatus::Paid
    })
    .await;
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(REACHED_WITHIN_SECS), running)
        .await
        .expect("run ends at shutdown")
        .unwrap();

    assert_eq!(w.transfers_to(ETH, RECIPIENTS[0]).await, 1);
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[1]).await, 1);
    for p in [&sent, &waiting_payout] {
        assert_eq!(w.store.attempts_of(&p.id).await.unwrap().len(), 1);
    }
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

payoutd_testkit::both_stores!(a_sent_payout_is_paid_while_the_signing_lane_waits);
