"""Grouped GEMM (issue 69) on sm_90a: the float64 reference over a NaN-poisoned D (every row of every
group written, none past the last), graph replay with new offs, torch._grouped_mm; the SwiGLU pair
epilogue and the masked layout (capacity per group, counts on the device) alike."""
from __future__ import annotations

import numpy as np
import pytest

from gemmtune.dtypes import from_storage, round_to, to_storage
from gemmtune.grouped import GroupedSpec, candidates, group_offsets, reference
from gemmtune.verify import compare

pytestmark = pytest.mark.gpu
ZIPF = tuple(int(x) for x in np.minimum(np.random.default_rng(7).zipf(1.5, 128), 2000))
CASES = [((700, 120, 64, 900, 33, 410, 256, 1), 512, 1024, "none"),
         ((0, 5, 0, 1, 64, 0), 333, 200, "bias+relu"),  # empty and 1-row groups, N odd, K % 64 != 0
         (ZIPF, 256, 512, "bias+gelu"), ((129, 1, 300), 200, 72, "gelu"), ((1000,), 4096, 64, "none")]


def _run(spec: GroupedSpec, sizes, config=None):
    from gemmtune.grouped.launch import build
    from gemmtune.runtime import DeviceBuffer, synchronize

    # `sizes`: each group's rows (contiguous: made into offs), or the counts as the masked kernel reads them
    rng = np.random.default_rng(len(sizes))
    offs = np.asarray(sizes, dtype=np.int32) if spec.masked_layout else group_offsets(sizes)
    x = {name: round_to(rng.uniform(-1, 1, shape), spec.dtype) for name, shape in
         (("A", (spec.total_m, spec.k)), ("W", (spec.groups, spec.weight_rows, spec.k)), ("bias", (spec.groups, spec.n)))}
    bufs = [DeviceBuffer.from_numpy(to_storage(x[name], spec.dtype)) for name in ("A", "W", "bias")]
    bufs += [DeviceBuffer.from_numpy(offs), DeviceBuffer.alloc(spec.total_m * spec.n * 2)]
    bufs[-1].fill_nan(spec.dtype)
    try:
        a, w, bias, o, d = bufs
        build(spec, config)(a.ptr, w.ptr, o.ptr, d.ptr, bias.ptr)
        synchronize()
        out = d.to_numpy((spec.total_m, spec.n), "<f2" if spec.dtype == "fp16" else np.uint16)
    finally:
        for buffer in bufs:
            buffer.free()
    ref = reference(spec, x["A"], x["W"].transpose(0, 2, 1), offs, x["bias"])
    _check_held(spec, from_storage(out, spec.dtype), ref)


def _check(spec: GroupedSpec, out: np.ndarray, ref: np.ndarray, end: int) -> None:
    if end:
        result = compare(out[:end], ref[:end], spec.dtype, spec.k)
        assert result.ok, result.message
    assert np.isnan(out[end:]).all(), "rows past the last group were written"


def _check_held(spec: GroupedSpec, out: np.ndarray, ref: np.ndarray) -> None:
    """The rows some group holds (the reference's non-NaN rows) match it; every other row is still NaN."""
    held = ~np.isnan(ref).all(axis=1)
    if held.any():
        result = compare(out[held], ref[held], spec.dtype, spec.k)
        assert result.ok, result.message
    written = np.flatnonzero(~np.isnan(out).all(axis=1) & ~held)
    assert not written.size, f"rows no group holds were written: {written[:8]}"


@pytest.mark.parametrize("sizes, n, k, epilogue", CASES, ids=lambda v: str(v)[:20])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_grouped_matches_the_float64_reference(sizes, n, k, epilogue, dtype):
    spec = GroupedSpec(len(sizes), sum(sizes) + 7, n, k, dtype, epilogue)
    for config in candidates(spec):
        _run(spec, sizes, config)


@pytest.mark.parametrize("band_m", [1, 2, 3])
def test_banded_tiles_match_the_float64_reference(band_m):
    from gemmtune.grouped.config import GroupedConfig, _deepest

    for sizes, n, k, epilogue in (CASES[0], CASES[4]):
        spec = GroupedSpec(len(sizes), sum(sizes) + 7, n, k, "bf16", epilogue)
        for base in (GroupedConfig(128, 128, band_m=band_m), GroupedConfig(64, 128, consumers=1, band_m=band_m)):
            _run(spec, sizes, _deepest(base, spec))


def test_all_groups_empty_writes_nothing():
    _run(GroupedSpec(4, 64, 128, 64), (0, 0, 0, 0))


