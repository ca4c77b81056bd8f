"""The MoE references against a per-token loop written independently, for every format (CPU)."""

import pytest
import torch

from hpc_moe.reference import (dequantize_activations, fused_moe_reference, fused_moe_reference_quant,
                               quantize_activations)

FP8 = torch.float8_e4m3fn


def _e4m3(v: torch.Tensor) -> torch.Tensor:
    """float -> E4M3 value (RNE, saturating at 448), written apart from hpc_common's helper."""
    return v.float().clamp(-448.0, 448.0).to(FP8).double()


def _x_row(x_row: torch.Tensor, quant: str, a1) -> torch.Tensor:
    """One token's activations as the kernels see them."""
    xf = x_row.double()
    if quant == "bf16":
        return xf
    if quant == "fp8_tensor" and a1 is not None:
        s = torch.tensor(a1, dtype=torch.float32)
        return _e4m3(x_row.float() * (1 / s)) * float(s)
    groups = [slice(0, x_row.numel())] if quant == "fp8_tensor" else \
        [slice(g, g + 128) for g in range(0, x_row.numel(), 128)]
    out = torch.empty_like(xf)
    for sl in groups:
        seg = x_row[sl].float()
        s = (seg.abs().max().clamp(min=1e-10) / torch.tensor(448.0)).float()
        out[sl] = _e4m3(seg * (1 / s)) * float(s)
    return out


def _w(w: torch.Tensor, s, quant: str, gate_rows: int | None) -> torch.Tensor:
    """One expert's weight matrix in float64, its scales applied block by block."""
    wf = w.double()
    if quant == "bf16":
        return wf
    out = wf.clone()
    if quant == "fp8_tensor":
        s = s.reshape(-1)
        if gate_rows is not None and s.numel() == 2:
            out[:gate_rows] *= float(s[0])
            out[gate_rows:] *= float(s[1])
        else:
            out *= float(s[0])
        return out
    for rb in range(s.shape[0]):
        for cb in range(s.shape[1]):
            out[rb * 128:(rb + 1) * 128, cb * 128:(cb + 1) * 128] *= float(s[rb, cb])
    return out


def _loop(x, w13, w2, ids, wts, offset, quant="bf16", s13=None, s2=None, a1=None, shared=None):
    T, H = x.shape
    inter = w2.shape[2]
    out = torch.zeros(T, H, dtype=torch.float64)
    for t in range(T):
        xt = _x_row(x[t], quant, a1)
        for j in range(ids.shape[1]):
            e = int(ids[t, j]) - offset
            if int(ids[t, j]) < 0 or not 0 <= e < w13.shape[0]:
                continue
            h = _w(w13[e], None if s13 is None else s13[e], quant, inter) @ xt
            a = torch.nn.functional.silu(h[:inter]) * h[inter:]
            out[t] += float(wts[t, j]) * (_w(w2[e], None if s2 is None else s2[e], quant, None) @ a)
        if shared is not None:
            out[t] += shared[t].double()
    return out


def test_reference_matches_loop_with_ep_offset():
    g = torch.Generator().manual_seed(3)
    T, H, inter, E_local, E, k = 5, 32, 16, 4, 12, 3
    x = torch.randn(T, H, generator=g)
    w13 = torch.randn(E_local, 2 * inter, H, generator=g) * 0.1
    w2 = torch.randn(E_local, H, inter, generator=g) * 0.1
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).int()
    wts = torch.rand(T, k, generator=g)
    got = fused_moe_reference(x, w13, w2, ids, wts, expert_offset=4)
    want = _loop(x, w13, w2, ids, wts, 4)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert got.abs().sum() > 0


