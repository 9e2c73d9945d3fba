//! A simulated Solana cluster behind the engine's `StandaloneRail` port: signed bytes valid until a last valid block height or signed against a durable nonce, sends lost after the node took them or dropped before it, late landings, blockhashes the cluster never saw, status reads that fail, a node restored from a snapshot that has forgotten older signatures, and listings a page at a time; every fault a pure function of the seed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use async_trait::async_trait;
use payoutd_domain::{
    Amount, Asset, Attempt, AttemptSlot, AttemptTx, Payout, SolanaExpiry, TxKind, TxRef,
};
use payoutd_engine::rail::{ReadError, answers_at};
use payoutd_engine::standalone::finality::{
    FinalizedLook, Sighting, Sightings, absence_is_proof, look,
};
use payoutd_engine::standalone::{
    Foreign, OutgoingSince, PrepareError, Prepared, RailWallet, StandaloneRail, StandaloneStatus,
    SubmitOutcome,
};
use sha2::{Digest, Sha256};

mod faults;
mod listing;
mod tx;
pub use faults::{SolanaDefects, SolanaFaults};
use tx::{SolTx, landed_effect};

/// Blocks a blockhash stays valid for, as on Solana (150 there; fewer here so seeds see expiry).
pub const VALIDITY_BLOCKS: u64 = 12;
/// Blocks on top of a landed transaction's block before it is finalized.
pub const FINAL_DEPTH: u64 = 3;
/// The fee payer's row in `hot_wallets`.
pub const SIM_SOLANA_CHAIN: &str = "solana:sim";
pub const SIM_SOLANA_PAYER: &str = "SimPayer1111111111111111111111111111111111";
/// The durable nonce account a share of the payouts is signed against.
pub const SIM_NONCE_ACCOUNT: &str = "SimNonce1111111111111111111111111111111111";
/// Per cent of Solana payouts signed against the durable nonce (chosen by the payout's key, so a
/// seed's schedule does not depend on it).
pub const DURABLE_SHARE_PERCENT: u8 = 25;
/// What each landed transaction costs the fee payer, in lamports (Solana's base fee per signature).
pub const FEE_LAMPORTS: u128 = 5_000;
/// How long the simulated first send takes at most (a call and the resolver's lease).
pub const FIRST_SEND_WITHIN_MS: i64 = 11_000;
/// The fee payer's balance before the seed's first payout, in lamports.
pub const OPENING_LAMPORTS: u128 = 1_000_000_000_000_000;
/// Blocks a node restored from a snapshot serves alone, its history starting at the restart,
/// before a node with the full history answers again: longer than a blockhash's validity and
/// finality together, so an attempt can expire and finalize inside the stretch.
pub const SNAPSHOT_STRETCH_BLOCKS: u64 = 2 * (VALIDITY_BLOCKS + FINAL_DEPTH);
/// Signatures one listing of the fee payer's history returns at most (small, so a seed's
/// reconciliation reads several pages).
pub const OUTGOING_PAGE_MAX: usize = 4;
/// How far behind the tip a node answering a status search may be, in blocks: past the finalized
/// depth and a blockhash's validity, so a node can lack a block the cluster already finalized,
/// and with it a transaction that landed before its blockhash expired (Solana nodes behind a
/// load balancer trail by dozens of slots at times).
pub const LAG_BLOCKS_MAX: u64 = 2 * (VALIDITY_BLOCKS + FINAL_DEPTH);
/// Blocks one node answers a client's status searches for, behind the endpoint's load balancer.
pub const NODE_STRETCH_BLOCKS: u64 = 10;

