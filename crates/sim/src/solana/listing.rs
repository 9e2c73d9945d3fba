//! The simulated fee payer's history read back: what left it since reconciliation's cursor (final, or landed at all), and a final transaction read back with its memo as the attempt it was.

use payoutd_domain::{AttemptSlot, AttemptTx, SolanaExpiry, TxKind, TxRef};
use payoutd_engine::rail::ReadError;
use payoutd_engine::standalone::{Foreign, OutgoingSince, Prepared};

use super::tx::SolTx;
use super::{OUTGOING_PAGE_MAX, SIM_NONCE_ACCOUNT, SimSolana};

impl SimSolana {
    /// What left the fee payer since `cursor`, at finality, a page at a time (`outgoing_since`).
    pub(super) fn final_since(&self, cursor: Option<&str>) -> Result<OutgoingSince, ReadError> {
        let c = self.cluster.lock().unwrap();
        let final_count = Self::final_count(&c);
        let Some(cursor) = cursor else {
            return Ok(OutgoingSince {
                refs: Vec::new(),
                cursor: Some(final_count.to_string()),
                carried: Vec::new(),
            });
        };
        let from: usize = cursor.parse().map_err(|_| ReadError(format!("cursor {cursor}")))?;
        let from = from.min(final_count);
        let to = final_count.min(from + OUTGOING_PAGE_MAX);
        let refs =
            c.landing_order[from..to].iter().map(|s| TxRef::parse(s).expect("reference")).collect();
        // The cursor moves over what was read, a page at a time, however far behind it is.
        let stalled = self.defects.cursor_stalls && final_count - from > OUTGOING_PAGE_MAX;
        let next = if stalled { from } else { to };
        Ok(OutgoingSince { refs, cursor: Some(next.to_string()), carried: Vec::new() })
    }

    /// Every landed transfer after the cursor, final or not (a listing at `confirmed`).
    pub(super) fn landed_since(&self, cursor: &str) -> Result<Vec<TxRef>, ReadError> {
        let c = self.cluster.lock().unwrap();
        let from: usize = cursor.parse().map_err(|_| ReadError(format!("cursor {cursor}")))?;
        Ok(c.landing_order[from.min(c.landing_order.len())..]
            .iter()
            .map(|s| TxRef::parse(s).expect("reference"))
            .collect())
    }

    /// Every transfer here is the fee payer's; one final is read back with its memo and as the
    /// attempt it was, one not final yet cannot be judged.
    pub(super) fn read_back(&self, refs: &[TxRef]) -> Result<Vec<Foreign>, ReadError> {
        let c = self.cluster.lock().unwrap();
        let finalized = Self::finalized_height(&c);
        let mut out = Vec::with_capacity(refs.len());
        for reference in refs {
            let Some((tx, at)) = c.landed.get(reference.as_str()) else {
                return Err(ReadError(format!("{reference} is not landed")));
            };
            if *at > finalized {
                return Err(ReadError(format!("{reference} is not final yet")));
            }
            let named = payoutd_domain::ChainReference::parse_hex(&tx.memo)
                .map(|named| (named, self.as_attempt(tx, reference, finalized)));
            out.push(Foreign { reference: reference.clone(), names: named });
        }
        Ok(out)
    }

    /// A landed transaction as the attempt it was: its bytes, and an expiry it already met.
    fn as_attempt(&self, tx: &SolTx, reference: &TxRef, finalized: u64) -> Prepared {
        let expiry = match tx.nonce {
            None => SolanaExpiry::LastValidBlockHeight(finalized),
            Some(value) => SolanaExpiry::DurableNonce {
                account: SIM_NONCE_ACCOUNT.to_owned(),
                value: value.to_string(),
                signed_at_block_height: finalized,
            },
        };
        Prepared {
            slot: AttemptSlot::Solana { fee_payer: self.wallet.id.clone(), expiry },
            tx: AttemptTx {
                hash: reference.clone(),
                kind: TxKind::Original,
                raw: tx.encode(),
                fees: None,
                created_at_ms: 0,
            },
        }
    }
}
