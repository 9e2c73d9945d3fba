//! `payoutd wallet fund` on both stores: a top-up is booked once per reference; bad input gets a
//! message and a failing exit code and books nothing.

use std::process::Output;

use crate::support::payoutd;

use payoutd_domain::EvmAddress;
use payoutd_testkit::{TestDb, both_stores};
use serde_json::Value;

const WALLET: &str = "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266";

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "payoutd failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

fn fund<'a>(amount: &'a str, reference: &'a str) -> Vec<&'a str> {
    vec![
        "wallet",
        "fund",
        "--chain",
        "31337",
        "--address",
        WALLET,
        "--asset",
        "evm:31337/ETH",
        "--amount",
        amount,
        "--reference",
        reference,
    ]
}

#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn a_top_up_is_booked_once_from_the_command_line(db: TestDb) {
    // Unknown wallet first: nothing is booked for a wallet no worker registered.
    let out = payoutd(&db, &fund("5", "0xabc"));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no hot wallet"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    db.evm_lines().ensure_hot_wallet(31337, &EvmAddress::parse(WALLET).unwrap(), 0).await.unwrap();
    let booked = json(&payoutd(&db, &fund("1000", "0xabc")));
    assert_eq!(booked["booked"], true);
    assert_eq!(booked["amount"], "1000");
    let again = json(&payoutd(&db, &fund("1000", "0xabc")));
    assert_eq!(again["booked"], false, "the same reference changes nothing");

    for (args, says) in [
        (fund("-5", "r1"), "--amount"),
        (fund("0", "r1"), "--amount"),
        (fund("5", "has space"), "--reference"),
        (
            vec![
                "wallet",
                "fund",
                "--chain",
                "31337",
                "--address",
                "0x12",
                "--asset",
                "evm:31337/ETH",
                "--amount",
                "5",
                "--reference",
                "r1",
            ],
            "--address",
        ),
        (
            vec![
                "wallet",
                "fund",
                "--chain",
                "1",
                "--address",
                WALLET,
                "--asset",
                "evm:31337/ETH",
                "--amount",
                "5",
                "--reference",
                "r1",
            ],
            "not an asset of chain 1",
        ),
        (
            vec![
                "wallet",
                "fund",
                "--chain",
                "31337",
                "--address",
                WALLET,
                "--asset",
                "evm:31337/XYZ",
                "--amount",
                "5",
                "--reference",
                "r1",
            ],
            "XYZ",
        ),
    ] {
        let out = payoutd(&db, &args);
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        db.scalar_raw("SELECT count(*) FROM wallet_fundings").await,
        1,
        "bad input booked nothing"
    );
    assert_eq!(
        db.scalar_raw(
            "SELECT count(*) FROM journals WHERE kind = 'deposit' AND reference = 'funding:0xabc'"
        )
        .await,
        1
    );
}

const SOLANA_WALLET: &str = "Anrv3JK8RnVkv2RnQ3NB7pNdREBmLsffvXpYeQcFb319";

/// A Solana hot wallet's top-up is booked the same way, against the cluster's assets only.
async fn a_solana_top_up_is_booked_once_from_the_command_line(db: TestDb) {
    let config =
        std::env::temp_dir().join(format!("payoutd-wallet-{}.toml", uuid::Uuid::new_v4().simple()));
    std::fs::write(&config, "[[assets]]\ncode = \"solana:localnet/SOL\"\ndecimals = 9\nkind = \"native\"\n\n[[assets]]\ncode = \"evm:31337/ETH\"\ndecimals = 18\nkind = \"native\"\n").unwrap();
    let config = config.to_str().unwrap();
    let fund = |asset: &str, reference: &str| {
        payoutd(
            &db,
            &[
                "--config",
                config,
                "wallet",
                "fund",
                "--chain",
                "solana:localnet",
                "--address",
                SOLANA_WALLET,
                "--asset",
                asset,
                "--amount",
                "2000000000",
                "--reference",
                reference,
            ],
        )
    };
    let unknown = fund("solana:localnet/SOL", "sig-1");
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("no hot wallet"),
        "{}",
        String::from_utf8_lossy(&unknown.stderr)
    );
    db.pipeline().ensure_signing_wallet("solana:localnet", SOLANA_WALLET).await.unwrap();
    assert_eq!(json(&fund("solana:localnet/SOL", "sig-1"))["booked"], true);
    assert_eq!(
        json(&fund("solana:localnet/SOL", "sig-1"))["booked"],
        false,
        "the same reference changes nothing"
    );
    let other_network = fund("evm:31337/ETH", "sig-2");
    assert_ne!(other_network.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&other_network.stderr).contains("not an asset of solana:localnet")
    );
    assert_eq!(
        db.scalar_raw("SELECT count(*) FROM wallet_fundings").await,
        1,
        "bad input booked nothing"
    );
}

const CIRCLE_WALLET: &str = "0f9c0a52-2e84-4c0c-9f0e-4a6c0b6f1b10";

/// A provider account the ledger keeps is topped up the same way, in the provider's assets only,
/// including the native token a Circle wallet pays its gas in (no payable asset of its own).
async fn a_provider_account_top_up_is_booked_once_from_the_command_line(db: TestDb) {
    let fund = |asset: &str, reference: &str| {
        payoutd(
            &db,
            &[
                "wallet",
                "fund",
                "--chain",
                "provider:circle",
                "--address",
                CIRCLE_WALLET,
                "--asset",
                asset,
                "--amount",
                "21000000000000",
                "--reference",
                reference,
            ],
        )
    };
    let unknown = fund("provider:circle/ETH", "tx-1");
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("no hot wallet"),
        "{}",
        String::from_utf8_lossy(&unknown.stderr)
    );
    db.pipeline().ensure_signing_wallet("provider:circle", CIRCLE_WALLET).await.unwrap();
    let booked = json(&fund("provider:circle/ETH", "tx-1"));
    assert_eq!(
        (booked["booked"].clone(), booked["asset"].clone()),
        (Value::Bool(true), Value::from("provider:circle/ETH"))
    );
    assert_eq!(
        json(&fund("provider:circle/ETH", "tx-1"))["booked"],
        false,
        "the same reference changes nothing"
    );
    for (asset, says) in [
        ("provider:coinbase/USDC", "not an asset of provider:circle"),
        ("evm:31337/ETH", "not an asset of provider:circle"),
        ("provider:circle", "--asset"),
    ] {
        let out = fund(asset, "tx-2");
        assert_ne!(out.status.code(), Some(0), "{asset}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{asset}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        db.scalar_raw("SELECT count(*) FROM wallet_fundings").await,
        1,
        "bad input booked nothing"
    );
}

both_stores!(
    a_top_up_is_booked_once_from_the_command_line,
    a_solana_top_up_is_booked_once_from_the_command_line,
    a_provider_account_top_up_is_booked_once_from_the_command_line,
);
