"""The torch custom ops of the decode attention: tensors in, one params struct out to the binding.

Each op fills the extension's params struct (DecodePlanParams / DecodeParams of decode_params.h,
exported field by field by csrc/bindings.cpp) from its tensors and the plan's resolved integers, and
hands it to one binding call. Registered as custom ops so torch.compile and CUDA graphs see the
mutated tables and outputs rather than Python objects. The public functions (decode.py) check every
argument before they get here.
"""

from __future__ import annotations

import math

import torch
from hpc_common import get_pdl
from hpc_common.launch import stream_ptr

from . import _ext

_FP8 = torch.float8_e4m3fn
_LOG2E = 1.0 / math.log(2.0)

# DecodeParams::merge: 0 the combine kernel, 1 the consumers, 2 the TMA kernel's helper warps.
MERGE_CODES = {"combine": 0, "consumers": 1, "helpers": 2}


def _ptr(t: torch.Tensor | None) -> int:
    return t.data_ptr() if t is not None else 0


@torch.library.custom_op("hpc_attention::plan_decode",
                         mutates_args=("tasks", "bin_start", "bin_first", "combine", "counters", "slot_meta",
                                       "bin_first_page"))
def plan_op(kv_lens: torch.Tensor, page_table: torch.Tensor | None, tasks: torch.Tensor, bin_start: torch.Tensor,
            bin_first: torch.Tensor, combine: torch.Tensor, counters: torch.Tensor, slot_meta: torch.Tensor,
            bin_first_page: torch.Tensor, num_kv_heads: int, num_bins: int, static_splits: int, max_len: int,
            min_tiles: int, task_cost: int, cost_cap: bool, tail_percent: int, tail_bin: int, max_tail_bins: int,
            page_size_log2: int, head_major: bool, cut_to_heads: bool) -> None:
    ext = _ext.load()
    p = ext.DecodePlanParams()
    p.kv_lens = kv_lens.data_ptr()
    p.batch = kv_lens.shape[0]
    p.num_kv_heads = num_kv_heads
    p.num_bins = num_bins
    p.min_tiles = min_tiles
    p.static_splits = static_splits
    p.max_len = max_len
    p.task_cost = task_cost
    p.cost_cap = int(cost_cap)
    p.tail_percent = tail_percent
    p.tail_bin = tail_bin
    p.max_tail_bins = max_tail_bins
    p.tasks = tasks.data_ptr()
    p.bin_start = bin_start.data_ptr()
    p.bin_first = bin_first.data_ptr()
    p.combine = combine.data_ptr()
    p.counters = counters.data_ptr()
    p.slot_meta = slot_meta.data_ptr()
    p.page_table = _ptr(page_table)  # 0: no first page ids
    p.page_table_stride = page_table.stride(0) if page_table is not None else 0
    p.page_size_log2 = page_size_log2
    p.bin_first_page = bin_first_page.data_ptr()
    ext.decode_plan(p, head_major=head_major, cut_to_heads=cut_to_heads, pdl=get_pdl(),
                    stream=stream_ptr(kv_lens.device))


@plan_op.register_fake
def _(kv_lens, page_table, tasks, bin_start, bin_first, combine, counters, slot_meta, bin_first_page, num_kv_heads,
      num_bins, static_splits, max_len, min_tiles, task_cost, cost_cap, tail_percent, tail_bin, max_tail_bins,
      page_size_log2, head_major, cut_to_heads):
    return None


@torch.library.custom_op("hpc_attention::decode",
                         mutates_args=("out", "partial_o", "partial_lse", "merge_counts", "claim_counter"))
def decode_op(q: torch.Tensor, q_scale: torch.Tensor | None, k_cache: torch.Tensor, v_cache: torch.Tensor,
              page_table: torch.Tensor, k_scale_t: torch.Tensor | None, v_scale_t: torch.Tensor | None,
              tasks: torch.Tensor, bin_start: torch.Tensor, bin_first: torch.Tensor,
              bin_first_page: torch.Tensor | None, combine: torch.Tensor, counters: torch.Tensor,
              slot_meta: torch.Tensor, partial_o: torch.Tensor, partial_lse: torch.Tensor, merge_counts: torch.Tensor,
              claim_counter: torch.Tensor, out: torch.Tensor, k_scale: float, v_scale: float, sm_scale: float,
              num_ctas: int, combine_ctas: int, merge: int, tma: bool, bin_heads: int, early_kv_tokens: int) -> None:
    ext = _ext.load()
    p = ext.DecodeParams()
    p.q = q.data_ptr()
    p.q_stride_b, p.q_stride_h = q.stride(0), q.stride(1)
    p.q_scale = _ptr(q_scale)
    p.q_scale_stride_b = q_scale.stride(0) if q_scale is not None else 0
    p.q_scale_stride_h = q_scale.stride(1) if q_scale is not None else 0
    p.k_cache, p.v_cache = k_cache.data_ptr(), v_cache.data_ptr()
    p.k_stride_page, p.k_stride_tok, p.k_stride_head = k_cache.stride()[:3]
    p.v_stride_page, p.v_stride_tok, p.v_stride_head = v_cache.stride()[:3]
    p.num_pages = k_cache.shape[0]
    p.page_size_log2 = int(k_cache.shape[1]).bit_length() - 1
    p.page_table = page_table.data_ptr()
    p.page_table_stride = page_table.stride(0)
    p.tasks, p.bin_start, p.bin_first = tasks.data_ptr(), bin_start.data_ptr(), bin_first.data_ptr()
    p.bin_first_page = _ptr(bin_first_page)  # 0: the kernel reads the page table
    p.out = out.data_ptr()
    p.out_stride_b, p.out_stride_h = out.stride(0), out.stride(1)
    p.partial_o, p.partial_lse = partial_o.data_ptr(), partial_lse.data_ptr()
    p.merge = merge
    p.slot_meta, p.merge_counts = slot_meta.data_ptr(), merge_counts.data_ptr()
    p.combine, p.counters, p.claim_counter = combine.data_ptr(), counters.data_ptr(), claim_counter.data_ptr()
    p.k_scale_ptr, p.v_scale_ptr = _ptr(k_scale_t), _ptr(v_scale_t)  # 0: the floats
    p.k_scale, p.v_scale = k_scale, v_scale
    p.sm_scale_log2 = sm_scale * _LOG2E
    p.num_kv_heads = k_cache.shape[2]
    p.group = q.shape[1] // k_cache.shape[2]
    p.bin_heads = bin_heads
    p.early_kv_tokens = early_kv_tokens  # 0: nothing read before the PDL wait
    # The binding encodes the caches' tensor maps for the TMA producer, launches the decode kernel and, with
    # merge 0, the combine kernel.
    ext.decode(p, fp8_kv=k_cache.dtype == _FP8, fp8_q=q.dtype == _FP8, tma=tma, num_ctas=num_ctas,
                      combine_ctas=combine_ctas, pdl=get_pdl(), stream=stream_ptr(q.device))


@decode_op.register_fake
def _(q, q_scale, k_cache, v_cache, page_table, k_scale_t, v_scale_t, tasks, bin_start, bin_first, bin_first_page,
      combine, counters, slot_meta, partial_o, partial_lse, merge_counts, claim_counter, out, k_scale, v_scale,
      sm_scale, num_ctas, combine_ctas, merge, tma, bin_heads, early_kv_tokens):
    return None
