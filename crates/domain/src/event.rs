//! Outbox events and their deterministic ids: Crockford base32 of SHA-256(type ":" entity)[..16].

use std::fmt;

use sha2::{Digest, Sha256};

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    PayoutCreated,
    PayoutApproved,
    PayoutHeldForReview,
    /// An operator approved a payout that was held for review (a second approval, distinct type).
    PayoutReviewApproved,
    PayoutRejected,
    PayoutCanceled,
    PayoutProcessing,
    PayoutPaid,
    PayoutFailed,
    PayoutNeedsAttention,
    DepositCreated,
    IncidentOpened,
    IncidentResolved,
    BatchCompleted,
    TransferCompleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::PayoutCreated => "payout.created",
            EventType::PayoutApproved => "payout.approved",
            EventType::PayoutHeldForReview => "payout.held_for_review",
            EventType::PayoutReviewApproved => "payout.review_approved",
            EventType::PayoutRejected => "payout.rejected",
            EventType::PayoutCanceled => "payout.canceled",
            EventType::PayoutProcessing => "payout.processing",
            EventType::PayoutPaid => "payout.paid",
            EventType::PayoutFailed => "payout.failed",
            EventType::PayoutNeedsAttention => "payout.needs_attention",
            EventType::DepositCreated => "deposit.created",
            EventType::IncidentOpened => "incident.opened",
            EventType::IncidentResolved => "incident.resolved",
            EventType::BatchCompleted => "batch.completed",
            EventType::TransferCompleted => "transfer.completed",
        }
    }

    pub const ALL: [EventType; 15] = [
        EventType::PayoutCreated,
        EventType::PayoutApproved,
        EventType::PayoutHeldForReview,
        EventType::PayoutReviewApproved,
        EventType::PayoutRejected,
        EventType::PayoutCanceled,
        EventType::PayoutProcessing,
        EventType::PayoutPaid,
        EventType::PayoutFailed,
        EventType::PayoutNeedsAttention,
        EventType::DepositCreated,
        EventType::IncidentOpened,
        EventType::IncidentResolved,
        EventType::BatchCompleted,
        EventType::TransferCompleted,
    ];

    pub fn parse(text: &str) -> Result<EventType, UnknownEventType> {
        EventType::ALL
            .into_iter()
            .find(|t| t.as_str() == text)
            .ok_or_else(|| UnknownEventType(text.chars().take(64).collect()))
    }

    /// Events an operator's webhook endpoints receive, whichever merchant they concern.
    pub fn is_operator_event(self) -> bool {
        matches!(self, EventType::IncidentOpened | EventType::IncidentResolved)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown event type {0:?}")]
pub struct UnknownEventType(pub String);

/// 26 characters; a pure function of (event type, entity id), identical on every retry and machine.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId(String);

impl EventId {
    pub fn derive(event_type: EventType, entity_id: &str) -> EventId {
        EventId::derive_raw(event_type.as_str(), entity_id)
    }

    pub fn derive_raw(event_type: &str, entity_id: &str) -> EventId {
        let mut hasher = Sha256::new();
        hasher.update(event_type.as_bytes());
        hasher.update(b":");
        hasher.update(entity_id.as_bytes());
        let digest = hasher.finalize();
        let mut bits: u128 = 0;
        for &b in &digest[..16] {
            bits = (bits << 8) | u128::from(b);
        }
        // 128 bits -> 26 groups of 5 bits, the first group holding the top 3 bits padded.
        let mut out = [0u8; 26];
        for (i, slot) in out.iter_mut().enumerate().rev() {
            let shift = (25 - i) * 5;
            *slot = CROCKFORD[((bits >> shift) & 0x1f) as usize];
        }
        EventId(String::from_utf8(out.to_vec()).expect("alphabet is ASCII"))
    }

    /// An id as a client sends it back: 26 characters of the Crockford alphabet.
    pub fn parse(text: &str) -> Result<EventId, MalformedEventId> {
        if text.len() != 26 || !text.bytes().all(|b| CROCKFORD.contains(&b)) {
            return Err(MalformedEventId);
        }
        Ok(EventId(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an event id is 26 characters of Crockford base32")]
pub struct MalformedEventId;

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EventId({})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_id_is_a_pure_26_char_crockford_function() {
        let a = EventId::derive(EventType::PayoutPaid, "po_1");
        assert_eq!(a, EventId::derive(EventType::PayoutPaid, "po_1"));
        assert_ne!(a, EventId::derive(EventType::PayoutFailed, "po_1"));
        assert_ne!(a, EventId::derive(EventType::PayoutPaid, "po_2"));
        assert_eq!(a.as_str().len(), 26);
        assert!(a.as_str().bytes().all(|b| CROCKFORD.contains(&b)));
    }

    #[test]
    fn event_id_matches_an_independent_computation() {
        // sha256("payout.paid:po_1")[..16] computed here bit by bit, big-endian, 5 bits at a time.
        let digest = Sha256::digest(b"payout.paid:po_1");
        let mut bits: Vec<u8> = vec![0, 0]; // 130 bits = 26 * 5: two zero pad bits in front
        for b in &digest[..16] {
            for i in (0..8).rev() {
                bits.push((b >> i) & 1);
            }
        }
        let expected: String = bits
            .chunks(5)
            .map(|c| CROCKFORD[c.iter().fold(0usize, |acc, &bit| acc * 2 + bit as usize)] as char)
            .collect();
        assert_eq!(EventId::derive(EventType::PayoutPaid, "po_1").as_str(), expected);
    }
}
