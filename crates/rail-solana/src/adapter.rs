//! The Solana rail behind the engine's lifecycle: an attempt is one signed transaction with a recent blockhash, re-sent unchanged until it lands or is proven dead past its last valid block height.

mod durable;
mod expiry;
mod landing;
mod reconcile;

use reconcile::CURSOR_FROM_GENESIS;
pub use reconcile::RECONCILE_PAGES_PER_PASS_MAX;

use async_trait::async_trait;
use solana_commitment_config::CommitmentConfig;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Signature;
use solana_transaction_status_client_types::{
    TransactionConfirmationStatus, UiTransactionStatusMeta, option_serializer::OptionSerializer,
};

use payoutd_domain::asset::TokenKind;

use payoutd_domain::{
    Amount, Asset, AssetCode, Attempt, AttemptSlot, AttemptTx, Destination, Payout, SecretUrl,
    SolanaExpiry, TxKind, TxRef,
};
use payoutd_engine::endpoints::{Endpoint, Endpoints, EndpointsError};
use payoutd_engine::rail::ReadError;
use payoutd_engine::standalone::finality::{Sightings, absence_is_proof};
use payoutd_engine::standalone::{
    Foreign, OutgoingSince, PrepareError, Prepared, RailWallet, StandaloneRail, StandaloneStatus,
    SubmitOutcome,
};

use crate::key::SolanaKey;
use crate::rpc::{RpcError, SignaturePage, SolanaRpc};
use crate::signer::{SolanaSignError, SolanaSigner};
use crate::tx::{
    RENT_EXEMPT_EMPTY_ACCOUNT_LAMPORTS, SignedTransfer, SolanaToken, Transfer,
    associated_token_account, decode, is_token_program, message, nonce_advance_instructions,
    signed, transfer_instructions,
};
use solana_sdk::hash::Hash;
use std::time::{Duration, Instant};

/// The cap on the priority fee when the configuration names none, in micro-lamports per compute
/// unit (at 60,000 units, 0.0006 SOL).
pub const COMPUTE_UNIT_PRICE_CAP_MICRO_LAMPORTS_DEFAULT: u64 = 10_000;
/// Native SOL has 9 decimals (lamports).
pub const SOL_DECIMALS: u8 = 9;

/// Which commitment "paid" waits for: `finalized` unless a cluster is configured otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PaidAt {
    Confirmed,
    #[default]
    Finalized,
}

impl PaidAt {
    fn reached(self, status: Option<&TransactionConfirmationStatus>) -> bool {
        matches!(
            (self, status),
            (_, Some(TransactionConfirmationStatus::Finalized))
                | (PaidAt::Confirmed, Some(TransactionConfirmationStatus::Confirmed))
        )
    }

    fn commitment(self) -> CommitmentConfig {
        match self {
            PaidAt::Confirmed => CommitmentConfig::confirmed(),
            PaidAt::Finalized => CommitmentConfig::finalized(),
        }
    }
}

/// One cluster as configured: where its node is and how it decides.
#[derive(Clone)]
pub struct SolanaClusterConfig {
    /// The cluster's name in asset codes: `localnet`, `devnet`, `mainnet`.
    pub cluster: String,
    /// The cluster's RPC endpoints, in the order reads try them; sends go to every one.
    pub rpc_urls: Vec<SecretUrl>,
    pub paid_at: PaidAt,
    pub compute_unit_price_cap_micro_lamports: u64,
    /// Payouts in these assets are signed against this durable nonce account (the hot wallet its
    /// authority) instead of a recent blockhash: valid until the nonce moves, killed by moving it.
    pub durable_nonce: Option<DurableNonceConfig>,
}

/// The durable nonce account and the assets whose payouts use it.
#[derive(Clone)]
pub struct DurableNonceConfig {
    pub account: Pubkey,
    pub assets: Vec<AssetCode>,
}

