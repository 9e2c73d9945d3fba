//! A simulated EVM node behind the engine's `EvmRail` port: mempool, per-account nonces, the replacement rule, blocks, reorgs, drops and faults.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;

use async_trait::async_trait;
use payoutd_domain::Asset;
use payoutd_domain::asset::TokenKind;
use payoutd_domain::{Amount, ChainReference, EvmAddress, FeeBid, HotWallet, TxRef};
use payoutd_engine::evm::{
    EvmRail, ExpectedTransfer, FinalView, OutgoingScan, OutgoingTx, Receipt, SendOutcome,
    SignError, SignedBytes, WalletAtBlock,
};
use payoutd_engine::rail::{ReadError, answers_at};
use sha2::{Digest, Sha256};

mod receipt;
mod replica;
mod tx;
use receipt::receipt_in;
pub use replica::LAG_BLOCKS_MAX;
use replica::Replicas;
pub use tx::SimTx;
use tx::{sent_by, sim_balance};

pub const SIM_CHAIN_ID: u64 = 31337;

/// A simulated hash as the engine's transaction reference (always 0x-prefixed hex).
fn sim_ref(hash: &str) -> TxRef {
    TxRef::parse(hash).expect("simulated hashes are hex")
}
/// Replacement must raise both fee fields by this many basis points (geth's 10%).
pub const REPLACEMENT_MIN_BUMP_BPS: u128 = 1_000;
/// Base fee quoted by the node, wei per gas.
pub const QUOTED_MAX_FEE: u128 = 100_000_000_000;
pub const QUOTED_PRIORITY_FEE: u128 = 1_000_000_000;
/// Gas every simulated transaction uses; its fee is this times its max fee per gas.
pub const SIM_GAS_PER_TX: u128 = 21_000;
/// What every account holds of every asset before the first block (the simulated chain's genesis).
pub const SIM_GENESIS_BALANCE: u128 = 1_000_000_000_000_000_000_000_000_000;
/// A foreign sender bids this many times the quote: above payoutd's cap (4x), so it always lands.
const FOREIGN_FEE_MULTIPLIER: u128 = 100;

/// Where a simulated worker process dies (the panic unwinds its task, like a kill).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crash {
    /// While signing inside the database transaction: before COMMIT.
    BeforeCommit,
    /// After COMMIT, before the bytes reach the node.
    BeforeSend,
    /// The node took the bytes; the worker dies before writing anything.
    AfterSend,
}

pub const CRASH_MESSAGE: &str = "simulated worker crash";

/// Fault probabilities, per mille, drawn from the seed.
#[derive(Debug, Clone, Copy)]
pub struct FaultRates {
    pub send_refused_before_node: u32,
    pub send_response_lost: u32,
    pub read_error: u32,
}

#[derive(Default)]
struct State {
    blocks: Vec<Vec<SimTx>>,
    /// Highest head ever reached: reorgs never reach below `max_head - REORG_DEPTH_MAX`, so a block
    /// that once had the finality threshold of confirmations stays (the chain's finality promise).
    max_head: usize,
    /// Per fault key, how many times it was rolled: fault decisions depend on what is asked, not
    /// on how concurrent workers happened to interleave.
    roll_counts: HashMap<String, u64>,
    pool: BTreeMap<(EvmAddress, u64), SimTx>,
    nonces: HashMap<EvmAddress, u64>,
    crash: Option<Crash>,
    faults_on: bool,
    /// The node is unreachable: every read fails and every send is lost, faults on or off.
    down: bool,
    faults_injected: u64,
    /// Hashes of transactions sent from the hot wallet by someone other than payoutd.
    foreign: HashSet<String>,
    replicas: Replicas,
}

impl State {
    /// The blocks the node answering read `key` has: a replica behind the head for a share of reads.
    fn view(&mut self, seed: u64, key: &str) -> usize {
        if !self.faults_on || self.down {
            return self.blocks.len();
        }
        let lag = self.replicas.lag_of(seed, key);
        self.blocks.len().saturating_sub(lag as usize)
    }
}

pub struct SimChain {
    state: Mutex<State>,
    chain_id: u64,
    seed: u64,
    rates: FaultRates,
    finality: u64,
    reorg_depth_max: usize,
    /// Deliberate defect: a proof of death reads the nonce from one node and the receipts from
    /// another, with no check that the second has the block the proof is judged at.
    mixed_views: bool,
}

