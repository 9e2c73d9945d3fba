//! A provider rail's settings: the key window against the request timeout, and how long the rail waits before it asks a person or the provider.

use payoutd_domain::Amount;
use payoutd_engine::clock::CLOCK_SKEW_MAX_MS;
use payoutd_engine::pipeline::RESOLVE_LEASE_MS;

use crate::api::CreatedWithin;

/// How long a provider keeps an idempotency key when the configuration names nothing shorter:
/// Stripe, Coinbase and Bridge document 24 hours.
pub const KEY_WINDOW_MS_DEFAULT: i64 = 24 * 60 * 60 * 1_000;
/// A provider call's timeout when the configuration names none.
pub const REQUEST_TIMEOUT_MS_DEFAULT: u64 = 10_000;

/// The key window and the request timeout, checked against each other: the rail must be able to
/// create inside the window with a margin on both sides.
#[derive(Debug, Clone)]
pub struct ProviderRailConfig {
    pub(crate) key_window_ms: i64,
    pub(crate) request_timeout_ms: u64,
    pub(crate) awaiting_funds_incident_after_ms: i64,
    /// The largest fee a provider may take out of a payout's amount on its way (Bridge's gas) for
    /// the transfer to still be the payout's; zero: the recipient must get the whole amount.
    pub(crate) withheld_max: Amount,
    /// A transfer still stuck this long after its attempt began is asked to be cancelled (it is
    /// asked to be accelerated from the first sight on).
    pub(crate) stuck_cancel_after_ms: i64,
    /// How long after its attempt began a create may still be sent (the same request, the same
    /// key); after it the attempt is decided by lookup alone. Bounds when a transfer the attempt
    /// made can have been created, so a lookup reads that window, not everything since.
    pub(crate) resend_horizon_ms: i64,
    #[cfg(feature = "defects")]
    pub defects: ProviderDefects,
}

/// Deliberately broken proofs of death, compiled only with the `defects` feature: the simulator
/// must find a double payment for each, or it proves nothing when it finds none.
#[cfg(feature = "defects")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProviderDefects {
    /// A refusal of a retry is taken as proof that nothing was created.
    pub retry_refusal_is_proof: bool,
    /// Creates until the window's end, and dead at the first lookup past it (no margins).
    pub dead_at_window: bool,
    /// The recorded transfer's failure is taken as the attempt's death, without looking for
    /// other transfers carrying its reference.
    pub recorded_failure_is_proof: bool,
    /// A replayed saved error is taken as proof that the key's first call made nothing: dead at
    /// the first lookup that finds nothing.
    pub replayed_error_is_proof: bool,
    /// A lookup by reference reads only until the last create could go out, not a margin after:
    /// a create the provider processed late within its contract is missed.
    pub lookup_window_without_margin: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "key_window_ms {key_window_ms} must exceed twice the margin of {margin_ms} ms (request_timeout_ms plus the {RESOLVE_LEASE_MS} ms resolver lease): \
     creates stop a margin before the window ends and deaths are declared only a margin after it"
)]
pub struct WindowTooShort {
    pub key_window_ms: i64,
    pub margin_ms: i64,
}

impl ProviderRailConfig {
    /// `key_window_ms`: the provider's key window, as configured (at most what the provider
    /// documents). `request_timeout_ms`: how long one call may take before the client gives up.
    pub fn new(
        key_window_ms: i64,
        request_timeout_ms: u64,
    ) -> Result<ProviderRailConfig, WindowTooShort> {
        let config = ProviderRailConfig {
            key_window_ms,
            request_timeout_ms,
            awaiting_funds_incident_after_ms: AWAITING_FUNDS_INCIDENT_AFTER_MS_DEFAULT,
            withheld_max: Amount::ZERO,
            stuck_cancel_after_ms: STUCK_CANCEL_AFTER_MS_DEFAULT,
            resend_horizon_ms: RESEND_HORIZON_MS_DEFAULT,
            #[cfg(feature = "defects")]
            defects: ProviderDefects::default(),
        };
        if key_window_ms <= 2 * config.margin_ms() {
            return Err(WindowTooShort { key_window_ms, margin_ms: config.margin_ms() });
        }
        Ok(config)
    }

    /// How long after deciding to call a worker may still reach the provider: one call's timeout
    /// plus the resolver's lease (a worker that took the attempt may act until the lease ends).
    pub fn margin_ms(&self) -> i64 {
        #[cfg(feature = "defects")]
        if self.defects.dead_at_window {
            return 0;
        }
        i64::try_from(self.request_timeout_ms).unwrap_or(i64::MAX / 4) + RESOLVE_LEASE_MS
    }

