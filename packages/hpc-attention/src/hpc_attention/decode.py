"""Paged-KV decode attention with a device-side plan: `plan_decode` once per step, then `decode` for
every layer.

    ws = DecodeWorkspace(max_batch, Hkv, Hq, max_kv_len)                  # once
    plan = plan_decode(kv_lens, Hkv, Hq, workspace=ws, kv_dtype=...)      # once per step
    out = decode(q, k_cache, v_cache, page_table, kv_lens, plan)          # per layer

The plan decides and the run executes: `plan_decode` resolves every scheduling policy (work floor, task
cost, tail, line order, bin dealing, producer, merge path) from `DecodeOptions` and heuristics.py into
the `DecodePlan`, and `decode` only checks its inputs and launches what the plan says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hpc_common import get_num_sms, get_pdl
from hpc_common.checks import check_tensor
from hpc_common.launch import require_hopper

from . import _ops, heuristics
from .planner import NUM_COUNTERS, PlanTables, WorkspaceCaps, workspace_caps

_FP8 = torch.float8_e4m3fn


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


@dataclass(frozen=True)
class DecodeOptions:
    """Tuning knobs of `plan_decode`; None takes the default of heuristics.py for the plan's shape.
    Every plan gives correct results whatever these say; they only balance the CTAs and pick code paths.

    min_tiles: work floor per CTA in 64-token tiles. task_cost: fixed cost per (request, KV head) item in
    tiles, charged when the work line is cut into bins (0: tiles alone; 0..heuristics.MAX_TASK_COST).
    cost_cap: no charge makes an item longer than the tiles-only budget. tail_percent / tail_bin: the
    share of the line (0..heuristics.MAX_TAIL_PERCENT) cut into small bins that CTAs claim once their own
    bin is done, and the smallest such bin in tiles. head_major: lay the items on the line head by head
    (dynamic plans with Hkv > 1 and no tail). cut_to_heads: a head-major line is cut into a multiple of
    Hkv bins. bins_by_head: deal such bins so that neighbouring CTAs run the heads of the same stretch.
    producer: "tma" or "cp_async" (pages under 16 tokens always use cp.async). merge: where split items
    are merged, "helpers" (the TMA kernel's idle warps; the consumers in the cp.async kernel),
    "consumers" or "combine" (a separate kernel). first_page_from_plan: with the page table given to
    plan_decode, the plan records each bin's first page id for the kernel.
    """

    min_tiles: int | None = None
    task_cost: int | None = None
    cost_cap: bool | None = None
    tail_percent: int | None = None
    tail_bin: int | None = None
    head_major: bool | None = None
    cut_to_heads: bool | None = None
    bins_by_head: bool | None = None
    producer: str | None = None
    merge: str | None = None
    first_page_from_plan: bool | None = None


class DecodeWorkspace:
    """Device buffers of the plan and of the partial outputs, sized once from maxima.

    max_batch: most requests a plan may hold; max_kv_len: longest KV length (lengths above it
    are clamped on the device, or rejected by validation); num_ctas: persistent CTAs (default
    from the SM count); static_splits: None for dynamic plans only, an int S > 0 or "auto" to
    also hold static split-KV plans. Nothing is allocated afterwards, so plan_decode and
    decode can be captured in a CUDA graph.
    """

    def __init__(self, max_batch: int, num_kv_heads: int, num_qo_heads: int, max_kv_len: int,
                 device: torch.device | str | None = None, *, num_ctas: int | None = None,
                 static_splits: int | str | None = None, max_tail_bins: int | None = None):
        op = "DecodeWorkspace"
        if max_batch < 1 or num_kv_heads < 1 or max_kv_len < 0:
            raise ValueError(f"{op}: max_batch and num_kv_heads must be >= 1 and max_kv_len >= 0, got "
                             f"{max_batch}, {num_kv_heads}, {max_kv_len}")
        _check_heads(num_qo_heads, num_kv_heads, op)
        device = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self.max_batch = int(max_batch)
        self.num_kv_heads = int(num_kv_heads)
        self.num_qo_heads = int(num_qo_heads)
        self.group = num_qo_heads // num_kv_heads
        self.max_kv_len = int(max_kv_len)
        if num_ctas is None:
            num_ctas = heuristics.num_ctas(get_num_sms(device))
        if num_ctas < 1:
            raise ValueError(f"{op}: num_ctas must be >= 1, got {num_ctas}")
        self.num_ctas = int(num_ctas)
        if max_tail_bins is None:
            max_tail_bins = heuristics.MAX_TAIL_BINS_PER_CTA * self.num_ctas
        if max_tail_bins < 0:
            raise ValueError(f"{op}: max_tail_bins must be >= 0, got {max_tail_bins}")
        self.max_tail_bins = int(max_tail_bins)
        caps = workspace_caps(self.max_batch, self.num_kv_heads, self.num_ctas, max_tail_bins=self.max_tail_bins)
        n = self.max_batch * self.num_kv_heads
        if static_splits == "auto":
            caps = WorkspaceCaps(max(caps.tasks, n + self.num_ctas), max(caps.combine, n),
                                 max(caps.slots, n + self.num_ctas))
        elif static_splits is not None:
            s = workspace_caps(self.max_batch, self.num_kv_heads, self.num_ctas, int(static_splits))
            caps = WorkspaceCaps(max(caps.tasks, s.tasks), max(caps.combine, s.combine), max(caps.slots, s.slots))
        self.caps = caps
        i32 = dict(dtype=torch.int32, device=device)
        self.tasks = torch.zeros(caps.tasks, 4, **i32)
        nbins = self.num_ctas + self.max_tail_bins  # owned bins, then claimable tail bins
        self.bin_start = torch.zeros(nbins + 1, **i32)
        self.bin_first = torch.zeros(nbins, 4, **i32)  # first task of each bin (a copy)
        # Page id of each bin's first tile (plans given the page table, see plan_decode).
        self.bin_first_page = torch.zeros(nbins, **i32)
        # Tail bins claimed so far in the running call (zero between calls: the last claim resets it).
        self.claim_counter = torch.zeros(1, **i32)
        self.combine = torch.zeros(caps.combine, 4, **i32)
        self.counters = torch.zeros(NUM_COUNTERS, **i32)
        self.partial_o = torch.empty(caps.slots, self.group, heuristics.HEAD_DIM, dtype=torch.float32, device=device)
        self.partial_lse = torch.empty(caps.slots, self.group, dtype=torch.float32, device=device)
        # In-kernel merge: {first slot, parts} per slot (planner), and arrival counters (zero here; every
        # merging CTA puts its counter back to zero, so each call and each graph replay starts from zero).
        self.slot_meta = torch.zeros(caps.slots, 2, **i32)
        self.merge_counts = torch.zeros(caps.slots, **i32)
        # True from plan_decode until the next decode on this workspace: the planner may then be the kernel right
        # before the decode kernel, so `decode(new_tokens=...)` must not read the tables before its PDL wait.
        self.fresh_plan = True


@dataclass
class DecodePlan:
    """A plan built by `plan_decode`: valid for the KV lengths it was built from (their values at the
    time the plan kernel ran), for every layer of the step. Every field is resolved: `decode` reads
    nothing else to choose what it launches."""

    workspace: DecodeWorkspace
    batch: int
    num_kv_heads: int
    num_qo_heads: int
    num_ctas: int
    combine_ctas: int
    static_splits: int  # 0: dynamic
    min_tiles: int
    task_cost: int  # fixed cost per item on the work line (dynamic plans; 0 for static)
    cost_cap: bool
    tail_percent: int  # claimable tail share of the line (dynamic plans; 0: none)
    tail_bin: int  # smallest tail bin in units
    head_major: bool  # the line holds the items head by head
    cut_to_heads: bool  # head-major: bins a multiple of Hkv
    bin_heads: int  # Hkv when CTA c runs bin (c % Hkv) * nb1 + c / Hkv (own_bin, decode_config.cuh), else 1
    producer: str  # "tma" or "cp_async"
    merge: str  # "helpers", "consumers" or "combine"
    max_kv_len: int
    kv_lens_ptr: int
    # The page table whose first-tile page ids the plan wrote (data_ptr, row stride, page size), or None.
    first_page_of: tuple[int, int, int] | None = None

    def tables(self) -> PlanTables:
        """The device tables as Python lists (synchronises; for tests and debugging)."""
        ws = self.workspace
        counters = ws.counters.tolist()
        return PlanTables(tasks=[tuple(r) for r in ws.tasks[:counters[0]].tolist()],
                          bin_start=ws.bin_start.tolist(),
                          bin_first=[tuple(r) for r in ws.bin_first.tolist()],
                          combine=[tuple(r) for r in ws.combine[:counters[1]].tolist()],
                          counters=counters,
                          slot_meta=[tuple(r) for r in ws.slot_meta[:counters[4]].tolist()])


def _check_heads(num_qo_heads: int, num_kv_heads: int, op: str) -> None:
    if num_kv_heads < 1 or num_qo_heads % num_kv_heads:
        raise ValueError(f"{op}: num_qo_heads ({num_qo_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
    g = num_qo_heads // num_kv_heads
    if not 1 <= g <= heuristics.MAX_GROUP:
        raise ValueError(f"{op}: GQA group num_qo_heads / num_kv_heads = {g} is not supported (1..{heuristics.MAX_GROUP})")


def plan_decode(kv_lens: torch.Tensor, num_kv_heads: int, num_qo_heads: int, *, max_kv_len: int | None = None,
                workspace: DecodeWorkspace | None = None, static_splits: int | str | None = None,
                kv_dtype: torch.dtype | None = None, page_table: torch.Tensor | None = None,
                page_size: int | None = None, validate: bool | None = None,
                options: DecodeOptions | None = None) -> DecodePlan:
    """Build the decode plan on the device from the device-side lengths (no host sync).

    kv_lens: [B] int32 CUDA tensor, the KV length of each request (0 allowed). The plan reads it when the
    plan kernel runs, so a CUDA graph that captured this call re-plans from the new lengths at every
    replay. workspace: a DecodeWorkspace (required under graph capture; otherwise one is made for B
    requests and `max_kv_len`). static_splits: None for the dynamic plan, an int S or "auto" for the
    split-KV baseline. kv_dtype: the KV cache dtype the plan will serve (torch.bfloat16 by default, or
    torch.float8_e4m3fn); it selects the default task cost (any plan is correct with any KV dtype).
    page_table / page_size: optionally the [B, max_pages] int32 page table (and its page size in tokens)
    that `decode` will read: the plan then also records the page id of each bin's first tile, so the
    decode kernel issues its first KV copies without a page-table read (used only when `decode` gets
    this same table with pages of >= 64 tokens). The ids are read when the plan kernel runs: the table's
    first pages must not change between plan_decode and decode. validate: check on the host that
    0 <= kv_lens <= max_kv_len (synchronises; default: when not capturing a CUDA graph); on the device,
    lengths are clamped into that range whatever `validate` says. options: tuning knobs (DecodeOptions).
    """
    op = "plan_decode"
    check_tensor(kv_lens, "kv_lens", op, dtype=torch.int32, ndim=1, contiguous=True)
    _check_heads(num_qo_heads, num_kv_heads, op)
    if options is not None and not isinstance(options, DecodeOptions):
        raise TypeError(f"{op}: options must be a DecodeOptions, got {type(options).__name__}")
    B = kv_lens.shape[0]
    if B < 1:
        raise ValueError(f"{op}: kv_lens must hold at least one request, got shape {list(kv_lens.shape)}")
    if workspace is None:
        if max_kv_len is None:
            raise ValueError(f"{op}: give max_kv_len (the longest KV length a request may have) or a workspace")
        if _capturing():
            raise RuntimeError(f"{op}: under CUDA-graph capture pass a preallocated DecodeWorkspace")
        require_hopper(kv_lens, "kv_lens", op)
        workspace = DecodeWorkspace(B, num_kv_heads, num_qo_heads, max_kv_len, kv_lens.device,
                                    static_splits=static_splits)
    ws = workspace
    if (ws.num_kv_heads, ws.num_qo_heads) != (num_kv_heads, num_qo_heads):
        raise ValueError(f"{op}: workspace was made for {ws.num_qo_heads}/{ws.num_kv_heads} heads, "
                         f"got {num_qo_heads}/{num_kv_heads}")
    if B > ws.max_batch:
        raise ValueError(f"{op}: batch {B} exceeds the workspace's max_batch {ws.max_batch}")
    if max_kv_len is not None and max_kv_len > ws.max_kv_len:
        raise ValueError(f"{op}: max_kv_len {max_kv_len} exceeds the workspace's {ws.max_kv_len}")
    max_len = ws.max_kv_len if max_kv_len is None else int(max_kv_len)
    if static_splits == "auto":
        splits = heuristics.default_static_splits(B, num_kv_heads, ws.num_ctas)
    else:
        splits = int(static_splits) if static_splits is not None else 0
        if splits < 0:
            raise ValueError(f"{op}: static_splits must be positive, got {splits}")
    need = workspace_caps(B, num_kv_heads, ws.num_ctas, splits)
    if splits > 0 and static_splits != "auto":
        if need.tasks > ws.caps.tasks or need.slots > ws.caps.slots or need.combine > ws.caps.combine:
            raise ValueError(f"{op}: the workspace is too small for {splits} static splits; create it with "
                             f"static_splits={splits}")
    if kv_dtype is not None and kv_dtype not in (torch.bfloat16, torch.float8_e4m3fn):
        raise ValueError(f"{op}: kv_dtype must be torch.bfloat16 or torch.float8_e4m3fn, got {kv_dtype}")
    pol = heuristics.resolve(options, B, num_kv_heads, ws.num_ctas, splits, kv_dtype)
    _check_policy(pol, op)
    if kv_lens.device != ws.device:
        raise ValueError(f"{op}: kv_lens is on {kv_lens.device}, the workspace on {ws.device}")
    require_hopper(kv_lens, "kv_lens", op)
    if validate is None:
        validate = not _capturing()
    if validate:
        lens = kv_lens.cpu()
        bad = ((lens < 0) | (lens > max_len)).nonzero().flatten()
        if bad.numel():
            i = int(bad[0])
            raise ValueError(f"{op}: kv_lens[{i}] = {int(lens[i])} is outside [0, max_kv_len={max_len}]")
    first_page_of = None
    if page_table is not None:
        check_tensor(page_table, "page_table", op, dtype=torch.int32, ndim=2, last_dim_contiguous=True)
        if page_size is None or page_size < 1 or page_size & (page_size - 1):
            raise ValueError(f"{op}: with page_table give page_size, a power of two, got {page_size}")
        if page_table.device != ws.device:
            raise ValueError(f"{op}: page_table is on {page_table.device}, the workspace on {ws.device}")
        if page_table.shape[0] < B or page_table.shape[1] * page_size < max_len:
            raise ValueError(f"{op}: page_table {list(page_table.shape)} of {page_size}-token pages does not cover "
                             f"{B} requests of up to {max_len} tokens")
        if pol.first_page_from_plan:
            first_page_of = (page_table.data_ptr(), page_table.stride(0), int(page_size))
        else:
            page_table = None
    ws.fresh_plan = True
    _ops.plan_op(kv_lens, page_table, ws.tasks, ws.bin_start, ws.bin_first, ws.combine, ws.counters, ws.slot_meta,
                 ws.bin_first_page, num_kv_heads, ws.num_ctas, splits, max_len, pol.min_tiles, pol.task_cost,
                 pol.cost_cap, pol.tail_percent, pol.tail_bin, ws.max_tail_bins,
                 int(page_size).bit_length() - 1 if page_table is not None else 0, pol.head_major, pol.cut_to_heads)
    bin_heads = num_kv_heads if pol.bins_by_head and pol.head_major and pol.cut_to_heads else 1
    return DecodePlan(workspace=ws, batch=B, num_kv_heads=num_kv_heads, num_qo_heads=num_qo_heads,
                      num_ctas=ws.num_ctas, combine_ctas=heuristics.combine_ctas(get_num_sms(ws.device)),
                      static_splits=splits, min_tiles=pol.min_tiles, task_cost=pol.task_cost, cost_cap=pol.cost_cap,
                      tail_percent=pol.tail_percent, tail_bin=pol.tail_bin, head_major=pol.head_major,
                      cut_to_heads=pol.cut_to_heads, bin_heads=bin_heads, producer=pol.producer, merge=pol.merge,
                      max_kv_len=max_len, kv_lens_ptr=kv_lens.data_ptr(), first_page_of=first_page_of)


def _check_policy(pol: heuristics.Policy, op: str) -> None:
    if pol.min_tiles < 1:
        raise ValueError(f"{op}: min_tiles must be >= 1, got {pol.min_tiles}")
    if not 0 <= pol.task_cost <= heuristics.MAX_TASK_COST:
        raise ValueError(f"{op}: task_cost must be in [0, {heuristics.MAX_TASK_COST}], got {pol.task_cost}")
    if not 0 <= pol.tail_percent <= heuristics.MAX_TAIL_PERCENT:
        raise ValueError(f"{op}: tail_percent must be in [0, {heuristics.MAX_TAIL_PERCENT}], got {pol.tail_percent}")
    if pol.tail_bin < 1:
        raise ValueError(f"{op}: tail_bin must be >= 1, got {pol.tail_bin}")
    if pol.producer not in ("tma", "cp_async"):
        raise ValueError(f"{op}: producer must be 'tma' or 'cp_async', got {pol.producer!r}")
    if pol.merge not in heuristics.MERGE_MODES:
        raise ValueError(f"{op}: merge must be one of {heuristics.MERGE_MODES}, got {pol.merge!r}")


def _scale_arg(x, name: str, op: str, device: torch.device):
    if isinstance(x, torch.Tensor):
        check_tensor(x, name, op, dtype=torch.float32)
        if x.numel() != 1:
            raise ValueError(f"{op}: {name} must hold one value (per-tensor scale), got shape {list(x.shape)}")
        if x.device != device:
            raise ValueError(f"{op}: {name} must be on {device}, got {x.device}")
        return x, 1.0
    return None, float(x)


def decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, page_table: torch.Tensor,
           kv_lens: torch.Tensor, plan: DecodePlan, *, sm_scale: float | None = None, k_scale=1.0, v_scale=1.0,
           q_scale: torch.Tensor | None = None, out: torch.Tensor | None = None, validate: bool = False,
           new_tokens: int | None = None) -> torch.Tensor:
    """Decode attention over a paged KV cache, one query token per request.

    q: [B, Hq, 128] BF16, or FP8 E4M3 with q_scale [B, Hq] float32 (per token and head).
    k_cache, v_cache: [num_pages, page_size, Hkv, 128] (NHD), both BF16 or both FP8 E4M3 with
    per-tensor k_scale / v_scale (floats, or one-element float32 CUDA tensors). page_size a
    power of two (64 is the reference). page_table: [B, max_pages] int32 page ids.
    kv_lens: [B] int32, the tensor `plan` was built from. Hq / Hkv in 1..16.
    Returns out [B, Hq, 128] BF16 (written into `out` when given). sm_scale defaults to
    1 / sqrt(128). validate=True also checks on the host (synchronising) that the pages the
    lengths reach are valid ids; the kernel clamps ids into range so it never faults.
    The K/V tiles are streamed by a TMA producer (tensor maps of the caches, encoded once per
    cache layout and cached) or by cp.async copies, as the plan says (DecodeOptions.producer); a CUDA
    graph that captured this call replays the maps of capture time, like every other pointer,
    so the caches must not be reallocated between replays.

    new_tokens (None: off): start streaming before the previous kernel on the stream has finished
    (PDL). Giving n >= 1 promises that the kernel launched right before this call writes at most the
    last n KV positions of each request (and q, q_scale, out), and that everything else this call
    reads (older KV positions, page_table, kv_lens, the scales, the plan) was written before that
    kernel started, as in a decode step where the KV-cache write / prologue kernel precedes the
    attention of a layer. The kernel then reads its plan entries and copies its first task's older
    KV tiles into shared memory before waiting for the previous kernel; Q rows, scales, counters and
    every write follow the wait. Used only with PDL on (hpc_common.set_pdl), the TMA producer, and
    not on the first decode after plan_decode into this workspace (the planner may be the previous
    kernel then). Same results either way.
    """
    op = "decode"
    check_tensor(q, "q", op, dtype=(torch.bfloat16, _FP8), ndim=3, last_dim_contiguous=True)
    check_tensor(k_cache, "k_cache", op, dtype=(torch.bfloat16, _FP8), ndim=4, last_dim_contiguous=True)
    check_tensor(v_cache, "v_cache", op, dtype=k_cache.dtype, ndim=4, last_dim_contiguous=True)
    check_tensor(page_table, "page_table", op, dtype=torch.int32, ndim=2, last_dim_contiguous=True)
    check_tensor(kv_lens, "kv_lens", op, dtype=torch.int32, ndim=1)
    if not isinstance(plan, DecodePlan):
        raise TypeError(f"{op}: plan must be a DecodePlan from plan_decode, got {type(plan).__name__}")
    B, Hq, D = q.shape
    num_pages, page_size, Hkv, Dk = k_cache.shape
    if D != heuristics.HEAD_DIM or Dk != heuristics.HEAD_DIM:
        raise ValueError(f"{op}: head dim must be {heuristics.HEAD_DIM}, got q {D} and k_cache {Dk}")
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"{op}: v_cache shape {list(v_cache.shape)} != k_cache shape {list(k_cache.shape)}")
    if page_size < 1 or page_size & (page_size - 1):
        raise ValueError(f"{op}: page_size (k_cache.shape[1]) must be a power of two, got {page_size}")
    _check_heads(Hq, Hkv, op)
    if (plan.num_qo_heads, plan.num_kv_heads) != (Hq, Hkv):
        raise ValueError(f"{op}: plan was built for {plan.num_qo_heads}/{plan.num_kv_heads} heads, "
                         f"q and k_cache have {Hq}/{Hkv}")
    check_tensor(kv_lens, "kv_lens", op, shape=(B,))
    if plan.batch != B or plan.kv_lens_ptr != kv_lens.data_ptr():
        raise ValueError(f"{op}: plan was built from another kv_lens tensor (batch {plan.batch}); "
                         "pass the kv_lens given to plan_decode")
    check_tensor(page_table, "page_table", op, shape=(B, None))
    if page_table.shape[1] * page_size < plan.max_kv_len:
        raise ValueError(f"{op}: page_table holds {page_table.shape[1]} pages of {page_size} tokens, fewer than "
                         f"the plan's max_kv_len {plan.max_kv_len}")
    fp8_q = q.dtype == _FP8
    if fp8_q:
        if q_scale is None:
            raise ValueError(f"{op}: FP8 q needs q_scale [B, Hq] float32")
        check_tensor(q_scale, "q_scale", op, dtype=torch.float32, shape=(B, Hq))
    elif q_scale is not None:
        raise ValueError(f"{op}: q_scale is only for FP8 q (q is {str(q.dtype).replace('torch.', '')})")
    qe = q.element_size()
    if (q.stride(0) * qe) % 16 or (q.stride(1) * qe) % 16:
        raise ValueError(f"{op}: q strides must be multiples of 16 bytes, got {q.stride()}")
    ke = k_cache.element_size()
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if any((s * ke) % 16 for s in t.stride()[:3]):
            raise ValueError(f"{op}: {name} strides must be multiples of 16 bytes, got {t.stride()}")
    if out is None:
        out = torch.empty(B, Hq, D, dtype=torch.bfloat16, device=q.device)
    check_tensor(out, "out", op, dtype=torch.bfloat16, shape=(B, Hq, D), last_dim_contiguous=True)
    if out.stride(0) % 8 or out.stride(1) % 8:
        raise ValueError(f"{op}: out strides must be multiples of 8 elements, got {out.stride()}")
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    require_hopper(q, "q", op)
    dev = q.device
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache), ("page_table", page_table), ("kv_lens", kv_lens),
                    ("out", out), ("q_scale", q_scale)):
        if t is not None and t.device != dev:
            raise ValueError(f"{op}: {name} must be on {dev} like q, got {t.device}")
    ws = plan.workspace
    if ws.device != dev:
        raise ValueError(f"{op}: the plan's workspace is on {ws.device}, q on {dev}")
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("out", out)):
        if t.data_ptr() % 16:
            raise ValueError(f"{op}: {name} must be 16-byte aligned (data_ptr {t.data_ptr():#x})")
    if new_tokens is not None and (isinstance(new_tokens, bool) or int(new_tokens) != new_tokens or new_tokens < 1):
        raise ValueError(f"{op}: new_tokens must be None or an int >= 1, got {new_tokens!r}")
    k_t, k_f = _scale_arg(k_scale, "k_scale", op, dev)
    v_t, v_f = _scale_arg(v_scale, "v_scale", op, dev)
    if validate:
        _validate_pages(page_table, kv_lens, page_size, num_pages, plan.max_kv_len, op)
    # What the plan decided, applied to this call's inputs: the TMA producer needs pages of >= 16 tokens;
    # the plan's first page ids serve only the page table they were read from, with a tile in one page.
    tma = plan.producer == "tma" and page_size >= heuristics.TMA_MIN_PAGE
    first_page = page_size >= 64 and plan.first_page_of == (page_table.data_ptr(), page_table.stride(0), page_size)
    early = new_tokens is not None and tma and get_pdl() and not ws.fresh_plan
    ws.fresh_plan = False
    _ops.decode_op(q, q_scale, k_cache, v_cache, page_table, k_t, v_t, ws.tasks, ws.bin_start, ws.bin_first,
                   ws.bin_first_page if first_page else None, ws.combine, ws.counters, ws.slot_meta, ws.partial_o,
                   ws.partial_lse, ws.merge_counts, ws.claim_counter, out, k_f, v_f, float(sm_scale), plan.num_ctas,
                   plan.combine_ctas, _ops.MERGE_CODES[plan.merge], tma, plan.bin_heads,
                   int(new_tokens) if early else 0)
    return out


def _validate_pages(page_table, kv_lens, page_size, num_pages, max_len, op) -> None:
    lens = kv_lens.cpu().clamp(0, max_len)
    pt = page_table.cpu()
    for b, L in enumerate(lens.tolist()):
        n = (L + page_size - 1) // page_size
        ids = pt[b, :n]
        bad = ((ids < 0) | (ids >= num_pages)).nonzero().flatten()
        if bad.numel():
            i = int(bad[0])
            raise ValueError(f"{op}: page_table[{b}, {i}] = {int(ids[i])} is not a page id in [0, {num_pages}) "
                             f"(request {b} has {L} tokens)")