#[derive(Default)]
struct Cluster {
    height: u64,
    /// Sent, not landed, not expired: signature -> transaction.
    pool: BTreeMap<String, SolTx>,
    /// Signature -> (transaction, height it landed at), in landing order by height.
    landed: HashMap<String, (SolTx, u64)>,
    landing_order: Vec<String>,
    faults_on: bool,
    roll_counts: HashMap<String, u64>,
    faults_injected: u64,
    /// The durable nonce's value now, and (height, value) at each move, oldest first.
    nonce_value: u64,
    nonce_moves: Vec<(u64, u64)>,
    /// Durable transactions that landed (each pays one payout).
    durable_landed: usize,
    /// Durable transactions that could never land because another one used their nonce value:
    /// two live transactions were signed on one value.
    nonce_collisions: Vec<String>,
    /// While a node restored from a snapshot answers: (its first block, the height a full node
    /// answers again).
    snapshot: Option<(u64, u64)>,
    /// Per mille of status searches a node behind the tip answers, and how many it answered.
    lag_per_mille: u32,
    lagging_reads: u64,
}

pub struct SimSolana {
    seed: u64,
    /// The fee payer, which also holds what the payouts pay out: the ledger keeps its account.
    wallet: RailWallet,
    faults: SolanaFaults,
    cluster: Mutex<Cluster>,
    /// Whether a durable attempt's slot names its nonce value, so the store holds one attempt
    /// per value (false only for the deliberate defect).
    claim_nonce_values: bool,
    defects: SolanaDefects,
    /// The rail's memory of nonce values seen at finality (the adapter keeps the same).
    sightings: Sightings<u64>,
}

impl SimSolana {
    /// `native`: the cluster's SOL, in which payouts and fees are paid.
    pub fn new(seed: u64, faults: SolanaFaults, native: Asset) -> SimSolana {
        let wallet = RailWallet {
            id: format!("hw_{SIM_SOLANA_CHAIN}_{SIM_SOLANA_PAYER}"),
            address: SIM_SOLANA_PAYER.to_owned(),
            native,
        };
        SimSolana {
            seed,
            wallet,
            faults,
            cluster: Mutex::new(Cluster::default()),
            claim_nonce_values: true,
            defects: SolanaDefects::default(),
            sightings: Sightings::default(),
        }
    }

    /// The fee payer's balance at the finalized height: the opening, less every finalized landed
    /// transaction's payout and fee.
    pub fn finalized_balance(&self) -> Amount {
        let c = self.cluster.lock().unwrap();
        let finalized = Self::finalized_height(&c);
        let fee = Amount::from_u128(FEE_LAMPORTS);
        let spent = c.landed.values().filter(|(_, at)| *at <= finalized).fold(
            Amount::ZERO,
            |sum, (tx, _)| {
                sum.checked_add(tx.amount)
                    .and_then(|s| s.checked_add(fee))
                    .expect("simulated amounts are small")
            },
        );
        Amount::from_u128(OPENING_LAMPORTS)
            .checked_sub(spent)
            .expect("the opening covers a seed's payouts")
    }

    /// The hot wallet's id in the ledger.
    pub fn wallet_id(&self) -> &str {
        &self.wallet.id
    }

    /// A share of stretches (per mille) in which a node up to `LAG_BLOCKS_MAX` blocks behind the
    /// tip answers the status searches, as behind a load-balanced endpoint.
    pub fn with_lagging_nodes(self, lag_per_mille: u32) -> SimSolana {
        self.cluster.lock().unwrap().lag_per_mille = lag_per_mille;
        self
    }

    /// Status searches a node behind the tip answered.
    pub fn lagging_reads(&self) -> u64 {
        self.cluster.lock().unwrap().lagging_reads
    }

    /// The height of the node answering a status search: the tip, or, through a share of
    /// stretches of `NODE_STRETCH_BLOCKS`, a node behind it by a lag drawn for the stretch (a load
    /// balancer keeps a client on one node a while); a pure function of the seed and the height.
    fn answering_height(c: &mut Cluster, seed: u64) -> u64 {
        if !c.faults_on || c.lag_per_mille == 0 {
            return c.height;
        }
        let stretch = c.height / NODE_STRETCH_BLOCKS;
        let digest = Sha256::digest(format!("{seed}:sol-node:{stretch}").as_bytes());
        if u32::from(u16::from_be_bytes([digest[0], digest[1]])) % 1000 >= c.lag_per_mille {
            return c.height;
        }
        c.lagging_reads += 1;
        c.height.saturating_sub(1 + u64::from(digest[2]) % LAG_BLOCKS_MAX)
    }

