//! The OpenAPI document as this server serves it: the static description narrowed to this
//! deployment (its configured assets, the destination forms of their rails, the status and event
//! names), so a client or fuzzer generated from it sends only requests the server takes.

use payoutd_domain::asset::TokenKind;
use payoutd_domain::{Asset, AssetRegistry, DestinationKind, EventType, PayoutStatus, RailFamily};
use serde_json::{Value, json};
use utoipa::OpenApi;

use crate::ApiDoc;

/// Request bodies that name an asset (and, for payouts, a destination on its rail).
const ASSET_BODIES: [&str; 4] =
    ["CreatePayoutBody", "CreateDepositBody", "CreateTransferBody", "BatchLineBody"];

/// A lower-case EVM address whose last digit is not zero: never the zero address (refused as a
/// burn), never a mixed case whose checksum could be wrong. Narrower than what the server takes
/// (any case, EIP-55 checked when mixed), never wider.
const EVM_DESTINATION_PATTERN: &str = "^0x[0-9a-f]{39}[1-9a-f]$";
/// 43 base58 characters whose first is at least `5`: always exactly 32 bytes (a shorter string or
/// a smaller first digit may decode to fewer).
const SOLANA_DESTINATION_PATTERN: &str = "^[5-9A-HJ-NP-Za-km-z][1-9A-HJ-NP-Za-km-z]{42}$";
/// A provider account id such as Stripe's `acct_1Nv0FGQ9RKHgCVdK`: letters and digits around one `_`.
const ACCOUNT_DESTINATION_PATTERN: &str = "^[A-Za-z0-9]{1,30}_[A-Za-z0-9]{1,30}$";

/// The document for a server configured with `assets` and batches of at most `batch_lines_max` lines.
pub fn served_document(assets: &AssetRegistry, batch_lines_max: usize) -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the OpenAPI document serialises");
    narrow_batches(&mut doc, assets, batch_lines_max);
    for body in ASSET_BODIES {
        if let Some(schema) = doc.pointer_mut(&format!("/components/schemas/{body}")) {
            narrow_asset_body(schema, assets);
        }
    }
    let codes: Vec<&str> = assets.iter().map(|a| a.code.as_str()).collect();
    set_parameter_enum(&mut doc, "/v1/statements", "asset", &codes);
    let statuses: Vec<&str> = PayoutStatus::ALL.iter().map(|s| s.as_str()).collect();
    set_parameter_enum(&mut doc, "/v1/payouts", "status", &statuses);
    let event_types: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
    set_parameter_enum(&mut doc, "/v1/events", "type", &event_types);
    if let Some(items) =
        doc.pointer_mut("/components/schemas/CreateEndpointBody/properties/event_types")
    {
        // `Option<Vec<_>>` may be written as a type union; the items sit beside it either way.
        if let Some(obj) = items.as_object_mut() {
            obj.insert("items".into(), json!({"type": "string", "enum": event_types}));
            obj.insert("uniqueItems".into(), json!(true));
            // Distinct types: no longer than the list of types (a tighter bound than the body's).
            obj.insert("maxItems".into(), json!(event_types.len()));
        }
    }
    doc
}

/// Restricts `asset` to the configured codes and `destination` to their rails' forms; with assets
/// on several rails, one variant per rail so a destination always matches its asset's rail.
fn narrow_asset_body(schema: &mut Value, assets: &AssetRegistry) {
    let families = destination_kinds(assets);
    let variant = |family: Option<DestinationKind>| {
        let mut variant = schema.clone();
        let codes: Vec<&str> = assets
            .iter()
            .filter(|a| family.is_none_or(|f| destination_kind(a) == f))
            .map(|a| a.code.as_str())
            .collect();
        if let Some(props) = variant.get_mut("properties").and_then(Value::as_object_mut) {
            if let Some(asset) = props.get_mut("asset") {
                asset["enum"] = json!(codes);
            }
            if let (Some(destination), Some(family)) = (props.get_mut("destination"), family) {
                destination["pattern"] = json!(destination_pattern(family));
            }
        }
        variant
    };
    let has_destination = schema.pointer("/properties/destination").is_some();
    *schema = match (has_destination, families.as_slice()) {
        (false, _) | (true, []) => variant(None),
        (true, [only]) => variant(Some(*only)),
        (true, many) => {
            json!({"oneOf": many.iter().map(|f| variant(Some(*f))).collect::<Vec<_>>()})
        }
    };
}