/// The Solana rail for one cluster and one hot wallet.
pub struct SolanaRail {
    name: String,
    endpoints: Endpoints<SolanaRpc>,
    signer: SolanaSigner,
    /// The hot wallet as the ledger holds it (its row id, which attempts name as their fee payer).
    wallet: RailWallet,
    paid_at: PaidAt,
    price_cap: u64,
    assets: Vec<(AssetCode, SolanaToken)>,
    durable: Option<DurableNonceConfig>,
    /// The last blockhash and fee quote read, shared by the attempts prepared within
    /// [`SIGNING_QUOTE_REUSE_MS`] of the read.
    quote: std::sync::Mutex<Option<SigningQuote>>,
    /// Durable attempts whose nonce was seen at `finalized` holding another value with none of
    /// their signatures known, the value and the block height (processed) at that first sight.
    /// Dead only at a later check that finds the same value once the finalized height has passed
    /// the sighting: whatever moved the nonce is then final and its signature known to the node,
    /// and a finalized value that was merely behind the signed one has caught up (and the
    /// sighting is forgotten) or changed (and is sighted again). A node that answers account
    /// reads ahead of its signature index (seen on the local node) cannot make a landed transfer
    /// look dead this way.
    nonce_moved_seen: Sightings<Hash>,
}

/// What signing needs from the node, read once for the attempts prepared together.
#[derive(Debug, Clone, Copy)]
struct SigningQuote {
    read_at: Instant,
    blockhash: Hash,
    last_valid_block_height: u64,
    compute_unit_price: u64,
}

/// A blockhash is valid for this many blocks after its own: the last valid block height less this
/// is the height of the blockhash, below which nothing signed with it can land.
pub const BLOCKHASH_LIFETIME_BLOCKS: u64 = 150;

/// How long a blockhash and fee quote serve new attempts: a blockhash stays valid for 150 blocks
/// (about 60 s), so one second costs an attempt at most three blocks of its life.
pub const SIGNING_QUOTE_REUSE_MS: u64 = 1_000;

#[derive(Debug, thiserror::Error)]
pub enum SolanaSetupError {
    #[error("asset {0} is not on Solana cluster {1}")]
    WrongCluster(AssetCode, String),
    #[error("asset {0}: native SOL has {SOL_DECIMALS} decimals")]
    SolDecimals(AssetCode),
    #[error("asset {0}: a Solana asset is native SOL or an SPL token with its mint")]
    Kind(AssetCode),
    #[error("asset {0} uses the durable nonce but is not paid on this cluster")]
    DurableAsset(AssetCode),
    #[error("cluster name {0:?}: {1}")]
    Cluster(String, String),
    #[error("durable nonce account {0}: {1}")]
    NonceAccount(String, String),
    #[error(transparent)]
    Endpoints(#[from] EndpointsError),
}

/// The gauge of how many slots each endpoint is behind the highest of its cluster.
pub const ENDPOINT_LAG_METRIC: &str = "payoutd_rpc_endpoint_lag_slots";

impl SolanaRail {
    /// `wallet_id` is the hot wallet's row (`PipelineStore::ensure_solana_wallet`).
    pub fn new(
        config: SolanaClusterConfig,
        key: SolanaKey,
        wallet_id: String,
        assets: &[Asset],
    ) -> Result<SolanaRail, SolanaSetupError> {
        SolanaRail::with_signer(config, SolanaSigner::Local(key), wallet_id, assets)
    }

