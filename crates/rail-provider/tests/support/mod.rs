//! What the provider tests share: each provider's asset, recipient and adapter, configured as an operator would for the real provider.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use payoutd_domain::asset::TokenKind;
use payoutd_domain::{Asset, Destination, DestinationKind, EvmAddress, ProviderAccount, Secret};
use payoutd_engine::clock::Clock;
use payoutd_provider_sim::{
    CIRCLE_SIM_ENTITY_SECRET_HEX, CIRCLE_SIM_USDC_TOKEN_ID, ProviderKind, ProviderSim,
};
use payoutd_rail_provider::{
    BridgeApi, BridgeConfig, CircleApi, CircleConfig, CoinbaseApi, CoinbaseConfig, ProviderApi,
    StripeApi, StripeConfig,
};

pub const RECIPIENT_EVM: &str = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed";
pub const RECIPIENT_ACCOUNT: &str = "acct_1Nv0FGQ9RKHgCVdK";

/// How the adapter is configured: as it should be, or so that the provider refuses every create.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Setup {
    Working,
    Refused,
}

pub fn kind_name(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::Stripe => "stripe",
        ProviderKind::Coinbase => "coinbase",
        ProviderKind::Bridge => "bridge",
        ProviderKind::Circle => "circle",
    }
}

pub fn asset_of(kind: ProviderKind) -> Asset {
    match kind {
        ProviderKind::Stripe => {
            Asset::new("provider:stripe/USD", 2, TokenKind::Provider(DestinationKind::Account))
                .unwrap()
        }
        other => Asset::new(
            &format!("provider:{}/USDC", kind_name(other)),
            6,
            TokenKind::Provider(DestinationKind::Evm),
        )
        .unwrap(),
    }
}

pub fn destination_of(kind: ProviderKind) -> Destination {
    match kind {
        ProviderKind::Stripe => {
            Destination::Account(ProviderAccount::parse(RECIPIENT_ACCOUNT).unwrap())
        }
        _ => Destination::Evm(EvmAddress::parse(RECIPIENT_EVM).unwrap()),
    }
}

/// The window a test's lookup reads: transfers created from `from_ms` to a minute later.
pub fn created_from(from_ms: i64) -> payoutd_rail_provider::api::CreatedWithin {
    payoutd_rail_provider::api::CreatedWithin { from_ms, until_ms: from_ms + 60_000 }
}

/// The Bridge wallet the tests pay from, and its customer.
pub const BRIDGE_WALLET: &str = "wallet_payoutd";
pub const BRIDGE_CUSTOMER: &str = "cust_payoutd";

/// Bridge's adapter paying USDC on Ethereum out of `BRIDGE_WALLET`, which holds USDC.
pub fn bridge_config(
    base_url: String,
    api_key: Secret,
    refused: bool,
    timeout: u64,
) -> BridgeConfig {
    BridgeConfig {
        base_url,
        api_key,
        customer_id: BRIDGE_CUSTOMER.into(),
        bridge_wallet_id: BRIDGE_WALLET.into(),
        // A fiat rail needs an external account, which this configuration lacks.
        payment_rail: if refused { "ach".into() } else { "ethereum".into() },
        source_currency: "usdc".into(),
        currency: "usdc".into(),
        initiation: None,
        decimals: 6,
        request_timeout_ms: timeout,
    }
}

fn bridge_api(
    base_url: String,
    api_key: Secret,
    refused: bool,
    timeout: u64,
) -> Arc<dyn ProviderApi> {
    Arc::new(BridgeApi::new(bridge_config(base_url, api_key, refused, timeout)).unwrap())
}

/// The adapter for `sim`, as an operator would configure it for the real provider.
pub fn api_of(
    kind: ProviderKind,
    sim: &ProviderSim,
    setup: Setup,
    request_timeout_ms: u64,
) -> Arc<dyn ProviderApi> {
    let refused = setup == Setup::Refused;
    let (base_url, api_key, timeout) =
        (sim.base_url(), Secret::new(sim.api_key()), request_timeout_ms);
    match kind {
        ProviderKind::Stripe => Arc::new(
            StripeApi::new(StripeConfig {
                base_url,
                api_key,
                account: "platform".into(),
                currency: if refused { "xxx".into() } else { "usd".into() },
                request_timeout_ms: timeout,
            })
            .unwrap(),
        ),
        ProviderKind::Coinbase => Arc::new(
            CoinbaseApi::new(CoinbaseConfig {
                base_url,
                api_key_id: sim.api_key_id(),
                api_key,
                account_id: "account_af2937b0-9846-4fe7-bfe9-ccc22d935114".into(),
                source_asset: "usdc".into(),
                network: "base".into(),
                target_asset: if refused { "doge".into() } else { "usdc".into() },
                decimals: 6,
                request_timeout_ms: timeout,
                travel_rule: None,
            })
            .unwrap(),
        ),
        ProviderKind::Bridge => {
            sim.add_bridge_wallet(BRIDGE_CUSTOMER, BRIDGE_WALLET, "usdc");
            bridge_api(base_url, api_key, refused, timeout)
        }
        ProviderKind::Circle => {
            Arc::new(CircleApi::new(circle_config(sim, setup, timeout)).unwrap())
        }
    }
}

/// A Circle wallet as Gas Station serves it (its fees are not the wallet's).
pub fn circle_config(sim: &ProviderSim, setup: Setup, request_timeout_ms: u64) -> CircleConfig {
    CircleConfig {
        base_url: sim.base_url(),
        api_key: Secret::new(sim.api_key()),
        entity_secret: Secret::new(CIRCLE_SIM_ENTITY_SECRET_HEX.into()),
        wallet_id: "0f9c0a52-2e84-4c0c-9f0e-4a6c0b6f1b10".into(),
        token_id: if setup == Setup::Refused {
            String::new()
        } else {
            CIRCLE_SIM_USDC_TOKEN_ID.into()
        },
        fee_level: "MEDIUM".into(),
        decimals: 6,
        gas: None,
        request_timeout_ms,
    }
}

/// Our clock, moved by the test beside the simulator's.
#[allow(dead_code)] // the conformance run keeps no clock
pub struct FakeClock(pub AtomicI64);

impl Clock for FakeClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}
