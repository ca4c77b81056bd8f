"""Sanity check of the benchmark harness on the GPU (run by tools/gpu_check.sh).

- An empty kernel and a 1 GiB copy timed with events inside the graph (the harness default)
  and with events around graph replay: they should differ by the graph launch cost alone.
- The 1 GiB copy and a 256 MB FP8 quantisation after a *written* and after a *read* L2
  flush: the difference is the write-back of the flush's dirty lines inside the timed call.
- The same 1 GiB moved by an SM kernel (`torch.mul(src, 1, out=dst)`). `dst.copy_(src)` of a
  contiguous same-dtype tensor is a device-to-device cudaMemcpyAsync, and from 512 MB up it runs
  at ~2.7 TB/s where an SM kernel reaches 4.2-4.27 (H200, in-graph, written flush:
  128 / 256 MB copy_ 3.99 / 4.14 TB/s, 512 MB / 1 GiB / 2 GiB 2.69 / 2.71 / 2.71, mul by
  one 4.22 / 4.26 / 4.27; a destination 1 MB + 8 KB further on changes nothing). So the copy row
  here is not the ceiling; the benchmarks' `torch_copy` rows (64 and 256 MB) are below that size.
"""

import torch

from hpc_common.bench import timing
from hpc_common.fp8 import quantize_per_tensor

dev = torch.device("cuda", 0)
tiny = torch.empty(1, device=dev)
src = torch.empty(1 << 29, dtype=torch.float16, device=dev).normal_()
dst = torch.empty_like(src)
x = torch.randn(32768, 4096, device=dev, dtype=torch.bfloat16)
q = torch.empty(x.shape, device=dev, dtype=torch.float8_e4m3fn)
scale = torch.tensor([0.02], device=dev)
stream = torch.cuda.Stream()
cases = (("empty kernel", lambda: tiny.zero_(), 0),
         ("1 GiB copy", lambda: dst.copy_(src), 2 << 30),
         ("1 GiB copy by an SM kernel (x * 1)", lambda: torch.mul(src, 1, out=dst), 2 << 30),
         ("fp8 per-tensor 256 MB", lambda: quantize_per_tensor(x, scale, out=q), 3 * x.numel()))
for name, fn, nbytes in cases:
    with torch.cuda.stream(stream):
        fn()
        timing.empty_l2(dev)
        stream.synchronize()
        inside = timing._bench_in_graph(fn, 50, True, dev, stream)
        around = timing._bench_around_replay(fn, 50, True, dev, stream, True)
        saved = "write"
        other = timing._bench_in_graph(fn, 50, True, dev, stream, "read")
    bw = (lambda t: f" ({nbytes / t / 1e6:.2f} TB/s)") if nbytes else (lambda t: "")
    print(f"timing check: {name}: in-graph {inside:.2f} us{bw(inside)} [{saved} flush], around replay "
          f"{around:.2f} us, in-graph after a {'read' if saved == 'write' else 'write'} flush {other:.2f} us"
          f"{bw(other)}")
