//! The operator's commands that change or show money outside the workers: deposits, payouts by hand (approve, reject, cancel, retry), hot wallet funding and listing, merchant keys.

use std::sync::Arc;

use payoutd::config;
use payoutd::rails::{build_pipeline, operator_pipeline};

use anyhow::Context;
use payoutd_domain::{Amount, ApiKeyId, AssetCode, DepositKey, HotWallet, MerchantId, PayoutId};
use payoutd_engine::{Clock, Engine, Pipeline, SystemClock, Verdict};

use crate::cli::{KeyCommand, PayoutCommand, WalletCommand};
use crate::random_key_bytes;

/// `payoutd deposit`: credits a merchant, idempotently on its key; a new credit reaches the audit log.
pub(crate) async fn deposit_command(
    stores: &payoutd_store::Stores,
    cfg: &config::Config,
    engine: &Engine,
    merchant: &str,
    asset: &str,
    amount: &str,
    idempotency_key: &str,
) -> anyhow::Result<()> {
    let merchant =
        MerchantId::parse(merchant).context("--merchant is not a merchant id (mer_...)")?;
    let asset = cfg.assets.get(asset)?.code.clone();
    let amount = Amount::parse_positive(amount).context("--amount")?;
    let key = DepositKey::parse(idempotency_key).context("--idempotency-key")?;
    let (d, replay) = engine.deposit(&merchant, &asset, amount, key).await?;
    if replay == payoutd_engine::Replay::Created {
        let detail = format!("{} {} credited ({})", d.amount, d.asset, d.id);
        payoutd::audit::record(
            stores.operator_views.as_ref(),
            "deposit",
            merchant.as_str(),
            detail,
        )
        .await?;
    }
    println!(
        "{}",
        serde_json::json!({"id": d.id.as_str(), "merchant_id": d.merchant_id.as_str(), "asset": d.asset.as_str(),
            "amount": d.amount.to_string(), "replayed": replay == payoutd_engine::Replay::Replayed})
    );
    Ok(())
}

/// The longest funding reference accepted (a transaction hash or a ticket id fits).
const FUNDING_REFERENCE_LEN_MAX: usize = 128;

pub(crate) fn wallet_list(cfg: &config::Config) -> anyhow::Result<()> {
    let rows = payoutd::rails::hot_wallet_rows(cfg);
    if rows.is_empty() {
        anyhow::bail!(
            "no hot wallet is configured ([[chains]] hot_wallet_key_envs/files, [[solana]] hot_wallet_key_env/file)"
        );
    }
    for row in rows {
        println!("{row}");
    }
    Ok(())
}

/// An operator's action on one payout; deciding a held payout needs only the database, the others
/// read or sign on the payout's rail.
pub(crate) async fn payout_command(
    stores: &payoutd_store::Stores,
    cfg: &config::Config,
    command: PayoutCommand,
    clock: &Arc<dyn Clock>,
) -> anyhow::Result<()> {
    async fn with_rails(
        stores: &payoutd_store::Stores,
        cfg: &config::Config,
        clock: &Arc<dyn Clock>,
    ) -> anyhow::Result<Pipeline> {
        build_pipeline(stores, cfg, clock)
            .await?
            .context("no rail is configured ([[chains]], [[solana]] or [[providers]]): this action reads or signs on the payout's rail")
    }
    let action = command.action();
    let payout = match command {
        PayoutCommand::Approve { id } => {
            operator_pipeline(stores.pipeline.clone(), cfg, clock.clone())
                .approve(&payout_id(&id)?)
                .await?
        }
        PayoutCommand::Reject { id } => {
            operator_pipeline(stores.pipeline.clone(), cfg, clock.clone())
                .reject(&payout_id(&id)?)
                .await?
        }
        PayoutCommand::Cancel { id } => {
            let tx = with_rails(stores, cfg, clock).await?.cancel_signed(&payout_id(&id)?).await?;
            payoutd::audit::record(
                stores.operator_views.as_ref(),
                "cancel",
                &id,
                format!("cancel transaction {} sent", tx.hash),
            )
            .await?;
            println!("{}", serde_json::json!({"cancel_tx": tx.hash.as_str()}));
            return Ok(());
        }
        PayoutCommand::ResolvePaid { id, evidence } => {
            with_rails(stores, cfg, clock)
                .await?
                .resolve_needs_attention(&payout_id(&id)?, Verdict::Paid, &evidence)
                .await?
        }
        PayoutCommand::ResolveFailed { id, evidence } => {
            with_rails(stores, cfg, clock)
                .await?
                .resolve_needs_attention(&payout_id(&id)?, Verdict::Failed, &evidence)
                .await?
        }
        PayoutCommand::ResolveRetry { id, evidence } => {
            with_rails(stores, cfg, clock)
                .await?
                .resolve_needs_attention(&payout_id(&id)?, Verdict::Retry, &evidence)
                .await?
        }
    };
    payoutd::audit::record(
        stores.operator_views.as_ref(),
        action,
        payout.id.as_str(),
        format!("now {}", payout.status.as_str()),
    )
    .await?;
    println!("{}", serde_json::json!({"id": payout.id.as_str(), "status": payout.status.as_str()}));
    Ok(())
}

