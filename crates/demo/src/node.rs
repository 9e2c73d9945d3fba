//! The demo's EVM node: an anvil it starts (interval mining) or the node it is given, checked to be the chain the demo's assets are on.

use anyhow::{Context, ensure};
use payoutd_demo::chain::start_anvil;
use payoutd_rail_evm::EvmRpc;
use payoutd_testkit::{ANVIL_CHAIN_ID, Anvil, AnvilOptions};

use crate::BLOCK_TIME_SECS;

/// The node at `rpc_url`, or an anvil started here; with its URL, a client and its chain id.
pub(crate) async fn evm_node(
    rpc_url: Option<&str>,
) -> anyhow::Result<(Option<Anvil>, String, EvmRpc, u64)> {
    let Some(node_url) = rpc_url else {
        let (anvil, rpc) = start_anvil(AnvilOptions::block_time_secs(BLOCK_TIME_SECS)).await?;
        let url = anvil.url().to_owned();
        return Ok((Some(anvil), url, rpc, ANVIL_CHAIN_ID));
    };
    let node_url = node_url.to_owned();
    let rpc = EvmRpc::new(&node_url).context("node URL")?;
    let chain_id =
        rpc.chain_id().await.with_context(|| format!("cannot reach the node at {node_url}"))?;
    ensure!(
        chain_id == ANVIL_CHAIN_ID,
        "the node at {node_url} is chain {chain_id}; the demo's assets are on {ANVIL_CHAIN_ID}"
    );
    Ok((None, node_url, rpc, chain_id))
}
