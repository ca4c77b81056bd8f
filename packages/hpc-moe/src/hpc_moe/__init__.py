"""hpc-moe: fused latency-oriented Mixture-of-Experts for Hopper (SM90).

    from hpc_moe import MoEWeights, fused_moe
    weights = MoEWeights.prepare(w13, w2, quant="fp8_block", w13_scale=s13, w2_scale=s2)  # load time
    ws = weights.workspace(max_tokens=256, top_k=8)                                         # once
    out = fused_moe(hidden, weights, topk_ids, topk_weights, workspace=ws)                  # per step

Formats "bf16", "fp8_tensor", "fp8_block"; EP through global expert ids; CUDA-graph safe with a
workspace. The pure-torch references are in `hpc_moe.reference` (they run on the CPU, and so
does `fused_moe` on CPU tensors). Importing builds nothing and touches no GPU.
"""

from ._version import __version__
from .fused_moe import fused_moe
from .sharding import MoEShard, shard_moe_weights
from .weights import MoEWeights
from .workspace import MoEWorkspace

__all__ = ["MoEShard", "MoEWeights", "MoEWorkspace", "__version__", "fused_moe", "shard_moe_weights"]
