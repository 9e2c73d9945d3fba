//! The demo's provider side: the four providers' simulators over real HTTP, faults on their creates, payouts through each, and each simulator's own count of what it created.

use std::collections::HashMap;

use payoutd_provider_sim::{
    CIRCLE_SIM_ENTITY_SECRET_HEX, Fault, ProviderKind, ProviderSim, SimOptions,
};
use reqwest::StatusCode;
use serde_json::json;

use crate::api::{Api, As};
use crate::report::RailCount;

/// Payouts through each provider.
pub const PAYOUTS_PER_PROVIDER: usize = 5;
/// A state step of the simulated providers: transfers complete within a few seconds.
const STEP_MS: u64 = 300;
/// Credited to the merchant's ledger per provider asset.
const DEPOSIT_BASE_UNITS: u64 = 1_000_000_000;
const AMOUNT_BASE: u64 = 1_000;
/// Attempts a payout may have had whose transfers are counted at the provider.
const ATTEMPTS_COUNTED_MAX: u32 = 5;
const RECIPIENT_EVM: &str = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed";
const RECIPIENT_ACCOUNT: &str = "acct_1Nv0FGQ9RKHgCVdK";
/// What each simulator does to its first creates: the answer lost after the transfer was made, a
/// 5xx after it, a reset, a 5xx before it.
const FAULTS: [Fault; 6] = [
    Fault::DelayAfterCreate(15_000),
    Fault::ServerErrorAfterCreate,
    Fault::ResetAfterCreate,
    Fault::ServerErrorBeforeCreate,
    // Stripe and Coinbase replay this 500 for the key's life: the attempt is decided by lookup.
    Fault::ServerErrorSaved,
    // Made, then an error no document explains (Circle's code -1): ambiguous, found by lookup.
    Fault::UnknownErrorAfterCreate,
];
/// Circle declines its first transfers after accepting them (the first two, whose answers the
/// faults above also lose): the route takes those payouts' next attempts to Coinbase.
pub const CIRCLE_DECLINED: usize = 2;

/// One provider of the run: its simulator and what payoutd is configured with.
struct Provider {
    kind: ProviderKind,
    sim: ProviderSim,
}

impl Provider {
    fn name(&self) -> &'static str {
        match self.kind {
            ProviderKind::Stripe => "stripe",
            ProviderKind::Coinbase => "coinbase",
            ProviderKind::Bridge => "bridge",
            ProviderKind::Circle => "circle",
        }
    }

    fn asset(&self) -> String {
        match self.kind {
            ProviderKind::Stripe => "provider:stripe/USD".to_owned(),
            _ => format!("provider:{}/USDC", self.name()),
        }
    }

    fn destination(&self) -> &'static str {
        match self.kind {
            ProviderKind::Stripe => RECIPIENT_ACCOUNT,
            _ => RECIPIENT_EVM,
        }
    }

    fn key_env(&self) -> String {
        format!("PAYOUTD_DEMO_{}_KEY", self.name().to_uppercase())
    }

    fn assets_toml(&self) -> String {
        let (decimals, destination) = match self.kind {
            ProviderKind::Stripe => (2, "account"),
            _ => (6, "evm"),
        };
        format!(
            "\n[[assets]]\ncode = \"{}\"\ndecimals = {decimals}\nkind = \"provider\"\ndestination = \"{destination}\"\n",
            self.asset()
        )
    }

    fn provider_toml(&self) -> String {
        let own = match self.kind {
            ProviderKind::Stripe => "account = \"acct_platform\"\ncurrency = \"usd\"".to_owned(),
            ProviderKind::Coinbase => {
                format!(
                    "api_key_id = \"{}\"\naccount = \"account_af2937b0-9846-4fe7-bfe9-ccc22d935114\"\nnetwork = \"base\"\nsource_asset = \"usdc\"\ntarget_asset = \"usdc\"",
                    self.sim.api_key_id()
                )
            }
            ProviderKind::Bridge => format!(
                "account = \"{BRIDGE_WALLET}\"\ncustomer_id = \"{BRIDGE_CUSTOMER}\"\npayment_rail = \"ethereum\"\n\
                 # The wallet holds usdb and pays it out as usdc; its transfers need an initiation.\n\
                 source_currency = \"usdb\"\ncurrency = \"usdc\"\ngas_fee_max_base_units = {BRIDGE_GAS_FEE_MAX}\n\
                 initiation = {{ attestations = {{ sca = {{ outcome = \"sca_used\" }} }} }}"
            ),
            ProviderKind::Circle => format!(
                "account = \"0f9c0a52-2e84-4c0c-9f0e-4a6c0b6f1b10\"\ntoken_id = \"7adb2b7d-c9cd-4c36-8d8b-0b0b5e0b8a4e\"\nblockchain = \"BASE\"\nentity_secret_env = \"{CIRCLE_SECRET_ENV}\"\n\
                 # The wallet pays its own gas: each networkFee is booked from its native balance.\ngas_symbol = \"ETH\"\ngas_decimals = 18"
            ),
        };
        format!(
            "\n[[providers]]\nkind = \"{name}\"\nname = \"{name}\"\nbase_url = \"{url}\"\napi_key_env = \"{env}\"\nrequest_timeout_ms = 2000\n{own}\n",
            name = self.name(),
            url = self.sim.base_url(),
            env = self.key_env(),
        )
    }
}