    /// Fails unless the node that searched the statuses had reached the finalized height the
    /// proof is judged at (the adapter's `minContextSlot` and the same rule, `answers_at`).
    fn searched_at_finality(&self, c: &Cluster, searched_at: u64) -> Result<(), ReadError> {
        if self.defects.status_from_node_behind {
            return Ok(());
        }
        answers_at(searched_at, Self::finalized_height(c)).map_err(|e| ReadError(e.to_string()))
    }

    /// The deliberate defect: durable attempts' slots do not name their nonce value.
    pub fn without_nonce_value_claims(mut self) -> SimSolana {
        self.claim_nonce_values = false;
        self
    }

    /// The deliberate defects of the rail's own reasoning.
    pub fn with_defects(mut self, defects: SolanaDefects) -> SimSolana {
        self.defects = defects;
        self
    }

    pub fn durable_landed(&self) -> usize {
        self.cluster.lock().unwrap().durable_landed
    }

    pub fn nonce_collisions(&self) -> Vec<String> {
        self.cluster.lock().unwrap().nonce_collisions.clone()
    }

    /// The nonce's value as of the finalized height.
    fn finalized_nonce_value(c: &Cluster) -> u64 {
        let finalized = Self::finalized_height(c);
        c.nonce_moves
            .iter()
            .take_while(|(at, _)| *at <= finalized)
            .last()
            .map_or(0, |(_, value)| *value)
    }

    /// A durable attempt nothing of which landed (in the answering node's history): dead once the
    /// finalized nonce value, seen twice a finalization apart, is another than the signed one, in a
    /// history that reaches back to the signing (the adapter's rule, with the same judgement).
    fn durable_status(
        &self,
        c: &Cluster,
        attempt: &Attempt,
        history_from: u64,
    ) -> Result<StandaloneStatus, ReadError> {
        let Some(SolanaExpiry::DurableNonce { signed_at_block_height, .. }) =
            attempt.slot.solana_expiry()
        else {
            return Err(ReadError(format!(
                "attempt {} is not a durable nonce attempt",
                attempt.id
            )));
        };
        let signed = SolTx::decode(&attempt.txs[0].raw)
            .nonce
            .expect("a durable attempt's bytes carry its nonce value");
        let finalized_value = Self::finalized_nonce_value(c);
        match look(signed, finalized_value, self.sightings.of(&attempt.id)) {
            FinalizedLook::Live => {
                self.sightings.forget(&attempt.id);
                return Ok(StandaloneStatus::Pending);
            }
            FinalizedLook::Sight if !self.defects.nonce_moved_at_first_sight => {
                self.sightings.remember(
                    &attempt.id,
                    Sighting { value: finalized_value, at_height: c.height },
                );
                return Ok(StandaloneStatus::Pending);
            }
            FinalizedLook::Seen(seen) if Self::finalized_height(c) <= seen.at_height => {
                return Ok(StandaloneStatus::Pending);
            }
            FinalizedLook::Sight | FinalizedLook::Seen(_) => {}
        }
        self.history_reaches(history_from, *signed_at_block_height, attempt)?;
        self.sightings.forget(&attempt.id);
        Ok(StandaloneStatus::Dead {
            proof: format!(
                "the nonce moved from {signed} to {finalized_value} at finality; no signature of the attempt landed"
            ),
            cancel_fee_paid: Amount::ZERO,
        })
    }

