//! Entity identifiers: a type prefix plus a time-ordered UUID (v7), so ids sort by creation.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed {kind} id")]
pub struct IdError {
    pub kind: &'static str,
}

/// A fresh v7 UUID: from the clock and the operating system's randomness, or, on a thread the
/// simulator seeded (`seeded::seed_this_thread`), the next of that seed's sequence.
fn fresh_uuid() -> uuid::Uuid {
    #[cfg(feature = "seeded-ids")]
    if let Some(uuid) = seeded::next() {
        return uuid;
    }
    uuid::Uuid::now_v7()
}

/// Ids a seed's run draws in the same order every time it replays: the deterministic simulator
/// seeds the thread a seed runs on, so everything hashed from an id (a provider's reference, a
/// fault decided from it, the order of a queue) is the same from one run of the seed to the next.
/// Compiled only with the `seeded-ids` feature, which the simulator turns on and the shipped
/// binary does not.
#[cfg(feature = "seeded-ids")]
pub mod seeded {
    use std::cell::Cell;

    /// The first seeded id's time (2024-01-01T00:00:00Z); each next id is a millisecond later,
    /// so seeded ids still sort by creation.
    const SEEDED_EPOCH_MS: u64 = 1_704_067_200_000;

    thread_local! {
        /// (seed, ids drawn so far) of this thread, when seeded.
        static SEQUENCE: Cell<Option<(u64, u64)>> = const { Cell::new(None) };
    }

    /// From now on, ids made on this thread are the sequence of `seed`, from its start.
    pub fn seed_this_thread(seed: u64) {
        SEQUENCE.with(|sequence| sequence.set(Some((seed, 0))));
    }

    /// The next id of this thread's sequence, or `None` when the thread is not seeded.
    pub(super) fn next() -> Option<uuid::Uuid> {
        SEQUENCE.with(|sequence| {
            let (seed, drawn) = sequence.get()?;
            sequence.set(Some((seed, drawn + 1)));
            let mut rest = [0u8; 10];
            rest[..8].copy_from_slice(&seed.to_be_bytes());
            rest[8..].copy_from_slice(&drawn.to_be_bytes()[6..]);
            Some(
                uuid::Builder::from_unix_timestamp_millis(SEEDED_EPOCH_MS + drawn, &rest)
                    .into_uuid(),
            )
        })
    }
}

macro_rules! id_type {
    ($name:ident, $prefix:literal) => {
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            pub const PREFIX: &'static str = $prefix;

            /// A fresh id; `uuid` must be a v7 so ids order by time (cursor pagination relies on it).
            pub fn from_uuid(uuid: uuid::Uuid) -> $name {
                $name(format!("{}{}", $prefix, uuid.simple()))
            }

            pub fn new() -> $name {
                $name::from_uuid(fresh_uuid())
            }

            pub fn parse(text: &str) -> Result<$name, IdError> {
                let rest = text.strip_prefix($prefix).ok_or(IdError { kind: $prefix })?;
                if rest.len() != 32 || !rest.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
                    return Err(IdError { kind: $prefix });
                }
                Ok($name(text.to_owned()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl Default for $name {
            fn default() -> $name {
                $name::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_type!(MerchantId, "mer_");
id_type!(PayoutId, "po_");
id_type!(AttemptId, "att_");
id_type!(JournalId, "jnl_");
id_type!(DepositId, "dep_");
id_type!(IncidentId, "inc_");
id_type!(WebhookEndpointId, "we_");
id_type!(TransferId, "tr_");
id_type!(ApiKeyId, "key_");
id_type!(BatchId, "pb_");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_refuse_foreign_prefixes() {
        let id = PayoutId::new();
        assert_eq!(PayoutId::parse(id.as_str()).unwrap(), id);
        assert!(PayoutId::parse(&id.as_str().replace("po_", "mer_")).is_err());
        assert!(PayoutId::parse("po_xyz").is_err());
        assert!(MerchantId::parse("mer_0192F0000000000000000000000000AA").is_err());
    }

    #[test]
    fn ids_sort_by_creation_time() {
        let a = PayoutId::new();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = PayoutId::new();
        assert!(a < b);
    }
}
