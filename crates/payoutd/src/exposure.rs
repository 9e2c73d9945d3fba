//! What one stolen merchant key could make payoutd pay, told when the API starts: each limit that would bound it and is not configured.

use payoutd_engine::intake_rate::PAYOUTS_PER_MERCHANT_PER_HOUR_DEFAULT;

use crate::config::Config;

/// One line per limit left open: caps per asset, a minimum payout, a network fee charged to the
/// merchant, an hourly number of payouts below the default's million. Empty when every limit is
/// set. Each line says what it leaves open and which setting closes it.
pub fn limits_left_open(config: &Config) -> Vec<String> {
    let mut open = Vec::new();
    for asset in config.assets.iter() {
        let code = asset.code.as_str();
        if !config.pipeline.caps.contains_key(&asset.code) {
            open.push(format!(
                "{code}: no caps, so one merchant key can send its whole balance in an hour to one \
                 address ([[caps]] per_destination_per_hour and per_wallet_per_hour)"
            ));
        }
        if asset.min_amount.is_zero() {
            open.push(format!(
                "{code}: no min_amount, so payouts of one base unit each cost the platform a \
                 transaction's fee (and on Solana often an account's rent) ([[assets]] min_amount)"
            ));
        }
        if asset.network_fee.is_zero() {
            open.push(format!(
                "{code}: no network_fee, so the platform pays every payout's fee itself \
                 ([[assets]] network_fee)"
            ));
        }
    }
    if config.payouts_per_merchant_per_hour >= PAYOUTS_PER_MERCHANT_PER_HOUR_DEFAULT {
        open.push(format!(
            "payouts_per_merchant_per_hour is {}: one merchant key may ask for that many payouts \
             an hour",
            config.payouts_per_merchant_per_hour
        ));
    }
    open
}