impl SimChain {
    pub fn new(seed: u64, rates: FaultRates, finality: u64, reorg_depth_max: usize) -> SimChain {
        assert!((reorg_depth_max as u64) < finality, "reorgs must stay shallower than finality");
        SimChain {
            state: Mutex::new(State { faults_on: true, ..State::default() }),
            chain_id: SIM_CHAIN_ID,
            seed,
            rates,
            finality,
            reorg_depth_max,
            mixed_views: false,
        }
    }

    /// A share of reads (per mille) answered by a replica up to `LAG_BLOCKS_MAX` blocks behind.
    pub fn with_lagging_replicas(self, lag_per_mille: u32) -> SimChain {
        self.state.lock().unwrap().replicas.lag_per_mille = lag_per_mille;
        self
    }

    /// The deliberate defect: proofs of death mix two nodes' views.
    pub fn with_mixed_views(mut self) -> SimChain {
        self.mixed_views = true;
        self
    }

    /// Reads a replica behind the head answered.
    pub fn lagging_reads(&self) -> u64 {
        self.state.lock().unwrap().replicas.lagging_reads
    }

    /// The final blocks of a view of `len` blocks (`finality` confirmations or more).
    fn final_of(&self, len: usize) -> u64 {
        (len as u64 + 1).saturating_sub(self.finality)
    }

    /// The same node on another chain id (several chains in one run).
    pub fn on_chain(mut self, chain_id: u64) -> SimChain {
        self.chain_id = chain_id;
        self
    }

    /// Takes the node down (every read fails, every send is lost) or brings it back.
    pub fn set_down(&self, down: bool) {
        self.state.lock().unwrap().down = down;
    }

    /// A fault decision that is a pure function of (seed, what is asked, how often it was asked).
    fn roll(&self, key: &str, per_mille: u32) -> bool {
        let mut s = self.state.lock().unwrap();
        if s.down {
            return true;
        }
        if !s.faults_on {
            return false;
        }
        let count = s.roll_counts.entry(key.to_owned()).or_insert(0);
        *count += 1;
        let digest = Sha256::digest(format!("{}:{key}:{count}", self.seed).as_bytes());
        let hit = u32::from(u16::from_be_bytes([digest[0], digest[1]])) % 1000 < per_mille;
        if hit {
            s.faults_injected += 1;
        }
        hit
    }

    pub fn set_faults(&self, on: bool) {
        self.state.lock().unwrap().faults_on = on;
    }

    pub fn faults_injected(&self) -> u64 {
        self.state.lock().unwrap().faults_injected
    }

    /// The next worker to reach this point dies there.
    pub fn arm_crash(&self, crash: Crash) {
        self.state.lock().unwrap().crash = Some(crash);
    }

    pub fn disarm_crash(&self) -> bool {
        self.state.lock().unwrap().crash.take().is_some()
    }

    fn crash_here(&self, point: Crash) {
        let mut s = self.state.lock().unwrap();
        if s.crash == Some(point) {
            s.crash = None;
            drop(s);
            panic!("{CRASH_MESSAGE} ({point:?})");
        }
    }

    /// Mines one block: per sender, pooled transactions in nonce order from its current nonce.
    pub fn mine(&self, max_txs: usize) {
        let mut s = self.state.lock().unwrap();
        let mut block = Vec::new();
        let mut senders: Vec<EvmAddress> = s.pool.keys().map(|(a, _)| *a).collect();
        senders.dedup();
        for from in senders {
            loop {
                let n = *s.nonces.get(&from).unwrap_or(&0);
                if block.len() >= max_txs {
                    break;
                }
                let Some(tx) = s.pool.remove(&(from, n)) else { break };
                s.nonces.insert(from, n + 1);
                block.push(tx);
            }
        }
        // Transactions below the sender's nonce can never be mined: the node forgets them.
        let nonces = s.nonces.clone();
        s.pool.retain(|(from, nonce), _| *nonce >= *nonces.get(from).unwrap_or(&0));
        s.blocks.push(block);
        s.max_head = s.max_head.max(s.blocks.len());
    }

