//! The nodes behind the simulated chain's one endpoint: a share of reads is answered by a replica some blocks behind the head, as a load-balanced RPC endpoint does; every fault a pure function of the seed.

use sha2::{Digest, Sha256};

/// How far behind the head a lagging replica may answer, in blocks: past the finality depth, so a
/// replica can lack a block that another node already calls final.
pub const LAG_BLOCKS_MAX: u64 = 6;

/// The replicas' share of reads and what they lagged.
#[derive(Debug, Default)]
pub(super) struct Replicas {
    /// Per mille of reads a replica behind the head answers.
    pub(super) lag_per_mille: u32,
    /// Per read key, how many times it was read: a read's replica depends on what is asked, not on
    /// how workers interleaved.
    read_counts: std::collections::HashMap<String, u64>,
    /// Reads a replica behind the head answered.
    pub(super) lagging_reads: u64,
}

impl Replicas {
    /// How many blocks behind the head the node answering this read is (0: the head's node).
    pub(super) fn lag_of(&mut self, seed: u64, key: &str) -> u64 {
        if self.lag_per_mille == 0 {
            return 0;
        }
        let count = self.read_counts.entry(key.to_owned()).or_insert(0);
        *count += 1;
        let digest = Sha256::digest(format!("{seed}:replica:{key}:{count}").as_bytes());
        if u32::from(u16::from_be_bytes([digest[0], digest[1]])) % 1000 >= self.lag_per_mille {
            return 0;
        }
        self.lagging_reads += 1;
        1 + u64::from(digest[2]) % LAG_BLOCKS_MAX
    }
}