/// The hot wallet a top-up goes to (its row id, which a worker registered) and the asset it arrived
/// in, checked to be an asset of that wallet's network: an EVM chain, a Solana cluster, or a
/// provider's account (`provider:<name>`, whose fee asset need not be a payable one).
async fn funded_wallet(
    stores: &payoutd_store::Stores,
    cfg: &config::Config,
    chain: &str,
    address: &str,
    asset: &str,
) -> anyhow::Result<(String, AssetCode)> {
    let store = stores.pipeline.as_ref();
    let unknown = || {
        format!(
            "no hot wallet {address} on {chain}: a wallet is registered when a worker first runs with its key or provider account"
        )
    };
    if let Some(name) = chain.strip_prefix("provider:") {
        let (code, rail, network) =
            AssetCode::parse(asset).with_context(|| format!("--asset {asset:?}"))?;
        if rail != payoutd_domain::RailFamily::Provider || network != name {
            anyhow::bail!("asset {code} is not an asset of {chain}");
        }
        return Ok((store.signing_wallet(chain, address).await?.with_context(unknown)?, code));
    }
    let asset = cfg.assets.get(asset)?;
    let wallet_id = match chain.strip_prefix("solana:") {
        Some(cluster) => {
            let address = payoutd_domain::SolanaAddress::parse(address)
                .context("--address is not a base58 Solana address")?;
            if asset.rail != payoutd_domain::RailFamily::Solana || asset.network != cluster {
                anyhow::bail!("asset {} is not an asset of {chain}", asset.code);
            }
            store.signing_wallet(chain, &address.to_string()).await?.with_context(unknown)?
        }
        None => {
            let chain_id: u64 = chain.strip_prefix("evm:").unwrap_or(chain).parse().context(
                "--chain is neither an EVM chain id nor solana:<cluster> nor provider:<name>",
            )?;
            let address = payoutd_domain::EvmAddress::parse(address)
                .context("--address is not a 0x EVM address")?;
            if asset.evm_chain_id() != Some(chain_id) {
                anyhow::bail!("asset {} is not an asset of chain {chain_id}", asset.code);
            }
            let wallet_id = HotWallet::id_for(chain_id, &address);
            stores.evm_lines.hot_wallet(&wallet_id).await?.with_context(unknown)?;
            wallet_id
        }
    };
    Ok((wallet_id, asset.code.clone()))
}

pub(crate) async fn wallet_command(
    stores: &payoutd_store::Stores,
    cfg: &config::Config,
    command: WalletCommand,
) -> anyhow::Result<()> {
    let store = stores.pipeline.as_ref();
    let (chain, address, asset, amount, reference) = match command {
        WalletCommand::List => return wallet_list(cfg),
        WalletCommand::Fund { chain, address, asset, amount, reference } => {
            (chain, address, asset, amount, reference)
        }
    };
    let amount = Amount::parse_positive(&amount).context("--amount")?;
    let reference = reference.trim();
    if reference.is_empty()
        || reference.len() > FUNDING_REFERENCE_LEN_MAX
        || !reference.bytes().all(|b| b.is_ascii_graphic())
    {
        anyhow::bail!(
            "--reference must be 1 to {FUNDING_REFERENCE_LEN_MAX} printable ASCII characters without spaces"
        );
    }
    let (wallet_id, asset) = funded_wallet(stores, cfg, &chain, &address, &asset).await?;
    let funding = payoutd_engine::pipeline_store::WalletFunding {
        reference: format!("funding:{reference}"),
        kind: payoutd_engine::pipeline_store::FundingKind::Funding,
        wallet_id,
        asset,
        amount,
        at_ms: payoutd_engine::Clock::now_ms(&SystemClock),
    };
    let booked = store.book_wallet_funding(&funding).await?;
    if booked {
        payoutd::audit::record(
            stores.operator_views.as_ref(),
            "wallet_fund",
            &funding.wallet_id,
            format!("{amount} {} booked ({reference})", funding.asset),
        )
        .await?;
    }
    println!(
        "{}",
        serde_json::json!({"wallet_id": funding.wallet_id, "asset": funding.asset.as_str(), "amount": amount.to_string(),
            "reference": reference, "booked": booked})
    );
    Ok(())
}

