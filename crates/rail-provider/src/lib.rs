//! Provider rails: payouts through a provider's API, one idempotency key per attempt, resolved by lookup.

mod answers;
pub mod api;
pub mod bridge;
pub mod cdp_auth;
pub mod circle;
pub mod coinbase;
mod coinbase_errors;
pub mod config;
mod http;
pub use http::{ClientError, check_base_url};
pub mod key;
pub mod rail;
pub mod stripe;
pub mod units;

pub use api::{CallError, Created, ProviderApi, ProviderState, ProviderTransfer, TransferPage};
pub use bridge::{BridgeApi, BridgeConfig};
pub use circle::{CircleApi, CircleConfig, CircleGas, CircleSetupError};
pub use coinbase::{
    CoinbaseApi, CoinbaseConfig, CoinbaseSetupError, METADATA_TRAVEL_RULE, TravelRuleConfig,
};
#[cfg(feature = "defects")]
pub use config::ProviderDefects;
pub use config::{
    AWAITING_FUNDS_INCIDENT_AFTER_MS_DEFAULT, KEY_WINDOW_MS_DEFAULT, ProviderRailConfig,
    REQUEST_TIMEOUT_MS_DEFAULT, WindowTooShort,
};
pub use key::{idempotency_key, our_reference};
pub use rail::ProviderRail;
pub use stripe::{StripeApi, StripeConfig};
