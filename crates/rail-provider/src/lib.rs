//! Provider rails: payouts through a provider's API, one idempotency key per attempt, resolved by lookup.
