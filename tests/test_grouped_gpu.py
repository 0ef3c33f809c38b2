"""Grouped GEMM (issue 69) on sm_90a: the float64 reference over a NaN-poisoned D (every row of every
group written, none past the last), graph replay with new offs, torch._grouped_mm."""
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

    rng, offs = np.random.default_rng(len(sizes)), group_offsets(sizes)
    x = {name: round_to(rng.uniform(-1, 1, shape), spec.dtype) for name, shape in
         (("A", (spec.total_m, spec.k)), ("W", (spec.groups, spec.n, spec.k)), ("bias", (spec.groups, spec.n)))}
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
    _check(spec, from_storage(out, spec.dtype), ref, int(offs[-1]))


def _check(spec: GroupedSpec, out: np.ndarray, ref: np.ndarray, end: int) -> None:
    if end:
        result = compare(out[:end], ref[:end], spec.dtype, spec.k)
        assert result.ok, result.message
    assert np.isnan(out[end:]).all(), "rows past the last group were written"


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
    from gemmtune.grouped.torch_ops import grouped_mm

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
    from gemmtune.grouped.torch_ops import bmm, grouped_mm

    a = torch.randn(2000, 512, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(8, 768, 512, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    offs = torch.tensor(group_offsets([700, 120, 64, 900, 33, 80, 2, 101]), device="cuda")
    if hasattr(torch, "_grouped_mm"):
        torch.testing.assert_close(grouped_mm(a, w, offs), torch._grouped_mm(a, w, offs), rtol=2e-2, atol=2e-2)
    x = torch.randn(6, 100, 512, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(bmm(x, w[:6]), torch.bmm(x, w[:6]), rtol=2e-2, atol=2e-2)