    /// Removes the last `depth` blocks; their transactions go back to the pool unless `forget`
    /// says a node lost them, or a newer one already holds their slot.
    pub fn reorg(&self, depth: usize, mut forget: impl FnMut(&SimTx) -> bool) {
        let mut s = self.state.lock().unwrap();
        let floor = s.max_head.saturating_sub(self.reorg_depth_max);
        let depth = depth.min(s.blocks.len().saturating_sub(floor));
        for _ in 0..depth {
            let block = s.blocks.pop().unwrap();
            for tx in block.into_iter().rev() {
                let n = s.nonces.entry(tx.from).or_insert(0);
                *n = (*n).min(tx.nonce);
                if !forget(&tx) {
                    s.pool.entry((tx.from, tx.nonce)).or_insert(tx);
                }
            }
        }
    }

    /// Drops one pooled transaction (mempools lose things); returns whether there was one.
    pub fn drop_from_pool(&self, pick: usize) -> bool {
        let mut s = self.state.lock().unwrap();
        if s.pool.is_empty() {
            return false;
        }
        let key = *s.pool.keys().nth(pick % s.pool.len()).unwrap();
        s.pool.remove(&key);
        true
    }

    /// Someone else holding the hot wallet's key sends a transfer at the wallet's next executable
    /// nonce, outbidding whatever the pool holds there (payoutd's cap cannot outbid it back).
    /// Returns its hash.
    pub fn foreign_send(&self, from: EvmAddress, to: EvmAddress, tag: u64) -> String {
        let mut s = self.state.lock().unwrap();
        let nonce = *s.nonces.get(&from).unwrap_or(&0);
        let fees = FeeBid {
            max_fee_per_gas: QUOTED_MAX_FEE * FOREIGN_FEE_MULTIPLIER,
            max_priority_fee_per_gas: QUOTED_PRIORITY_FEE * FOREIGN_FEE_MULTIPLIER,
        };
        let (tx, _) = SimTx {
            hash: String::new(),
            from,
            nonce,
            to,
            value: Amount::from_u128(u128::from(tag)),
            token: None,
            fees,
            cancel: false,
            reference: None,
        }
        .signed();
        let hash = tx.hash.clone();
        s.pool.insert((from, nonce), tx);
        s.foreign.insert(hash.clone());
        hash
    }

    pub fn is_foreign(&self, hash: &str) -> bool {
        self.state.lock().unwrap().foreign.contains(hash)
    }

    /// Foreign transactions mined in blocks that are final now (`finality` confirmations or more).
    pub fn final_foreign(&self) -> Vec<String> {
        let s = self.state.lock().unwrap();
        let head = s.blocks.len() as u64;
        let final_blocks = (head + 1).saturating_sub(self.finality) as usize;
        s.blocks
            .iter()
            .take(final_blocks)
            .flatten()
            .filter(|t| s.foreign.contains(&t.hash))
            .map(|t| t.hash.clone())
            .collect()
    }

    /// Every mined transaction, in chain order.
    pub fn mined(&self) -> Vec<SimTx> {
        self.state.lock().unwrap().blocks.iter().flatten().cloned().collect()
    }

    /// The block that mined `hash` (numbered from 1, as receipts report it), if one did.
    pub fn block_of(&self, hash: &str) -> Option<u64> {
        let s = self.state.lock().unwrap();
        let index = s.blocks.iter().position(|block| block.iter().any(|t| t.hash == hash))?;
        Some(index as u64 + 1)
    }

    pub fn pool_len(&self) -> usize {
        self.state.lock().unwrap().pool.len()
    }

    pub fn head(&self) -> u64 {
        self.state.lock().unwrap().blocks.len() as u64
    }
}

#[async_trait]
impl EvmRail for SimChain {
    fn chain_id(&self) -> u64 {
        self.chain_id
    }

    fn max_fee_per_gas_cap(&self) -> u128 {
        QUOTED_MAX_FEE * 4
    }

    async fn sign_transfer(
        &self,
        wallet: &HotWallet,
        t: &ExpectedTransfer,
        reference: &ChainReference,
        nonce: u64,
        fees: FeeBid,
    ) -> Result<SignedBytes, SignError> {
        self.crash_here(Crash::BeforeCommit);
        let token = match t.asset.token {
            TokenKind::Erc20(a) => Some(a),
            _ => None,
        };
        let (tx, raw) = SimTx {
            hash: String::new(),
            from: wallet.address,
            nonce,
            to: t.to,
            value: t.amount,
            token,
            fees,
            cancel: false,
            reference: Some(*reference),
        }
        .signed();
        Ok(SignedBytes { hash: sim_ref(&tx.hash), raw, fees })
    }