def _case(quant, seed=0, T=6, H=256, inter=192, E_local=4, ep_rank=1, k=4):
    """Awkward sizes: I = 192 puts gate rows 128..191 and up rows 0..63 in one 128-row block."""
    g = torch.Generator().manual_seed(seed)
    E = E_local * 3
    x = (torch.randn(T, H, generator=g) * 2).to(torch.bfloat16)
    x[1, :128] = 0  # a zero group keeps a finite scale
    ids = torch.randint(-1, E, (T, k), generator=g, dtype=torch.int32)
    ids[0, :2] = ep_rank * E_local + 1  # a repeated local id: two terms of the sum
    ids[2] = ep_rank * E_local  # every pair of a token to one expert
    wts = torch.rand(T, k, generator=g)
    shared = torch.randn(T, H, generator=g).to(torch.bfloat16)
    if quant == "bf16":
        w13 = (torch.randn(E_local, 2 * inter, H, generator=g) * 0.05).to(torch.bfloat16)
        w2 = (torch.randn(E_local, H, inter, generator=g) * 0.05).to(torch.bfloat16)
        return dict(x=x, w13=w13, w2=w2, ids=ids, wts=wts, shared=shared, s13=None, s2=None,
                    offset=ep_rank * E_local)
    w13 = (torch.randn(E_local, 2 * inter, H, generator=g) * 100).clamp(-448, 448).to(FP8)
    w2 = (torch.randn(E_local, H, inter, generator=g) * 100).clamp(-448, 448).to(FP8)
    if quant == "fp8_tensor":
        s13 = torch.rand(E_local, 2, generator=g) * 1e-3 + 1e-4
        s2 = torch.rand(E_local, generator=g) * 1e-3 + 1e-4
    else:
        s13 = torch.rand(E_local, -(-2 * inter // 128), H // 128, generator=g) * 1e-3 + 1e-4
        s2 = torch.rand(E_local, H // 128, -(-inter // 128), generator=g) * 1e-3 + 1e-4
    return dict(x=x, w13=w13, w2=w2, ids=ids, wts=wts, shared=shared, s13=s13, s2=s2, offset=ep_rank * E_local)


@pytest.mark.parametrize("quant,a1", [("bf16", None), ("fp8_tensor", None), ("fp8_tensor", 0.02),
                                      ("fp8_block", None)])
@pytest.mark.parametrize("seed", [0, 1])
def test_quant_reference_matches_loop(quant, a1, seed):
    c = _case(quant, seed)
    got = fused_moe_reference_quant(c["x"], c["w13"], c["w2"], c["ids"], c["wts"], quant=quant, w13_scale=c["s13"],
                                    w2_scale=c["s2"], a1_scale=a1, expert_offset=c["offset"],
                                    shared_output=c["shared"])
    want = _loop(c["x"], c["w13"], c["w2"], c["ids"], c["wts"], c["offset"], quant, c["s13"], c["s2"], a1,
                 c["shared"])
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    # The pairs that reach this rank's experts contribute: the output is not just shared_output.
    assert (got - c["shared"].double()).abs().max() > 0


def test_fp8_tensor_one_scale_equals_two_equal_scales():
    c = _case("fp8_tensor")
    s1 = c["s13"][:, 0].contiguous()
    one = fused_moe_reference_quant(c["x"], c["w13"], c["w2"], c["ids"], c["wts"], quant="fp8_tensor",
                                    w13_scale=s1, w2_scale=c["s2"], expert_offset=c["offset"])
    two = fused_moe_reference_quant(c["x"], c["w13"], c["w2"], c["ids"], c["wts"], quant="fp8_tensor",
                                    w13_scale=torch.stack([s1, s1], 1), w2_scale=c["s2"], expert_offset=c["offset"])
    torch.testing.assert_close(one, two, rtol=0, atol=0)


def test_fp8_block_with_uniform_blocks_equals_fp8_tensor_per_token():
    """fp8_tensor's weight scales are block scales with every block alike: with one activation
    group (H = 128) the two formats are the same computation."""
    c = _case("fp8_tensor", H=128)
    E, two_i, H = c["w13"].shape
    s13 = c["s13"][:, 0].contiguous()
    b13 = s13[:, None, None].expand(E, -(-two_i // 128), H // 128).contiguous()
    b2 = c["s2"][:, None, None].expand(E, H // 128, -(-(two_i // 2) // 128)).contiguous()
    t = fused_moe_reference_quant(c["x"], c["w13"], c["w2"], c["ids"], c["wts"], quant="fp8_tensor", w13_scale=s13,
                                  w2_scale=c["s2"], expert_offset=c["offset"])
    b = fused_moe_reference_quant(c["x"], c["w13"], c["w2"], c["ids"], c["wts"], quant="fp8_block", w13_scale=b13,
                                  w2_scale=b2, expert_offset=c["offset"])
    torch.testing.assert_close(t, b, rtol=1e-12, atol=1e-12)


def test_activation_scales_follow_hpc_common():
    x = (torch.randn(3, 256) * 5).to(torch.bfloat16)
    q, s = quantize_activations(x, "fp8_block")
    assert q.dtype == FP8 and s.shape == (3, 2)
    q, s = quantize_activations(x, "fp8_tensor")  # dynamic: one scale per token, broadcast to the groups
    assert s.shape == (3, 2) and torch.equal(s[:, 0], s[:, 1])
    torch.testing.assert_close(s[:, 0], x.float().abs().amax(1) / 448, rtol=0, atol=0)
    q, s = quantize_activations(x, "fp8_tensor", 0.5)
    assert torch.all(s == 0.5)
    deq = dequantize_activations(x, "fp8_block")
    assert deq.dtype == torch.float64 and ((deq - x.double()).abs() <= x.double().abs() / 8 + 1e-6).all()


def test_non_local_and_minus_one_ids_give_zero_or_shared():
    c = _case("bf16")
    ids = torch.full_like(c["ids"], -1)
    ids[:, 0] = 0  # rank 1 owns experts 4..7: expert 0 is another rank's
    out = fused_moe_reference_quant(c["x"], c["w13"], c["w2"], ids, c["wts"], expert_offset=c["offset"],
                                    shared_output=c["shared"])
    torch.testing.assert_close(out, c["shared"].double(), rtol=0, atol=0)
