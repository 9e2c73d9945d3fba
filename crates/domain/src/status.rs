//! Payout and attempt state machines as explicit transition tables; everything not listed is refused.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("illegal {machine} transition {from} -> {to}")]
pub struct TransitionError {
    pub machine: &'static str,
    pub from: &'static str,
    pub to: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {machine} status {text:?}")]
pub struct StatusParseError {
    pub machine: &'static str,
    pub text: String,
}

macro_rules! state_machine {
    ($name:ident, $machine:literal, [$($variant:ident => $text:literal),+ $(,)?], $table:ident) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($variant),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            pub fn parse(text: &str) -> Result<$name, StatusParseError> {
                match text {
                    $($text => Ok($name::$variant),)+
                    _ => Err(StatusParseError { machine: $machine, text: text.chars().take(32).collect() }),
                }
            }

            pub fn can_become(self, to: $name) -> bool {
                $table.iter().any(|&(f, t)| f == self && t == to)
            }

            /// Returns `to` if the table allows it; stores use the result as the expected-state guard.
            pub fn transition(self, to: $name) -> Result<$name, TransitionError> {
                if self.can_become(to) {
                    Ok(to)
                } else {
                    Err(TransitionError { machine: $machine, from: self.as_str(), to: to.as_str() })
                }
            }

            /// The states from which `to` may be reached: the `WHERE status IN (...)` of a conditional update.
            pub fn sources_of(to: $name) -> Vec<$name> {
                $table.iter().filter(|&&(_, t)| t == to).map(|&(f, _)| f).collect()
            }

            pub fn is_terminal(self) -> bool {
                !$table.iter().any(|&(f, _)| f == self)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

state_machine!(PayoutStatus, "payout", [
    Requested => "requested",
    HeldForReview => "held_for_review",
    Approved => "approved",
    Processing => "processing",
    Paid => "paid",
    Rejected => "rejected",
    Canceled => "canceled",
    Failed => "failed",
    NeedsAttention => "needs_attention",
], PAYOUT_TRANSITIONS);

/// Forward-only. `held_for_review` can be entered from `approved` because caps are checked
/// again at signing time (I8); `approved -> failed` is a signer's refusal, before any bytes exist
/// (SPEC 4, failure rules); `approved -> needs_attention` is the send guard remembering an attempt
/// the database lost (its bytes may be out there). A payout whose bytes may be out there can only
/// end `paid`, `failed` (proven) or wait in `needs_attention` for a person. A next attempt after a
/// proven death keeps the payout `processing`; `needs_attention -> processing` is a person's "retry",
/// accepted only with the chain's proof that the previous attempt cannot land.
pub const PAYOUT_TRANSITIONS: &[(PayoutStatus, PayoutStatus)] = {
    use PayoutStatus::*;
    &[
        (Requested, Approved),
        (Requested, HeldForReview),
        (Requested, Canceled),
        (HeldForReview, Approved),
        (HeldForReview, Rejected),
        (HeldForReview, Canceled),
        (Approved, Processing),
        (Approved, HeldForReview),
        (Approved, Canceled),
        (Approved, Failed),
        (Approved, NeedsAttention),
        (Processing, Paid),
        (Processing, Failed),
        (Processing, NeedsAttention),
        (NeedsAttention, Paid),
        (NeedsAttention, Failed),
        (NeedsAttention, Processing),
    ]
};

impl PayoutStatus {
    /// Before any attempt exists: cancel releases the hold without touching a rail.
    pub fn is_cancelable_before_signing(self) -> bool {
        self.can_become(PayoutStatus::Canceled)
    }

    /// The hold still stands in these states (money reserved, not yet settled or released).
    pub fn holds_funds(self) -> bool {
        !matches!(
            self,
            PayoutStatus::Paid
                | PayoutStatus::Rejected
                | PayoutStatus::Canceled
                | PayoutStatus::Failed
        )
    }
}

state_machine!(AttemptStatus, "attempt", [
    Created => "created",
    Signed => "signed",
    Broadcast => "broadcast",
    Confirmed => "confirmed",
    Dead => "dead",
    Reverted => "reverted",
], ATTEMPT_TRANSITIONS);

/// `signed` and `broadcast` are both live: bytes exist and may land. `confirmed` is only
/// entered at the chain's finality threshold, so a reorg below it never needs a way back.
pub const ATTEMPT_TRANSITIONS: &[(AttemptStatus, AttemptStatus)] = {
    use AttemptStatus::*;
    &[
        (Created, Signed),
        (Created, Dead),
        (Signed, Broadcast),
        (Signed, Confirmed),
        (Signed, Dead),
        (Signed, Reverted),
        (Broadcast, Confirmed),
        (Broadcast, Dead),
        (Broadcast, Reverted),
    ]
};

impl AttemptStatus {
    /// At most one attempt per payout may be live (I3); the store enforces it with a partial unique index.
    pub fn is_live(self) -> bool {
        matches!(self, AttemptStatus::Created | AttemptStatus::Signed | AttemptStatus::Broadcast)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payout_table_is_exactly_what_is_allowed() {
        use PayoutStatus::*;
        let mut allowed = 0;
        for &from in PayoutStatus::ALL {
            for &to in PayoutStatus::ALL {
                let listed = PAYOUT_TRANSITIONS.contains(&(from, to));
                assert_eq!(from.transition(to).is_ok(), listed, "{from} -> {to}");
                allowed += usize::from(listed);
            }
        }
        assert_eq!(allowed, PAYOUT_TRANSITIONS.len());
        for terminal in [Paid, Rejected, Canceled, Failed] {
            assert!(terminal.is_terminal(), "{terminal}");
        }
        // Nothing that may have left the wallet can be canceled or failed without a rail's word.
        assert!(!Processing.can_become(Canceled));
        assert!(!NeedsAttention.can_become(Canceled));
        assert!(!Paid.can_become(Failed));
        assert!(!Failed.can_become(Paid));
        assert!(!Processing.can_become(Approved));
    }

    #[test]
    fn attempt_table_is_exactly_what_is_allowed() {
        use AttemptStatus::*;
        for &from in AttemptStatus::ALL {
            for &to in AttemptStatus::ALL {
                assert_eq!(
                    from.transition(to).is_ok(),
                    ATTEMPT_TRANSITIONS.contains(&(from, to)),
                    "{from} -> {to}"
                );
            }
        }
        assert!(!Confirmed.can_become(Broadcast));
        assert!(!Dead.can_become(Signed));
        assert_eq!(AttemptStatus::ALL.iter().filter(|s| s.is_live()).count(), 3);
        assert!(Confirmed.is_terminal() && Dead.is_terminal() && Reverted.is_terminal());
    }

    #[test]
    fn statuses_round_trip_through_text() {
        for &s in PayoutStatus::ALL {
            assert_eq!(PayoutStatus::parse(s.as_str()).unwrap(), s);
        }
        for &s in AttemptStatus::ALL {
            assert_eq!(AttemptStatus::parse(s.as_str()).unwrap(), s);
        }
        assert!(PayoutStatus::parse("PAID").is_err());
    }

    #[test]
    fn sources_feed_conditional_updates() {
        use PayoutStatus::*;
        let mut from = PayoutStatus::sources_of(Canceled);
        from.sort();
        assert_eq!(from, vec![Requested, HeldForReview, Approved]);
    }
}
