//! Reconciliation's reads: the hot wallet's finalized signatures since the stored cursor, in runs that go on across passes, and which of them the wallet signed.

use async_trait::async_trait;
use payoutd_domain::{AttemptSlot, AttemptTx, SolanaExpiry, TxKind, TxRef};
use payoutd_engine::rail::ReadError;
use payoutd_engine::standalone::{Foreign, OutgoingSince, Prepared};
use solana_commitment_config::CommitmentConfig;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Signature;
use solana_sdk::transaction::{Transaction, VersionedTransaction};

use crate::tx::carried_reference;

use super::{SolanaRail, read_error};
use crate::rpc::{SIGNATURES_PER_PAGE_MAX, SignaturePage, SolanaRpc};

/// The System program's `AdvanceNonceAccount` instruction, as its data encodes it.
const ADVANCE_NONCE_INSTRUCTION: [u8; 4] = 4u32.to_le_bytes();

/// The nonce account a transaction advances first (one signed against a durable nonce), if any.
fn advanced_nonce_account(tx: &Transaction) -> Option<Pubkey> {
    let first = tx.message.instructions.first()?;
    let keys = &tx.message.account_keys;
    let program = keys.get(usize::from(first.program_id_index))?;
    if *program != solana_system_interface::program::ID || first.data != ADVANCE_NONCE_INSTRUCTION {
        return None;
    }
    keys.get(usize::from(*first.accounts.first()?)).copied()
}

/// Pages of `confirmed` signatures read before signing at most: past them the line waits for
/// reconciliation to catch up.
pub const UNJUDGED_PAGES_MAX: usize = 5;

/// The wallet's signatures at `confirmed` after `until`, newest first, from one node; refused past
/// `UNJUDGED_PAGES_MAX` full pages.
async fn confirmed_pages(
    rpc: &SolanaRpc,
    wallet: Pubkey,
    until: Option<Signature>,
) -> Result<Vec<Signature>, ReadError> {
    let mut all = Vec::new();
    let mut before = None;
    for _ in 0..UNJUDGED_PAGES_MAX {
        let page = SignaturePage {
            until,
            before,
            limit: SIGNATURES_PER_PAGE_MAX,
            commitment: CommitmentConfig::confirmed(),
        };
        let signatures: Vec<Signature> = rpc
            .signatures_page(&wallet, page)
            .await
            .map_err(read_error)?
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        let full = signatures.len() == SIGNATURES_PER_PAGE_MAX;
        before = signatures.last().copied();
        all.extend(signatures);
        if !full {
            return Ok(all);
        }
    }
    Err(ReadError(format!(
        "more than {} signatures since reconciliation's cursor",
        UNJUDGED_PAGES_MAX * SIGNATURES_PER_PAGE_MAX
    )))
}

/// The cursor of a wallet whose history was empty when reconciliation started: everything counts.
pub(super) const CURSOR_FROM_GENESIS: &str = "-";
/// Pages of signatures one reconciliation pass reads at most; a longer run since the cursor goes
/// on at the next pass from where this one stopped.
pub const RECONCILE_PAGES_PER_PASS_MAX: usize = 10;
/// What marks a stored run in progress: `run:<target>:<until>:<before>`.
const RUN_PREFIX: &str = "run";

/// How much of the node's signature list one pass reads.
#[derive(Debug, Clone, Copy)]
struct PassLimits {
    pages_per_pass_max: usize,
    signatures_per_page_max: usize,
}

const PASS_LIMITS: PassLimits = PassLimits {
    pages_per_pass_max: RECONCILE_PAGES_PER_PASS_MAX,
    signatures_per_page_max: SIGNATURES_PER_PAGE_MAX,
};

/// Where reconciliation of the hot wallet stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cursor {
    /// Every signature up to and including this one is judged (`None`: the wallet had none, `-`).
    Judged(Option<Signature>),
    /// A run longer than one pass, read newest first: the signatures after `until` up to and
    /// including `target` (the newest when the run began) are being judged, and those from
    /// `target` down to and including `before` already are. Signatures newer than `target` wait
    /// for the next run, which starts from it.
    Run { target: Signature, until: Option<Signature>, before: Signature },
}

#[derive(Debug, thiserror::Error)]
#[error(
    "stored reconciliation cursor {text:?} is neither a signature, {CURSOR_FROM_GENESIS:?} nor {RUN_PREFIX}:<target>:<until>:<before>"
)]
struct CursorError {
    text: String,
}

