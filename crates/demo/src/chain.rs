//! What the node says happened: every transaction mined from the hot wallet, classified, and matched against the payouts (never against payoutd's own records).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use payoutd_domain::{Amount, EvmAddress};
use payoutd_rail_evm::{
    ERC20_TRANSFER_GAS_LIMIT_DEFAULT, EvmRpc, SigningKey, TxParams, sign_erc20_transfer,
};
use payoutd_testkit::{
    ANVIL_CHAIN_ID, Anvil, AnvilOptions, RECEIPT_WAIT_TIMEOUT_MS, anvil_bin, wait_for_receipt,
};
use serde_json::json;

/// Bound on waiting for the hot wallet's pool entries to be mined before counting.
pub const POOL_DRAIN_TIMEOUT_SECS: u64 = 20;
const POOL_POLL_MS: u64 = 250;

/// Which asset a transfer moved, as the demo names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Coin {
    Eth,
    Usdc,
}

/// One payout as the chain should see it: this much of this coin to this address.
pub type Signature = (Coin, EvmAddress, Amount);

/// Transactions from the hot wallet in the scanned blocks.
#[derive(Debug, Default)]
pub struct Scan {
    pub first_block: u64,
    pub last_block: u64,
    /// Successful value transfers (native value > 0, or an ERC-20 `transfer` call on the token).
    pub transfers: Vec<Signature>,
    /// Mined but reverted: the nonce is used, no money moved.
    pub reverted: usize,
    /// Anything else: the token deployment, zero-value cancels.
    pub other: usize,
}

/// Waits until the node has mined everything the wallet sent (pending nonce == mined nonce,
/// and nothing of the wallet's left in `txpool_content`, queued behind a gap included), so a
/// late duplicate still in the pool is counted too. `false` when the bound passed.
pub async fn wait_pool_drained(rpc: &EvmRpc, wallet: EvmAddress) -> anyhow::Result<bool> {
    let deadline = Instant::now() + Duration::from_secs(POOL_DRAIN_TIMEOUT_SECS);
    loop {
        let pending: String =
            rpc.call("eth_getTransactionCount", json!([wallet.to_string(), "pending"])).await?;
        let pending =
            u64::from_str_radix(pending.trim_start_matches("0x"), 16).context("pending nonce")?;
        // A node without txpool_content (not anvil): the nonces alone decide.
        let pooled = pool_nonces(rpc, wallet).await.map_or(0, |(p, q)| p.len() + q.len());
        if pending <= rpc.mined_nonce(wallet).await? && pooled == 0 {
            return Ok(true);
        }
        if Instant::now() > deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(POOL_POLL_MS)).await;
    }
}

/// The nonces of `wallet`'s transactions in the node's pool: (pending, queued), from
/// `txpool_content` (anvil, geth). `None` when the node does not serve it.
pub async fn pool_nonces(rpc: &EvmRpc, wallet: EvmAddress) -> Option<(Vec<u64>, Vec<u64>)> {
    let content: serde_json::Value = rpc.call("txpool_content", json!([])).await.ok()?;
    let nonces = |section: &str| -> Vec<u64> {
        let entry = content[section].as_object().and_then(|m| {
            m.iter().find(|(k, _)| k.eq_ignore_ascii_case(&wallet.to_string())).map(|(_, v)| v)
        });
        let mut list: Vec<u64> = entry
            .and_then(|v| v.as_object())
            .map(|m| m.keys().filter_map(|k| k.parse().ok()).collect())
            .unwrap_or_default();
        list.sort_unstable();
        list
    };
    Some((nonces("pending"), nonces("queued")))
}

/// Reads every block from `first_block` to the head, in the bounded pages the RPC client serves.
pub async fn scan(
    rpc: &EvmRpc,
    wallet: EvmAddress,
    token: EvmAddress,
    first_block: u64,
) -> anyhow::Result<Scan> {
    let head = rpc.block_number().await?;
    let mut out = Scan { first_block, last_block: head, ..Scan::default() };
    let mut from = first_block;
    while from <= head {
        let page = rpc.outgoing_transactions(wallet, from, head).await?;
        for tx in page.transactions {
            if !tx.status_ok {
                out.reverted += 1;
                continue;
            }
            match (tx.to, tx.erc20_transfer_call()) {
                (Some(to), Some((recipient, amount))) if to == token => {
                    out.transfers.push((Coin::Usdc, recipient, amount))
                }
                (Some(to), _) if !tx.value.is_zero() => {
                    out.transfers.push((Coin::Eth, to, tx.value))
                }
                _ => out.other += 1,
            }
        }
        anyhow::ensure!(page.next_block > from, "the scan did not advance past block {from}");
        from = page.next_block;
    }
    Ok(out)
}

