//! The workers' part of the configuration: `[pipeline]` timings, `[[caps]]` per asset and `[webhooks]` delivery, each value checked against its range.

use anyhow::{Context, bail};
use payoutd_domain::{Amount, AssetRegistry};
use payoutd_engine::{Caps, PipelineConfig, WebhookConfig};
use serde::Deserialize;

use crate::config::{
    ATTEMPT_UNRESOLVED_AFTER_MS_RANGE, BALANCE_CHECK_INTERVAL_MS_RANGE, FEE_BUMP_BPS_RANGE,
    IDLE_SLEEP_MS_RANGE, NEAR_DUPLICATE_WINDOW_MS_RANGE, REBROADCAST_AFTER_MS_RANGE,
    REPLACE_AFTER_MS_RANGE, SIGN_BATCH_MAX_RANGE, WEBHOOK_RETRY_DELAY_MS_RANGE,
    WEBHOOK_ROUND_INTERVAL_MS_RANGE, WEBHOOK_ROUNDS_MAX_RANGE, WEBHOOK_SECRET_OVERLAP_MS_RANGE,
    WEBHOOK_TIMEOUT_MS_RANGE, ensure_in,
};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FilePipeline {
    near_duplicate_window_ms: Option<i64>,
    rebroadcast_after_ms: Option<i64>,
    replace_after_ms: Option<i64>,
    fee_bump_bps: Option<u32>,
    sign_batch_max: Option<u32>,
    idle_sleep_ms: Option<u64>,
    balance_check_interval_ms: Option<i64>,
    attempt_unresolved_after_ms: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileCaps {
    asset: String,
    per_destination_per_hour: String,
    per_wallet_per_hour: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileWebhooks {
    /// The waits between the 5 tries of a round, before jitter: exactly 4 values.
    retry_delays_ms: Option<Vec<u64>>,
    round_interval_ms: Option<u64>,
    timeout_ms: Option<u64>,
    rounds_max: Option<u32>,
    secret_overlap_ms: Option<u64>,
    /// Local development only: endpoints on http and private addresses (127.0.0.1, 10/8, ...).
    allow_private_urls: Option<bool>,
}

/// `value`, when the file gives one, replaces `target` once it is within `range`.
fn override_in<T: PartialOrd + Copy + std::fmt::Debug>(
    name: &str,
    value: Option<T>,
    range: &std::ops::RangeInclusive<T>,
    target: &mut T,
) -> anyhow::Result<()> {
    if let Some(v) = value {
        ensure_in(name, v, range)?;
        *target = v;
    }
    Ok(())
}

/// The workers' settings: the defaults, each overridden within its range, and the caps per asset.
pub(crate) fn pipeline_config(
    p: FilePipeline,
    caps: Vec<FileCaps>,
    assets: &AssetRegistry,
) -> anyhow::Result<PipelineConfig> {
    let mut pipeline = PipelineConfig::default();
    override_in(
        "pipeline.near_duplicate_window_ms",
        p.near_duplicate_window_ms,
        &NEAR_DUPLICATE_WINDOW_MS_RANGE,
        &mut pipeline.near_duplicate_window_ms,
    )?;
    override_in(
        "pipeline.rebroadcast_after_ms",
        p.rebroadcast_after_ms,
        &REBROADCAST_AFTER_MS_RANGE,
        &mut pipeline.rebroadcast_after_ms,
    )?;
    override_in(
        "pipeline.replace_after_ms",
        p.replace_after_ms,
        &REPLACE_AFTER_MS_RANGE,
        &mut pipeline.replace_after_ms,
    )?;
    override_in(
        "pipeline.fee_bump_bps",
        p.fee_bump_bps,
        &FEE_BUMP_BPS_RANGE,
        &mut pipeline.fee_bump_bps,
    )?;
    override_in(
        "pipeline.sign_batch_max",
        p.sign_batch_max,
        &SIGN_BATCH_MAX_RANGE,
        &mut pipeline.sign_batch_max,
    )?;
    override_in(
        "pipeline.idle_sleep_ms",
        p.idle_sleep_ms,
        &IDLE_SLEEP_MS_RANGE,
        &mut pipeline.idle_sleep_ms,
    )?;
    override_in(
        "pipeline.balance_check_interval_ms",
        p.balance_check_interval_ms,
        &BALANCE_CHECK_INTERVAL_MS_RANGE,
        &mut pipeline.balance_check_interval_ms,
    )?;
    override_in(
        "pipeline.attempt_unresolved_after_ms",
        p.attempt_unresolved_after_ms,
        &ATTEMPT_UNRESOLVED_AFTER_MS_RANGE,
        &mut pipeline.attempt_unresolved_after_ms,
    )?;
    for c in caps {
        let asset = assets
            .get(&c.asset)
            .with_context(|| format!("caps: asset {:?}", c.asset))?
            .code
            .clone();
        let caps = Caps {
            per_destination_per_hour: Amount::parse(&c.per_destination_per_hour)
                .context("caps.per_destination_per_hour")?,
            per_wallet_per_hour: Amount::parse(&c.per_wallet_per_hour)
                .context("caps.per_wallet_per_hour")?,
        };
        if pipeline.caps.insert(asset.clone(), caps).is_some() {
            bail!("caps: two [[caps]] entries for {asset}; give one");
        }
    }
    Ok(pipeline)
}

pub(crate) fn webhook_config(file: FileWebhooks) -> anyhow::Result<WebhookConfig> {
    let mut config = WebhookConfig::default();
    if let Some(delays) = file.retry_delays_ms {
        let count = delays.len();
        config.retry_delays_ms = delays.try_into().map_err(|_| {
            anyhow::anyhow!("webhooks.retry_delays_ms must hold exactly {} waits (between {} tries), got {count}",
                config.retry_delays_ms.len(), payoutd_engine::webhooks::TRIES_PER_ROUND)
        })?;
        for v in config.retry_delays_ms {
            ensure_in("webhooks.retry_delays_ms[]", v, &WEBHOOK_RETRY_DELAY_MS_RANGE)?;
        }
    }
    if let Some(v) = file.round_interval_ms {
        ensure_in("webhooks.round_interval_ms", v, &WEBHOOK_ROUND_INTERVAL_MS_RANGE)?;
        config.round_interval_ms = v;
    }
    if let Some(v) = file.timeout_ms {
        ensure_in("webhooks.timeout_ms", v, &WEBHOOK_TIMEOUT_MS_RANGE)?;
        config.timeout_ms = v;
    }
    if let Some(v) = file.rounds_max {
        ensure_in("webhooks.rounds_max", v, &WEBHOOK_ROUNDS_MAX_RANGE)?;
        config.rounds_max = v;
    }
    if let Some(v) = file.secret_overlap_ms {
        ensure_in("webhooks.secret_overlap_ms", v, &WEBHOOK_SECRET_OVERLAP_MS_RANGE)?;
        config.secret_overlap_ms = v;
    }
    config.allow_private_urls = file.allow_private_urls.unwrap_or(false);
    Ok(config)
}