impl Cursor {
    fn parse(text: &str) -> Result<Cursor, CursorError> {
        let bad = || CursorError { text: text.to_owned() };
        let signature = |s: &str| s.parse::<Signature>().map_err(|_| bad());
        let until =
            |s: &str| if s == CURSOR_FROM_GENESIS { Ok(None) } else { signature(s).map(Some) };
        match text.split(':').collect::<Vec<_>>()[..] {
            [judged] => Ok(Cursor::Judged(until(judged)?)),
            [RUN_PREFIX, target, until_text, before] => Ok(Cursor::Run {
                target: signature(target)?,
                until: until(until_text)?,
                before: signature(before)?,
            }),
            _ => Err(bad()),
        }
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let until = |u: &Option<Signature>| {
            u.map_or_else(|| CURSOR_FROM_GENESIS.to_owned(), |s| s.to_string())
        };
        match self {
            Cursor::Judged(judged) => f.write_str(&until(judged)),
            Cursor::Run { target, until: u, before } => {
                write!(f, "{RUN_PREFIX}:{target}:{}:{before}", until(u))
            }
        }
    }
}

/// The node's list of signatures naming an address (`getSignaturesForAddress`), as a pass reads it.
#[async_trait]
trait SignatureList: Sync {
    /// Newest first, strictly between `until` and `before` (each absent: no bound), at most `limit`.
    async fn newest_first(
        &self,
        until: Option<Signature>,
        before: Option<Signature>,
        limit: usize,
    ) -> Result<Vec<Signature>, ReadError>;
}

/// The hot wallet's finalized signatures on the node.
struct WalletSignatures<'a> {
    rpc: &'a SolanaRpc,
    wallet: Pubkey,
}

#[async_trait]
impl SignatureList for WalletSignatures<'_> {
    async fn newest_first(
        &self,
        until: Option<Signature>,
        before: Option<Signature>,
        limit: usize,
    ) -> Result<Vec<Signature>, ReadError> {
        let page =
            SignaturePage { until, before, limit, commitment: CommitmentConfig::finalized() };
        let signatures = self.rpc.signatures_page(&self.wallet, page).await.map_err(read_error)?;
        Ok(signatures.into_iter().map(|(s, _)| s).collect())
    }
}

/// One pass from `cursor`: the signatures read, newest first, and the cursor after them.
async fn read_pass(
    list: &impl SignatureList,
    cursor: &Cursor,
    limits: PassLimits,
) -> Result<(Vec<Signature>, Cursor), ReadError> {
    let (until, mut target, mut before) = match cursor {
        Cursor::Judged(until) => (*until, None, None),
        Cursor::Run { target, until, before } => (*until, Some(*target), Some(*before)),
    };
    let mut read = Vec::new();
    for _ in 0..limits.pages_per_pass_max {
        let page = list.newest_first(until, before, limits.signatures_per_page_max).await?;
        let full = page.len() == limits.signatures_per_page_max;
        target = target.or_else(|| page.first().copied());
        before = page.last().copied().or(before);
        read.extend(page);
        if !full {
            // The run reached `until`: everything up to its target is judged.
            return Ok((read, Cursor::Judged(target.or(until))));
        }
    }
    // Longer than a pass: the next pass goes on below the oldest read, towards the same `until`.
    let next = match (target, before) {
        (Some(target), Some(before)) => Cursor::Run { target, until, before },
        _ => cursor.clone(), // nothing read: limits of zero
    };
    Ok((read, next))
}

