//! `payoutd statement`: a merchant's statement for a period as CSV, for finance (the opening balances, each ledger entry with the balances after it, the closing balances).

use anyhow::Context;
use payoutd::config;
use payoutd_domain::MerchantId;
use payoutd_engine::statement_text::{parse_instant, statement_csv};
use payoutd_engine::statements::{Period, statement};

pub(crate) async fn statement_command(
    stores: &payoutd_store::Stores,
    cfg: &config::Config,
    engine: &payoutd_engine::Engine,
    merchant: &str,
    asset: &str,
    (from, to): (&str, &str),
) -> anyhow::Result<()> {
    let merchant =
        MerchantId::parse(merchant).context("--merchant is not a merchant id (mer_...)")?;
    let asset = cfg.assets.get(asset)?.code.clone();
    let period =
        Period::new(parse_instant(from).context("--from")?, parse_instant(to).context("--to")?)?;
    // A merchant keeps every key it was given, revoked ones too: none means no such merchant.
    if engine.api_keys(&merchant).await?.is_empty() {
        anyhow::bail!("no merchant {merchant}");
    }
    let statement = statement(stores.operator_views.as_ref(), &merchant, &asset, period).await?;
    print!("{}", statement_csv(&statement));
    Ok(())
}