/// Batch size as configured; lines are distinct; the CSV form described by a pattern of one valid
/// line (the server takes up to the limit; a pattern cannot say "distinct external ids").
fn narrow_batches(doc: &mut Value, assets: &AssetRegistry, batch_lines_max: usize) {
    if let Some(lines) = doc.pointer_mut("/components/schemas/CreateBatchBody/properties/payouts") {
        lines["maxItems"] = json!(batch_lines_max);
        lines["uniqueItems"] = json!(true);
    }
    let per_rail: Vec<String> = destination_kinds(assets)
        .into_iter()
        .map(|family| {
            let codes: Vec<String> = assets
                .iter()
                .filter(|a| destination_kind(a) == family)
                .map(|a| regex_escape(a.code.as_str()))
                .collect();
            let destination =
                destination_pattern(family).trim_start_matches('^').trim_end_matches('$');
            format!("({}),[1-9][0-9]{{0,76}},{destination}", codes.join("|"))
        })
        .collect();
    let pattern = format!(
        "^external_id,asset,amount,destination\\n[!#-+\\--~]{{8,128}},({})\\n?$",
        per_rail.join("|")
    );
    if let Some(csv) =
        doc.pointer_mut("/paths/~1v1~1payout_batches/post/requestBody/content/text~1csv/schema")
    {
        csv["pattern"] = json!(pattern);
        csv["description"] = json!(
            "`external_id,asset,amount,destination` then one line per payout (the pattern describes one line)"
        );
    }
}

/// The kinds of destination the configured assets take, in the order first met.
fn destination_kinds(assets: &AssetRegistry) -> Vec<DestinationKind> {
    let mut kinds: Vec<DestinationKind> = Vec::new();
    for asset in assets.iter() {
        if !kinds.contains(&destination_kind(asset)) {
            kinds.push(destination_kind(asset));
        }
    }
    kinds
}

fn destination_kind(asset: &Asset) -> DestinationKind {
    match (asset.rail, &asset.token) {
        (_, TokenKind::Provider(kind)) => *kind,
        (RailFamily::Solana, _) => DestinationKind::Solana,
        (RailFamily::Evm | RailFamily::Provider, _) => DestinationKind::Evm,
    }
}

/// An asset code as a regex literal (codes hold `:` `/` `.` and alphanumerics).
fn regex_escape(text: &str) -> String {
    text.chars().fold(String::new(), |mut out, c| {
        if !c.is_ascii_alphanumeric() && c != ':' && c != '/' && c != '_' && c != '-' {
            out.push('\\');
        }
        out.push(c);
        out
    })
}

fn destination_pattern(kind: DestinationKind) -> &'static str {
    match kind {
        DestinationKind::Evm => EVM_DESTINATION_PATTERN,
        DestinationKind::Solana => SOLANA_DESTINATION_PATTERN,
        DestinationKind::Account => ACCOUNT_DESTINATION_PATTERN,
    }
}