    /// `new`, the hot wallet signed for by `signer` (a signer service, or a key).
    pub fn with_signer(
        config: SolanaClusterConfig,
        signer: SolanaSigner,
        wallet_id: String,
        assets: &[Asset],
    ) -> Result<SolanaRail, SolanaSetupError> {
        let mut tokens = Vec::with_capacity(assets.len());
        for asset in assets {
            if asset.rail != payoutd_domain::RailFamily::Solana || asset.network != config.cluster {
                return Err(SolanaSetupError::WrongCluster(
                    asset.code.clone(),
                    config.cluster.clone(),
                ));
            }
            let token = match &asset.token {
                TokenKind::Native if asset.decimals == SOL_DECIMALS => SolanaToken::Sol,
                TokenKind::Native => return Err(SolanaSetupError::SolDecimals(asset.code.clone())),
                TokenKind::Spl(mint) => SolanaToken::Spl {
                    mint: Pubkey::new_from_array(*mint.as_bytes()),
                    decimals: asset.decimals,
                },
                _ => return Err(SolanaSetupError::Kind(asset.code.clone())),
            };
            tokens.push((asset.code.clone(), token));
        }
        for code in config.durable_nonce.iter().flat_map(|d| &d.assets) {
            if !tokens.iter().any(|(c, _)| c == code) {
                return Err(SolanaSetupError::DurableAsset(code.clone()));
            }
        }
        let name = format!("solana:{}", config.cluster);
        let endpoints = config.rpc_urls.iter().map(|url| {
            let rpc = SolanaRpc::new(url);
            Endpoint { host: rpc.host(), client: rpc }
        });
        let endpoints = Endpoints::new(name.clone(), ENDPOINT_LAG_METRIC, endpoints.collect())?;
        Ok(SolanaRail {
            name,
            endpoints,
            wallet: RailWallet {
                id: wallet_id,
                address: signer.pubkey().to_string(),
                native: Asset::new(
                    &format!("solana:{}/SOL", config.cluster),
                    SOL_DECIMALS,
                    TokenKind::Native,
                )
                .map_err(|e| SolanaSetupError::Cluster(config.cluster.clone(), e.to_string()))?,
            },
            signer,
            paid_at: config.paid_at,
            price_cap: config.compute_unit_price_cap_micro_lamports,
            assets: tokens,
            durable: config.durable_nonce,
            quote: std::sync::Mutex::new(None),
            nonce_moved_seen: Sightings::default(),
        })
    }

    /// `instructions` signed by the hot wallet's signer against `blockhash`. A signer that cannot
    /// be reached leaves the payout for a later pass (nothing of ours exists); an answer that is
    /// not the wallet's signature is refused, never stored or sent.
    async fn sign(
        &self,
        instructions: &[solana_sdk::instruction::Instruction],
        blockhash: Hash,
    ) -> Result<SignedTransfer, PrepareError> {
        let message = message(&self.signer.pubkey(), instructions, blockhash);
        let signature = match self.signer.sign(&message.serialize()).await {
            Ok(signature) => signature,
            Err(e @ SolanaSignError::Unreachable(_)) => {
                return Err(PrepareError::Unavailable(ReadError(e.to_string())));
            }
            Err(e @ SolanaSignError::Mismatch(_)) => {
                tracing::error!(rail = %self.name, error = %e, "the signer's answer is refused: nothing is stored or sent");
                return Err(PrepareError::Refused(e.to_string()));
            }
        };
        signed(message, signature).map_err(|e| PrepareError::Refused(e.to_string()))
    }

    pub fn hot_wallet_address(&self) -> Pubkey {
        self.signer.pubkey()
    }

    /// At start: the configured durable nonce account exists and the hot wallet is its authority
    /// (else every advance, and every payout signed against it, would fail on chain).
    pub async fn check_durable_nonce(&self) -> Result<(), SolanaSetupError> {
        let Some(durable) = &self.durable else { return Ok(()) };
        let (_, authority) = self
            .endpoints
            .read("nonce_state", |rpc| {
                rpc.nonce_state(&durable.account, CommitmentConfig::finalized())
            })
            .await
            .map_err(|e| {
                SolanaSetupError::NonceAccount(durable.account.to_string(), e.to_string())
            })?;
        if authority != self.signer.pubkey() {
            return Err(SolanaSetupError::NonceAccount(
                durable.account.to_string(),
                format!(
                    "its authority is {authority}, not the hot wallet {}",
                    self.signer.pubkey()
                ),
            ));
        }
        Ok(())
    }

    /// The endpoint reads go to first.
    pub fn rpc(&self) -> &SolanaRpc {
        self.endpoints.preferred()
    }

    fn token_of(&self, code: &AssetCode) -> Option<SolanaToken> {
        self.assets.iter().find(|(c, _)| c == code).map(|(_, t)| *t)
    }

