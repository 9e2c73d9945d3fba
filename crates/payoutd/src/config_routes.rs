//! The `[[routes]]` of the configuration file: per asset, the provider rails that take a payout's later attempts once the one before is proven dead.

use anyhow::{Context, bail};
use payoutd_domain::asset::TokenKind;
use payoutd_domain::{AssetCode, AssetRegistry, Route, Routes};
use serde::Deserialize;

use crate::providers::ProviderConfig;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileRoute {
    /// The payouts' asset; its own rail makes their first attempt.
    asset: String,
    /// Provider assets (`provider:<name>/<SYMBOL>`) whose rails make attempts 2, 3, … in this
    /// order; the last makes every attempt after.
    then: Vec<String>,
}

/// The routes the file lists, each checked against the assets: a later rail must be a provider's,
/// pay the same number of decimals to the same kind of destination.
pub(crate) fn routes(listed: Vec<FileRoute>, assets: &AssetRegistry) -> anyhow::Result<Routes> {
    let mut routes = Vec::with_capacity(listed.len());
    for r in listed {
        let asset =
            assets.get(&r.asset).with_context(|| format!("route of {:?}: asset", r.asset))?;
        let mut then = Vec::with_capacity(r.then.len());
        for code in &r.then {
            let next =
                assets.get(code).with_context(|| format!("route of {}: {code:?}", asset.code))?;
            if !matches!(next.token, TokenKind::Provider(_)) {
                bail!(
                    "route of {}: {code} is not a provider asset; only a provider's rail makes attempts for another asset's payouts",
                    asset.code
                );
            }
            if next.decimals != asset.decimals
                || next.destination_kind() != asset.destination_kind()
            {
                bail!(
                    "route of {}: {code} pays {} decimals to {:?} destinations, the asset {} to {:?}; a route's rails pay the same money to the same address",
                    asset.code,
                    next.decimals,
                    next.destination_kind(),
                    asset.decimals,
                    asset.destination_kind()
                );
            }
            then.push(next.code.clone());
        }
        routes.push(
            Route::new(asset.code.clone(), then)
                .with_context(|| format!("route of {}", asset.code))?,
        );
    }
    Routes::new(routes).context("routes")
}

/// Each route's providers are of different kinds: an attempt is told apart by its provider's kind,
/// so two providers of one kind in one route could each claim the other's attempt.
pub(crate) fn check_route_providers(
    routes: &Routes,
    providers: &[ProviderConfig],
) -> anyhow::Result<()> {
    for route in routes.iter() {
        let mut kinds = Vec::new();
        for asset in route.rails() {
            let Some(name) = provider_name(asset) else { continue };
            let Some(provider) = providers.iter().find(|p| p.name == name) else {
                bail!(
                    "route of {}: no [[providers]] entry named {name:?} pays {asset}",
                    route.asset()
                );
            };
            if kinds.contains(&provider.kind()) {
                bail!(
                    "route of {}: two {} providers; a route may list one provider of each kind",
                    route.asset(),
                    provider.kind()
                );
            }
            kinds.push(provider.kind());
        }
    }
    Ok(())
}

/// `circle` of `provider:circle/USDC`.
fn provider_name(asset: &AssetCode) -> Option<&str> {
    asset.as_str().strip_prefix("provider:").and_then(|rest| rest.split('/').next())
}

#[cfg(test)]
mod tests {

    const USDC: &str = "[[assets]]\ncode = \"evm:1/USDC\"\ndecimals = 6\nkind = \"erc20\"\ntoken_address = \"0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48\"\n";

    fn provider_asset(name: &str, decimals: u8, destination: &str) -> String {
        format!(
            "[[assets]]\ncode = \"provider:{name}/USDC\"\ndecimals = {decimals}\nkind = \"provider\"\ndestination = \"{destination}\"\n"
        )
    }

    fn bridge(name: &str) -> String {
        format!(
            "[[providers]]\nkind = \"bridge\"\nname = \"{name}\"\nbase_url = \"https://api.example\"\napi_key_env = \"PAYOUTD_TEST_ROUTE_KEY\"\naccount = \"wallet_{name}\"\n\
             customer_id = \"cust\"\npayment_rail = \"ethereum\"\ncurrency = \"usdc\"\n"
        )
    }

    fn load_text(text: &str) -> anyhow::Result<crate::config::Config> {
        // SAFETY: the one variable these tests read, set to the same value by each; no test removes it.
        unsafe { std::env::set_var("PAYOUTD_TEST_ROUTE_KEY", "sk_test_route") };
        crate::config::tests::load_top(text)
    }

    fn refusal(text: &str) -> String {
        load_text(text).err().map(|e| format!("{e:#}")).unwrap_or_default()
    }

    /// A route is read in its order; a rail after the first that is not a provider's, pays other
    /// decimals or another kind of destination, is not configured, or shares its kind with another
    /// of the route's providers is refused at start, saying which. (Before, `[[routes]]` was an
    /// unknown field.)
    #[test]
    fn a_route_is_read_and_a_route_that_could_pay_other_money_is_refused() {
        let base = format!("{USDC}{}{}", provider_asset("b1", 6, "evm"), bridge("b1"));
        let loaded = load_text(&format!(
            "{base}[[routes]]\nasset = \"evm:1/USDC\"\nthen = [\"provider:b1/USDC\"]\n"
        ))
        .unwrap();
        let route = loaded.routes.iter().next().unwrap();
        assert_eq!(
            route.rails().iter().map(|a| a.as_str()).collect::<Vec<_>>(),
            ["evm:1/USDC", "provider:b1/USDC"]
        );
        let route_to =
            |then: &str| format!("[[routes]]\nasset = \"evm:1/USDC\"\nthen = [{then}]\n");
        let cases = [
            (format!("{base}{}", route_to("\"evm:1/USDC\"")), "is not a provider asset".to_owned()),
            (
                format!(
                    "{USDC}{}{}{}",
                    provider_asset("b1", 2, "evm"),
                    bridge("b1"),
                    route_to("\"provider:b1/USDC\"")
                ),
                "pays 2 decimals".to_owned(),
            ),
            (
                format!(
                    "{USDC}{}{}{}",
                    provider_asset("b1", 6, "solana"),
                    bridge("b1"),
                    route_to("\"provider:b1/USDC\"")
                ),
                "to Solana destinations".to_owned(),
            ),
            (
                format!(
                    "{USDC}{}{}",
                    provider_asset("b1", 6, "evm"),
                    route_to("\"provider:b1/USDC\"")
                ),
                "no [[providers]] entry named \"b1\"".to_owned(),
            ),
            (
                format!(
                    "{base}{}{}{}",
                    provider_asset("b2", 6, "evm"),
                    bridge("b2"),
                    route_to("\"provider:b1/USDC\", \"provider:b2/USDC\"")
                ),
                "two bridge providers".to_owned(),
            ),
            (
                format!("{base}{}", route_to("\"provider:b1/USDC\", \"provider:b1/USDC\"")),
                "twice".to_owned(),
            ),
            (format!("{base}{}", route_to("")), "at least one rail".to_owned()),
            (
                format!(
                    "{base}{}{}",
                    route_to("\"provider:b1/USDC\""),
                    route_to("\"provider:b1/USDC\"")
                ),
                "has two routes".to_owned(),
            ),
        ];
        for (text, expected) in cases {
            let refused = refusal(&text);
            assert!(refused.contains(&expected), "expected {expected:?}, got {refused:?}");
        }
    }
}