fn set_parameter_enum(doc: &mut Value, path: &str, name: &str, values: &[&str]) {
    let pointer = format!("/paths/{}/get/parameters", path.replace('/', "~1"));
    let Some(params) = doc.pointer_mut(&pointer).and_then(Value::as_array_mut) else { return };
    for param in params.iter_mut().filter(|p| p["name"] == name) {
        param["schema"]["enum"] = json!(values);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use payoutd_domain::asset::TokenKind;
    use payoutd_domain::{Asset, Destination, EvmAddress, SolanaAddress};

    #[test]
    fn destination_patterns_only_admit_addresses_the_domain_takes() {
        // The boundary cases of each pattern: the smallest and largest values it admits.
        for text in [
            "0x0000000000000000000000000000000000000001",
            "0xffffffffffffffffffffffffffffffffffffffff",
        ] {
            assert!(EvmAddress::parse(text).is_ok(), "{text}");
        }
        for text in [
            "5111111111111111111111111111111111111111111",
            "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
        ] {
            assert!(SolanaAddress::parse(text).is_ok(), "{text}");
        }
        assert!(matches!(
            Destination::parse(RailFamily::Evm, "0x0000000000000000000000000000000000000001"),
            Ok(Destination::Evm(_))
        ));
        for text in
            ["a_b", "acct_1Nv0FGQ9RKHgCVdK", &format!("{}_{}", "a".repeat(30), "b".repeat(30))]
        {
            assert!(regex_lite_match(ACCOUNT_DESTINATION_PATTERN, text), "{text}");
            assert!(payoutd_domain::ProviderAccount::parse(text).is_ok(), "{text}");
        }
    }

    /// The account pattern, checked by hand: letters and digits, one `_`, 1..=30 on each side.
    fn regex_lite_match(pattern: &str, text: &str) -> bool {
        assert_eq!(pattern, ACCOUNT_DESTINATION_PATTERN);
        let Some((a, b)) = text.split_once('_') else { return false };
        let side =
            |s: &str| (1..=30).contains(&s.len()) && s.bytes().all(|c| c.is_ascii_alphanumeric());
        side(a) && side(b)
    }

    #[test]
    fn assets_on_two_rails_give_one_variant_per_rail() {
        let assets = AssetRegistry::new(vec![
            Asset::new("evm:1/USDC", 6, TokenKind::Other).unwrap(),
            Asset::new("solana:devnet/USDC", 6, TokenKind::Other).unwrap(),
        ])
        .unwrap();
        let doc = served_document(&assets, 10);
        let variants =
            doc["components"]["schemas"]["CreatePayoutBody"]["oneOf"].as_array().unwrap();
        assert_eq!(variants.len(), 2);
        assert_eq!(variants[0]["properties"]["asset"]["enum"], json!(["evm:1/USDC"]));
        assert_eq!(variants[0]["properties"]["destination"]["pattern"], EVM_DESTINATION_PATTERN);
        assert_eq!(variants[1]["properties"]["destination"]["pattern"], SOLANA_DESTINATION_PATTERN);
        assert_eq!(
            doc["components"]["schemas"]["CreateTransferBody"]["properties"]["asset"]["enum"],
            json!(["evm:1/USDC", "solana:devnet/USDC"])
        );
        let csv = doc["paths"]["/v1/payout_batches"]["post"]["requestBody"]["content"]["text/csv"]
            ["schema"]["pattern"]
            .as_str()
            .unwrap();
        assert!(csv.contains("(evm:1/USDC),[1-9][0-9]{0,76},0x[0-9a-f]{39}[1-9a-f]"), "{csv}");
        assert_eq!(
            doc["components"]["schemas"]["CreateBatchBody"]["properties"]["payouts"]["maxItems"],
            10
        );
        // Distinct event types cannot outnumber the types: a longer bound sends a fuzzer looking
        // for arrays that do not exist.
        let types =
            &doc["components"]["schemas"]["CreateEndpointBody"]["properties"]["event_types"];
        assert_eq!(types["maxItems"], EventType::ALL.len(), "{types}");
    }

    #[test]
    fn a_provider_asset_paying_accounts_gets_the_account_pattern() {
        let assets = AssetRegistry::new(vec![
            Asset::new("evm:1/USDC", 6, TokenKind::Other).unwrap(),
            Asset::new("provider:stripe/USD", 2, TokenKind::Provider(DestinationKind::Account))
                .unwrap(),
            Asset::new("provider:circle/USDC", 6, TokenKind::Provider(DestinationKind::Evm))
                .unwrap(),
        ])
        .unwrap();
        let doc = served_document(&assets, 10);
        let variants =
            doc["components"]["schemas"]["CreatePayoutBody"]["oneOf"].as_array().unwrap();
        assert_eq!(variants.len(), 2, "EVM addresses (a chain and Circle) and provider accounts");
        let account = variants
            .iter()
            .find(|v| v["properties"]["destination"]["pattern"] == ACCOUNT_DESTINATION_PATTERN)
            .unwrap();
        assert_eq!(account["properties"]["asset"]["enum"], json!(["provider:stripe/USD"]));
    }
}