    async fn sign_cancel(
        &self,
        wallet: &HotWallet,
        nonce: u64,
        fees: FeeBid,
    ) -> Result<SignedBytes, SignError> {
        let (tx, raw) = SimTx {
            hash: String::new(),
            from: wallet.address,
            nonce,
            to: wallet.address,
            value: Amount::ZERO,
            token: None,
            fees,
            cancel: true,
            reference: None,
        }
        .signed();
        Ok(SignedBytes { hash: sim_ref(&tx.hash), raw, fees })
    }

    async fn fee_quote(&self) -> Result<FeeBid, ReadError> {
        if self.roll("fee", self.rates.read_error) {
            return Err(ReadError("simulated fee read error".into()));
        }
        Ok(FeeBid {
            max_fee_per_gas: QUOTED_MAX_FEE,
            max_priority_fee_per_gas: QUOTED_PRIORITY_FEE,
        })
    }

    async fn send(&self, raw: &[u8]) -> SendOutcome {
        self.crash_here(Crash::BeforeSend);
        let key = format!("send:{}", hex::encode(Sha256::digest(raw)));
        if self.roll(&format!("{key}:refuse"), self.rates.send_refused_before_node) {
            return SendOutcome::Unknown("simulated: connection refused before the node".into());
        }
        let Some(tx) = SimTx::decode(raw) else {
            return SendOutcome::Refused("undecodable".into());
        };
        let outcome = {
            let mut s = self.state.lock().unwrap();
            let mined = *s.nonces.get(&tx.from).unwrap_or(&0);
            if tx.nonce < mined {
                SendOutcome::MaybeAlreadySent
            } else {
                match s.pool.get(&(tx.from, tx.nonce)) {
                    Some(existing) if existing.hash == tx.hash => SendOutcome::MaybeAlreadySent,
                    Some(existing) => {
                        let bump = |old: u128, new: u128| {
                            new * 10_000 >= old * (10_000 + REPLACEMENT_MIN_BUMP_BPS)
                        };
                        if bump(existing.fees.max_fee_per_gas, tx.fees.max_fee_per_gas)
                            && bump(
                                existing.fees.max_priority_fee_per_gas,
                                tx.fees.max_priority_fee_per_gas,
                            )
                        {
                            s.pool.insert((tx.from, tx.nonce), tx);
                            SendOutcome::Accepted
                        } else {
                            SendOutcome::SlotHeldByOther
                        }
                    }
                    None => {
                        s.pool.insert((tx.from, tx.nonce), tx);
                        SendOutcome::Accepted
                    }
                }
            }
        };
        self.crash_here(Crash::AfterSend);
        if self.roll(&format!("{key}:lose"), self.rates.send_response_lost) {
            return SendOutcome::Unknown("simulated: response lost after the node acted".into());
        }
        outcome
    }

    async fn receipt(
        &self,
        hash: &TxRef,
        expected: &ExpectedTransfer,
    ) -> Result<Option<Receipt>, ReadError> {
        if self.roll(&format!("receipt:{hash}"), self.rates.read_error) {
            return Err(ReadError("simulated receipt read error".into()));
        }
        let mut s = self.state.lock().unwrap();
        let view = s.view(self.seed, &format!("receipt:{hash}"));
        Ok(receipt_in(&s.blocks[..view], hash, expected))
    }

    async fn final_view(
        &self,
        address: &EvmAddress,
        queries: &[(TxRef, ExpectedTransfer)],
    ) -> Result<FinalView, ReadError> {
        if self.roll(&format!("final_view:{address}"), self.rates.read_error) {
            return Err(ReadError("simulated final view read error".into()));
        }
        let mut s = self.state.lock().unwrap();
        // The final block as the endpoint answers it, then the batch from whichever node answers.
        let block = self.final_of(s.view(self.seed, "head"));
        if block == 0 {
            return Err(ReadError("no block is final yet".into()));
        }
        let batch = s.view(self.seed, &format!("final_view:{address}"));
        let (nonce_view, receipt_view) = if self.mixed_views {
            // The nonce at the block from a node that has it, the receipts from another.
            (block as usize, s.view(self.seed, &format!("final_view:receipts:{address}")))
        } else {
            answers_at(batch as u64, block).map_err(|e| ReadError(e.to_string()))?;
            (block as usize, batch)
        };
        let nonce = sent_by(&s.blocks[..nonce_view], address);
        let receipts = queries
            .iter()
            .map(|(hash, expected)| receipt_in(&s.blocks[..receipt_view], hash, expected))
            .collect();
        Ok(FinalView { block, nonce, receipts })
    }

