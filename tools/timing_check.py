"""Sanity check of the benchmark harness on the GPU: an empty kernel and a 1 GiB copy timed
with events inside the graph (the harness default) and with events around graph replay.
The two should differ by the graph launch cost alone (a few us), and the copy should give
the ~4.27 TB/s the floors assume. Prints one line each; run by tools/gpu_check.sh."""

import torch

from hpc_common.bench import timing

dev = torch.device("cuda", 0)
tiny = torch.empty(1, device=dev)
src = torch.empty(1 << 29, dtype=torch.float16, device=dev).normal_()
dst = torch.empty_like(src)
stream = torch.cuda.Stream()
for name, fn, nbytes in (("empty kernel", lambda: tiny.zero_(), 0), ("1 GiB copy", lambda: dst.copy_(src), 2 << 30)):
    with torch.cuda.stream(stream):
        fn()
        timing._flush_l2(dev)
        stream.synchronize()
        inside = timing._bench_in_graph(fn, 50, True, dev, stream)
        around = timing._bench_around_replay(fn, 50, True, dev, stream, True)
    bw = f", {nbytes / inside / 1e6:.2f} TB/s in-graph" if nbytes else ""
    print(f"timing check: {name}: in-graph events {inside:.2f} us, around replay {around:.2f} us{bw}")