    /// Refuses, before anything is signed, a destination that would swallow the payout or make it
    /// fail on chain, read at `confirmed`: an account owned by SPL Token or Token-2022 (a token
    /// account or a mint pasted instead of a wallet: a token account created for it as "owner"
    /// can never be spent), or, for SOL, an account that does not exist yet and that the amount
    /// cannot make rent-exempt (the transfer would fail on chain and wait for a person).
    async fn refuse_swallowing_destination(
        &self,
        token: SolanaToken,
        destination: &Pubkey,
        amount_base_units: u64,
    ) -> Result<(), PrepareError> {
        let owner = self
            .endpoints
            .read("account_owner", |rpc| {
                rpc.account_owner(destination, CommitmentConfig::confirmed())
            })
            .await
            .map_err(|e| PrepareError::Unavailable(read_error(e)))?;
        match (owner, token) {
            (Some(program), _) if is_token_program(&program) => {
                Err(PrepareError::Refused(format!(
                    "destination {destination} is a token account or a mint (owned by {program}), not a wallet: a payout to it could never be spent"
                )))
            }
            (None, SolanaToken::Sol) if amount_base_units < RENT_EXEMPT_EMPTY_ACCOUNT_LAMPORTS => {
                Err(PrepareError::Refused(format!(
                    "destination {destination} does not exist yet and {amount_base_units} lamports cannot open it: a new account needs at least {RENT_EXEMPT_EMPTY_ACCOUNT_LAMPORTS} to be rent-exempt"
                )))
            }
            _ => Ok(()),
        }
    }

    /// A recent blockhash and the priority fee to bid, read again once the last read is older
    /// than [`SIGNING_QUOTE_REUSE_MS`].
    async fn signing_quote(&self) -> Result<SigningQuote, RpcError> {
        if let Some(q) = *self.quote.lock().expect("quote lock")
            && q.read_at.elapsed() < Duration::from_millis(SIGNING_QUOTE_REUSE_MS)
        {
            return Ok(q);
        }
        let compute_unit_price = self.compute_unit_price().await?;
        let (blockhash, last_valid_block_height) =
            self.endpoints.read("blockhash", SolanaRpc::latest_blockhash).await?;
        let q = SigningQuote {
            read_at: Instant::now(),
            blockhash,
            last_valid_block_height,
            compute_unit_price,
        };
        *self.quote.lock().expect("quote lock") = Some(q);
        Ok(q)
    }

    /// The median recent priority fee paid by transactions writing the hot wallet, capped.
    async fn compute_unit_price(&self) -> Result<u64, RpcError> {
        let wallet = [self.signer.pubkey()];
        let mut fees = self.endpoints.read("fees", |rpc| rpc.recent_priority_fees(&wallet)).await?;
        fees.sort_unstable();
        let median = fees.get(fees.len() / 2).copied().unwrap_or(0);
        Ok(median.min(self.price_cap))
    }

    /// The signatures of the attempt's payout transfers (a cancel moves nothing: it is not one).
    fn signatures_of(attempt: &Attempt) -> Result<Vec<Signature>, ReadError> {
        attempt
            .txs
            .iter()
            .filter(|tx| tx.kind != TxKind::Cancel)
            .map(|tx| {
                tx.hash
                    .as_str()
                    .parse::<Signature>()
                    .map_err(|e| ReadError(format!("stored signature {}: {e}", tx.hash)))
            })
            .collect()
    }
}

fn read_error(e: RpcError) -> ReadError {
    ReadError(e.to_string())
}

/// The amount in base units, when it fits the chain's u64.
fn base_units(amount: Amount) -> Option<u64> {
    amount.to_string().parse().ok()
}

#[async_trait]
impl StandaloneRail for SolanaRail {
    fn name(&self) -> &str {
        &self.name
    }

    /// One call to each endpoint, one after another, and the resolver's lease.
    fn first_send_within_ms(&self) -> i64 {
        let calls = i64::try_from(self.endpoints.len()).unwrap_or(i64::MAX / 4);
        let call_ms = i64::try_from(crate::rpc::RPC_CALL_TIMEOUT_MS).unwrap_or(i64::MAX / 4);
        calls.saturating_mul(call_ms).saturating_add(payoutd_engine::pipeline::RESOLVE_LEASE_MS)
    }

