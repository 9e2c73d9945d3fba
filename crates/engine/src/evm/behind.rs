//! Records behind the chain: before a chain's lines sign, each hot wallet's stored nonce counter is proven not below what its chain holds for it; otherwise commits were lost (a failover, a restore) or its key signed elsewhere, and signing could pay a payout a second time.

use payoutd_domain::{HotWallet, IncidentKind};

use super::EvmFamily;
use crate::pipeline::{Core, PipelineError};
use crate::pipeline_store::{IncidentSubject, NewIncident};

/// A line whose chain holds nonces its records do not.
struct Behind<'a> {
    wallet: &'a HotWallet,
    /// The stored counter: the first nonce the records do not hold.
    recorded: u64,
    /// The chain's pending nonce: nonces below it are mined or held by a node's pool.
    on_chain: u64,
}

impl EvmFamily {
    /// Whether the chain's lines may sign this pass: every wallet's records are proven not behind
    /// its chain, or have caught up by now. While any line is behind (or cannot be read), no line
    /// of the chain signs: a payout whose lost transaction waits on one wallet's line could be
    /// claimed by another's.
    pub(super) async fn records_hold_the_chain(&self, core: &Core) -> bool {
        let mut all_hold = true;
        for wallet in &self.chain.wallets {
            match self.line_holds(core, wallet).await {
                Ok(true) => {}
                Ok(false) => all_hold = false,
                Err(e) => {
                    tracing::warn!(wallet = %wallet.id, error = %e, "cannot prove the wallet's records are not behind its chain; not signing on the chain this pass");
                    all_hold = false;
                }
            }
        }
        all_hold
    }

    /// Whether `wallet`'s records hold everything its chain holds for it, opening the incident
    /// when they do not and catching up once they can.
    async fn line_holds(&self, core: &Core, wallet: &HotWallet) -> Result<bool, PipelineError> {
        // The chain first: a transaction of ours was stored before it was sent, so a counter
        // read after the chain is at or past everything the chain holds, unless commits were lost.
        let on_chain = self
            .chain
            .rail
            .pending_nonce(&wallet.address)
            .await
            .map_err(|e| PipelineError::RailUnavailable(e.to_string()))?;
        let recorded = self
            .lines
            .hot_wallet(&wallet.id)
            .await?
            .unwrap_or_else(|| panic!("hot wallet {} is registered at start", wallet.id))
            .next_nonce;
        if on_chain <= recorded {
            // Caught up since a pass found it behind (reconciliation relinked what it lacked), or
            // an incident another process opened before this one started: asked once per process
            // and after every pass that found the line behind, never on each pass.
            if self.may_be_behind(&wallet.id) {
                self.resolve_behind(core, wallet, recorded).await?;
                self.behind_seen.lock().expect("behind set lock").remove(&wallet.id);
            }
            return Ok(true);
        }
        self.behind_seen.lock().expect("behind set lock").insert(wallet.id.clone());
        let behind = Behind { wallet, recorded, on_chain };
        self.open_behind(core, &behind).await?;
        self.catch_up(core, &behind).await
    }

    /// Whether `wallet_id` may have an open `records_behind_chain` incident: until this process
    /// has looked once, and after a pass found its line behind.
    fn may_be_behind(&self, wallet_id: &str) -> bool {
        self.behind_seen.lock().expect("behind set lock").contains(wallet_id)
    }

    /// One open `records_behind_chain` incident per wallet at a time.
    async fn open_behind(&self, core: &Core, behind: &Behind<'_>) -> Result<(), PipelineError> {
        let (wallet, recorded, on_chain) = (behind.wallet, behind.recorded, behind.on_chain);
        let about = subject_prefix(wallet);
        if core.store.open_incident_about(IncidentKind::RecordsBehindChain, &about).await?.is_some()
        {
            return Ok(());
        }
        tracing::error!(wallet = %wallet.id, recorded, on_chain, "the chain holds transactions of this hot wallet that the database does not: signing on the chain stops until each is final and read back");
        let detail = format!(
            "hot wallet {} ({}): its chain holds transactions at nonces {recorded} to {} (mined or pooled) that the database does not record: commits were lost (a failover, a restore from a backup) or the wallet's key signed elsewhere. No payout is signed on chain {} until each is final and read back: one that carries a payout's reference is recorded as that payout's attempt, any other is reported as an unmatched_transfer",
            wallet.id,
            wallet.address,
            on_chain - 1,
            wallet.chain_id,
        );
        let incident = NewIncident::new(
            IncidentKind::RecordsBehindChain,
            IncidentSubject::default(),
            detail,
            core.clock.now_ms(),
        );
        core.store.open_incident_once(&incident, &format!("{about}{recorded}:{on_chain}")).await?;
        Ok(())
    }

    /// The line catches up once every transaction at nonces `recorded..on_chain` is in a block
    /// reconciliation has read (each relinked to its payout or reported unmatched there, and
    /// final: reconciliation reads final blocks only): the counter moves past them and the
    /// incident is resolved. Until then nothing is signed, however long a transaction stays pooled.
    async fn catch_up(&self, core: &Core, behind: &Behind<'_>) -> Result<bool, PipelineError> {
        let wallet = behind.wallet;
        let read_to = self.lines.reconcile_cursor(&wallet.id).await?.and_then(|c| c.checked_sub(1));
        let Some(last_read) = read_to else { return Ok(false) };
        let read_back = self
            .chain
            .rail
            .wallet_at(&wallet.address, last_read, &[])
            .await
            .map_err(|e| PipelineError::RailUnavailable(e.to_string()))?
            .nonce;
        if read_back < behind.on_chain {
            return Ok(false);
        }
        self.lines.raise_nonce_floor(&wallet.id, behind.on_chain).await?;
        self.resolve_behind(core, wallet, behind.on_chain).await?;
        Ok(true)
    }

    /// Resolves the wallet's open `records_behind_chain` incident, if any: its records hold every
    /// nonce below `holds_below`.
    async fn resolve_behind(
        &self,
        core: &Core,
        wallet: &HotWallet,
        holds_below: u64,
    ) -> Result<(), PipelineError> {
        let about = subject_prefix(wallet);
        let Some(id) =
            core.store.open_incident_about(IncidentKind::RecordsBehindChain, &about).await?
        else {
            return Ok(());
        };
        let resolution = format!(
            "every transaction of the wallet below nonce {holds_below} is final and was read back (each carrying a payout's reference recorded as its attempt, any other reported as an unmatched_transfer): signing resumed at nonce {holds_below}"
        );
        if core.store.resolve_incident(&id, &resolution, core.clock.now_ms()).await? {
            tracing::info!(wallet = %wallet.id, nonce = holds_below, "the wallet's records caught up with its chain: signing resumes");
        }
        Ok(())
    }
}

/// What every `records_behind_chain` subject of `wallet` begins with.
fn subject_prefix(wallet: &HotWallet) -> String {
    format!("{}:", wallet.id)
}
