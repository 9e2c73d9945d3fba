//! The `[[routes]]` of the configuration file: per asset, the provider rails that take a payout's later attempts once the one before is proven dead.

use anyhow::{Context, bail};
use payoutd_domain::asset::TokenKind;
use payoutd_domain::{Asset, AssetCode, AssetRegistry, RailFamily, Route, Routes};
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

/// Where a rail's payouts arrive, compared across a route's rails.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Network {
    Evm(u64),
    Solana(String),
    /// A provider's own ledger (Stripe's balances): no chain.
    OffChain,
    /// A chain or network name payoutd does not know: equal to nothing, so a route naming it is
    /// refused rather than trusted.
    Unknown(String),
}

impl std::fmt::Display for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Network::Evm(id) => write!(f, "EVM chain {id}"),
            Network::Solana(cluster) => write!(f, "Solana {cluster}"),
            Network::OffChain => write!(f, "no chain (the provider's own balances)"),
            Network::Unknown(name) => write!(f, "unknown network {name:?}"),
        }
    }
}

/// A chain or network as Coinbase (`network`), Bridge (`payment_rail`) and Circle (`blockchain`)
/// name it, compared case-insensitively.
fn network_named(name: &str) -> Network {
    let name = name.to_ascii_lowercase().replace('_', "-");
    let evm = |id| Some(Network::Evm(id));
    let known = match name.as_str() {
        "ethereum" | "eth" => evm(1),
        "ethereum-sepolia" | "eth-sepolia" => evm(11_155_111),
        "base" => evm(8_453),
        "base-sepolia" => evm(84_532),
        "polygon" | "matic" => evm(137),
        "polygon-amoy" | "matic-amoy" => evm(80_002),
        "arbitrum" | "arb" => evm(42_161),
        "arbitrum-sepolia" | "arb-sepolia" => evm(421_614),
        "optimism" | "op" => evm(10),
        "optimism-sepolia" | "op-sepolia" => evm(11_155_420),
        "avalanche" | "avalanche-c-chain" | "avax" => evm(43_114),
        "solana" | "sol" => Some(Network::Solana("mainnet".into())),
        "solana-devnet" | "sol-devnet" => Some(Network::Solana("devnet".into())),
        _ => None,
    };
    known.unwrap_or(Network::Unknown(name))
}

/// What a route's rail pays: the token (upper-case) and where, with the settings that say so.
struct RailPays {
    token: String,
    network: Network,
    said_by: String,
}

/// What `asset`'s rail pays: a chain asset's own code says it; a provider's settings say theirs.
fn rail_pays(asset: &Asset, providers: &[ProviderConfig]) -> anyhow::Result<RailPays> {
    let symbol = asset.code.as_str().rsplit('/').next().unwrap_or_default().to_ascii_uppercase();
    let own = |network| RailPays {
        token: symbol.clone(),
        network,
        said_by: format!("its code {}", asset.code),
    };
    Ok(match asset.rail {
        RailFamily::Evm => own(asset
            .evm_chain_id()
            .map_or_else(|| Network::Unknown(asset.network.clone()), Network::Evm)),
        RailFamily::Solana => own(Network::Solana(asset.network.clone())),
        RailFamily::Provider => {
            let provider =
                providers.iter().find(|p| p.name == asset.network).with_context(|| {
                    format!("no [[providers]] entry named {:?} pays {}", asset.network, asset.code)
                })?;
            let pays = provider.pays();
            let network = match (provider.kind(), pays.network) {
                (_, Some((_, name))) => network_named(name),
                ("stripe", None) => Network::OffChain,
                (kind, None) => bail!(
                    "provider {}: a {kind} provider named in a route says which chain it pays on (`blockchain`, as Circle names it: `BASE`, `ETH`, `SOL`)",
                    provider.name
                ),
            };
            let token = pays.token.map_or(symbol.clone(), str::to_ascii_uppercase);
            let said_by = match (pays.token, pays.network) {
                (Some(token), Some((field, name))) => {
                    format!("provider {}: token {token:?}, {field} = {name:?}", provider.name)
                }
                (None, Some((field, name))) => {
                    format!("provider {}: its asset's symbol, {field} = {name:?}", provider.name)
                }
                (Some(token), None) => format!("provider {}: currency {token:?}", provider.name),
                (None, None) => format!("provider {}", provider.name),
            };
            RailPays { token, network, said_by }
        }
    })
}

/// Every rail of a route pays the same token on the same chain or network as the route's asset:
/// a route is a second way to pay the same money to the same place, never another money or another
/// chain (USDC on Base for a payout asked on Ethereum pays an address the recipient may not hold).
pub(crate) fn check_route_networks(
    routes: &Routes,
    assets: &AssetRegistry,
    providers: &[ProviderConfig],
) -> anyhow::Result<()> {
    for route in routes.iter() {
        let context = || format!("route of {}", route.asset());
        let first = assets.get(route.asset().as_str()).with_context(context)?;
        let wanted = rail_pays(first, providers).with_context(context)?;
        for code in route.rails().iter().skip(1) {
            let asset = assets.get(code.as_str()).with_context(context)?;
            let pays = rail_pays(asset, providers).with_context(context)?;
            if pays.token != wanted.token || pays.network != wanted.network {
                bail!(
                    "route of {}: {code} pays {} on {} ({}), but {} is {} on {} ({}); every rail of a route pays the same token on the same chain",
                    route.asset(),
                    pays.token,
                    pays.network,
                    pays.said_by,
                    route.asset(),
                    wanted.token,
                    wanted.network,
                    wanted.said_by
                );
            }
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
        bridge_paying(name, "ethereum", "usdc")
    }

    fn bridge_paying(name: &str, payment_rail: &str, currency: &str) -> String {
        format!(
            "[[providers]]\nkind = \"bridge\"\nname = \"{name}\"\nbase_url = \"https://api.example\"\napi_key_env = \"PAYOUTD_TEST_ROUTE_KEY\"\naccount = \"wallet_{name}\"\n\
             customer_id = \"cust\"\npayment_rail = \"{payment_rail}\"\ncurrency = \"{currency}\"\n"
        )
    }

    /// Every rail of a route pays the asset's token on the asset's chain, as each provider's
    /// settings name them: USDC on Base for a payout of USDC on Ethereum, or another currency, is
    /// refused at start and the message names both sides. (Before, only decimals and the kind of
    /// destination were compared, so `evm:1/USDC` routed to a provider paying on Base started.)
    #[test]
    fn a_route_to_another_chain_or_token_is_refused() {
        let route = "[[routes]]\nasset = \"evm:1/USDC\"\nthen = [\"provider:b1/USDC\"]\n";
        let with =
            |provider: String| format!("{USDC}{}{provider}{route}", provider_asset("b1", 6, "evm"));
        assert!(load_text(&with(bridge_paying("b1", "ETHEREUM", "USDC"))).is_ok());
        let on_base = refusal(&with(bridge_paying("b1", "base", "usdc")));
        assert!(
            on_base.contains("pays USDC on EVM chain 8453")
                && on_base.contains("payment_rail = \"base\"")
                && on_base.contains("is USDC on EVM chain 1"),
            "{on_base}"
        );
        let euro = refusal(&with(bridge_paying("b1", "ethereum", "eurc")));
        assert!(euro.contains("pays EURC on EVM chain 1"), "{euro}");
        let nowhere = refusal(&with(bridge_paying("b1", "a-chain-nobody-knows", "usdc")));
        assert!(nowhere.contains("unknown network"), "{nowhere}");
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
