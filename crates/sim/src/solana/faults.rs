//! The simulated cluster's faults, per mille, and the deliberate defects of the Solana rail's own reasoning it can carry.

/// Per mille of each fault while faults are on.
#[derive(Debug, Clone, Copy)]
pub struct SolanaFaults {
    /// The node takes the bytes, the answer is lost.
    pub answer_lost: u32,
    /// The bytes never reach the node.
    pub dropped: u32,
    /// The transaction is signed against a blockhash the cluster never saw: it can never land.
    pub unseen_blockhash: u32,
    /// A status or height read fails.
    pub read_error: u32,
    /// A pooled transaction waits another block instead of landing (late landing).
    pub late: u32,
    /// Per block: the node restarts from a snapshot and, for `SNAPSHOT_STRETCH_BLOCKS`, finds no
    /// signature that landed before the restart.
    pub snapshot_restart: u32,
}

/// The deliberate defects of the Solana rail's own reasoning (each off in a correct run).
#[derive(Debug, Clone, Copy, Default)]
pub struct SolanaDefects {
    /// A durable attempt is dead at the first finalized read of another nonce value (a value
    /// merely behind the signed one included).
    pub nonce_moved_at_first_sight: bool,
    /// "Not found" past the expiry is taken as proof in a history that starts after the signing.
    pub absence_without_history: bool,
    /// The listing's cursor stops advancing once more than a page of transfers waits.
    pub cursor_stalls: bool,
    /// A status search's "not found" counts in a proof although the node that answered had not
    /// reached the slot the proof is judged at (no `minContextSlot`).
    pub status_from_node_behind: bool,
}