const CIRCLE_SECRET_ENV: &str = "PAYOUTD_DEMO_CIRCLE_ENTITY_SECRET";
const BRIDGE_WALLET: &str = "wallet_demo";
const BRIDGE_CUSTOMER: &str = "cust_demo";
/// The gas Bridge's simulator takes out of each transfer (USDC), and the most payoutd accepts
/// (base units): the recipient gets the rest, and the payout is paid.
const BRIDGE_GAS_FEE: &str = "0.00001";
const BRIDGE_GAS_FEE_MAX: u64 = 20;
/// What Coinbase's simulator charges each transfer on top of its amount (USDC).
const COINBASE_FEE: &str = "0.01";

/// The four simulated providers of a run.
pub struct ProviderSide {
    providers: Vec<Provider>,
}

/// The payouts asked of each provider (in the side's order): key -> payout id.
pub struct ProviderPayouts(Vec<HashMap<String, String>>);

impl ProviderPayouts {
    /// Every payout id submitted through a provider.
    pub fn ids(&self) -> impl Iterator<Item = &String> {
        self.0.iter().flat_map(|ids| ids.values())
    }

    /// All of them, key -> payout id.
    pub fn all(&self) -> HashMap<String, String> {
        self.0.iter().flat_map(|ids| ids.iter().map(|(k, v)| (k.clone(), v.clone()))).collect()
    }
}

impl ProviderSide {
    /// Starts the four simulators, each with its faults queued for the first creates.
    pub async fn start() -> ProviderSide {
        let mut providers = Vec::new();
        for kind in [
            ProviderKind::Stripe,
            ProviderKind::Coinbase,
            ProviderKind::Bridge,
            ProviderKind::Circle,
        ] {
            let sim = ProviderSim::start_with(
                kind,
                SimOptions { step_ms: STEP_MS, ..SimOptions::default() },
            )
            .await;
            for fault in FAULTS {
                sim.fault_next_create(fault);
            }
            if kind == ProviderKind::Circle {
                sim.fail_next_created(CIRCLE_DECLINED);
            }
            if kind == ProviderKind::Bridge {
                sim.add_bridge_wallet(BRIDGE_CUSTOMER, BRIDGE_WALLET, "usdb");
                sim.require_bridge_initiation(BRIDGE_WALLET);
                sim.set_bridge_gas_fee(BRIDGE_GAS_FEE);
            }
            if kind == ProviderKind::Coinbase {
                // Fees on top of each transfer: booked from the account, checked against its balance.
                sim.set_coinbase_fee(COINBASE_FEE);
            }
            providers.push(Provider { kind, sim });
        }
        ProviderSide { providers }
    }

    /// The `[[assets]]`, `[[providers]]` and `[[routes]]` tables for a process that pays: Circle's
    /// payouts whose attempt Circle proves dead are paid next by Coinbase.
    pub fn config_toml(&self) -> String {
        let tables: String =
            self.providers.iter().map(|p| p.assets_toml() + &p.provider_toml()).collect();
        tables
            + "
[[routes]]
asset = \"provider:circle/USDC\"
then = [\"provider:coinbase/USDC\"]
"
    }

    /// The `[[assets]]` tables alone: for a process that takes payouts but does not pay them.
    pub fn assets_toml(&self) -> String {
        self.providers.iter().map(Provider::assets_toml).collect()
    }

    /// The API keys and Circle's entity secret, for payoutd's environment.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> =
            self.providers.iter().map(|p| (p.key_env(), p.sim.api_key())).collect();
        env.push((CIRCLE_SECRET_ENV.to_owned(), CIRCLE_SIM_ENTITY_SECRET_HEX.to_owned()));
        env
    }