impl Scan {
    /// Adds another wallet's scan of the same blocks.
    pub fn absorb(&mut self, other: Scan) {
        self.last_block = self.last_block.max(other.last_block);
        self.transfers.extend(other.transfers);
        self.reverted += other.reverted;
        self.other += other.other;
    }
}

/// Sends `amount` of `token` from `key`'s address to `to` and waits for it to be mined
/// (funding a hot wallet before payoutd starts; not a payout).
pub async fn fund_token(
    rpc: &EvmRpc,
    key: &SigningKey,
    token: EvmAddress,
    to: EvmAddress,
    amount: Amount,
) -> anyhow::Result<()> {
    let nonce: String =
        rpc.call("eth_getTransactionCount", json!([key.address().to_string(), "pending"])).await?;
    let params = TxParams {
        chain_id: rpc.chain_id().await?,
        nonce: u64::from_str_radix(nonce.trim_start_matches("0x"), 16).context("pending nonce")?,
        fees: rpc.suggest_fees().await?,
        gas_limit: ERC20_TRANSFER_GAS_LIMIT_DEFAULT,
    };
    let signed = sign_erc20_transfer(key, &params, token, to, amount)?;
    rpc.send_raw(&signed.raw).await?;
    let receipt = wait_for_receipt(rpc, signed.hash, RECEIPT_WAIT_TIMEOUT_MS).await?;
    anyhow::ensure!(receipt.status_ok, "token funding of {to} reverted");
    Ok(())
}

/// The node's pool as it concerns `wallet`, in one line: the mined nonce, and the nonces anvil
/// holds as `pending` (executable) and `queued` (waiting for a gap) in `txpool_content`.
pub async fn pool_line(rpc: &EvmRpc, wallet: EvmAddress) -> String {
    let mined = match rpc.mined_nonce(wallet).await {
        Ok(n) => n.to_string(),
        Err(e) => format!("unreadable ({e})"),
    };
    let describe = |list: &[u64]| match (list.first(), list.last()) {
        (Some(lo), Some(hi)) => format!("{} in {lo}..={hi}", list.len()),
        _ => "none".to_owned(),
    };
    match pool_nonces(rpc, wallet).await {
        Some((pending, queued)) => {
            format!(
                "{wallet}: mined nonce {mined}; pool pending {}, queued {}",
                describe(&pending),
                describe(&queued)
            )
        }
        None => format!("{wallet}: mined nonce {mined}; pool unreadable"),
    }
}

/// The chain against the payouts.
#[derive(Debug, Default)]
pub struct Reconciliation {
    pub transfers_on_chain: usize,
    /// Transfers beyond one per payout with that coin, destination and amount.
    pub extra_for_a_payout: usize,
    /// Transfers that match no payout that could pay.
    pub matching_no_payout: usize,
    /// Payouts payoutd calls paid with no transfer on chain (money recorded as gone but not sent).
    pub paid_without_transfer: usize,
}

impl Reconciliation {
    pub fn duplicates(&self) -> usize {
        self.extra_for_a_payout + self.matching_no_payout
    }
}

/// `may_pay`: one entry per payout that may legitimately move money (not canceled or
/// rejected); `paid`: those payoutd reports paid. Both are multisets on purpose: two
/// distinct business events may pay the same amount to the same address.
pub fn reconcile(scan: &Scan, may_pay: &[Signature], paid: &[Signature]) -> Reconciliation {
    let count = |items: &[Signature]| {
        let mut m: HashMap<Signature, usize> = HashMap::new();
        for s in items {
            *m.entry(*s).or_default() += 1;
        }
        m
    };
    let landed = count(&scan.transfers);
    let allowed = count(may_pay);
    let mut r =
        Reconciliation { transfers_on_chain: scan.transfers.len(), ..Reconciliation::default() };
    for (signature, &n) in &landed {
        match allowed.get(signature) {
            Some(&a) => r.extra_for_a_payout += n.saturating_sub(a),
            None => r.matching_no_payout += n,
        }
    }
    for (signature, &n) in &count(paid) {
        r.paid_without_transfer += n.saturating_sub(landed.get(signature).copied().unwrap_or(0));
    }
    r
}

