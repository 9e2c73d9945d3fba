//! The pipeline benchmark's breakdown mode: a rail that times every call it passes on to the node.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use payoutd_domain::{Asset, ChainReference, EvmAddress, FeeBid, HotWallet, TxRef};
use payoutd_engine::evm::{
    EvmRail, ExpectedTransfer, FinalView, OutgoingScan, Receipt, SendOutcome, SignError,
    SignedBytes, WalletAtBlock,
};
use payoutd_engine::rail::ReadError;
use payoutd_rail_evm::EvmNode;

#[derive(Default)]
struct Timer {
    calls: AtomicU64,
    nanos: AtomicU64,
}

impl Timer {
    fn add(&self, since: Instant) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.nanos.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    fn take(&self) -> (u64, Duration) {
        (
            self.calls.swap(0, Ordering::Relaxed),
            Duration::from_nanos(self.nanos.swap(0, Ordering::Relaxed)),
        )
    }
}

#[derive(Default)]
pub(crate) struct RailTimes {
    fee_quote: Timer,
    sign: Timer,
    send: Timer,
    send_batch: Timer,
    receipt: Timer,
    mined_nonce: Timer,
    pending_nonce: Timer,
    final_block: Timer,
    outgoing: Timer,
}

/// Delegates to `EvmNode`, adding two clock reads per call (tens of nanoseconds beside a round trip).
pub(crate) struct TimedRail {
    pub(crate) inner: EvmNode,
    pub(crate) times: Arc<RailTimes>,
}

#[async_trait]
impl EvmRail for TimedRail {
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
        let t = Instant::now();
        let r = self.inner.sign_transfer(wallet, transfer, reference, nonce, fees).await;
        self.times.sign.add(t);
        r
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
        let t = Instant::now();
        let r = self.inner.fee_quote().await;
        self.times.fee_quote.add(t);
        r
    }
    async fn send(&self, raw: &[u8]) -> SendOutcome {
        let t = Instant::now();
        let r = self.inner.send(raw).await;
        self.times.send.add(t);
        r
    }
    async fn send_batch(&self, raws: &[&[u8]]) -> Vec<SendOutcome> {
        let t = Instant::now();
        let r = self.inner.send_batch(raws).await;
        self.times.send_batch.add(t);
        r
    }
    async fn receipt(
        &self,
        hash: &TxRef,
        expected: &ExpectedTransfer,
    ) -> Result<Option<Receipt>, ReadError> {
        let t = Instant::now();
        let r = self.inner.receipt(hash, expected).await;
        self.times.receipt.add(t);
        r
    }
    async fn receipts(
        &self,
        queries: &[(TxRef, ExpectedTransfer)],
    ) -> Vec<Result<Option<Receipt>, ReadError>> {
        let t = Instant::now();
        let r = self.inner.receipts(queries).await;
        self.times.receipt.add(t);
        r
    }
    async fn mined_nonce(&self, address: &EvmAddress) -> Result<u64, ReadError> {
        let t = Instant::now();
        let r = self.inner.mined_nonce(address).await;
        self.times.mined_nonce.add(t);
        r
    }
    async fn pending_nonce(&self, address: &EvmAddress) -> Result<u64, ReadError> {
        let t = Instant::now();
        let r = self.inner.pending_nonce(address).await;
        self.times.pending_nonce.add(t);
        r
    }
    async fn final_block(&self) -> Result<Option<u64>, ReadError> {
        let t = Instant::now();
        let r = self.inner.final_block().await;
        self.times.final_block.add(t);
        r
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
    async fn outgoing(
        &self,
        senders: &[EvmAddress],
        from_block: u64,
        to_block: u64,
    ) -> Result<OutgoingScan, ReadError> {
        let t = Instant::now();
        let r = self.inner.outgoing(senders, from_block, to_block).await;
        self.times.outgoing.add(t);
        r
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

pub(crate) fn rail_breakdown(times: &RailTimes, per: usize) -> String {
    let mut out = Vec::new();
    for (name, timer) in [
        ("fee_quote", &times.fee_quote),
        ("sign", &times.sign),
        ("send", &times.send),
        ("send_batch", &times.send_batch),
        ("receipt", &times.receipt),
        ("mined_nonce", &times.mined_nonce),
        ("pending_nonce", &times.pending_nonce),
        ("final_block", &times.final_block),
        ("outgoing", &times.outgoing),
    ] {
        let (calls, total) = timer.take();
        if calls > 0 {
            out.push(format!(
                "{name}: {calls} calls, {:.0} ms total, {:.0} us/call, {:.0} us/payout",
                total.as_secs_f64() * 1e3,
                total.as_secs_f64() * 1e6 / calls as f64,
                total.as_secs_f64() * 1e6 / per as f64
            ));
        }
    }
    out.join("\n      ")
}

pub(crate) fn times_reset(times: &RailTimes) {
    for t in [
        &times.fee_quote,
        &times.sign,
        &times.send,
        &times.receipt,
        &times.mined_nonce,
        &times.pending_nonce,
        &times.final_block,
    ] {
        t.take();
    }
}
