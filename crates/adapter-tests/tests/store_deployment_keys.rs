//! The deployment's reference key, on both stores: made once by whichever process asks first, the same for every process and every later start, and kept with the data.

use payoutd_domain::{ChainReference, MerchantId, PayoutKey};
use payoutd_store::open_stores_with;
use payoutd_testkit::{TestDb, both_stores};

/// Two processes on one database (two stores opened on it) ask for the key at once: both get the
/// same one, and a store opened later gets it again. One row, 64 hex characters. (Before, there
/// was no key: transactions named nothing of what they paid.)
async fn the_reference_key_is_made_once_and_shared_by_every_process(db: TestDb) {
    let (first, second) = (db.evm_lines(), open_stores_with(db.url(), None).await.unwrap());
    let (a, b) = tokio::join!(first.reference_key(), second.evm_lines.reference_key());
    let (a, b) = (a.unwrap(), b.unwrap());
    let later = open_stores_with(db.url(), None).await.unwrap().evm_lines.reference_key().await;
    let merchant = MerchantId::parse("mer_0192f00000000000000000000000000a").unwrap();
    let event = PayoutKey::parse("withdrawal-1").unwrap();
    let of = |key| ChainReference::of(key, &merchant, &event);
    assert_eq!(of(&a), of(&b), "both processes make the same references");
    assert_eq!(of(&a), of(&later.unwrap()), "and so does a later start");
    assert_eq!(db.scalar_raw("SELECT count(*) FROM deployment_keys").await, 1);
    let length = "SELECT count(*) FROM deployment_keys WHERE length(key_hex) = 64";
    assert_eq!(db.scalar_raw(length).await, 1);
}

both_stores!(the_reference_key_is_made_once_and_shared_by_every_process);