    /// How long a first create takes at most, from its attempt's storing to its answer: one call's
    /// timeout plus the resolver's lease (never shortened by a defect: it only delays a resend).
    pub fn first_send_within_ms(&self) -> i64 {
        i64::try_from(self.request_timeout_ms).unwrap_or(i64::MAX / 4) + RESOLVE_LEASE_MS
    }

    pub fn key_window_ms(&self) -> i64 {
        self.key_window_ms
    }

    /// How long after its attempt began a create may go out: the resend horizon, and never later
    /// than a margin before the key window ends.
    pub fn creates_until_ms(&self) -> i64 {
        #[cfg(feature = "defects")]
        if self.defects.dead_at_window {
            return self.key_window_ms;
        }
        self.resend_horizon_ms.min(self.key_window_ms - self.margin_ms())
    }

    /// When a transfer of an attempt that began at `attempt_began_ms`, and whose creates could go
    /// out for `creates_for_ms` after it, can have been created, on the database's clock: from its
    /// start to a margin after the last create it may send (a call in flight then is answered, or
    /// given up on, by then), each end widened by the most an in-step worker's reading of that clock
    /// may be off (the start was stamped, and every create sent, by such a worker). What a lookup by
    /// reference reads, however long after.
    pub fn lookup_window(&self, attempt_began_ms: i64, creates_for_ms: i64) -> CreatedWithin {
        let from_ms = attempt_began_ms - CLOCK_SKEW_MAX_MS;
        let last_create_ms = attempt_began_ms + creates_for_ms;
        #[cfg(feature = "defects")]
        if self.defects.lookup_window_without_margin {
            return CreatedWithin { from_ms, until_ms: last_create_ms };
        }
        let until_ms = last_create_ms + self.margin_ms() + CLOCK_SKEW_MAX_MS;
        CreatedWithin { from_ms, until_ms }
    }

    /// How long after its attempt began a create could go out for an attempt made before the
    /// attempt stored it: until a margin before the key window's end, as payoutd then sent them.
    pub fn creates_for_unstored_ms(&self) -> i64 {
        self.key_window_ms - self.margin_ms()
    }

    /// Creates stop `ms` after their attempt began (or a margin before the key window ends, if
    /// sooner); lookups by reference then read the transfers created in that time and a margin.
    pub fn with_resend_horizon_ms(mut self, ms: i64) -> ProviderRailConfig {
        self.resend_horizon_ms = ms.max(0);
        self
    }

    /// How long a transfer may wait for its source's funds at the provider before a person is
    /// told (an `attempt_unresolved` incident); the attempt stays live either way.
    pub fn with_awaiting_funds_incident_after_ms(mut self, ms: i64) -> ProviderRailConfig {
        self.awaiting_funds_incident_after_ms = ms.max(0);
        self
    }

    /// A transfer whose recipient got the payout's amount less a provider's fee of at most
    /// `withheld_max` (the account paying the whole amount) is the payout's, not a mismatch.
    pub fn with_withheld_max(mut self, withheld_max: Amount) -> ProviderRailConfig {
        self.withheld_max = withheld_max;
        self
    }

    /// How long after its attempt began a transfer still stuck on its way is asked to be cancelled
    /// (Circle's `cancel`, best effort); until then it is asked to be accelerated.
    pub fn with_stuck_cancel_after_ms(mut self, ms: i64) -> ProviderRailConfig {
        self.stuck_cancel_after_ms = ms.max(0);
        self
    }
}

/// Creates are re-sent (the same request, the same key) for fifteen minutes after their attempt
/// began: long enough to learn a lost answer through any short outage; past it lookups decide.
pub const RESEND_HORIZON_MS_DEFAULT: i64 = 15 * 60 * 1_000;

/// A stuck transfer is asked to be cancelled two hours after its attempt began: long past any
/// acceleration's effect, well before the day an unresolved attempt waits for a person.
pub const STUCK_CANCEL_AFTER_MS_DEFAULT: i64 = 2 * 60 * 60 * 1_000;

/// A transfer waiting this long for its source's funds needs a person: a Bridge wallet pays at
/// once, so a wait means a misconfigured or empty source.
pub const AWAITING_FUNDS_INCIDENT_AFTER_MS_DEFAULT: i64 = 15 * 60 * 1_000;

impl Default for ProviderRailConfig {
    fn default() -> Self {
        ProviderRailConfig::new(KEY_WINDOW_MS_DEFAULT, REQUEST_TIMEOUT_MS_DEFAULT)
            .expect("the default window exceeds the default margin")
    }
}