    /// Any Solana slot: routes list only providers after their first rail, so the Solana rail
    /// paying a payout's asset is the only one its Solana attempts can belong to.
    fn owns(&self, slot: &AttemptSlot) -> bool {
        matches!(slot, AttemptSlot::Solana { .. })
    }

    async fn prepare(
        &self,
        payout: &Payout,
        attempt_no: u32,
        reference: &payoutd_domain::ChainReference,
    ) -> Result<Prepared, PrepareError> {
        let token = self.token_of(&payout.asset).ok_or_else(|| {
            PrepareError::Refused(format!("asset {} is not paid by {}", payout.asset, self.name))
        })?;
        let Destination::Solana(destination) = &payout.destination else {
            return Err(PrepareError::Refused(format!(
                "destination {} is not a Solana address",
                payout.destination
            )));
        };
        let amount_base_units = base_units(payout.amount).ok_or_else(|| {
            PrepareError::Refused(format!("amount {} does not fit a Solana u64", payout.amount))
        })?;
        let destination = Pubkey::new_from_array(*destination.as_bytes());
        self.refuse_swallowing_destination(token, &destination, amount_base_units).await?;
        let quote =
            self.signing_quote().await.map_err(|e| PrepareError::Unavailable(read_error(e)))?;
        let transfer = Transfer {
            token,
            destination,
            amount_base_units,
            compute_unit_price_micro_lamports: quote.compute_unit_price,
            reference: *reference,
        };
        let (signed, expiry) = match self.durable_account_for(&payout.asset) {
            Some(account) => self.sign_durable(&transfer, account).await?,
            None => {
                let instructions = transfer_instructions(&self.signer.pubkey(), &transfer)
                    .map_err(|e| PrepareError::Refused(e.to_string()))?;
                let signed = self.sign(&instructions, quote.blockhash).await?;
                (signed, SolanaExpiry::LastValidBlockHeight(quote.last_valid_block_height))
            }
        };
        tracing::debug!(rail = %self.name, payout = %payout.id, attempt_no, signature = %signed.signature, ?expiry, "signed");
        let hash = TxRef::parse(&signed.signature.to_string())
            .map_err(|_| PrepareError::Refused("a signature that is not a reference".into()))?;
        Ok(Prepared {
            slot: AttemptSlot::Solana { fee_payer: self.wallet.id.clone(), expiry },
            tx: AttemptTx {
                hash,
                kind: TxKind::Original,
                raw: signed.raw,
                fees: None,
                created_at_ms: 0,
            },
        })
    }

    /// The stored bytes to every endpoint: taken when any one took them (a second copy of one
    /// signed transaction lands once at most).
    async fn submit(&self, attempt: &Attempt) -> SubmitOutcome {
        let raw = &attempt.latest_tx().raw;
        let answers = self.endpoints.every(|rpc| rpc.send_raw(raw)).await;
        let mut refusals = Vec::new();
        for (endpoint, answer) in answers.into_iter().enumerate() {
            match answer {
                Ok(_) => return SubmitOutcome::Accepted { reference: None },
                Err(e) => {
                    self.endpoints.count_error(endpoint, "send");
                    refusals.push(e.to_string());
                }
            }
        }
        SubmitOutcome::NotAccepted(refusals.join("; "))
    }

    async fn cancel(&self, attempt: &Attempt) -> Result<AttemptTx, PrepareError> {
        let AttemptSlot::Solana {
            expiry: SolanaExpiry::DurableNonce { account, value, .. }, ..
        } = &attempt.slot
        else {
            return Err(PrepareError::Refused(format!(
                "attempt {} is signed against a recent blockhash: it ends by itself once its last valid block height passes",
                attempt.id
            )));
        };
        let nonce =
            Self::durable_nonce_of(attempt, account, value).map_err(PrepareError::Unavailable)?;
        let signed = self
            .sign(&nonce_advance_instructions(&self.signer.pubkey(), &nonce), nonce.value)
            .await?;
        let hash = TxRef::parse(&signed.signature.to_string())
            .map_err(|_| PrepareError::Refused("a signature that is not a reference".into()))?;
        Ok(AttemptTx { hash, kind: TxKind::Cancel, raw: signed.raw, fees: None, created_at_ms: 0 })
    }