/// `payoutd merchant create`: the merchant and its first API key, shown once, then audited (the
/// key is shown first: it exists either way, and is shown only this once).
pub(crate) async fn merchant_create_command(
    engine: &Engine,
    audit: &dyn payoutd_engine::OperatorViewStore,
    name: &str,
) -> anyhow::Result<()> {
    let (id, key) = engine.create_merchant(name, random_key_bytes()?).await?;
    println!(
        "{}",
        serde_json::json!({"id": id.as_str(), "name": name.trim(), "api_key": key.expose()})
    );
    let detail = format!("created {:?} with its first API key", name.trim());
    payoutd::audit::record(audit, "create_merchant", id.as_str(), detail).await
}

pub(crate) async fn key_command(
    engine: &Engine,
    audit: &dyn payoutd_engine::OperatorViewStore,
    command: KeyCommand,
) -> anyhow::Result<()> {
    let merchant = |text: &str| {
        MerchantId::parse(text).with_context(|| format!("{text:?} is not a merchant id (mer_...)"))
    };
    match command {
        KeyCommand::Create { merchant_id } => {
            let merchant = merchant(&merchant_id)?;
            let (id, key) = engine.create_api_key(&merchant, random_key_bytes()?).await.map_err(
                |e| match e {
                    payoutd_engine::IntakeError::UnknownMerchant => {
                        anyhow::anyhow!("no merchant {merchant}")
                    }
                    other => other.into(),
                },
            )?;
            payoutd::audit::record(
                audit,
                "create_api_key",
                merchant.as_str(),
                format!("key {id} created"),
            )
            .await?;
            println!(
                "{}",
                serde_json::json!({"id": id.as_str(), "merchant_id": merchant.as_str(), "api_key": key.expose()})
            );
        }
        KeyCommand::List { merchant_id } => {
            for k in engine.api_keys(&merchant(&merchant_id)?).await? {
                println!(
                    "{}",
                    serde_json::json!({"id": k.id.as_str(), "merchant_id": k.merchant_id.as_str(), "created_at_ms": k.created_at_ms,
                        "revoked_at_ms": k.revoked_at_ms})
                );
            }
        }
        KeyCommand::Revoke { key_id } => {
            let id = ApiKeyId::parse(&key_id)
                .with_context(|| format!("{key_id:?} is not an API key id (key_...)"))?;
            engine.revoke_api_key(&id).await.map_err(|e| match e {
                payoutd_engine::IntakeError::NotFound => {
                    anyhow::anyhow!("no API key {id} that is not already revoked")
                }
                other => other.into(),
            })?;
            payoutd::audit::record(audit, "revoke_api_key", id.as_str(), "revoked".to_owned())
                .await?;
            println!("{}", serde_json::json!({"id": id.as_str(), "revoked": true}));
        }
    }
    Ok(())
}

fn payout_id(text: &str) -> anyhow::Result<PayoutId> {
    PayoutId::parse(text).with_context(|| format!("{text:?} is not a payout id (po_...)"))
}

/// `payoutd webhooks reseal`: every webhook secret sealed again under the current key, audited.
pub(crate) async fn reseal_command(
    stores: &payoutd_store::Stores,
    cfg: &config::Config,
) -> anyhow::Result<()> {
    let current = cfg
        .webhook_secrets_key
        .as_ref()
        .context("PAYOUTD_WEBHOOK_SECRETS_KEY must be set: the key to seal the secrets under")?;
    let previous = config::previous_webhook_secrets_key()?;
    let resealed =
        payoutd_store::reseal_webhook_secrets(&cfg.database_url, current, previous.as_deref())
            .await?;
    let detail = format!("{resealed} webhook secrets sealed under the current key");
    payoutd::audit::record(
        stores.operator_views.as_ref(),
        "webhooks_reseal",
        "webhook_secrets",
        detail,
    )
    .await?;
    println!("{}", serde_json::json!({"resealed": resealed}));
    Ok(())
}

/// `payoutd incidents`: the open incidents, one JSON object a line.
pub(crate) async fn incidents_command(
    store: &dyn payoutd_engine::PipelineStore,
) -> anyhow::Result<()> {
    for i in store.open_incidents(payoutd_engine::store::LIST_LIMIT_MAX).await? {
        println!(
            "{}",
            serde_json::json!({"id": i.id.as_str(), "kind": i.kind.as_str(), "payout_id": i.payout_id.map(|p| p.to_string()),
                "attempt_id": i.attempt_id.map(|a| a.to_string()), "detail": i.detail, "created_at_ms": i.created_at_ms})
        );
    }
    Ok(())
}
