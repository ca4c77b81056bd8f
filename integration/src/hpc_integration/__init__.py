"""hpc-integration: adapters that plug the hpc-ops operators into SGLang and vLLM.

- `hpc_integration.sglang.register`: entry point `sglang.srt.plugins: hpc` (attention backend
  "hpc", MoE runner "hpc", FP32 router hooks);
- `hpc_integration.vllm.register`: entry point `vllm.general_plugins: hpc` (attention backend
  CUSTOM, hpc_moe experts, FP32 GateLinear);
- `hpc_integration.ops`: the operator calls both use (kernels on an SM90 GPU, references elsewhere);
- `hpc_integration.support`: what the kernels serve, and the start-up messages.

Importing this package imports no framework.
"""

from ._version import __version__

__all__ = ["__version__"]