/// How many of `released` (payouts payoutd gave up on: failed, canceled, rejected, their hold
/// released) have a transfer on chain anyway: money gone that the ledger says is still there.
/// A multiset match, like [`reconcile`].
pub fn landed_though_released(scan: &Scan, released: &[Signature]) -> usize {
    let mut landed: HashMap<Signature, usize> = HashMap::new();
    for s in &scan.transfers {
        *landed.entry(*s).or_default() += 1;
    }
    released
        .iter()
        .filter(|s| match landed.get_mut(*s) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        })
        .count()
}

/// An anvil started with `options` (from the tools `scripts/install-tools` installs), with a client
/// that has checked it is the chain the demo's, the chaos run's and the benchmarks' assets are on.
pub async fn start_anvil(options: AnvilOptions) -> anyhow::Result<(Anvil, EvmRpc)> {
    ensure!(
        anvil_bin().is_file(),
        "anvil not found at {}: run scripts/install-tools",
        anvil_bin().display()
    );
    let anvil = tokio::task::spawn_blocking(move || Anvil::start(options)).await?;
    let rpc = EvmRpc::new(anvil.url()).context("node URL")?;
    let chain_id = rpc.chain_id().await.context("cannot reach anvil")?;
    ensure!(chain_id == ANVIL_CHAIN_ID, "anvil is chain {chain_id}, expected {ANVIL_CHAIN_ID}");
    Ok((anvil, rpc))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(coin: Coin, to: u8, amount: u128) -> Signature {
        let mut bytes = [0u8; 20];
        bytes[19] = to;
        (coin, EvmAddress::from_bytes(bytes), Amount::from_u128(amount))
    }

    fn scan_of(transfers: Vec<Signature>) -> Scan {
        Scan { transfers, ..Scan::default() }
    }

    #[test]
    fn one_transfer_per_payout_is_clean() {
        let payouts = [sig(Coin::Eth, 1, 10), sig(Coin::Usdc, 2, 20)];
        let r = reconcile(&scan_of(payouts.to_vec()), &payouts, &payouts);
        assert_eq!((r.transfers_on_chain, r.duplicates(), r.paid_without_transfer), (2, 0, 0));
    }

    #[test]
    fn a_second_transfer_and_a_stray_one_are_both_duplicates() {
        let payouts = [sig(Coin::Eth, 1, 10), sig(Coin::Usdc, 2, 20)];
        // Paid twice; and a transfer of the right amount in the wrong coin matches nothing.
        let landed = vec![payouts[0], payouts[0], payouts[1], sig(Coin::Eth, 2, 20)];
        let r = reconcile(&scan_of(landed), &payouts, &payouts);
        assert_eq!((r.extra_for_a_payout, r.matching_no_payout, r.duplicates()), (1, 1, 2));
    }

    #[test]
    fn two_business_events_with_the_same_signature_may_both_land() {
        let payouts = [sig(Coin::Eth, 1, 10), sig(Coin::Eth, 1, 10)];
        let r = reconcile(&scan_of(payouts.to_vec()), &payouts, &payouts);
        assert_eq!(r.duplicates(), 0);
        let r = reconcile(&scan_of(vec![payouts[0]; 3]), &payouts, &payouts);
        assert_eq!(r.duplicates(), 1);
    }

    #[test]
    fn a_released_payout_whose_money_left_is_counted_once_per_transfer() {
        let payouts = [sig(Coin::Eth, 1, 10), sig(Coin::Usdc, 2, 20), sig(Coin::Usdc, 2, 20)];
        let scan = scan_of(vec![payouts[0], payouts[1]]);
        assert_eq!(landed_though_released(&scan, &payouts[1..]), 1);
        assert_eq!(landed_though_released(&scan, &[sig(Coin::Eth, 3, 10)]), 0);
    }

    #[test]
    fn paid_without_a_transfer_is_reported() {
        let payouts = [sig(Coin::Eth, 1, 10), sig(Coin::Usdc, 2, 20)];
        let r = reconcile(&scan_of(vec![payouts[0]]), &payouts, &payouts);
        assert_eq!((r.duplicates(), r.paid_without_transfer), (0, 1));
    }
}
