"""Paged-KV decode attention with a device-side plan: `plan_decode` once per step, then
`decode` for every layer. See README.md for the scheme and NOTES.md for the measurements."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hpc_common import get_num_sms, get_pdl
from hpc_common.checks import check_tensor
from hpc_common.launch import require_hopper, stream_ptr

from . import _ext, heuristics
from .planner import NUM_COUNTERS, PlanTables, WorkspaceCaps, workspace_caps

_FP8 = torch.float8_e4m3fn
_LOG2E = 1.0 / math.log(2.0)


# Benchmark diagnostics (never set by the library): "skip_combine" leaves out the combine
# launch and the in-kernel merge (the decode kernel alone), "flags" is passed to the decode
# kernel (bit 0: consumers skip the math). Read when the op runs, so a CUDA graph keeps what
# was set at capture. Outputs are wrong while set (not while only "timeline" is set).
# "timeline": None, or a CUDA uint64-sized tensor of >= num_ctas * TIMELINE_SLOTS words into which the decode
# kernel writes per-CTA event stamps (decode_timeline.cuh, scripts/timeline_decode.py).
# "defines": extra -D switches for a separate build of the kernels (benchmark A/B rows only), e.g.
# ("-DHPC_ATTN_SCORE_LOOKAHEAD=0",) for the consumers' schedule before the score look-ahead.
# "plan_timeline": None, or a CUDA int64 tensor of >= plan CTAs * 16 warps * 16 words into which the
# planner writes per-warp step stamps (decode_plan_timeline.cuh, scripts/timeline_plan.py).
DIAG = {"skip_combine": False, "flags": 0, "timeline": None, "defines": (), "plan_timeline": None}

# Which producer the last eager `decode` call ran ("tma" or "cp_async"; tests read it). The TMA
# producer falls back to cp.async when the driver cannot encode the cache's tensor map.
LAST_PRODUCER = {"name": None, "first_page": None, "early_kv": None}

# Smallest page for the TMA producer: a 64-token tile takes 64 / page_size boxes per K and V.
_TMA_MIN_PAGE = 16
TIMELINE_SLOTS = 34  # decode_timeline.cuh kTimelineSlots


def _use_tma(page_size: int, num_kv_heads: int, fp8_kv: bool = False) -> bool:
    """Whether `decode` asks for the TMA producer (heuristics.USE_TMA_PRODUCER: True, False or
    "auto" = num_kv_heads >= heuristics.TMA_MIN_KV_HEADS, or TMA_MIN_KV_HEADS_FP8 for FP8 KV);
    pages under 16 tokens never."""
    flag = heuristics.USE_TMA_PRODUCER
    if page_size < _TMA_MIN_PAGE:
        return False
    if flag == "auto":
        return num_kv_heads >= (heuristics.TMA_MIN_KV_HEADS_FP8 if fp8_kv else heuristics.TMA_MIN_KV_HEADS)
    return bool(flag)


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


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
        # In-kernel merge (heuristics.MERGE_IN_DECODE): {first slot, parts} per slot (planner),
        # arrival counters (zero here; every merging CTA puts its counter back to zero, so each
        # call and each graph replay starts from zero), group states (m, l) per slot and row.
        self.slot_meta = torch.zeros(caps.slots, 2, **i32)
        self.merge_counts = torch.zeros(caps.slots, **i32)
        self.merge_ml = torch.empty(caps.slots, self.group, 2, dtype=torch.float32, device=device)
        # True from plan_decode until the next decode on this workspace: the planner may then be the kernel right
        # before the decode kernel, so `decode(new_tokens=...)` must not read the tables before its PDL wait.
        self.fresh_plan = True


@dataclass
class DecodePlan:
    """A plan built by `plan_decode`: valid for the KV lengths it was built from (their values
    at the time the plan kernel ran), for every layer of the step."""

    workspace: DecodeWorkspace
    batch: int
    num_kv_heads: int
    num_qo_heads: int
    num_ctas: int
    static_splits: int  # 0: dynamic
    min_tiles: int
    task_cost: int  # fixed cost per item on the work line (dynamic plans; 0 for static)
    tail_percent: int  # claimable tail share of the line (dynamic plans; 0: none)
    tail_bin: int  # smallest tail bin in units
    max_kv_len: int
    kv_lens_ptr: int
    # The page table whose first-tile page ids the plan wrote (data_ptr, row stride, page size), or None.
    first_page_of: tuple[int, int, int] | None = None
    head_major: bool = False  # the line holds the items head by head (heuristics.HEAD_MAJOR_LINE)
    cut_to_heads: bool = True  # head-major: bins a multiple of Hkv (heuristics.HEAD_MAJOR_CUT_TO_HEADS)
    cost_cap: bool = False  # no charge makes an item longer than the tiles-only budget (heuristics.TASK_COST_CAP)

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


# ---- custom ops (torch.compile / CUDA graphs see mutations, not Python objects) ----------------

@torch.library.custom_op("hpc_attention::plan_decode",
                        mutates_args=("tasks", "bin_start", "bin_first", "combine", "counters", "slot_meta",
                                      "bin_first_page"))
def _plan_op(kv_lens: torch.Tensor, tasks: torch.Tensor, bin_start: torch.Tensor, bin_first: torch.Tensor,
             combine: torch.Tensor, counters: torch.Tensor, slot_meta: torch.Tensor, num_kv_heads: int, num_ctas: int,
             min_tiles: int,
             static_splits: int, max_len: int, task_cost: int, tail_percent: int, tail_bin: int,
             max_tail_bins: int, page_table: torch.Tensor | None, page_size_log2: int,
             bin_first_page: torch.Tensor, head_major: bool, cut_to_heads: bool, cost_cap: bool) -> None:
    # The planner's step stamps are recorded only by the diagnostics build (decode_plan_timeline.cuh).
    tl = DIAG.get("plan_timeline")
    ext = _ext.load_timeline() if tl is not None else _ext.load()
    ext.decode_plan(
        page_table=page_table.data_ptr() if page_table is not None else 0,
        page_table_stride=page_table.stride(0) if page_table is not None else 0, page_size_log2=page_size_log2,
        bin_first_page=bin_first_page.data_ptr(),
        kv_lens=kv_lens.data_ptr(), batch=kv_lens.shape[0], num_kv_heads=num_kv_heads, num_bins=num_ctas,
        min_tiles=min_tiles, static_splits=static_splits, max_len=max_len, task_cost=task_cost,
        tail_percent=tail_percent, tail_bin=tail_bin, max_tail_bins=max_tail_bins,
        tasks=tasks.data_ptr(),
        bin_start=bin_start.data_ptr(), bin_first=bin_first.data_ptr(), combine=combine.data_ptr(),
        counters=counters.data_ptr(), slot_meta=slot_meta.data_ptr(), pdl=get_pdl(), stream=stream_ptr(kv_lens.device),
        head_major=head_major, cut_to_heads=cut_to_heads, timeline=tl.data_ptr() if tl is not None else 0,
        cost_cap=cost_cap)


@_plan_op.register_fake
def _(kv_lens, tasks, bin_start, bin_first, combine, counters, slot_meta, num_kv_heads, num_ctas, min_tiles,
      static_splits, max_len, task_cost, tail_percent, tail_bin, max_tail_bins, page_table, page_size_log2,
      bin_first_page, head_major, cut_to_heads, cost_cap):
    return None


@torch.library.custom_op("hpc_attention::paged_decode",
                        mutates_args=("out", "partial_o", "partial_lse", "merge_counts", "merge_ml", "claim_counter"))
def _decode_op(q: torch.Tensor, q_scale: torch.Tensor | None, k_cache: torch.Tensor, v_cache: torch.Tensor,
               page_table: torch.Tensor, tasks: torch.Tensor, bin_start: torch.Tensor, bin_first: torch.Tensor,
               combine: torch.Tensor, counters: torch.Tensor, partial_o: torch.Tensor, partial_lse: torch.Tensor, slot_meta: torch.Tensor,
               merge_counts: torch.Tensor, merge_ml: torch.Tensor, claim_counter: torch.Tensor, out: torch.Tensor,
               k_scale_t: torch.Tensor | None, v_scale_t: torch.Tensor | None, k_scale: float, v_scale: float,
               sm_scale: float, num_ctas: int, combine_ctas: int, merge_in_decode: bool,
               tma_producer: bool, merge_helpers: bool, bin_first_page: torch.Tensor | None, bin_heads: int,
               early_kv_tokens: int) -> None:
    # The timeline is recorded only by the diagnostics build of the extension (decode_timeline.cuh).
    if DIAG.get("timeline") is not None:  # with any build switches of the A/B rows
        ext = _ext.load_timeline(*(DIAG.get("defines") or ()))
    elif DIAG.get("defines"):
        ext = _ext.load_variant(*DIAG["defines"])
    else:
        ext = _ext.load()
    skip_combine = bool(DIAG["skip_combine"])
    merge = merge_in_decode and not skip_combine
    pdl = get_pdl()
    stream = stream_ptr(q.device)
    hkv = k_cache.shape[2]
    group = q.shape[1] // hkv
    fp8_q = q.dtype == _FP8
    used_tma = ext.paged_decode(
        q=q.data_ptr(), q_stride_b=q.stride(0), q_stride_h=q.stride(1), fp8_q=fp8_q,
        q_scale=q_scale.data_ptr() if q_scale is not None else 0,
        q_scale_stride_b=q_scale.stride(0) if q_scale is not None else 0,
        q_scale_stride_h=q_scale.stride(1) if q_scale is not None else 0,
        k_cache=k_cache.data_ptr(), v_cache=v_cache.data_ptr(), fp8_kv=k_cache.dtype == _FP8,
        k_stride_page=k_cache.stride(0), k_stride_tok=k_cache.stride(1), k_stride_head=k_cache.stride(2),
        v_stride_page=v_cache.stride(0), v_stride_tok=v_cache.stride(1), v_stride_head=v_cache.stride(2),
        num_pages=k_cache.shape[0], page_size_log2=int(k_cache.shape[1]).bit_length() - 1,
        page_table=page_table.data_ptr(), page_table_stride=page_table.stride(0), tasks=tasks.data_ptr(),
        bin_start=bin_start.data_ptr(), bin_first=bin_first.data_ptr(), out=out.data_ptr(), out_stride_b=out.stride(0), out_stride_h=out.stride(1),
        partial_o=partial_o.data_ptr(), partial_lse=partial_lse.data_ptr(),
        k_scale_ptr=k_scale_t.data_ptr() if k_scale_t is not None else 0,
        v_scale_ptr=v_scale_t.data_ptr() if v_scale_t is not None else 0,
        k_scale=k_scale, v_scale=v_scale, sm_scale_log2=sm_scale * _LOG2E, num_kv_heads=hkv, group=group,
        diag=int(DIAG["flags"]), merge=(2 if merge_helpers else 1) if merge else 0, slot_meta=slot_meta.data_ptr(),
        merge_counts=merge_counts.data_ptr(), merge_ml=merge_ml.data_ptr(), combine=combine.data_ptr(),
        counters=counters.data_ptr(), claim_counter=claim_counter.data_ptr(), tma_producer=tma_producer,
        num_ctas=num_ctas, pdl=pdl, stream=stream, timeline=_timeline_ptr(num_ctas),
        bin_first_page=bin_first_page.data_ptr() if bin_first_page is not None else 0, bin_heads=bin_heads,
        early_kv_tokens=early_kv_tokens)
    LAST_PRODUCER["name"] = "tma" if used_tma else "cp_async"
    if merge or skip_combine:
        return
    ext.decode_combine(
        combine=combine.data_ptr(), counters=counters.data_ptr(), partial_o=partial_o.data_ptr(),
        partial_lse=partial_lse.data_ptr(), out=out.data_ptr(), out_stride_b=out.stride(0),
        out_stride_h=out.stride(1), num_kv_heads=hkv, group=group, num_ctas=combine_ctas, pdl=pdl, stream=stream)


def _timeline_ptr(num_ctas: int) -> int:
    t = DIAG.get("timeline")
    if t is None:
        return 0
    if not t.is_cuda or t.numel() * t.element_size() < num_ctas * TIMELINE_SLOTS * 8:
        raise ValueError(f"DIAG['timeline'] must be a CUDA tensor of >= {num_ctas * TIMELINE_SLOTS} 64-bit words")
    return t.data_ptr()


@_decode_op.register_fake
def _(q, q_scale, k_cache, v_cache, page_table, tasks, bin_start, bin_first, combine, counters, partial_o, partial_lse,
      slot_meta, merge_counts, merge_ml, claim_counter, out, k_scale_t, v_scale_t, k_scale, v_scale, sm_scale, num_ctas, combine_ctas,
      merge_in_decode, tma_producer, merge_helpers, bin_first_page, bin_heads, early_kv_tokens):
    return None


# ---- public API --------------------------------------------------------------------------------

def plan_decode(kv_lens: torch.Tensor, num_kv_heads: int, num_qo_heads: int, *, max_kv_len: int | None = None,
                workspace: DecodeWorkspace | None = None, static_splits: int | str | None = None,
                min_tiles: int | None = None, kv_dtype: torch.dtype | None = None, task_cost: int | None = None,
                tail_percent: int | None = None, tail_bin: int | None = None,
                validate: bool | None = None, page_table: torch.Tensor | None = None,
                page_size: int | None = None, head_major: bool | None = None,
                cost_cap: bool | None = None) -> DecodePlan:
    """Build the decode plan on the device from the device-side lengths (no host sync).

    kv_lens: [B] int32 CUDA tensor, the KV length of each request (0 allowed). The plan reads
    it when the plan kernel runs, so a CUDA graph that captured this call re-plans from the
    new lengths at every replay. workspace: a DecodeWorkspace (required under graph capture;
    otherwise one is made for B requests and `max_kv_len`). static_splits: None for the
    dynamic plan, an int S or "auto" for the split-KV baseline. min_tiles: work floor per CTA
    in 64-token tiles (default heuristics.min_tiles_per_cta: 8 with at least num_ctas / 4 (request, KV head)
    items, else 4). kv_dtype: the KV cache dtype the plan will serve (torch.bfloat16 by default, or
    torch.float8_e4m3fn): it selects the default task_cost, the fixed cost per (request,
    KV head) counted in tiles when the bins are cut
    (heuristics.task_cost_tiles; 0 cuts on tiles alone). Any plan is correct with any KV dtype;
    these only balance the CTAs. tail_percent / tail_bin: the share of the work line (percent,
    0..heuristics.MAX_TAIL_PERCENT) cut into small bins that CTAs claim once their own bin is
    done, and the smallest such bin in tiles (defaults: heuristics.TAIL_PERCENT and
    TAIL_BIN_TILES; the TMA producer kernel claims tail bins, the cp.async one runs them in a
    fixed order; any plan gives the same results with either). validate: check on the host that
    0 <= kv_lens <= max_kv_len (synchronises; default: when not capturing a CUDA graph). On the
    device, lengths are clamped into that range whatever `validate` says. page_table / page_size:
    optionally the [B, max_pages] int32 page table (and its page size in tokens) that `decode` will
    read: the plan then also records the page id of each bin's first tile, so the decode kernel
    issues its first KV copies without a page-table read (heuristics.FIRST_PAGE_FROM_PLAN; used
    only when `decode` gets this same table with pages of >= 64 tokens, ignored otherwise). The
    ids are read when the plan kernel runs: the table's first pages must not change between
    plan_decode and decode. head_major: lay the items on the work line head by head and cut it
    into a multiple of Hkv bins (default heuristics.HEAD_MAJOR_LINE; only for dynamic plans with
    Hkv > 1 and no claimable tail, ignored otherwise). cost_cap: no item's task_cost charge makes it
    longer than the tiles-only budget (total tiles over the bins of a plan without charges), so an item
    whose tiles fit one bin is not split for the charge's sake (default heuristics.TASK_COST_CAP).
    Any plan gives correct results.
    """
    op = "plan_decode"
    check_tensor(kv_lens, "kv_lens", op, dtype=torch.int32, ndim=1, contiguous=True)
    _check_heads(num_qo_heads, num_kv_heads, op)
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
    floor = (heuristics.min_tiles_per_cta(B * num_kv_heads, ws.num_ctas) if min_tiles is None
             else int(min_tiles))
    if floor < 1:
        raise ValueError(f"{op}: min_tiles must be >= 1, got {floor}")
    cost = heuristics.task_cost_tiles(kv_dtype) if task_cost is None else int(task_cost)
    if not 0 <= cost <= heuristics.MAX_TASK_COST:
        raise ValueError(f"{op}: task_cost must be in [0, {heuristics.MAX_TASK_COST}], got {cost}")
    tail = heuristics.TAIL_PERCENT if tail_percent is None else int(tail_percent)
    if not 0 <= tail <= heuristics.MAX_TAIL_PERCENT:
        raise ValueError(f"{op}: tail_percent must be in [0, {heuristics.MAX_TAIL_PERCENT}], got {tail}")
    tbin = heuristics.TAIL_BIN_TILES if tail_bin is None else int(tail_bin)
    if tbin < 1:
        raise ValueError(f"{op}: tail_bin must be >= 1, got {tbin}")
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
        first_page_of = (page_table.data_ptr(), page_table.stride(0), int(page_size))
    if head_major is None:
        head_major = heuristics.HEAD_MAJOR_LINE
    head_major = bool(head_major) and num_kv_heads > 1 and splits == 0 and tail == 0
    cut_to_heads = bool(heuristics.HEAD_MAJOR_CUT_TO_HEADS)
    cost_cap = bool(heuristics.TASK_COST_CAP if cost_cap is None else cost_cap) and splits == 0
    ws.fresh_plan = True
    torch.ops.hpc_attention.plan_decode(kv_lens, ws.tasks, ws.bin_start, ws.bin_first, ws.combine, ws.counters,
                                        ws.slot_meta, num_kv_heads, ws.num_ctas, floor, splits, max_len, cost,
                                        tail if splits == 0 else 0, tbin, ws.max_tail_bins, page_table,
                                        int(page_size).bit_length() - 1 if page_table is not None else 0,
                                        ws.bin_first_page, head_major, cut_to_heads, cost_cap)
    return DecodePlan(workspace=ws, batch=B, num_kv_heads=num_kv_heads, num_qo_heads=num_qo_heads,
                      num_ctas=ws.num_ctas, static_splits=splits, min_tiles=floor,
                      task_cost=cost if splits == 0 else 0, tail_percent=tail if splits == 0 else 0, tail_bin=tbin,
                      max_kv_len=max_len, kv_lens_ptr=kv_lens.data_ptr(), first_page_of=first_page_of,
                      head_major=head_major, cut_to_heads=cut_to_heads, cost_cap=cost_cap)


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
    cache layout and cached) or by cp.async copies, per heuristics.USE_TMA_PRODUCER; a CUDA
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
    first_page = _use_first_page(plan, page_table, page_size)
    tma = _use_tma(page_size, Hkv, k_cache.dtype == _FP8)
    early = new_tokens is not None and tma and get_pdl() and not ws.fresh_plan
    ws.fresh_plan = False
    torch.ops.hpc_attention.paged_decode(
        q, q_scale, k_cache, v_cache, page_table, ws.tasks, ws.bin_start, ws.bin_first, ws.combine, ws.counters,
        ws.partial_o, ws.partial_lse, ws.slot_meta, ws.merge_counts, ws.merge_ml, ws.claim_counter, out, k_t, v_t, k_f,
        v_f, float(sm_scale),
        plan.num_ctas, heuristics.combine_ctas(get_num_sms(dev)), bool(heuristics.MERGE_IN_DECODE),
        tma, bool(heuristics.MERGE_ON_HELPER_WARPS),
        ws.bin_first_page if first_page else None, _bin_heads(plan), int(new_tokens) if early else 0)
    LAST_PRODUCER["first_page"] = first_page
    LAST_PRODUCER["early_kv"] = early and LAST_PRODUCER["name"] == "tma"  # (the binding's cp.async fallback: never)
    return out


def _bin_heads(plan: DecodePlan) -> int:
    """Hkv when the decode kernel deals a head-major plan's bins head by head to neighbouring CTAs
    (own_bin in paged_decode_config.cuh; heuristics.BINS_BY_HEAD), else 1 (CTA c runs bin c)."""
    if heuristics.BINS_BY_HEAD and plan.head_major and plan.cut_to_heads:
        return plan.num_kv_heads
    return 1


def _use_first_page(plan: DecodePlan, page_table: torch.Tensor, page_size: int) -> bool:
    """Whether the decode kernel takes each bin's first page id from the plan: the plan recorded
    them for this page table (same storage, row stride and page size), pages hold >= 64 tokens (a
    tile in one page) and heuristics.FIRST_PAGE_FROM_PLAN is on."""
    return (bool(heuristics.FIRST_PAGE_FROM_PLAN) and page_size >= 64 and plan.first_page_of is not None
            and plan.first_page_of == (page_table.data_ptr(), page_table.stride(0), page_size))


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