    async fn mined_nonce(&self, address: &EvmAddress) -> Result<u64, ReadError> {
        if self.roll(&format!("nonce:{address}"), self.rates.read_error) {
            return Err(ReadError("simulated nonce read error".into()));
        }
        let mut s = self.state.lock().unwrap();
        let view = s.view(self.seed, &format!("nonce:{address}"));
        if view == s.blocks.len() {
            // The head's node: the nonce it keeps, not a scan of every block.
            return Ok(*s.nonces.get(address).unwrap_or(&0));
        }
        Ok(sent_by(&s.blocks[..view], address))
    }

    async fn pending_nonce(&self, address: &EvmAddress) -> Result<u64, ReadError> {
        if self.roll(&format!("pending_nonce:{address}"), self.rates.read_error) {
            return Err(ReadError("simulated nonce read error".into()));
        }
        // The head's node: its nonce, then the pooled transactions that follow it without a gap.
        let s = self.state.lock().unwrap();
        let mut nonce = *s.nonces.get(address).unwrap_or(&0);
        while s.pool.contains_key(&(*address, nonce)) {
            nonce += 1;
        }
        Ok(nonce)
    }

    async fn final_block(&self) -> Result<Option<u64>, ReadError> {
        if self.roll("head", self.rates.read_error) {
            return Err(ReadError("simulated head read error".into()));
        }
        let view = self.state.lock().unwrap().view(self.seed, "head");
        Ok((view as u64 + 1).checked_sub(self.finality))
    }

    async fn final_nonce(&self, address: &EvmAddress) -> Result<u64, ReadError> {
        if self.roll(&format!("final_nonce:{address}"), self.rates.read_error) {
            return Err(ReadError("simulated nonce read error".into()));
        }
        let mut s = self.state.lock().unwrap();
        let block = self.final_of(s.view(self.seed, "head"));
        // The nonce at that block, from a node that has it (a node without it answers an error).
        let view = s.view(self.seed, &format!("final_nonce:{address}"));
        answers_at(view as u64, block).map_err(|e| ReadError(e.to_string()))?;
        Ok(sent_by(&s.blocks[..block as usize], address))
    }

    async fn outgoing(
        &self,
        senders: &[EvmAddress],
        from_block: u64,
        to_block: u64,
    ) -> Result<OutgoingScan, ReadError> {
        if self.roll(&format!("outgoing:{from_block}"), self.rates.read_error) {
            return Err(ReadError("simulated block read error".into()));
        }
        let mut s = self.state.lock().unwrap();
        let view = s.view(self.seed, &format!("outgoing:{from_block}"));
        // A node behind lists the blocks it has: the scan stops at its head.
        let last = to_block.min(view as u64);
        let mut txs = Vec::new();
        // Blocks are numbered from 1, as `receipt` reports them.
        for number in from_block.max(1)..=last {
            for tx in s.blocks[number as usize - 1].iter().filter(|t| senders.contains(&t.from)) {
                txs.push(OutgoingTx {
                    from: tx.from,
                    hash: sim_ref(&tx.hash),
                    nonce: tx.nonce,
                    block: number,
                    reference: tx.reference,
                });
            }
        }
        Ok(OutgoingScan { txs, next_block: (last + 1).max(from_block) })
    }

    async fn wallet_at(
        &self,
        address: &EvmAddress,
        block: u64,
        assets: &[Asset],
    ) -> Result<WalletAtBlock, ReadError> {
        if self.roll(&format!("wallet_at:{address}:{block}"), self.rates.read_error) {
            return Err(ReadError("simulated balance read error".into()));
        }
        let mut s = self.state.lock().unwrap();
        let view = s.view(self.seed, &format!("wallet_at:{address}:{block}"));
        answers_at(view as u64, block).map_err(|e| ReadError(e.to_string()))?;
        let upto = block as usize;
        let txs: Vec<&SimTx> = s.blocks[..upto].iter().flatten().collect();
        let nonce = txs.iter().filter(|t| t.from == *address).count() as u64;
        let balances = assets
            .iter()
            .map(|asset| sim_balance(&txs, address, &asset.token))
            .collect::<Result<_, _>>()?;
        Ok(WalletAtBlock { nonce, balances })
    }
}