    pub fn urls(&self) -> String {
        self.providers
            .iter()
            .map(|p| format!("{} {}", p.name(), p.sim.base_url()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Funds the merchant in each provider asset, then submits each payout twice.
    pub async fn submit(
        &self,
        api: &Api,
        merchant_id: &str,
        run_tag: u32,
    ) -> anyhow::Result<ProviderPayouts> {
        let mut asked = Vec::new();
        for p in &self.providers {
            let body = json!({"merchant_id": merchant_id, "asset": p.asset(), "amount": DEPOSIT_BASE_UNITS.to_string(),
                "idempotency_key": format!("demo-funding-{}-{run_tag:08x}", p.name())});
            let reply = api.post("/v1/deposits", &body, As::Operator).await?;
            anyhow::ensure!(
                reply.status == StatusCode::CREATED,
                "deposit of {}: {} {}",
                p.asset(),
                reply.status,
                reply.body
            );
            let mut ids = HashMap::new();
            for i in 0..PAYOUTS_PER_PROVIDER {
                let key = format!("demo-{}-{run_tag:08x}-{i:03}", p.name());
                let body = json!({"asset": p.asset(), "amount": (AMOUNT_BASE + i as u64).to_string(), "destination": p.destination(),
                    "idempotency_key": key, "metadata": {"rail": p.name()}});
                let first = api.post("/v1/payouts", &body, As::Merchant).await?;
                let again = api.post("/v1/payouts", &body, As::Merchant).await?;
                let (a, b) = (first.str_field("id").to_owned(), again.str_field("id").to_owned());
                anyhow::ensure!(
                    !a.is_empty() && a == b,
                    "payout {key} sent twice gave {a:?} and {b:?}"
                );
                ids.insert(key, a);
            }
            asked.push(ids);
        }
        crate::report::say(format!(
            "submitted {PAYOUTS_PER_PROVIDER} payouts through each of Stripe, Coinbase, Bridge and Circle (simulated at {}), each request twice; \
             each simulator loses, fails, resets, saves an error for or answers an unknown error to its first {} creates; \
             Circle declines its first {CIRCLE_DECLINED} transfers, and its payouts are routed to Coinbase once Circle proves \
             an attempt dead; Bridge's wallet holds usdb, requires an initiation and takes {BRIDGE_GAS_FEE} USDC of gas out of each amount",
            self.urls(),
            FAULTS.len()
        ));
        Ok(ProviderPayouts(asked))
    }

    /// The line for the summary, counted from the simulators: a payout's transfers are the ones
    /// carrying the reference of any of its attempts at any provider (a route moves later attempts
    /// to another), less those the provider declined (nothing moved); more than one is a duplicate.
    pub fn rail_count(
        &self,
        payouts: &ProviderPayouts,
        statuses: &HashMap<String, String>,
    ) -> RailCount {
        let mut count = RailCount::default();
        for id in payouts.ids() {
            count.payouts += 1;
            count.paid += usize::from(statuses.get(id).is_some_and(|s| s == "paid"));
            let made = self.moved_for(id);
            count.transfers_on_chain += made;
            count.duplicates += made.saturating_sub(1);
        }
        count
    }

    /// Transfers that moved money for payout `id`, at every provider.
    fn moved_for(&self, id: &str) -> usize {
        (1..=ATTEMPTS_COUNTED_MAX)
            .map(|n| {
                self.providers
                    .iter()
                    .map(|p| p.sim.not_failed_with_reference(&format!("{id}-{n}")))
                    .sum::<usize>()
            })
            .sum()
    }

    /// Circle's payouts paid by Coinbase: the ones the route moved.
    pub fn routed(&self, payouts: &ProviderPayouts) -> usize {
        let coinbase = self
            .providers
            .iter()
            .find(|p| p.kind == ProviderKind::Coinbase)
            .expect("Coinbase is simulated");
        let circle = self
            .providers
            .iter()
            .position(|p| p.kind == ProviderKind::Circle)
            .expect("Circle is simulated");
        payouts.0[circle]
            .values()
            .filter(|id| {
                (2..=ATTEMPTS_COUNTED_MAX)
                    .any(|n| coinbase.sim.not_failed_with_reference(&format!("{id}-{n}")) > 0)
            })
            .count()
    }

    /// What the simulators created in all that was not declined, beside what the payouts account
    /// for: anything more is a transfer no payout explains.
    pub fn created_in_all(&self) -> usize {
        self.providers.iter().map(|p| p.sim.created() - p.sim.declined()).sum()
    }
}
