"""Per-CTA timeline of the FP8 bulk ring quantisation kernel (fp8_quant_bulk.cuh) on one call (the
ring is not the default since the seventeenth session: this script turns quant.USE_TILE_KERNEL off).

Each CTA's thread 0 writes stamps when quant.BULK_TIMELINE is set: entry, first loads issued, every
tile seen in shared memory ("landed") and its bulk store issued ("stored"), exit (slot layout:
TimelineSlot in fp8_quant.cuh; globaltimer and clock64 at entry and exit, clock64 elsewhere, put on
one ns axis by _to_ns). The call is timed as the benchmark does (a CUDA
graph of [L2 flush, event, call, event]) under three conditions:
  write  the harness's flush (a 128 MB buffer rewritten: the L2 is full of dirty lines)
  read   the same buffer read instead (clean L2)
  warm   no flush; the graph first runs the same call on another 64 MB input (its FP8 output is
         dirty in the L2, as in a stream of calls)
and prints, per mode x variant x condition (medians over the replays):
  event      the in-graph event pair (what the benchmark reports)
  span       first CTA entry -> last CTA exit (globaltimer); event - span = launch + completion
  entry      last CTA entry - first (launch skew); issue = median entry -> first loads issued
  first      first tile landed, from the first entry: min / median / max over CTAs
  st0        first tile stored (earliest CTA)
  q1..q5     traffic rate (TB/s, input + FP8 bytes of the tiles stored) in each fifth of the tiles
             (can exceed the DRAM rate: stored bytes land in the L2 and may stay there)
  mid        the same over the middle 60% of the tiles (steady state)
  tail       last exit - time when 99% of the tiles were stored; drain = last exit - last store
  eskew      last exit - median exit
and a 1 us histogram of the stored bytes of one replay per condition for the default kernel.

    PYTHONPATH=packages/hpc-common/src python3 packages/hpc-common/scripts/fp8_timeline.py \
        [--mb 64] [--reps 30] [--variants 0,1] [--modes per_tensor_static,per_token]
"""

from __future__ import annotations

import argparse
import statistics

import torch

from hpc_common import fp8
from hpc_common.bench import timing
from hpc_common.fp8 import quant

MB = 1 << 20
N = 4096
S = quant.TIMELINE_SLOTS
MAXT = 32  # tiles recorded per CTA
ENTRY, ISSUED, EXIT, TILES, SMID, ENTRY_CLK, EXIT_CLK, LANDED, STORED = 0, 1, 2, 3, 4, 5, 6, 8, 8 + MAXT


def _call(mode: str, x: torch.Tensor, out: torch.Tensor, scale_out: torch.Tensor, static: torch.Tensor):
    if mode == "per_tensor_static":
        return lambda: fp8.quantize_per_tensor(x, static, out=out)
    if mode == "per_token":
        return lambda: fp8.quantize_per_token(x, out=out, scale_out=scale_out)
    if mode == "group128":
        return lambda: fp8.quantize_per_token_group(x, 128, out=out, scale_out=scale_out)
    raise KeyError(mode)