    /// Fails unless the answering node's history reaches back to the signing (as the adapter does).
    fn history_reaches(
        &self,
        history_from: u64,
        signed_at: u64,
        attempt: &Attempt,
    ) -> Result<(), ReadError> {
        if absence_is_proof(history_from, signed_at) || self.defects.absence_without_history {
            return Ok(());
        }
        Err(ReadError(format!(
            "attempt {} was signed at height {signed_at}; the node's history starts at {history_from}",
            attempt.id
        )))
    }

    /// The first block the answering node holds: the restart's while a restored node answers alone.
    fn history_from(c: &Cluster) -> u64 {
        c.snapshot.filter(|(_, until)| c.height < *until).map_or(0, |(from, _)| from)
    }

    /// Final landed transfers, in landing order (what a listing at finality can return).
    fn final_count(c: &Cluster) -> usize {
        let finalized = Self::finalized_height(c);
        c.landing_order.iter().take_while(|s| c.landed[*s].1 <= finalized).count()
    }

    /// How many landed transfers are final now.
    pub fn final_transfers(&self) -> usize {
        Self::final_count(&self.cluster.lock().unwrap())
    }

    fn durable(payout: &Payout) -> bool {
        Sha256::digest(payout.key.as_str().as_bytes())[0] % 100 < DURABLE_SHARE_PERCENT
    }

    /// Faults off also ends a restored node's stretch: a node with the full history answers again.
    pub fn set_faults(&self, on: bool) {
        let mut c = self.cluster.lock().unwrap();
        c.faults_on = on;
        if !on {
            c.snapshot = None;
        }
    }

    pub fn faults_injected(&self) -> u64 {
        self.cluster.lock().unwrap().faults_injected
    }

    /// A fault decision that is a pure function of (seed, what is asked, how often it was asked).
    fn roll(cluster: &mut Cluster, seed: u64, key: &str, per_mille: u32) -> bool {
        if !cluster.faults_on {
            return false;
        }
        let count = cluster.roll_counts.entry(key.to_owned()).or_insert(0);
        *count += 1;
        let digest = Sha256::digest(format!("{seed}:sol:{key}:{count}").as_bytes());
        let hit = u32::from(u16::from_be_bytes([digest[0], digest[1]])) % 1000 < per_mille;
        cluster.faults_injected += u64::from(hit);
        hit
    }

    /// One block: pooled transactions land (unless late), expired ones leave the pool for good.
    pub fn produce_block(&self) {
        let mut c = self.cluster.lock().unwrap();
        c.height += 1;
        let height = c.height;
        if Self::roll(
            &mut c,
            self.seed,
            &format!("snapshot:{height}"),
            self.faults.snapshot_restart,
        ) {
            c.snapshot = Some((height, height + SNAPSHOT_STRETCH_BLOCKS));
        }
        let pooled: Vec<String> = c.pool.keys().cloned().collect();
        for signature in pooled {
            let tx = c.pool[&signature].clone();
            if tx.last_valid < height {
                c.pool.remove(&signature);
                continue;
            }
            if let Some(nonce) = tx.nonce.filter(|n| *n != c.nonce_value) {
                assert!(
                    nonce < c.nonce_value,
                    "{signature} signed on a nonce value the cluster never held"
                );
                c.pool.remove(&signature);
                c.nonce_collisions.push(signature);
                continue;
            }
            if Self::roll(
                &mut c,
                self.seed,
                &format!("late:{signature}:{height}"),
                self.faults.late,
            ) {
                continue;
            }
            if tx.nonce.is_some() {
                c.nonce_value += 1;
                let value = c.nonce_value;
                c.nonce_moves.push((height, value));
                c.durable_landed += 1;
            }
            c.pool.remove(&signature);
            c.landed.insert(signature.clone(), (tx, height));
            c.landing_order.push(signature);
        }
    }

