"""Every production kernel once on small shapes, for compute-sanitizer (tools/gpu_check.sh runs this
script under memcheck, racecheck and synccheck, one short run each):

    compute-sanitizer --tool memcheck --error-exitcode 9 python3 tools/sanitize_ops.py

- FP8 quantisation (hpc_common.fp8): every mode (per-tensor static and dynamic, per-token, group-128
  with row- and column-major scales and UE8M0, per-token-head) on bf16 and fp32 inputs, over shapes that
  take each kernel family (tile, column tile, flat, row tile, cover, odd rows, long and wide rows,
  short-segment and generic register kernels, the scalar path);
- router GEMM (hpc_router_gemm): the plan of every TABLE row of the three served shapes (every path the
  library dispatches to) and the rules' paths on a shape without a table (--light, for racecheck: every
  path once at one M tile with K unsplit);
- decode attention (hpc_attention): plan_decode + decode (+ combine where the plan splits), BF16 and
  FP8 KV, small batches with and without split requests, the static split-KV baseline, 8/1 and 64/8 heads,
  the separate combine kernel and the cp.async producer, pages of 64 tokens and of 1 (the cp.async kernel);
- the attention prologue (hpc_attention.qk_norm_rope_store): BF16 and FP8 KV and Q, both RoPE styles,
  full and partial rotary dims (the shuffle and the shared-memory paths), norm on and off, padding;
- fused MoE (hpc_moe): each weight format at T = 1 (the tile-form Down), T = 5 (the tile form split over
  experts, with the reduce kernel) and T = 300 (the expert form and its reduce kernel), when hpc_moe has a
  CUDA path.

An operator whose package is not installed is skipped and named. Each op synchronises, so an error
is attributed to the op that caused it; the last line is `sanitize_ops: N ops ran, M skipped`.
Build the kernels first (`python -m hpc_common.jit.prebuild`): under the sanitizer a JIT build would
be slow. `--only fp8,router` runs a subset.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

import torch

RAN: list[str] = []
SKIPPED: list[str] = []
LIGHT = False  # --light: fewer, smaller launches where an op has many (for racecheck)


def _done(name: str) -> None:
    torch.cuda.synchronize()
    RAN.append(name)
    print(f"  ran {name}", flush=True)


def _installed(module: str) -> bool:
    try:
        importlib.import_module(module)
        return True
    except ModuleNotFoundError as e:
        if e.name and module.startswith(e.name):
            return False
        raise


def fp8_ops(dev: torch.device) -> None:
    from hpc_common import fp8

    gen = torch.Generator(dev).manual_seed(1)
    static = torch.tensor([0.05], device=dev)
    # (M, N): dense tiles, odd rows (scalar head + vectors), no-power-of-two rows (row tile / covers),
    # long and wide rows, small groups, a flat tensor whose size is no vector multiple.
    shapes = [(37, 4096), (33, 4095), (20, 2880), (12, 7168), (3, 14336), (2, 28672), (9, 1536), (5, 1001)]
    for dtype in (torch.bfloat16, torch.float32):
        for m, n in shapes:
            x = torch.randn(m, n, device=dev, generator=gen).to(dtype)
            fp8.quantize_per_tensor(x, static)
            fp8.quantize_per_tensor(x, 0.03)
            fp8.quantize_per_tensor(x)
            fp8.quantize_per_token(x, ue8m0=True)
            fp8.quantize_per_token_group(x, 128)
            fp8.quantize_per_token_group(x, 128, column_major_scales=True)
            fp8.quantize_per_token_group(x, 64, ue8m0=True)
            fp8.quantize_per_token_group(x, 32)
            _done(f"fp8 {str(dtype).removeprefix('torch.')} {m}x{n}")
        big = torch.randn(70, 48, 128, device=dev, generator=gen).to(dtype)
        fp8.quantize_per_token_head(big[:, 8:40])  # a Q slice of a fused QKV buffer
        fp8.quantize_per_token_head(big)
        misaligned = torch.randn(3 * 4096 + 3, device=dev, generator=gen).to(dtype)[3:].view(3, 4096)
        fp8.quantize_per_token(misaligned, out=torch.empty(3 * 4096 + 1, dtype=torch.float8_e4m3fn,
                                                           device=dev)[1:].view(3, 4096))  # scalar path
        _done(f"fp8 {str(dtype).removeprefix('torch.')} per-head, scalar path")


def router_ops(dev: torch.device) -> None:
    from hpc_router_gemm import RouterWeight, plan_for
    from hpc_router_gemm.heuristics import TABLE, Plan
    from hpc_router_gemm.router_gemm import launch

    gen = torch.Generator(dev).manual_seed(2)
    if LIGHT:
        # racecheck: every path of the table once, at the smallest M its row serves (at most 128, one M
        # tile of every tile shape), with K unsplit (one CTA per tile): racecheck instruments every
        # shared-memory access, so its run time grows with the CTAs. It checks each CTA's shared
        # memory; a split over a cluster (DSMEM partials, cluster barriers) or a spinning workspace
        # split (`_wsp`) needs its CTAs resident together, and racecheck's run of the table's own plans
        # never finished the first shape (230 s, 67b4dee). memcheck and synccheck run the table's own
        # plans, splits included.
        cases = []
        for (k, n), rows in TABLE.items():
            firsts = {}
            for i, (_, path, *_rest) in enumerate(rows):
                firsts.setdefault(path, 1 if i == 0 else min(rows[i - 1][0] + 1, 128))
            cases.append(((k, n), [(m, Plan(path, 1)) for path, m in firsts.items()]))
        print("  --light: each path with K unsplit (no cluster or workspace split)", flush=True)
    else:
        cases = [((k, n), [(m, None) for m in sorted({1, *(min(r[0], 4096) for r in rows)})])
                 for (k, n), rows in TABLE.items()]
        cases.append(((1024, 320), [(m, None) for m in (1, 8, 64, 600)]))  # no table: the rules
    for (K, N), runs in cases:
        rw = RouterWeight(torch.randn(N, K, device=dev, generator=gen) * 0.02)
        for M, plan in runs:
            x = torch.randn(M, K, device=dev, generator=gen).to(torch.bfloat16)
            plan = plan or plan_for(M, N, K, dev)
            # named before it runs, so a run that never finishes shows the path it is in
            print(f"  router K={K} N={N} M={M}: {plan.path}, {plan.splits} splits", flush=True)
            launch(x, rw, torch.empty(M, N, device=dev), plan)
            torch.cuda.synchronize()
        _done(f"router K={K} N={N} M={sorted({m for m, _ in runs})}")


def decode_ops(dev: torch.device) -> None:
    import hpc_attention as ha
    from hpc_common import launch

    gen = torch.Generator(dev).manual_seed(3)
    # (label, lengths, Hq, Hkv, page size): one CTA's work each (no split; the row plan, one row warp), 40
    # requests with an empty one (the row plan's two row warps), a long request among short ones (split across
    # CTAs, merged), and pages of one token (SGLang's default), which always take the cp.async producer.
    rows2 = [0] + [(37 * k) % 300 + 1 for k in range(39)]
    cases = [("no split", [64, 100, 1, 0], 8, 1, 64), ("rows x2", rows2, 8, 1, 64),
             ("split", [8192, 100, 3000, 64], 8, 1, 64), ("split 64/8", [4096, 700], 64, 8, 64),
             ("page 1", [64, 100, 1, 0], 8, 1, 1), ("page 1 split", [2048, 100, 300, 64], 8, 1, 1)]
    for kv_dtype in (torch.bfloat16, torch.float8_e4m3fn):
        for label, lens, hq, hkv, page in cases:
            b = len(lens)
            max_pages = max(1, -(-max(lens) // page))
            num_pages = b * max_pages + 3
            k_cache = torch.randn(num_pages, page, hkv, 128, device=dev, generator=gen).to(kv_dtype)
            v_cache = torch.randn(num_pages, page, hkv, 128, device=dev, generator=gen).to(kv_dtype)
            page_table = torch.randperm(num_pages, device=dev, generator=gen)[:b * max_pages].view(b, max_pages)
            page_table = page_table.to(torch.int32).contiguous()
            kv_lens = torch.tensor(lens, dtype=torch.int32, device=dev)
            q = torch.randn(b, hq, 128, device=dev, generator=gen).to(torch.bfloat16)
            kw = {} if kv_dtype == torch.bfloat16 else {"k_scale": 0.5, "v_scale": 0.25}
            name = f"decode {str(kv_dtype).removeprefix('torch.')} {label}"

            # Each plan and each decode synchronised and named on its own, so a sanitizer report
            # (printed when the kernel completes) follows the name of the step that caused it.
            def step(what, opts=None, splits=None, pdl_off=False):
                if pdl_off:
                    launch.set_pdl(False)
                try:
                    plan = ha.plan_decode(kv_lens, hkv, hq, max_kv_len=max(lens), static_splits=splits,
                                          kv_dtype=kv_dtype, page_table=page_table, page_size=page,
                                          options=opts)
                    torch.cuda.synchronize()
                    print(f"  planned {name} {what}", flush=True)
                    ha.decode(q, k_cache, v_cache, page_table, kv_lens, plan, **kw)
                    torch.cuda.synchronize()
                    print(f"  decoded {name} {what}", flush=True)
                finally:
                    launch.set_pdl(None)

            step("dynamic")
            step("static split", splits="auto")
            # The kernels the default plan never launches at page 64: the combine kernel (merge in a
            # pass of its own) and the cp.async producer.
            step("combine", ha.DecodeOptions(merge="combine"))
            step("cp.async", ha.DecodeOptions(producer="cp_async"))
            if kv_dtype == torch.bfloat16:
                step("dynamic, PDL off", pdl_off=True)  # a report here too is not an overlap of launches
            _done(f"{name} (dynamic, static split, combine, cp.async)")


def prologue_ops(dev: torch.device) -> None:
    import hpc_attention as ha
    from hpc_attention import reference as ref

    gen = torch.Generator(dev).manual_seed(5)
    page, T = 16, 37
    # (Hq, Hkv, rotary_dim, style, norm): the shuffle path (rotary % 16 == 0) and the shared-memory one.
    cases = [(8, 1, 128, "neox", True), (32, 4, 64, "gptj", False), (16, 16, 100, "neox", True)]
    for kv_dtype in (torch.bfloat16, torch.float8_e4m3fn):
        for q_dtype in (torch.bfloat16, torch.float8_e4m3fn):
            for hq, hkv, rot, style, norm in cases:
                qkv = torch.randn(T, (hq + 2 * hkv) * 128, device=dev, generator=gen).to(torch.bfloat16)
                positions = torch.randint(0, 4096, (T,), device=dev, generator=gen)
                cs = ref.rope_cos_sin_cache(4096, rot).to(dev)
                num_pages = -(-2 * T // page)
                k_cache = torch.zeros(num_pages, page, hkv, 128, device=dev).to(kv_dtype)
                v_cache = torch.zeros_like(k_cache)
                slots = torch.randperm(num_pages * page, device=dev, generator=gen)[:T]
                slots[::5] = -1  # padding tokens
                wq = torch.rand(128, device=dev, generator=gen).to(torch.bfloat16) + 0.5 if norm else None
                wk = torch.rand(128, device=dev, generator=gen).to(torch.bfloat16) + 0.5 if norm else None
                kw = {} if kv_dtype == torch.bfloat16 else {"k_scale": 0.05, "v_scale": 0.05}
                ha.qk_norm_rope_store(qkv, positions, cs, k_cache, v_cache, slots, num_qo_heads=hq,
                                      num_kv_heads=hkv, q_norm_weight=wq, k_norm_weight=wk, eps=1e-5,
                                      rope_style=style, rotary_dim=rot, q_out_dtype=q_dtype, **kw)
            _done(f"prologue kv {str(kv_dtype).removeprefix('torch.')} q {str(q_dtype).removeprefix('torch.')}")


def moe_ops(dev: torch.device) -> None:
    from hpc_common.launch import get_num_sms
    from hpc_moe import MoEWeights, fused_moe, heuristics

    gen = torch.Generator(dev).manual_seed(4)
    H, inter, E, k = 256, 128, 8, 2
    # T = 1 (2 pairs): the tile-form Down in one CTA per H tile; T = 5: the tile form split over experts (16 H
    # tiles leave the GPU idle: heuristics.down_tile_splits) and the reduce kernel; T = 300 (600 pairs, 75 per
    # expert): the expert form and its reduce kernel.
    for T, quant in [(t, q) for t in (1, 5, 300) for q in ("bf16", "fp8_tensor", "fp8_block")]:
        w13 = torch.randn(E, 2 * inter, H, device=dev, generator=gen) * 0.05
        w2 = torch.randn(E, H, inter, device=dev, generator=gen) * 0.05
        kw = {}
        if quant == "bf16":
            w13, w2 = w13.to(torch.bfloat16), w2.to(torch.bfloat16)
        else:
            w13, w2 = w13.to(torch.float8_e4m3fn), w2.to(torch.float8_e4m3fn)
            if quant == "fp8_tensor":
                kw = dict(w13_scale=torch.rand(E, device=dev, generator=gen) + 0.5,
                          w2_scale=torch.rand(E, device=dev, generator=gen) + 0.5)
            else:
                kw = dict(w13_scale=torch.rand(E, -(-2 * inter // 128), H // 128, device=dev, generator=gen) + 0.5,
                          w2_scale=torch.rand(E, H // 128, -(-inter // 128), device=dev, generator=gen) + 0.5)
        weights = MoEWeights.prepare(w13, w2, quant, **kw)
        hidden = torch.randn(T, H, device=dev, generator=gen).to(torch.bfloat16)
        ids = torch.randint(-1, E, (T, k), device=dev, generator=gen, dtype=torch.int32)
        topw = torch.rand(T, k, device=dev, generator=gen)
        fused_moe(hidden, weights, ids, topw)
        form = heuristics.down_form(T * k, E, inter, quant != "bf16")
        if form == heuristics.DOWN_TILE:  # T <= 5: one token chunk
            form += f", {heuristics.down_tile_splits(1, H, T * k, E, get_num_sms(dev))} expert splits"
        _done(f"moe {quant} T={T} E={E} top-{k} (Down form: {form})")


OPS = {"fp8": ("hpc_common.fp8", fp8_ops), "router": ("hpc_router_gemm", router_ops),
       "decode": ("hpc_attention", decode_ops), "prologue": ("hpc_attention", prologue_ops),
       "moe": ("hpc_moe.kernels", moe_ops)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated subset of: " + ", ".join(OPS))
    ap.add_argument("--light", action="store_true",
                    help="every router path once, at one M tile with K unsplit (for racecheck)")
    ap.add_argument("--require-all", action="store_true",
                    help="fail when an op is skipped (its package not installed): tools/gpu_check.sh sets it")
    args = ap.parse_args(argv)
    global LIGHT
    LIGHT = args.light
    names = [n for n in args.only.split(",") if n] or list(OPS)
    if not torch.cuda.is_available():
        print("sanitize_ops: no CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda", torch.cuda.current_device())
    failed = False
    for name in names:
        module, fn = OPS[name]
        if not _installed(module):
            SKIPPED.append(name)
            print(f"skipped {name}: {module} is not installed (or has no CUDA path)", flush=True)
            continue
        print(f"== {name}", flush=True)
        try:
            fn(dev)
        except Exception:  # a raised error is a failure of this run, whatever the sanitizer says
            failed = True
            traceback.print_exc()
            print(f"FAILED {name}", flush=True)
    print(f"sanitize_ops: {len(RAN)} ops ran, {len(SKIPPED)} skipped ({', '.join(SKIPPED) or 'none'})"
          f"{', with errors' if failed else ''}", flush=True)
    if args.require_all and SKIPPED:
        print(f"sanitize_ops: --require-all and {', '.join(SKIPPED)} skipped", flush=True)
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