impl SolanaRail {
    /// Everything naming the hot wallet since `cursor`, finalized, read for one pass: a run longer
    /// than a pass is stored in the cursor and goes on at the next. The references are oldest
    /// first within the pass; a run's passes go back in time, which the engine does not mind (it
    /// judges each reference alone, and a run's end moves the cursor past all of them).
    pub(super) async fn finalized_since(&self, text: &str) -> Result<OutgoingSince, ReadError> {
        let cursor = Cursor::parse(text).map_err(|e| ReadError(e.to_string()))?;
        // One pass's pages from one endpoint: pages of two nodes' histories do not join up.
        let (newest_first, next) = self
            .endpoints
            .read("signatures", |rpc| {
                let list = WalletSignatures { rpc, wallet: self.signer.pubkey() };
                let cursor = &cursor;
                async move { read_pass(&list, cursor, PASS_LIMITS).await }
            })
            .await?;
        let refs = newest_first
            .iter()
            .rev()
            .map(|s| {
                TxRef::parse(&s.to_string())
                    .map_err(|_| ReadError(format!("signature {s} is not a reference")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(OutgoingSince {
            refs,
            cursor: Some(next.to_string()).filter(|next| next != text),
            carried: Vec::new(),
        })
    }

    /// Every signature naming the hot wallet after what reconciliation has judged (`text`), at
    /// `confirmed`, from every endpoint that answers (the union: a node behind misses the newest,
    /// another has them). Refused while reconciliation is still reading a backlog, when no
    /// endpoint answers, or past `UNJUDGED_PAGES_MAX` pages: the line waits for reconciliation.
    pub(super) async fn confirmed_since(&self, text: &str) -> Result<Vec<TxRef>, ReadError> {
        let Cursor::Judged(until) = Cursor::parse(text).map_err(|e| ReadError(e.to_string()))?
        else {
            return Err(ReadError("reconciliation is reading a backlog of the wallet".into()));
        };
        let wallet = self.signer.pubkey();
        let answers = self
            .endpoints
            .every(|rpc| async move { confirmed_pages(rpc, wallet, until).await })
            .await;
        let mut union: Vec<TxRef> = Vec::new();
        let mut answered = false;
        for (endpoint, answer) in answers.into_iter().enumerate() {
            match answer {
                Ok(signatures) => {
                    answered = true;
                    for signature in signatures {
                        let reference = TxRef::parse(&signature.to_string()).map_err(|_| {
                            ReadError(format!("signature {signature} is not a reference"))
                        })?;
                        if !union.contains(&reference) {
                            union.push(reference);
                        }
                    }
                }
                Err(_) => self.endpoints.count_error(endpoint, "signatures"),
            }
        }
        if !answered {
            return Err(ReadError("no endpoint listed the wallet's signatures".into()));
        }
        Ok(union)
    }

    /// `signature`'s final transaction when the hot wallet signed it (money out), else `None`.
    async fn own_transaction(
        &self,
        signature: &Signature,
    ) -> Result<Option<VersionedTransaction>, ReadError> {
        let landed = self
            .endpoints
            .read("transaction", |rpc| rpc.transaction(signature, CommitmentConfig::finalized()))
            .await
            .map_err(read_error)?;
        let tx = landed
            .transaction
            .transaction
            .decode()
            .ok_or_else(|| ReadError(format!("transaction {signature} does not decode")))?;
        let signers = usize::from(tx.message.header().num_required_signatures);
        let signed = tx
            .message
            .static_account_keys()
            .iter()
            .take(signers)
            .any(|k| *k == self.signer.pubkey());
        Ok(signed.then_some(tx))
    }

    /// Of `refs` (final signatures no stored attempt holds), the hot wallet's own transactions,
    /// each with the business event its memo names and the attempt it was.
    pub(super) async fn foreign_of(&self, refs: &[TxRef]) -> Result<Vec<Foreign>, ReadError> {
        let mut out = Vec::new();
        for reference in refs {
            let signature = reference
                .as_str()
                .parse::<Signature>()
                .map_err(|e| ReadError(format!("{reference}: {e}")))?;
            if let Some(tx) = self.own_transaction(&signature).await? {
                out.push(self.foreign(reference, tx).await?);
            }
        }
        Ok(out)
    }

    /// A final transaction of the hot wallet: when its memo names a business event, the attempt it
    /// was, rebuilt from its bytes. Its expiry is the finalized height now, which it landed
    /// before: the status of its signature, not its expiry, is what settles it.
    async fn foreign(
        &self,
        reference: &TxRef,
        tx: VersionedTransaction,
    ) -> Result<Foreign, ReadError> {
        let (Some(named), Some(legacy)) =
            (carried_reference(&tx.message), tx.into_legacy_transaction())
        else {
            return Ok(Foreign::naming_nothing(reference.clone()));
        };
        let height = self
            .endpoints
            .read("block height", |rpc| rpc.block_height(CommitmentConfig::finalized()))
            .await
            .map_err(read_error)?;
        let expiry = match advanced_nonce_account(&legacy) {
            Some(account) => SolanaExpiry::DurableNonce {
                account: account.to_string(),
                value: legacy.message.recent_blockhash.to_string(),
                signed_at_block_height: height,
            },
            None => SolanaExpiry::LastValidBlockHeight(height),
        };
        let raw = bincode::serialize(&legacy).map_err(|e| ReadError(e.to_string()))?;
        let tx = AttemptTx {
            hash: reference.clone(),
            kind: TxKind::Original,
            raw,
            fees: None,
            created_at_ms: 0,
        };
        let slot = AttemptSlot::Solana { fee_payer: self.wallet.id.clone(), expiry };
        Ok(Foreign { reference: reference.clone(), names: Some((named, Prepared { slot, tx })) })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Mutex;

    use super::*;

    /// Small enough that a run of a few dozen signatures spans several passes.
    const LIMITS_SMALL: PassLimits =
        PassLimits { pages_per_pass_max: 2, signatures_per_page_max: 3 };
    const SIGNATURES_PER_PASS_SMALL: usize = 6;
    const PASSES_MAX: usize = 20;

    /// A node's signature list for one address, oldest first, as `getSignaturesForAddress` pages it.
    struct History(Mutex<Vec<Signature>>);

    impl History {
        fn grow(&self, count: usize) {
            let mut all = self.0.lock().unwrap();
            let from = all.len();
            all.extend((from..from + count).map(signature));
        }

        fn all(&self) -> Vec<Signature> {
            self.0.lock().unwrap().clone()
        }
    }

    #[async_trait]
    impl SignatureList for History {
        async fn newest_first(
            &self,
            until: Option<Signature>,
            before: Option<Signature>,
            limit: usize,
        ) -> Result<Vec<Signature>, ReadError> {
            let all = self.all();
            let below = before.map_or(all.len(), |b| {
                all.iter().position(|s| *s == b).expect("`before` is a listed signature")
            });
            let above = until
                .and_then(|u| all.iter().position(|s| *s == u))
                .map_or(0, |i| i + 1)
                .min(below);
            Ok(all[above..below].iter().rev().take(limit).copied().collect())
        }
    }

    fn signature(n: usize) -> Signature {
        let mut bytes = [7u8; 64];
        bytes[..8].copy_from_slice(&(n as u64).to_le_bytes());
        Signature::from(bytes)
    }

    /// A wallet 20 signatures behind, read 6 per pass, with 4 more arriving mid-run: every
    /// signature after the cursor is read exactly once, the cursor stores the run between
    /// passes, and it ends at the run's target before the newer ones are read.
    #[tokio::test]
    async fn a_run_longer_than_a_pass_goes_on_at_the_next_pass_and_ends_at_its_target() {
        let history = History(Mutex::new(Vec::new()));
        history.grow(3);
        let judged_before = history.all();
        history.grow(20);
        let mut cursor = Cursor::parse(&judged_before[2].to_string()).unwrap();
        let (mut read, mut cursors) = (Vec::new(), Vec::new());
        for pass in 0..PASSES_MAX {
            let (newest_first, next) =
                read_pass(&history, &cursor, LIMITS_SMALL).await.expect("a pass reads what it can");
            assert!(newest_first.len() <= SIGNATURES_PER_PASS_SMALL);
            read.extend(newest_first);
            cursor = Cursor::parse(&next.to_string()).unwrap(); // stored and read back between passes
            cursors.push(next.to_string());
            if pass == 0 {
                history.grow(4);
            }
            if cursor == Cursor::Judged(history.all().last().copied()) {
                break;
            }
        }
        let newer: Vec<Signature> = history.all()[3..].to_vec();
        assert_eq!(read.len(), newer.len(), "each read once: {cursors:?}");
        assert_eq!(read.iter().collect::<HashSet<_>>(), newer.iter().collect::<HashSet<_>>());
        assert!(cursors[0].starts_with("run:"), "the first pass stored its run: {cursors:?}");
        let run_end = cursors.iter().position(|c| !c.starts_with("run:")).unwrap();
        assert_eq!(
            cursors[run_end],
            signature(22).to_string(),
            "the run ended at its target, the newest when it began"
        );
        assert_eq!(cursors.last().unwrap(), &signature(26).to_string());
    }

    #[test]
    fn plain_cursors_stored_before_runs_existed_still_parse() {
        assert_eq!(Cursor::parse(CURSOR_FROM_GENESIS).unwrap(), Cursor::Judged(None));
        let plain = signature(1).to_string();
        assert_eq!(Cursor::parse(&plain).unwrap(), Cursor::Judged(Some(signature(1))));
        for cursor in [
            Cursor::Judged(None),
            Cursor::Run { target: signature(9), until: None, before: signature(4) },
            Cursor::Run { target: signature(9), until: Some(signature(1)), before: signature(4) },
        ] {
            assert_eq!(Cursor::parse(&cursor.to_string()).unwrap(), cursor);
        }
        for bad in ["", "run:x:-:y", "run:-:-", "not a signature"] {
            assert!(Cursor::parse(bad).is_err(), "{bad:?}");
        }
    }
}
