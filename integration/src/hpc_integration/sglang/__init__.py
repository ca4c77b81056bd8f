"""SGLang plugin (entry point `sglang.srt.plugins: hpc = hpc_integration.sglang:register`).

SGLang loads general plugins once per process, before it builds the CLI parser and the model.
`register` is idempotent and registers, each switched by HPC_INTEGRATION_OPS (default all):

- attention: backend "hpc" (`--attention-backend hpc`, or per phase `--decode-attention-backend
  hpc`), its name added to the CLI choices; and, unless HPC_SGLANG_PROLOGUE=0, AROUND hooks on the
  Qwen3-MoE / Qwen3 attention layers that fuse QK-Norm, RoPE and the KV write of decode steps into
  one hpc_attention call (prologue.py);
- moe: runner "hpc" (`--moe-runner-backend hpc`): `register_moe_runner_core` where the release
  has it, and a hook after the unquantised / FP8 MoE methods' `create_moe_runner` (their runner
  is chosen by hard-coded names), through `srt/plugins/hook_registry.py`;
- router: AROUND hooks on `linear_bf16_fp32` and on gate `ReplicatedLinear.forward` for FP32
  router weights.
"""

from __future__ import annotations

from .. import support

_REGISTERED: dict[str, object] = {}

MOE_METHODS = (
    "sglang.srt.layers.quantization.unquant.UnquantizedFusedMoEMethod.create_moe_runner",
    "sglang.srt.layers.quantization.fp8.Fp8MoEMethod.create_moe_runner",
)


def register() -> dict[str, object]:
    """Register the enabled operators once per process; returns what is registered."""
    ops = support.enabled_ops()
    if "attention" in ops and "attention" not in _REGISTERED:
        _REGISTERED["attention"] = _register_attention()
    if "attention" in ops and "prologue" not in _REGISTERED and support.prologue_enabled():
        _REGISTERED["prologue"] = _register_prologue()
    if "moe" in ops and "moe" not in _REGISTERED:
        _REGISTERED["moe"] = _register_moe()
    if "router" in ops and "router" not in _REGISTERED:
        _REGISTERED["router"] = _register_router()
    _apply_hooks()
    return dict(_REGISTERED)


def _choices(names: tuple[str, ...]) -> list | None:
    """The first of the CLI choice lists that exists (arg_groups in 0.5.23, server_args before)."""
    import importlib

    for mod in ("sglang.srt.arg_groups.choices", "sglang.srt.server_args"):
        try:
            m = importlib.import_module(mod)
        except ImportError:
            continue
        for n in names:
            lst = getattr(m, n, None)
            if isinstance(lst, list):
                return lst
    return None


def _add_choice(list_names: tuple[str, ...], name: str) -> bool:
    lst = _choices(list_names)
    if lst is None:
        return False
    if name not in lst:
        lst.append(name)
    return True


def _register_attention() -> str:
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS, register_attention_backend

    from .attention import create_backend

    if ATTENTION_BACKENDS.get("hpc") is not create_backend:
        register_attention_backend("hpc")(create_backend)
    _add_choice(("ATTENTION_BACKEND_CHOICES",), "hpc")
    return "hpc"


def _register_prologue() -> tuple[str, ...]:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from . import prologue

    targets = []
    for target, hook in prologue.hooks():
        if _module_exists(target.rsplit(".", 2)[0]):
            targets.append(target)
            if not any(h is hook for _, h, _ in HookRegistry._hooks.get(target, ())):
                HookRegistry.register(target, hook, HookType.AROUND)
    return tuple(targets)


def _module_exists(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a parent package that does not exist in this release
        return False


def _register_moe() -> str:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from . import moe

    try:
        from sglang.srt.layers.moe.moe_runner import runner as runner_mod

        register_core = runner_mod.register_moe_runner_core
    except (ImportError, AttributeError):
        register_core = None
    if register_core is not None:
        if runner_mod._CUSTOM_RUNNER_CORE_FACTORIES.get(moe.NAME) is not moe.make_core:
            register_core(moe.NAME, moe.make_core)
        _add_choice(("MOE_RUNNER_BACKEND_CHOICES",), moe.NAME)
    else:
        support.say("this SGLang has no register_moe_runner_core: the hpc MoE runner is switched on by "
                    f"{support.ENV_OPS} naming 'moe' (keep --moe-runner-backend at its default)")
    for target in MOE_METHODS:
        if not any(h is moe.after_create_moe_runner for _, h, _ in HookRegistry._hooks.get(target, ())):
            HookRegistry.register(target, moe.after_create_moe_runner, HookType.AFTER)
    return moe.NAME


def _register_router() -> tuple[str, ...]:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from . import router

    targets = []
    for target in router.LINEAR_BF16_FP32:
        if _module_exists(target.rsplit(".", 1)[0]):
            targets.append((target, router.around_linear_bf16_fp32))
    targets.append((router.REPLICATED_LINEAR_FORWARD, router.around_replicated_forward))
    targets.append((router.REPLICATED_LINEAR_INIT, router.around_replicated_init))
    for target, hook in targets:
        if not any(h is hook for _, h, _ in HookRegistry._hooks.get(target, ())):
            HookRegistry.register(target, hook, HookType.AROUND)
    return tuple(t for t, _ in targets)


def _apply_hooks() -> None:
    """load_plugins() applies hooks after running the plugins; a direct call of register() (tests,
    scripts that build SGLang objects by hand) applies them here. Patched targets are skipped."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    HookRegistry.apply_hooks()