    /// Drops one pooled transaction, as a node restarting forgets what it held.
    pub fn drop_from_pool(&self, pick: usize) -> Option<String> {
        let mut c = self.cluster.lock().unwrap();
        let signature = c.pool.keys().nth(pick % c.pool.len().max(1)).cloned()?;
        c.pool.remove(&signature);
        Some(signature)
    }

    pub fn pool_len(&self) -> usize {
        self.cluster.lock().unwrap().pool.len()
    }

    /// Every landed transaction: (signature, destination, amount), in landing order.
    pub fn landed(&self) -> Vec<(String, String, Amount)> {
        let c = self.cluster.lock().unwrap();
        c.landing_order
            .iter()
            .map(|s| (s.clone(), c.landed[s].0.destination.clone(), c.landed[s].0.amount))
            .collect()
    }

    fn finalized_height(c: &Cluster) -> u64 {
        c.height.saturating_sub(FINAL_DEPTH)
    }
}

#[async_trait]
impl StandaloneRail for SimSolana {
    fn name(&self) -> &str {
        "sim-solana"
    }

    fn first_send_within_ms(&self) -> i64 {
        FIRST_SEND_WITHIN_MS
    }

    fn owns(&self, slot: &AttemptSlot) -> bool {
        matches!(slot, AttemptSlot::Solana { .. })
    }

    async fn prepare(
        &self,
        payout: &Payout,
        attempt_no: u32,
        reference: &payoutd_domain::ChainReference,
    ) -> Result<Prepared, PrepareError> {
        let mut c = self.cluster.lock().unwrap();
        if Self::roll(
            &mut c,
            self.seed,
            &format!("blockhash-read:{}:{attempt_no}", payout.id),
            self.faults.read_error,
        ) {
            return Err(PrepareError::Unavailable(ReadError("getLatestBlockhash failed".into())));
        }
        // Signed against the block it read: the same attempt signed again later is another
        // transaction, with another signature (as a fresh blockhash makes it on a real cluster).
        let signature = format!("solsig-{}-{attempt_no}-h{}", payout.id, c.height);
        let nonce = Self::durable(payout).then_some(c.nonce_value);
        let seen_blockhash = nonce.is_some()
            || !Self::roll(
                &mut c,
                self.seed,
                &format!("unseen:{signature}"),
                self.faults.unseen_blockhash,
            );
        let tx = SolTx {
            signature: signature.clone(),
            destination: payout.destination.to_string(),
            amount: payout.amount,
            last_valid: if nonce.is_some() { u64::MAX } else { c.height + VALIDITY_BLOCKS },
            seen_blockhash,
            nonce,
            memo: reference.to_string(),
        };
        let expiry = match nonce {
            None => SolanaExpiry::LastValidBlockHeight(tx.last_valid),
            Some(value) => SolanaExpiry::DurableNonce {
                account: SIM_NONCE_ACCOUNT.to_owned(),
                value: if self.claim_nonce_values { value.to_string() } else { String::new() },
                signed_at_block_height: c.height,
            },
        };
        Ok(Prepared {
            slot: AttemptSlot::Solana { fee_payer: self.wallet.id.clone(), expiry },
            tx: AttemptTx {
                hash: TxRef::parse(&signature).expect("a simulated signature is a reference"),
                kind: TxKind::Original,
                raw: tx.encode(),
                fees: None,
                created_at_ms: 0,
            },
        })
    }

    async fn submit(&self, attempt: &Attempt) -> SubmitOutcome {
        let tx = SolTx::decode(&attempt.latest_tx().raw);
        let mut c = self.cluster.lock().unwrap();
        if Self::roll(&mut c, self.seed, &format!("drop:{}", tx.signature), self.faults.dropped) {
            return SubmitOutcome::NotAccepted("connection reset before the node".into());
        }
        if !tx.seen_blockhash || tx.last_valid < c.height {
            return SubmitOutcome::NotAccepted("BlockhashNotFound".into());
        }
        if c.landed.contains_key(&tx.signature) {
            return SubmitOutcome::NotAccepted("AlreadyProcessed".into());
        }
        c.pool.insert(tx.signature.clone(), tx.clone());
        if Self::roll(&mut c, self.seed, &format!("lost:{}", tx.signature), self.faults.answer_lost)
        {
            return SubmitOutcome::NotAccepted("timeout after the node took the bytes".into());
        }
        SubmitOutcome::Accepted { reference: None }
    }