def test_graph_replays_with_new_offsets():
    torch = pytest.importorskip("torch")
    from gemmtune.torch import grouped_mm

    g, n, k, total = 8, 384, 256, 1200
    a = torch.randn(total, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16)
    offs = torch.tensor(group_offsets([100] * 8), device="cuda")
    grouped_mm(a, w.transpose(1, 2), offs)  # built and loaded before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = grouped_mm(a, w.transpose(1, 2), offs)
    spec = GroupedSpec(g, total, n, k)
    for sizes in ([1, 0, 500, 3, 0, 64, 600, 32], [0] * 7 + [1200], [150] * 7 + [0]):
        offs.copy_(torch.tensor(group_offsets(sizes), device="cuda"))
        out.fill_(float("nan"))
        graph.replay()
        ref = reference(spec, a.float().cpu().numpy(), w.float().cpu().numpy().transpose(0, 2, 1), group_offsets(sizes))
        _check(spec, out.double().cpu().numpy(), ref, sum(sizes))


def test_against_torch_grouped_mm_and_bmm():
    torch = pytest.importorskip("torch")
    from gemmtune.torch import bmm, grouped_mm

    a = torch.randn(2000, 512, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(8, 768, 512, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    offs = torch.tensor(group_offsets([700, 120, 64, 900, 33, 80, 2, 101]), device="cuda")
    if hasattr(torch, "_grouped_mm"):
        torch.testing.assert_close(grouped_mm(a, w, offs), torch._grouped_mm(a, w, offs), rtol=2e-2, atol=2e-2)
    x = torch.randn(6, 100, 512, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(bmm(x, w[:6]), torch.bmm(x, w[:6]), rtol=2e-2, atol=2e-2)


# --- SwiGLU pair epilogue -------------------------------------------------------------------------------------
SWIGLU_CASES = [((700, 120, 64, 900, 33, 410, 256, 1), 512, 1024),
                ((0, 5, 0, 1, 64, 0), 333, 200),  # empty and 1-row groups, odd F (gate box runs into up rows), K % 64
                ((129, 1, 300), 100, 72), ((17, 40), 8, 64),  # F under a tile, F = 8
                (ZIPF, 256, 512), ((1000,), 1408, 2048)]


@pytest.mark.parametrize("sizes, f, k", SWIGLU_CASES, ids=lambda v: str(v)[:20])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_swiglu_matches_the_float64_reference(sizes, f, k, dtype):
    spec = GroupedSpec(len(sizes), sum(sizes) + 7, f, k, dtype, swiglu=True)
    for config in candidates(spec):
        _run(spec, sizes, config)


def test_swiglu_banded_and_64_column_tiles():
    from gemmtune.grouped.config import GroupedConfig, _deepest

    spec = GroupedSpec(3, 1300, 333, 256, "bf16", swiglu=True)
    for base in (GroupedConfig(128, 128, band_m=2), GroupedConfig(64, 64, consumers=1), GroupedConfig(128, 64, consumers=2)):
        _run(spec, (129, 1, 1100), _deepest(base, spec))


# --- masked layout --------------------------------------------------------------------------------------------
MASKED_CASES = [(8, 128, (0, 1, 128, 77, 0, 128, 3, 500), 384, 256, "none"),  # 500: clamped to the capacity
                (4, 100, (100, 0, 1, 99), 333, 200, "bias+relu"),  # capacity not a multiple of BM, odd N
                (4, 1, (0, 1, 1, 0), 256, 64, "bias+gelu"),          # capacity 1
                (16, 64, (0,) * 16, 128, 128, "none"),               # nothing to do
                (32, 256, tuple(range(0, 256, 8)), 768, 2048, "gelu")]


@pytest.mark.parametrize("groups, capacity, counts, n, k, epilogue", MASKED_CASES, ids=lambda v: str(v)[:20])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_masked_matches_the_float64_reference(groups, capacity, counts, n, k, epilogue, dtype):
    spec = GroupedSpec.masked(groups, capacity, n, k, dtype, epilogue)
    for config in candidates(spec):
        _run(spec, counts, config)


@pytest.mark.parametrize("counts, f", [((0, 1, 64, 33), 96), ((64, 64, 0, 5), 333)])
def test_masked_swiglu_matches_the_float64_reference(counts, f):
    spec = GroupedSpec.masked(4, 64, f, 256, "bf16", swiglu=True)
    for config in candidates(spec):
        _run(spec, counts, config)


def _masked_reference(a, w, counts: list[int], activation=None):
    """float64 per group on the GPU: a (G, cap, K), w stored (G, N, K) (swiglu: (G, 2F, K)); NaN past each count."""
    import torch

    out = torch.full((a.shape[0], a.shape[1], w.shape[1] // (2 if activation == "swiglu" else 1)), float("nan"),
                     dtype=torch.float64, device=a.device)
    for g, count in enumerate(counts):
        rows = min(max(count, 0), a.shape[1])
        value = a[g, :rows].double() @ w[g].double().T
        if activation == "swiglu":
            f = w.shape[1] // 2
            value = torch.nn.functional.silu(value[:, :f]) * value[:, f:]
        out[g, :rows] = value
    return out


def _check_masked(out, ref, k: int) -> None:
    held = ~ref.isnan().all(dim=-1)
    if held.any():
        result = compare(out[held], ref[held], "bf16", k)
        assert result.ok, result.message
    assert out[~held].isnan().all(), "rows past a group's count were written"


@pytest.mark.parametrize("activation", [None, "swiglu"])
def test_masked_graph_replays_with_new_counts(activation):
    torch = pytest.importorskip("torch")
    import gemmtune.torch as gt

    g, capacity, n, k = 8, 96, 384, 256
    a = torch.randn(g, capacity, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16)
    counts = torch.full((g,), capacity, device="cuda", dtype=torch.int32)
    gt.grouped_mm_masked(a, w.transpose(1, 2), counts, None, activation)  # built and loaded before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = gt.grouped_mm_masked(a, w.transpose(1, 2), counts, None, activation)
    for new in ([1, 0, 96, 3, 0, 64, 95, 32], [0] * 7 + [96], [0] * 8, [200, -5, 50, 1, 1, 1, 96, 0]):
        counts.copy_(torch.tensor(new, device="cuda", dtype=torch.int32))  # on the device: no host sync in replay
        out.fill_(float("nan"))
        graph.replay()
        _check_masked(out, _masked_reference(a, w, new, activation), k)


def test_torch_entries_against_torch():
    torch = pytest.importorskip("torch")
    import gemmtune.torch as gt

    g, f, k = 8, 704, 512
    x = torch.randn(2000, k, device="cuda", dtype=torch.bfloat16) / 8
    w_gate, w_up = (torch.randn(g, f, k, device="cuda", dtype=torch.bfloat16) / 8 for _ in range(2))
    w13 = torch.cat([w_gate, w_up], dim=1)  # stored (G, 2F, K): gate rows, then up rows
    sizes = [700, 120, 64, 900, 33, 80, 2, 101]
    offs = torch.tensor(group_offsets(sizes), device="cuda")
    out = gt.grouped_mm(x, w13.transpose(1, 2), offs, activation="swiglu")
    starts = [0, *offs.tolist()[:-1]]
    silu = torch.nn.functional.silu
    expected = torch.cat([silu(x[s:e].float() @ w_gate[i].float().T) * (x[s:e].float() @ w_up[i].float().T)
                          for i, (s, e) in enumerate(zip(starts, offs.tolist()))])
    torch.testing.assert_close(out[:sum(sizes)].float(), expected, rtol=2e-2, atol=2e-2)
    if hasattr(torch, "_grouped_mm"):  # the same from torch's grouped GEMM of the concatenated weights
        both = torch._grouped_mm(x, w13.transpose(1, 2), offs).float()
        fused = torch.nn.functional.silu(both[:, :f]) * both[:, f:]
        torch.testing.assert_close(out[:sum(sizes)].float(), fused[:sum(sizes)], rtol=3e-2, atol=3e-2)
    x3 = torch.randn(g, 128, k, device="cuda", dtype=torch.bfloat16) / 8
    counts = [128, 0, 1, 77, 128, 5, 64, 100]
    masked = gt.grouped_mm_masked(x3, w_gate.transpose(1, 2), torch.tensor(counts, device="cuda", dtype=torch.int32))
    for i, c in enumerate(counts):
        torch.testing.assert_close(masked[i, :c], x3[i, :c] @ w_gate[i].T, rtol=2e-2, atol=2e-2)


# --- clusters of two sharing A by multicast (config.cluster = 2) -----------------------------------------------
def _cluster_configs(spec: GroupedSpec):
    """Every cluster shape valid for `spec`, as deep as shared memory holds: ping-pong and cooperative consumers,
    one consumer, 64- and 128-row tiles (32- and 64-row A shares), 128- and 256-column tiles, bands, staged D."""
    from gemmtune.grouped.config import GroupedConfig, _deepest, rejections
    from gemmtune.grouped.render import swiglu_rejections

    shapes = [GroupedConfig(128, 128, consumers=2, pingpong=True, staged_store=True), GroupedConfig(128, 256, consumers=2, staged_store=True),
              GroupedConfig(64, 128, consumers=1, band_m=2), GroupedConfig(128, 128, consumers=2),
              GroupedConfig(64, 256, consumers=2, pingpong=True)]
    configs = [_deepest(shape.with_(cluster=2), spec) for shape in shapes]
    return [c for c in configs if not rejections(c, spec) and not swiglu_rejections(c, spec)]


# tile columns: even and odd counts (the last pair's second block idle), one column (always idle), one k-block
CLUSTER_CASES = CASES + [((300, 0, 1, 77), 100, 64, "bias+relu"), ((513, 2, 1000), 640, 64, "none"),
                         ((4000, 3000, 1, 2500), 1408, 320, "gelu")]


@pytest.mark.parametrize("sizes, n, k, epilogue", CLUSTER_CASES, ids=lambda v: str(v)[:20])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_cluster_pairs_match_the_float64_reference(sizes, n, k, epilogue, dtype):
    spec = GroupedSpec(len(sizes), sum(sizes) + 7, n, k, dtype, epilogue)
    for config in _cluster_configs(spec):
        _run(spec, sizes, config)


def test_cluster_pairs_with_every_group_empty_write_nothing():
    spec = GroupedSpec(4, 64, 384, 64)
    for config in _cluster_configs(spec):
        _run(spec, (0, 0, 0, 0), config)


@pytest.mark.parametrize("sizes, f, k", SWIGLU_CASES + [((129, 1, 300), 333, 72)], ids=lambda v: str(v)[:20])
def test_cluster_pairs_swiglu_match_the_float64_reference(sizes, f, k):
    spec = GroupedSpec(len(sizes), sum(sizes) + 7, f, k, "bf16", swiglu=True)
    for config in _cluster_configs(spec):
        _run(spec, sizes, config)


@pytest.mark.parametrize("groups, capacity, counts, n, k, epilogue", MASKED_CASES, ids=lambda v: str(v)[:20])
def test_cluster_pairs_masked_match_the_float64_reference(groups, capacity, counts, n, k, epilogue):
    spec = GroupedSpec.masked(groups, capacity, n, k, "bf16", epilogue)
    for config in _cluster_configs(spec):
        _run(spec, counts, config)


@pytest.mark.parametrize("n", [384, 333])  # 3 tile columns of 128: the second pair's second block has none
def test_cluster_pairs_replay_in_a_graph_with_new_offsets(n):
    torch = pytest.importorskip("torch")
    from gemmtune.grouped.launch import build

    g, k, total = 8, 256, 1200
    spec = GroupedSpec(g, total, n, k)
    a = torch.randn(total, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16)  # stored (G, N, K)
    offs = torch.tensor(group_offsets([100] * 8), device="cuda")
    for config in _cluster_configs(spec):
        kernel = build(spec, config)  # built and loaded before the capture
        out = torch.empty(total, n, device="cuda", dtype=torch.bfloat16)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            kernel(a.data_ptr(), w.data_ptr(), offs.data_ptr(), out.data_ptr(), None, torch.cuda.current_stream().cuda_stream)
        for sizes in ([1, 0, 500, 3, 0, 64, 600, 32], [0] * 7 + [1200], [150] * 7 + [0], [0] * 8):
            offs.copy_(torch.tensor(group_offsets(sizes), device="cuda"))
            out.fill_(float("nan"))
            graph.replay()
            ref = reference(spec, a.double().cpu().numpy(), w.double().cpu().numpy().transpose(0, 2, 1), group_offsets(sizes))
            _check(spec, out.double().cpu().numpy(), ref, sum(sizes))


def test_cluster_pairs_against_torch_grouped_mm():
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("torch._grouped_mm is missing")
    from gemmtune.grouped.launch import build

    sizes, n, k = [2100, 0, 1, 900, 3000, 64, 2, 1933], 1408, 1024
    a = torch.randn(sum(sizes), k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(len(sizes), n, k, device="cuda", dtype=torch.bfloat16)
    offs = torch.tensor(group_offsets(sizes), device="cuda")
    want = torch._grouped_mm(a, w.transpose(1, 2), offs)
    spec = GroupedSpec(len(sizes), sum(sizes), n, k)
    for config in _cluster_configs(spec):
        out = torch.full_like(want, float("nan"))
        build(spec, config)(a.data_ptr(), w.data_ptr(), offs.data_ptr(), out.data_ptr())
        torch.cuda.synchronize()
        torch.testing.assert_close(out, want, rtol=2e-2, atol=2e-2, msg=lambda m, c=config: f"{c}: {m}")
