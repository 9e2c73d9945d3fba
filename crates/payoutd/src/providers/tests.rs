//! The provider entries of the configuration: each kind's settings, refusals and the ledger wallet a provider's account becomes.

const ASSETS: &str = "[[assets]]\ncode = \"provider:pay/USD\"\ndecimals = 2\nkind = \"provider\"\ndestination = \"account\"\n";

fn load_text(text: &str) -> anyhow::Result<crate::config::Config> {
    crate::config::tests::load_top(text)
}

fn provider(kind_lines: &str) -> String {
    format!(
        "{ASSETS}[[providers]]\nname = \"pay\"\nbase_url = \"https://api.example\"\napi_key_env = \"PAYOUTD_TEST_PROVIDER_KEY\"\naccount = \"acct_platform\"\n{kind_lines}\n"
    )
}

/// The line of the configuration's first provider, its account wallet `hw_pay`.
fn first_line(loaded: &crate::config::Config) -> payoutd_engine::StandaloneLine {
    let clock = std::sync::Arc::new(payoutd_engine::SystemClock);
    super::provider_line(&loaded.providers[0], &loaded.assets, "hw_pay".into(), clock).unwrap()
}

#[test]
fn provider_entries_take_their_kinds_settings_and_refuse_others() {
    // SAFETY: the one variable these tests read, set to the same value by each; no test removes it.
    unsafe { std::env::set_var("PAYOUTD_TEST_PROVIDER_KEY", "sk_test_123") };
    let loaded = load_text(&provider("kind = \"stripe\"\ncurrency = \"usd\"")).unwrap();
    assert_eq!(loaded.providers.len(), 1);
    assert_eq!(loaded.providers[0].name, "pay");
    let line = first_line(&loaded);
    assert_eq!(line.rail.name(), "provider:stripe");
    for (lines, says) in [
        ("kind = \"stripe\"", "`currency` is required"),
        ("kind = \"stripe\"\ncurrency = \"USD\"", "lower-case ISO"),
        (
            "kind = \"stripe\"\ncurrency = \"usd\"\nnetwork = \"base\"",
            "`network` is not a setting of a stripe provider",
        ),
        (
            "kind = \"coinbase\"\napi_key_id = \"k\"\nnetwork = \"base\"\nsource_asset = \"usdc\"",
            "`target_asset` is required",
        ),
        (
            "kind = \"coinbase\"\napi_key_id = \"k\"\nnetwork = \"base\"\nsource_asset = \"usdc\"\ntarget_asset = \"usdc\"",
            "neither base64 of an Ed25519 key",
        ),
        (
            "kind = \"circle\"\ntoken_id = \"t\"\nentity_secret_env = \"PAYOUTD_TEST_NO_SUCH_VARIABLE\"",
            "the entity secret",
        ),
        ("kind = \"paypal\"", "kind must be"),
        ("kind = \"stripe\"\ncurrency = \"usd\"\nkey_window_ms = 172800000", "key_window_ms"),
        // 60 s of window cannot hold a 30 s call plus the 10 s lease on both sides.
        (
            "kind = \"stripe\"\ncurrency = \"usd\"\nkey_window_ms = 60000\nrequest_timeout_ms = 30000",
            "must exceed twice the margin",
        ),
        ("kind = \"stripe\"\ncurrency = \"usd\"\nwebhook = 1", "unknown field"),
        (
            "kind = \"stripe\"\ncurrency = \"usd\"\nsource_currency = \"usd\"",
            "`source_currency` is not a setting of a stripe provider",
        ),
        (
            "kind = \"bridge\"\ncustomer_id = \"c\"\npayment_rail = \"ethereum\"\ncurrency = \"usdc\"\ninitiation = \"sca\"",
            "`initiation` must be a table",
        ),
        (
            "kind = \"bridge\"\ncustomer_id = \"c\"\npayment_rail = \"ethereum\"\ncurrency = \"usdc\"\nsource_currency = \" \"",
            "`source_currency` is required",
        ),
    ] {
        let Err(error) = load_text(&provider(lines)) else { panic!("{lines}: must be refused") };
        assert!(format!("{error:#}").contains(says), "{lines}: {error:#}");
    }
    // The API key rides in every request's headers: never in clear beyond this machine.
    let in_clear = provider("kind = \"stripe\"\ncurrency = \"usd\"")
        .replace("https://api.example", "http://api.example");
    let Err(error) = load_text(&in_clear) else {
        panic!("a plain http base URL to another host must be refused")
    };
    assert!(format!("{error:#}").contains("use https://"), "{error:#}");
    let bad_asset = ASSETS.replace("destination = \"account\"", "destination = \"iban\"");
    let Err(error) = load_text(&bad_asset) else {
        panic!("an unknown destination kind must be refused")
    };
    assert!(format!("{error:#}").contains("destination"), "{error:#}");
}

/// A provider's account is kept in the ledger as the hot wallet it is given, its fees in the
/// asset it pays out, or, for a Circle wallet paying its own gas, in the chain's native token.
#[test]
fn a_providers_account_is_a_ledger_wallet_and_a_circle_wallet_paying_gas_names_its_token() {
    // SAFETY: variables only these tests read, set to the same values by each; none removed.
    unsafe {
        std::env::set_var("PAYOUTD_TEST_PROVIDER_KEY", "sk_test_123");
        std::env::set_var("PAYOUTD_TEST_CIRCLE_SECRET", "11".repeat(32));
    }
    let circle =
        "kind = \"circle\"\ntoken_id = \"t\"\nentity_secret_env = \"PAYOUTD_TEST_CIRCLE_SECRET\"";
    let native_of = |lines: &str| {
        let loaded = load_text(&provider(lines)).unwrap();
        let line = first_line(&loaded);
        let wallet = line.rail.hot_wallet().expect("the account is kept in the ledger").clone();
        assert_eq!((wallet.id.as_str(), wallet.address.as_str()), ("hw_pay", "acct_platform"));
        (wallet.native.code.as_str().to_owned(), wallet.native.decimals)
    };
    assert_eq!(
        native_of("kind = \"stripe\"\ncurrency = \"usd\""),
        ("provider:pay/USD".to_owned(), 2)
    );
    assert_eq!(
        native_of(circle),
        ("provider:pay/USD".to_owned(), 2),
        "Gas Station pays: no fee leaves the wallet"
    );
    assert_eq!(
        native_of(&format!("{circle}\ngas_symbol = \"ETH\"\ngas_decimals = 18")),
        ("provider:pay/ETH".to_owned(), 18)
    );
    for bad in [
        "gas_symbol = \"ETH\"",
        "gas_decimals = 18",
        "gas_symbol = \"eth\"\ngas_decimals = 18",
        "gas_symbol = \"ETH\"\ngas_decimals = 40",
    ] {
        let Err(error) = load_text(&provider(&format!("{circle}\n{bad}"))) else {
            panic!("{bad}: must be refused")
        };
        assert!(format!("{error:#}").contains("gas_symbol"), "{bad}: {error:#}");
    }
    let Err(error) =
        load_text(&provider("kind = \"stripe\"\ncurrency = \"usd\"\ngas_symbol = \"ETH\""))
    else {
        panic!("not a stripe setting")
    };
    assert!(
        format!("{error:#}").contains("`gas_symbol` is not a setting of a stripe provider"),
        "{error:#}"
    );
}