    async fn status(
        &self,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<StandaloneStatus, ReadError> {
        let Some(expiry) = attempt.slot.solana_expiry() else {
            return Err(ReadError(format!("attempt {} is not a Solana attempt", attempt.id)));
        };
        let mut c = self.cluster.lock().unwrap();
        if Self::roll(&mut c, self.seed, &format!("status:{}", attempt.id), self.faults.read_error)
        {
            return Err(ReadError("getSignatureStatuses failed".into()));
        }
        let history_from = Self::history_from(&c);
        let searched_at = Self::answering_height(&mut c, self.seed);
        for tx in &attempt.txs {
            if let Some((landed, at)) = c
                .landed
                .get(tx.hash.as_str())
                .filter(|(_, at)| *at >= history_from && *at <= searched_at)
            {
                let effect = landed_effect(landed, payout);
                return Ok(StandaloneStatus::Landed {
                    reference: tx.hash.clone(),
                    final_: Self::finalized_height(&c) >= *at,
                    transfer_matches: effect.transfer_matches,
                    moved: effect.moved,
                    fee_paid: Amount::from_u128(
                        u128::try_from(effect.fee_paid).expect("a simulated fee is positive"),
                    ),
                });
            }
        }
        let last_valid = match expiry {
            SolanaExpiry::LastValidBlockHeight(height) => height,
            SolanaExpiry::DurableNonce { .. } => {
                self.searched_at_finality(&c, searched_at)?;
                return self.durable_status(&c, attempt, history_from);
            }
        };
        let finalized = Self::finalized_height(&c);
        if finalized <= *last_valid {
            return Ok(StandaloneStatus::Pending);
        }
        self.history_reaches(history_from, last_valid.saturating_sub(VALIDITY_BLOCKS), attempt)?;
        self.searched_at_finality(&c, searched_at)?;
        // The same lock: this status read comes after the height read, and finds none of them.
        Ok(StandaloneStatus::Dead {
            proof: format!(
                "finalized height {finalized} passed last valid {last_valid}; no signature of the attempt landed"
            ),
            cancel_fee_paid: Amount::ZERO,
        })
    }

    fn hot_wallet(&self) -> Option<&RailWallet> {
        Some(&self.wallet)
    }

    async fn wallet_balances(&self, assets: &[Asset]) -> Result<Vec<Amount>, ReadError> {
        {
            let mut c = self.cluster.lock().unwrap();
            let key = format!("balance:{}", c.height);
            if Self::roll(&mut c, self.seed, &key, self.faults.read_error) {
                return Err(ReadError("getBalance failed".into()));
            }
        }
        let balance = self.finalized_balance();
        assets
            .iter()
            .map(|a| {
                if a.code == self.wallet.native.code {
                    Ok(balance)
                } else {
                    Err(ReadError(format!("the fee payer holds no {}", a.code)))
                }
            })
            .collect()
    }

    fn reconcile_cursor_name(&self) -> Option<String> {
        Some(format!("{SIM_SOLANA_CHAIN}/{SIM_SOLANA_PAYER}"))
    }

    async fn outgoing_since(&self, cursor: Option<&str>) -> Result<OutgoingSince, ReadError> {
        self.final_since(cursor)
    }

    async fn listed_since(&self, cursor: &str) -> Result<Vec<TxRef>, ReadError> {
        self.landed_since(cursor)
    }

    async fn outgoing_of(&self, refs: &[TxRef]) -> Result<Vec<Foreign>, ReadError> {
        self.read_back(refs)
    }
}