    fn reconcile_cursor_name(&self) -> Option<String> {
        Some(format!("{}/{}", self.name, self.signer.pubkey()))
    }

    async fn outgoing_since(&self, cursor: Option<&str>) -> Result<OutgoingSince, ReadError> {
        let Some(cursor) = cursor else {
            // The starting point: the newest transaction naming the wallet now (set-up included).
            let page = SignaturePage {
                until: None,
                before: None,
                limit: 1,
                commitment: CommitmentConfig::confirmed(),
            };
            let wallet = self.signer.pubkey();
            let newest = self
                .endpoints
                .read("signatures", |rpc| rpc.signatures_page(&wallet, page))
                .await
                .map_err(read_error)?;
            let start = newest
                .first()
                .map_or_else(|| CURSOR_FROM_GENESIS.to_owned(), |(s, _)| s.to_string());
            return Ok(OutgoingSince {
                refs: Vec::new(),
                cursor: Some(start),
                carried: Vec::new(),
            });
        };
        self.finalized_since(cursor).await
    }

    async fn outgoing_of(&self, refs: &[TxRef]) -> Result<Vec<Foreign>, ReadError> {
        self.foreign_of(refs).await
    }

    async fn listed_since(&self, cursor: &str) -> Result<Vec<TxRef>, ReadError> {
        self.confirmed_since(cursor).await
    }

    fn hot_wallet(&self) -> Option<&RailWallet> {
        Some(&self.wallet)
    }

    async fn wallet_balances(&self, assets: &[Asset]) -> Result<Vec<Amount>, ReadError> {
        if let Some(asset) =
            assets.iter().find(|a| !matches!(a.token, TokenKind::Native | TokenKind::Spl(_)))
        {
            return Err(ReadError(format!("asset {} is not a Solana asset", asset.code)));
        }
        // Every balance from one endpoint: one view of the wallet.
        let balances = self
            .endpoints
            .read("balances", |rpc| self.balances_on(rpc, assets))
            .await
            .map_err(read_error)?;
        Ok(balances)
    }

    async fn status(
        &self,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<StandaloneStatus, ReadError> {
        let AttemptSlot::Solana { expiry, .. } = &attempt.slot else {
            return Err(ReadError(format!("attempt {} is not a Solana attempt", attempt.id)));
        };
        let signatures = Self::signatures_of(attempt)?;
        let last_valid = match expiry {
            SolanaExpiry::LastValidBlockHeight(height) => height,
            SolanaExpiry::DurableNonce { .. } => {
                return self.durable_status(&signatures, attempt, payout).await;
            }
        };
        if let Some(landed) = self.landed(&signatures, attempt, payout).await? {
            return Ok(landed);
        }
        // The proof from one endpoint, whole: another is asked only when this one cannot give it.
        self.endpoints
            .read("expiry_proof", |rpc| {
                self.expiry_proof(rpc, &signatures, *last_valid, attempt, payout)
            })
            .await
    }
}

impl SolanaRail {
    /// Every balance of the hot wallet in `assets` (SOL or SPL), as `rpc` answers them.
    async fn balances_on(
        &self,
        rpc: &SolanaRpc,
        assets: &[Asset],
    ) -> Result<Vec<Amount>, RpcError> {
        let owner = self.signer.pubkey();
        let commitment = self.paid_at.commitment();
        let mut balances = Vec::with_capacity(assets.len());
        for asset in assets {
            let units = match &asset.token {
                TokenKind::Spl(mint) => {
                    let account =
                        associated_token_account(&owner, &Pubkey::new_from_array(*mint.as_bytes()));
                    rpc.token_account_amount(&account, commitment).await?
                }
                _ => rpc.balance(&owner, commitment).await?,
            };
            balances.push(Amount::from_u128(u128::from(units)));
        }
        Ok(balances)
    }
}