def _scale_out(mode: str, x: torch.Tensor) -> torch.Tensor:
    g = {"per_tensor_static": 1, "per_token": 1, "group128": x.shape[1] // 128}[mode]
    return torch.empty(x.shape[0], g, dtype=torch.float32, device=x.device)


def _replays(fn, pre, tl: torch.Tensor, stream, reps: int, each):
    """[pre, event, fn (with the timeline), event] captured once and replayed `reps` times; per
    replay (event us, each()) with the timeline read by `each` and zeroed for the next one."""
    def timed():
        quant.BULK_TIMELINE = tl
        try:
            fn()
        finally:
            quant.BULK_TIMELINE = None

    def read_and_zero():
        r = each()
        tl.zero_()
        return r

    tl.zero_()
    return timing.replay_in_graph(timed, reps, stream, pre=pre, each=read_and_zero)


def _to_ns(t: torch.Tensor) -> tuple[torch.Tensor, float, float]:
    """(stamps [grid, S] as float64 ns on one axis, SM cycles per ns, globaltimer tick in ns).

    Entry and exit carry a globaltimer (common to all SMs, possibly coarse) and a clock64 stamp;
    the other stamps are clock64. The clock rate is the median over CTAs of cycles / ns between
    entry and exit, and each CTA's clock is placed on the common axis by the mean offset of its
    two pairs, so a coarse globaltimer tick costs alignment across CTAs, not resolution inside one.
    """
    gt = t[:, [ENTRY, EXIT]].double()
    clk = t[:, [ENTRY_CLK, EXIT_CLK]].double()
    dgt, dclk = gt[:, 1] - gt[:, 0], clk[:, 1] - clk[:, 0]
    ok = dgt > 2000
    f = float((dclk[ok] / dgt[ok]).median()) if ok.any() else 1.0
    off = (gt - clk / f).mean(dim=1, keepdim=True)  # ns = off + clk / f
    ns = t.double().clone()
    cols = [ISSUED, ENTRY_CLK, EXIT_CLK] + list(range(LANDED, STORED + MAXT))
    ns[:, cols] = off + t[:, cols].double() / f
    stamps = torch.unique(t[:, [ENTRY, EXIT]].reshape(-1))
    diffs = stamps[1:] - stamps[:-1]
    tick = float(diffs[diffs > 0].min()) if (diffs > 0).any() else float("nan")
    return ns, f, tick


def _analyse(t: torch.Tensor, total_bytes: float) -> dict:
    """Metrics of one replay's stamps (int64 [grid, S] on the CPU), times in us."""
    t = t[t[:, ENTRY] > 0]
    ns, f, tick = _to_ns(t)
    entry, exits = ns[:, ENTRY_CLK], ns[:, EXIT_CLK]
    t0 = float(entry.min())
    ntiles = t[:, TILES].clamp(max=MAXT)
    valid = torch.arange(MAXT)[None, :] < ntiles[:, None]
    stored = torch.sort(ns[:, STORED:STORED + MAXT][valid]).values - t0
    landed = ns[:, LANDED:LANDED + MAXT][valid] - t0
    exits = exits - t0
    n = stored.numel()
    per_tile = total_bytes / int(t[:, TILES].sum())
    first = ns[:, LANDED] - t0

    def rate(a: float, b: float) -> float:  # TB/s between the a-th and b-th fraction of the tiles
        i, j = int(a * (n - 1)), int(b * (n - 1))
        dt = float(stored[j] - stored[i])
        return (j - i) * per_tile / dt / 1e3 if dt > 0 else float("nan")

    return dict(
        span=float(t[:, EXIT].max() - t[:, ENTRY].min()) / 1e3,  # globaltimer alone
        entry=float(entry.max() - t0) / 1e3,
        issue=float((ns[:, ISSUED] - entry).median()) / 1e3,
        first_min=float(first.min()) / 1e3, first_med=float(first.median()) / 1e3, first_max=float(first.max()) / 1e3,
        st0=float(stored[0]) / 1e3,
        **{f"q{k + 1}": rate(k / 5, (k + 1) / 5) for k in range(5)},
        mid=rate(0.2, 0.8),
        tail=(float(exits.max()) - float(stored[int(0.99 * (n - 1))])) / 1e3,
        drain=(float(exits.max()) - float(stored[-1])) / 1e3,
        eskew=(float(exits.max()) - float(exits.median())) / 1e3,
        tick=tick, ghz=f, grid=int(t.shape[0]), land_last=float(landed.max()) / 1e3,
        _stored=stored, _per_tile=per_tile,
    )


def _histogram(m: dict, width_ns: int = 1000) -> str:
    stored, per_tile = m["_stored"], m["_per_tile"]
    nb = int(stored.max() // width_ns) + 1
    counts = torch.bincount((stored // width_ns).long(), minlength=nb)
    return " ".join(f"{c * per_tile / width_ns / 1e3:.2f}" for c in counts.tolist())


COLS = ("event", "span", "entry", "issue", "first_min", "first_med", "first_max", "st0", "q1", "q2", "q3", "q4",
        "q5", "mid", "tail", "drain", "eskew")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--variants", default="0,1", help="quant.BULK_VARIANT values")
    ap.add_argument("--modes", default="per_tensor_static,per_token")
    ap.add_argument("--conditions", default="write,read,warm")
    args = ap.parse_args(argv)
    quant.USE_TILE_KERNEL = False  # only the ring kernel writes the timeline

    dev = torch.device("cuda", 0)
    stream = torch.cuda.Stream(dev)
    rows = args.mb * MB // (2 * N)
    gen = torch.Generator(dev).manual_seed(0)
    x = torch.randn(rows, N, device=dev, generator=gen).to(torch.bfloat16)
    x_prev = torch.randn(rows, N, device=dev, generator=gen).to(torch.bfloat16)
    out, out_prev = (torch.empty(rows, N, dtype=torch.float8_e4m3fn, device=dev) for _ in range(2))
    static = torch.tensor([0.02], device=dev)
    tl = torch.zeros(8 * torch.cuda.get_device_properties(dev).multi_processor_count, S, dtype=torch.int64,
                     device=dev)
    timing.empty_l2(dev)  # allocate the flush buffer outside capture

    # Launch-cost references: an empty kernel and a one-tile call, timed the same way (written flush).
    tiny = torch.empty(1, device=dev)
    small = torch.randn(4, 2048, device=dev).to(torch.bfloat16)
    small_out = torch.empty(4, 2048, dtype=torch.float8_e4m3fn, device=dev)
    print(f"empty kernel (written flush): {timing._bench_in_graph(lambda: tiny.zero_(), 50, True, dev, stream):.2f} us")

    variants = [int(v) for v in args.variants.split(",")]
    nbytes = 3 * x.numel()  # bf16 in + FP8 out (scales: a few KB)
    print(f"input {tuple(x.shape)} bf16 ({args.mb} MB), bytes per call {nbytes / MB:.0f} MB, floor "
          f"{timing.floor_us(nbytes):.2f} us; times in us, rates in TB/s of input + FP8 bytes")
    print(f"{'mode':18s} {'var':>3s} {'cond':5s} " + " ".join(f"{c:>6s}" for c in COLS) + "  grid tick_ns GHz")
    hist = []
    for mode in args.modes.split(","):
        scale_out = _scale_out(mode, x)
        for variant in variants:
            quant.BULK_VARIANT = variant
            try:
                one = _call(mode, small, small_out, _scale_out(mode, small), static)
                with torch.cuda.stream(stream):
                    one()  # warm-up outside the capture (extension load, kernel attributes)
                stream.synchronize()
                runs = _replays(one, lambda: timing.empty_l2(dev), tl, stream, args.reps,
                                lambda: _analyse(tl.cpu(), 3 * small.numel())["span"])
                ev1, sp1 = [t for t, _ in runs], [span for _, span in runs]
                e_med, s_med = statistics.median(ev1), statistics.median(sp1)
                print(f"{mode:18s} {variant:3d} small: one-tile call event {e_med:.2f} span {s_med:.2f} "
                      f"-> launch + completion {e_med - s_med:.2f}")
                fn = _call(mode, x, out, scale_out, static)
                prev = _call(mode, x_prev, out_prev, _scale_out(mode, x_prev), static)
                for cond in args.conditions.split(","):
                    pre = {"write": lambda: timing.empty_l2(dev, "write"),
                           "read": lambda: timing.empty_l2(dev, "read"), "warm": prev}[cond]
                    with torch.cuda.stream(stream):
                        fn()
                        prev()
                    stream.synchronize()
                    ms = []
                    for event_us, m in _replays(fn, pre, tl, stream, args.reps, lambda: _analyse(tl.cpu(), nbytes)):
                        m["event"] = event_us
                        ms.append(m)
                    med = {c: statistics.median(m[c] for m in ms) for c in COLS}
                    ticks = statistics.median(m["tick"] for m in ms)
                    ghz = statistics.median(m["ghz"] for m in ms)
                    print(f"{mode:18s} {variant:3d} {cond:5s} " + " ".join(f"{med[c]:6.2f}" for c in COLS)
                          + f"  {ms[0]['grid']:4d} {ticks:.0f} {ghz:.3f}", flush=True)
                    if variant == 0:
                        rep = sorted(ms, key=lambda m: m["event"])[len(ms) // 2]
                        hist.append(f"{mode} {cond} (event {rep['event']:.2f} us, span {rep['span']:.2f} us): "
                                    + _histogram(rep))
            finally:
                quant.BULK_VARIANT = 0
    print("\nStored traffic per 1 us bin (TB/s, input + FP8 bytes of tiles stored in the bin), default kernel, "
          "median replay:")
    for h in hist:
        print(" ", h)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
