//! The configuration loader's tests: defaults, bounds and refusals, from real files.

use super::*;
use payoutd_domain::Amount;
use payoutd_rail_evm::Finality;

/// A config file with one chain whose key comes from a file, plus `extra` lines in the chain table.
fn load_chain(extra: &str) -> anyhow::Result<Config> {
    load_chain_at("http://127.0.0.1:8545", extra)
}

fn load_chain_at(rpc_url: &str, extra: &str) -> anyhow::Result<Config> {
    load_chain_with_key_mode(rpc_url, extra, 0o600)
}

/// `load_chain_at`, its key file with permissions `mode`.
fn load_chain_with_key_mode(rpc_url: &str, extra: &str, mode: u32) -> anyhow::Result<Config> {
    load_chain_with(&format!("rpc_url = {rpc_url:?}"), extra, mode)
}

/// A chain whose endpoints are given by `endpoints` (the `rpc_url` or `rpc_urls` line or none).
fn load_chain_with(endpoints: &str, extra: &str, mode: u32) -> anyhow::Result<Config> {
    use std::os::unix::fs::PermissionsExt;
    let dir =
        std::env::temp_dir().join(format!("payoutd-config-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("hot.key");
    std::fs::write(&key, "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d\n")
        .unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
    let text = format!(
        "[[chains]]\nchain_id = 31337\n{endpoints}\nhot_wallet_key_files = [{:?}]\n{extra}\n",
        key.display().to_string()
    );
    let loaded = load_top(&text);
    std::fs::remove_dir_all(&dir).unwrap();
    loaded
}

#[test]
fn out_of_range_pipeline_values_a_second_cap_and_a_bad_explorer_are_refused() {
    let cap = "\n[[caps]]\nasset = \"evm:31337/ETH\"\nper_destination_per_hour = \"5\"\nper_wallet_per_hour = \"9\"\n";
    assert_eq!(load_chain(cap).unwrap().pipeline.caps.len(), 1);
    for (extra, says) in [
        ("\n[pipeline]\nidle_sleep_ms = 5".to_owned(), "idle_sleep_ms"),
        ("\n[pipeline]\nnear_duplicate_window_ms = -1".to_owned(), "near_duplicate_window_ms"),
        (format!("{cap}{cap}"), "two [[caps]] entries"),
        ("explorer_tx_url = \"https://explorer.example/tx/\"".to_owned(), "explorer_tx_url"),
    ] {
        let refused = load_chain(&extra).err().map(|e| format!("{e:#}")).unwrap_or_default();
        assert!(refused.contains(says), "{extra}: {refused}");
    }
    let explorer = load_chain("explorer_tx_url = \"https://explorer.example/tx/{tx}\"").unwrap();
    assert_eq!(
        explorer.chains[0].explorer_tx_url.as_ref().map(|u| u.link("0xab")),
        Some("https://explorer.example/tx/0xab".to_owned())
    );
}

/// A config file of top-level `text` alone.
/// The configuration `text` would load to, read from a file as `payoutd` reads it.
pub(crate) fn load_top(text: &str) -> anyhow::Result<Config> {
    let file =
        std::env::temp_dir().join(format!("payoutd-config-{}.toml", uuid::Uuid::new_v4().simple()));
    std::fs::write(&file, text).unwrap();
    let loaded = load(Overrides {
        config_file: Some(file.display().to_string()),
        listen: None,
        database_url: None,
    });
    std::fs::remove_file(&file).unwrap();
    loaded
}

#[test]
fn the_merchant_intake_rate_defaults_and_is_bounded() {
    assert_eq!(
        load_top("").unwrap().payouts_per_merchant_per_minute,
        payoutd_engine::intake_rate::PAYOUTS_PER_MERCHANT_PER_MINUTE_DEFAULT
    );
    assert_eq!(
        load_top("payouts_per_merchant_per_minute = 120\n")
            .unwrap()
            .payouts_per_merchant_per_minute,
        120
    );
    let refused = load_top("payouts_per_merchant_per_minute = 0\n")
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(refused.contains("payouts_per_merchant_per_minute = 0 is outside"), "{refused}");
    assert_eq!(
        load_top("").unwrap().payouts_per_merchant_per_hour,
        payoutd_engine::intake_rate::PAYOUTS_PER_MERCHANT_PER_HOUR_DEFAULT
    );
    assert_eq!(
        load_top("payouts_per_merchant_per_hour = 5000\n").unwrap().payouts_per_merchant_per_hour,
        5000
    );
    let refused = load_top("payouts_per_merchant_per_hour = 0\n")
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(refused.contains("payouts_per_merchant_per_hour = 0 is outside"), "{refused}");
}

#[test]
fn http_connection_limits_default_and_are_bounded() {
    assert_eq!(load_top("").unwrap().http_limits, payoutd_api::ServeLimits::default());
    let set = load_top("http_connections_max = 64\nhttp_header_read_timeout_ms = 5000\n")
        .unwrap()
        .http_limits;
    assert_eq!(
        set,
        payoutd_api::ServeLimits { connections_max: 64, header_read_timeout_ms: 5_000 }
    );
    for (bad, says) in [
        ("http_connections_max = 0", "http_connections_max = 0 is outside 1..=65536"),
        (
            "http_header_read_timeout_ms = 0",
            "http_header_read_timeout_ms = 0 is outside 100..=600000",
        ),
    ] {
        let refused = load_top(bad).err().map(|e| format!("{e:#}")).unwrap_or_default();
        assert!(refused.contains(says), "{bad}: {refused}");
    }
}

#[test]
fn send_batch_max_defaults_to_batches_and_is_bounded() {
    assert_eq!(
        load_chain("").unwrap().chains[0].send_batch_max,
        payoutd_rail_evm::SEND_BATCH_MAX_DEFAULT
    );
    assert_eq!(
        load_chain("send_batch_max = 1").unwrap().chains[0].send_batch_max,
        1,
        "1 turns batches off"
    );
    for bad in ["send_batch_max = 0", "send_batch_max = 1001"] {
        let Err(error) = load_chain(bad) else { panic!("{bad}: out of range must be refused") };
        let error = format!("{error:#}");
        assert!(error.contains("send_batch_max must be in 1..=1000"), "{error}");
    }
}

#[test]
fn finality_defaults_to_the_finalized_tag_and_a_depth_is_bounded() {
    assert_eq!(load_chain("").unwrap().chains[0].finality, Finality::FinalizedTag);
    assert_eq!(
        load_chain("finality_confirmations = 3").unwrap().chains[0].finality,
        Finality::Depth(3)
    );
    for bad in ["finality_confirmations = 0", "finality_confirmations = 1001"] {
        let Err(error) = load_chain(bad) else { panic!("{bad}: out of range must be refused") };
        assert!(
            format!("{error:#}").contains("finality_confirmations must be in 1..=1000"),
            "{error:#}"
        );
    }
}

#[test]
fn several_rpc_endpoints_are_kept_in_order_and_bad_lists_are_refused() {
    let two = r#"rpc_urls = ["http://a.example:8545/KEY", "http://b.example:8545"]"#;
    let config = load_chain_with(two, "", 0o600).unwrap();
    let urls: Vec<&str> = config.chains[0].rpc_urls.iter().map(|u| u.expose()).collect();
    assert_eq!(urls, ["http://a.example:8545/KEY", "http://b.example:8545"]);
    let nine = (0..9).map(|i| format!("\"http://n{i}.example\"")).collect::<Vec<_>>().join(", ");
    for (endpoints, says) in [
        (
            r#"rpc_url = "http://a.example"
rpc_urls = ["http://b.example"]"#
                .to_owned(),
            "not both",
        ),
        ("".to_owned(), "rpc_url (or rpc_urls) is required"),
        ("rpc_urls = []".to_owned(), "between 1 and 8"),
        (format!("rpc_urls = [{nine}]"), "names 9 endpoints"),
        (r#"rpc_urls = ["http://a.example", "http://a.example"]"#.to_owned(), "twice"),
    ] {
        let error = format!("{:#}", load_chain_with(&endpoints, "", 0o600).unwrap_err());
        assert!(error.contains(says), "{endpoints}: {error}");
    }
}

#[test]
fn rpc_url_credentials_never_reach_the_configuration_debug() {
    for url in [
        "https://node.example/v2/SECRETKEY",
        "https://node.example/?key=SECRETKEY",
        "https://u:SECRETKEY@node.example:8545",
    ] {
        let config = load_chain_at(url, "").unwrap();
        let printed = format!("{config:?}");
        assert!(!printed.contains("SECRETKEY"), "{printed}");
        assert!(printed.contains("https://node.example"), "{printed}");
        assert_eq!(config.chains[0].rpc_urls[0].expose(), url, "the key is still used to connect");
    }
}

#[test]
fn webhook_settings_are_bounded_and_private_urls_are_off_by_default() {
    let dir =
        std::env::temp_dir().join(format!("payoutd-config-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let load_text = |text: &str| {
        let file = dir.join("payoutd.toml");
        std::fs::write(&file, text).unwrap();
        load(Overrides {
            config_file: Some(file.display().to_string()),
            listen: None,
            database_url: None,
        })
    };
    let defaults = load_text("").unwrap().webhooks;
    assert!(!defaults.allow_private_urls);
    assert_eq!(defaults.timeout_ms, 10_000);
    let set = load_text(
        "[webhooks]\nretry_delays_ms = [1, 2, 3, 4]\nallow_private_urls = true\ntimeout_ms = 500\n",
    )
    .unwrap()
    .webhooks;
    assert_eq!(
        (set.retry_delays_ms, set.allow_private_urls, set.timeout_ms),
        ([1, 2, 3, 4], true, 500)
    );
    for (bad, says) in [
        ("[webhooks]\nretry_delays_ms = [1, 2]", "exactly 4 waits"),
        ("[webhooks]\ntimeout_ms = 0", "webhooks.timeout_ms"),
        ("[webhooks]\nallow_private = true", "unknown field"),
    ] {
        let Err(error) = load_text(bad) else { panic!("{bad}: must be refused") };
        assert!(format!("{error:#}").contains(says), "{bad}: {error:#}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn database_passwords_are_redacted() {
    assert_eq!(redact_url("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
    assert_eq!(redact_url("sqlite://payoutd.db"), "sqlite://payoutd.db");
}

#[test]
fn an_assets_minimum_payout_is_read_and_a_bad_one_refused() {
    let asset = |min: &str| {
        format!("[[assets]]\ncode = \"evm:31337/ETH\"\ndecimals = 18\nkind = \"native\"\n{min}\n")
    };
    let none = load_top(&asset("")).unwrap();
    assert_eq!(
        none.assets.get("evm:31337/ETH").unwrap().min_amount,
        Amount::ZERO,
        "absent: any positive amount"
    );
    let set = load_top(&asset("min_amount = \"1000000000000\"")).unwrap();
    assert_eq!(
        set.assets.get("evm:31337/ETH").unwrap().min_amount,
        Amount::from_u128(1_000_000_000_000)
    );
    let refused = load_top(&asset("min_amount = \"0.5\""))
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(refused.contains("evm:31337/ETH: min_amount"), "{refused}");
}

/// Every limit that bounds a stolen merchant key and is left open is named at start, with the
/// setting that closes it; a configuration that sets them all names none. (Before, nothing warned.)
#[test]
fn the_limits_a_stolen_merchant_key_would_meet_are_named_when_left_open() {
    let asset = "[[assets]]\ncode = \"evm:31337/ETH\"\ndecimals = 18\nkind = \"native\"\n";
    let open = crate::exposure::limits_left_open(&load_top(asset).unwrap());
    for says in ["no caps", "no min_amount", "no network_fee", "payouts_per_merchant_per_hour"] {
        assert!(open.iter().any(|line| line.contains(says)), "{says}: {open:?}");
    }
    assert!(open.iter().all(|line| line.contains("evm:31337/ETH") || line.contains("per_hour")));
    let closed = format!(
        "payouts_per_merchant_per_hour = 5000\n{asset}min_amount = \"1000\"\nnetwork_fee = \"21000\"\n\
         [[caps]]\nasset = \"evm:31337/ETH\"\nper_destination_per_hour = \"5\"\nper_wallet_per_hour = \"9\"\n"
    );
    assert_eq!(
        crate::exposure::limits_left_open(&load_top(&closed).unwrap()),
        Vec::<String>::new()
    );
}

#[test]
fn an_assets_network_fee_is_read_and_a_bad_one_refused() {
    let asset = |fee: &str| {
        format!("[[assets]]\ncode = \"evm:31337/ETH\"\ndecimals = 18\nkind = \"native\"\n{fee}\n")
    };
    assert_eq!(
        load_top(&asset("")).unwrap().assets.get("evm:31337/ETH").unwrap().network_fee,
        Amount::ZERO,
        "absent: none"
    );
    let set = load_top(&asset("network_fee = \"21000000000000\"")).unwrap();
    assert_eq!(
        set.assets.get("evm:31337/ETH").unwrap().network_fee,
        Amount::from_u128(21_000_000_000_000)
    );
    let refused = load_top(&asset("network_fee = \"-1\""))
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(refused.contains("evm:31337/ETH: network_fee"), "{refused}");
}

/// Native SOL's minimum payout defaults to what opens a new account (890,880 lamports), so such a
/// payout is refused at intake instead of failing on chain and waiting for a person; an operator
/// may set another, 0 included. (Before, any positive amount was accepted.)
#[test]
fn native_sols_minimum_payout_defaults_to_a_new_accounts_rent() {
    let sol = |min: &str| {
        format!(
            "[[assets]]\ncode = \"solana:localnet/SOL\"\ndecimals = 9\nkind = \"native\"\n{min}\n"
        )
    };
    let min_of = |text: String| {
        load_top(&text).unwrap().assets.get("solana:localnet/SOL").unwrap().min_amount
    };
    assert_eq!(min_of(sol("")), Amount::from_u128(890_880));
    assert_eq!(min_of(sol("min_amount = \"0\"")), Amount::ZERO, "an operator's choice stands");
    assert_eq!(min_of(sol("min_amount = \"5000000\"")), Amount::from_u128(5_000_000));
}

/// A hot wallet key file others may read (or write) is refused at start, naming the fix; the
/// owner's own 0600 or 0400 loads. (Before, any readable file was loaded.)
#[test]
fn a_key_file_others_can_read_is_refused() {
    for mode in [0o644, 0o640, 0o604, 0o660] {
        let refused = load_chain_with_key_mode("http://127.0.0.1:8545", "", mode)
            .err()
            .map(|e| format!("{e:#}"))
            .unwrap_or_default();
        assert!(
            refused.contains(&format!("permissions {mode:o}")) && refused.contains("chmod 600"),
            "{mode:o}: {refused}"
        );
    }
    for mode in [0o600, 0o400] {
        assert_eq!(
            load_chain_with_key_mode("http://127.0.0.1:8545", "", mode).unwrap().chains[0]
                .keys
                .len(),
            1,
            "{mode:o}"
        );
    }
}

#[test]
fn trusted_proxies_are_ip_addresses() {
    assert!(
        load_top("").unwrap().trusted_proxies.is_empty(),
        "no forwarded header is believed by default"
    );
    let set = load_top("trusted_proxies = [\"10.0.0.2\", \"::1\"]\n").unwrap().trusted_proxies;
    assert_eq!(set, vec!["10.0.0.2".parse::<std::net::IpAddr>().unwrap(), "::1".parse().unwrap()]);
    let refused = load_top("trusted_proxies = [\"proxy.internal\"]\n")
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(refused.contains("is not an IP address"), "{refused}");
}

#[test]
fn the_webhook_secrets_key_is_64_hex_digits() {
    assert!(webhook_secrets_key(&"ab".repeat(32)).is_ok());
    for bad in ["", "abc", &"ab".repeat(31), &"zz".repeat(32), &"ab".repeat(33)] {
        let refused = webhook_secrets_key(bad).err().map(|e| format!("{e:#}")).unwrap_or_default();
        assert!(refused.contains("must be 64 hex digits"), "{bad:?}: {refused}");
    }
}

/// A hot wallet may be signed for by a signer service: its address is a wallet of the chain like a
/// key's, and a wallet configured twice (a key and a service, or two services) is refused.
#[test]
fn remote_signers_add_wallets_and_a_wallet_twice_is_refused() {
    let remote = |address: &str| {
        format!("remote_signers = [{{ url = \"http://127.0.0.1:8550\", address = \"{address}\" }}]")
    };
    let service_only = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
    let chain = load_chain(&remote(service_only)).unwrap();
    let wallets: Vec<String> =
        chain.chains[0].wallet_addresses().iter().map(ToString::to_string).collect();
    assert_eq!(wallets.len(), 2, "{wallets:?}");
    assert!(!format!("{:?}", chain).contains("8550"), "the signer's URL is not printed");
    // The key file's own address, signed for by a service too.
    let twice =
        load_chain(&remote("0x70997970C51812dc3A010C7d01b50e0d17dc79C8")).expect_err("refused");
    assert!(format!("{twice:#}").contains("configured twice"), "{twice:#}");
    let bad_url = "remote_signers = [{ url = \"ftp://signer\", address = \"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266\" }]";
    assert!(format!("{:#}", load_chain(bad_url).expect_err("refused")).contains("http"));
}

/// A signer service off loopback is reached over TLS with this process's token, or not at all:
/// whoever reaches an open signer can make the hot wallet sign. On loopback neither is required.
#[test]
fn a_signer_service_off_loopback_needs_tls_and_a_token() {
    let remote = |url: &str, token_env: &str| {
        format!(
            "remote_signers = [{{ url = \"{url}\", address = \"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266\"{token_env} }}]"
        )
    };
    // A variable every process has stands for the token's (tests set no environment).
    let token = ", bearer_token_env = \"PATH\"";
    for refused in [
        remote("http://signer.internal:8550", ""),
        remote("https://signer.internal:8550", ""),
        remote("http://signer.internal:8550", token),
        remote("http://10.0.0.7:8550", token),
    ] {
        let e = load_chain(&refused).expect_err(&refused);
        assert!(format!("{e:#}").contains("off loopback"), "{e:#}");
    }
    let unset =
        remote("https://signer.internal", ", bearer_token_env = \"PAYOUTD_TEST_UNSET_TOKEN\"");
    assert!(format!("{:#}", load_chain(&unset).expect_err("unset")).contains("is not set"));
    let tls = load_chain(&remote("https://signer.internal:8550", token)).unwrap();
    let signer = &tls.chains[0].remote_signers[0];
    let path = std::env::var("PATH").unwrap();
    assert_eq!(signer.bearer_token.as_ref().map(|t| t.expose()), Some(path.as_str()));
    for loopback in ["http://127.0.0.1:8550", "http://localhost:8550", "http://[::1]:8550"] {
        let open = load_chain(&remote(loopback, "")).unwrap();
        assert!(open.chains[0].remote_signers[0].bearer_token.is_none(), "{loopback}");
    }
}

/// A hot wallet may be an AWS KMS key: its address counts as a wallet of the chain; an empty key
/// id or a non-http endpoint is refused at load.
#[test]
fn kms_signers_add_wallets_and_bad_entries_are_refused() {
    let kms = |key_id: &str, endpoint: &str| {
        format!(
            "kms_signers = [{{ key_id = \"{key_id}\", region = \"eu-west-1\", address = \"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266\"{endpoint} }}]"
        )
    };
    let chain = load_chain(&kms("1234abcd-12ab-34cd-56ef-1234567890ab", "")).unwrap();
    assert_eq!(chain.chains[0].wallet_addresses().len(), 2);
    assert_eq!(chain.chains[0].kms_signers[0].region, "eu-west-1");
    assert!(format!("{:#}", load_chain(&kms(" ", "")).expect_err("refused")).contains("key_id"));
    let bad_endpoint = kms("1234abcd", ", endpoint_url = \"kms.internal\"");
    assert!(
        format!("{:#}", load_chain(&bad_endpoint).expect_err("refused")).contains("endpoint_url")
    );
}

/// A Solana hot wallet may be signed for by a signer service instead of a key: then its address
/// comes from the configuration, and exactly one of the three ways must be given.
#[test]
fn a_solana_wallet_signed_by_a_service_needs_its_address_and_token_and_nothing_else() {
    let wallet = "4Nd1mBQtrMJVYVfKf2PJy9NZUZdTAsp7D4xWLs4gDB4T";
    let solana = |signer: &str| {
        format!(
            "[[solana]]\ncluster = \"localnet\"\nrpc_url = \"http://127.0.0.1:8899\"\n{signer}\n"
        )
    };
    // PATH is set in every test environment: it stands for the token's variable.
    let service = |url: &str, env: &str| {
        format!(
            "hot_wallet_signer = {{ url = \"{url}\", public_key = \"{wallet}\", token_env = \"{env}\" }}"
        )
    };
    let loaded = load_top(&solana(&service("http://127.0.0.1:8560", "PATH"))).unwrap();
    assert_eq!(loaded.solana[0].signer.address(), wallet);
    assert!(
        !format!("{loaded:?}").contains(&std::env::var("PATH").unwrap()),
        "the token is never printed"
    );
    let refused = |text: String| format!("{:#}", load_top(&text).expect_err("refused"));
    assert!(
        refused(solana(&service("http://10.0.0.5:8560", "PATH"))).contains("https"),
        "plain http off the loopback"
    );
    assert!(
        refused(solana(&service("https://signer.internal", "PAYOUTD_NO_SUCH_VARIABLE_0189")))
            .contains("PAYOUTD_NO_SUCH_VARIABLE_0189")
    );
    let both =
        format!("{}\nhot_wallet_key_env = \"PATH\"", service("http://127.0.0.1:8560", "PATH"));
    assert!(refused(solana(&both)).contains("exactly one of"));
}

mod properties {
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, failure_persistence: None, ..ProptestConfig::default() })]

        /// Any text as the configuration file: an answer (a configuration or a message), never a panic.
        #[test]
        fn any_configuration_text_is_loaded_or_refused_without_panic(text in "\\PC{0,300}") {
            let _ = super::load_top(&text);
        }

        /// Values of the right keys but any shape: refused with a message, never a panic.
        #[test]
        fn any_value_of_a_known_key_is_loaded_or_refused_without_panic(
            key in proptest::sample::select(vec!["payouts_per_merchant_per_minute", "trusted_proxies", "http_connections_max", "listen", "database_url", "http_header_read_timeout_ms"]),
            value in "[0-9]{1,25}|\"\\PC{0,30}\"|\\[\"[ -~]{0,20}\"\\]|-[0-9]{1,5}|true",
        ) {
            let _ = super::load_top(&format!("{key} = {value}\n"));
        }
    }
}

#[test]
fn the_request_rate_per_key_defaults_and_is_bounded() {
    assert_eq!(
        load_top("").unwrap().request_rate.per_second,
        payoutd_api::request_rate::REQUESTS_PER_SECOND_PER_KEY_DEFAULT
    );
    assert_eq!(load_top("requests_per_second_per_key = 50\n").unwrap().request_rate.per_second, 50);
    let refused = load_top("requests_per_second_per_key = 0\n")
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(refused.contains("requests_per_second_per_key"), "{refused}");
}
