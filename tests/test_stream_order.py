"""Kernels that keep state between launches (module memory, staging workspaces) are launched one
after another across streams (stream_order.py), against the fake driver: no GPU needed."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fake_driver import FakeDriver, installed
from gemmtune.compiler import CompiledKernel, ResourceUsage
from gemmtune.kernel_source import KernelSource
from gemmtune.kernels import get_family
from gemmtune.runtime import LoadedKernel
from gemmtune.spec import GemmSpec
from test_fake_device import SPEC, python_gemm

SPLIT_STATE = "__device__ unsigned int split_turn[4];  // whose turn it is, per tile\n"


def compiled(code: str = "// python", co_resident: bool = False) -> CompiledKernel:
    source = KernelSource(code, "gemm", (1, 1, 1), (128, 1, 1), ("A", "B", "alpha", "D"), SPEC, "fake", "1",
                          co_resident=co_resident)
    return CompiledKernel(source, "sm_90", b"cubin", "", ResourceUsage(32, 0, 0, 0, 0), "", 0.0, "13.0")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeDriver:
    from gemmtune import stream_order

    monkeypatch.setattr(stream_order, "_shared", {})  # each test starts with no shared order
    with installed(monkeypatch, FakeDriver({"gemm": python_gemm()})) as driver:
        yield driver


def _launch(kernel: LoadedKernel, buffers: dict, stream: int) -> None:
    kernel.launch({"A": buffers["A"], "B": buffers["B"], "alpha": 1.0, "D": buffers["D"]}, stream)


@pytest.fixture
def buffers(fake: FakeDriver) -> dict:
    shapes = {"A": (SPEC.m, SPEC.k), "B": (SPEC.k, SPEC.n), "D": (SPEC.m, SPEC.n)}
    return {name: fake.cuMemAlloc(int(np.prod(shape)) * 4)[1] for name, shape in shapes.items()}


def test_a_stateful_kernel_waits_for_its_last_launch_on_another_stream(fake, buffers):
    kernel = LoadedKernel(compiled(SPLIT_STATE))
    for stream in (7, 7, 9, 9, 7):
        _launch(kernel, buffers, stream)
    # An event after every launch, on its stream; the first change (7 -> 9) makes 9 wait on the one
    # after the last launch on 7, the second (9 -> 7) the other way round.
    orders = [c for c in fake.calls if c in ("launch", "record") or c.endswith("waits")]
    assert orders == ["launch", "record", "launch", "record", "9 waits", "launch", "record", "launch", "record",
                      "7 waits", "launch", "record"]
    assert fake.recorded_on == [7, 7, 9, 9, 7]
    assert fake.calls.count("launch") == 5 and fake.events_alive == 1
    kernel.unload()
    assert fake.events_alive == 0


def test_a_stateless_kernel_runs_on_any_stream_unordered(fake, buffers):
    kernel = LoadedKernel(compiled())
    for stream in (7, 9, 7):
        _launch(kernel, buffers, stream)
    assert fake.calls.count("launch") == 3 and "record" not in fake.calls
    assert not any(c.endswith("waits") for c in fake.calls) and fake.events_alive == 0
    kernel.unload()


def test_kernels_whose_blocks_wait_on_each_other_share_one_order_per_gpu(fake, buffers):
    """Two different co-resident kernels (split tails) on two streams run one after another: started
    together, each could hold part of the GPU with its blocks waiting for blocks that cannot start."""
    first = LoadedKernel(compiled(SPLIT_STATE, co_resident=True))
    second = LoadedKernel(compiled(SPLIT_STATE + "// another kernel\n", co_resident=True))
    _launch(first, buffers, 7)
    _launch(second, buffers, 9)
    _launch(second, buffers, 9)
    _launch(first, buffers, 7)
    assert fake.recorded_on == [7, 9, 9, 7] and [c for c in fake.calls if c.endswith("waits")] == ["9 waits", "7 waits"]
    first.unload()
    second.unload()
    assert fake.events_alive == 1  # the GPU's shared order keeps its event for the next kernels


def test_a_launch_under_graph_capture_is_left_to_the_graph(fake, buffers):
    """Capturing stream 9: its launch neither records nor waits (an outside event cannot join a
    capture), and the next launch outside it orders after the last launch outside it (stream 7)."""
    kernel = LoadedKernel(compiled(SPLIT_STATE))
    waits = lambda: [c for c in fake.calls if c.endswith("waits")]  # noqa: E731
    _launch(kernel, buffers, 7)
    fake.capturing = frozenset({9})
    _launch(kernel, buffers, 9)
    assert fake.recorded_on == [7] and not waits()
    fake.capturing = frozenset()
    _launch(kernel, buffers, 7)  # the same stream as the last launch outside the capture: no wait
    assert fake.recorded_on == [7, 7] and not waits()
    fake.capturing = frozenset({7})  # 7 captures now; the event was recorded before: 11 may wait on it
    _launch(kernel, buffers, 11)
    assert fake.recorded_on == [7, 7, 11] and waits() == ["11 waits"]
    fake.capturing = frozenset()
    _launch(kernel, buffers, 7)  # after the launch on 11
    assert fake.recorded_on == [7, 7, 11, 7] and waits() == ["11 waits", "7 waits"]
    kernel.unload()


def test_a_failed_launch_records_nothing_and_frees_the_order(fake, buffers):
    from gemmtune.errors import LaunchError

    kernel = LoadedKernel(compiled(SPLIT_STATE))
    _launch(kernel, buffers, 7)
    fake.kernels["gemm"] = None  # the next launch raises inside the order
    with pytest.raises((LaunchError, TypeError)):
        _launch(kernel, buffers, 9)
    fake.kernels["gemm"] = python_gemm()
    _launch(kernel, buffers, 9)  # the lock was released; 9 still waits for the launch on 7
    assert fake.recorded_on == [7, 9] and [c for c in fake.calls if c.endswith("waits")] == ["9 waits", "9 waits"]
    kernel.unload()


def test_module_memory_is_read_from_the_generated_code():
    """Split tails and split-K keep partial tiles and flags in module memory; plain tiles and GEMVs do not."""
    from gemmtune.kernels.simt.config import SimtConfig
    from gemmtune.kernels.wgmma.config import WgmmaConfig

    wgmma, simt, gemv = get_family("wgmma"), get_family("simt"), get_family("gemv")
    long_k = GemmSpec(512, 512, 65536, "nt", "bf16")
    assert wgmma.render(long_k, WgmmaConfig(bm=128, bn=256, split_tail=True), "sm_90a").module_state
    assert not wgmma.render(long_k, WgmmaConfig(bm=128, bn=256), "sm_90a").module_state
    square = GemmSpec(1024, 1024, 1024)
    assert not simt.render(square, SimtConfig(), "sm_90").module_state
    for reduce in ("serial", "workspace"):
        assert simt.render(square, SimtConfig(split_k=2, split_reduce=reduce), "sm_90").module_state
    decode = GemmSpec(1, 4096, 4096, "nt", "bf16")
    assert not gemv.render(decode, gemv.default_config(decode, "sm_90"), "sm_90").module_state
    # A helper function declared at module scope is not memory.
    helper = dataclasses.replace(compiled().source, code="__device__ float twice(float x) { return 2 * x; }\n")
    assert not helper.module_state


def test_exported_launchers_order_their_launches_and_compile(tmp_path):
    """The exported header's twin of StreamOrder: a split tail's launcher (co-resident: the program's
    shared order) and a staged one (its own order) lock, wait when the stream changes and record after
    the launch; a plain kernel's launcher has none of it. All three headers in one program compile
    with nvcc (where it is installed)."""
    import shutil
    import subprocess

    from gemmtune.export.header import header_text
    from gemmtune.kernels.wgmma.config import WgmmaConfig

    wgmma = get_family("wgmma")
    staged_spec = GemmSpec(1000, 1001, 1003, "nn", "bf16")
    sources = {"split_gemm": wgmma.render(GemmSpec(512, 512, 65536, "nt", "bf16"), WgmmaConfig(bm=128, bn=256, split_tail=True), "sm_90a"),
               "plain_gemm": wgmma.render(GemmSpec(512, 512, 4096, "nt", "bf16"), WgmmaConfig(bm=128, bn=256), "sm_90a"),
               "staged_gemm": wgmma.render(staged_spec, wgmma.default_config(staged_spec, "sm_90a"), "sm_90a")}
    headers = {name: header_text(name, source, "sm_90a") for name, source in sources.items()}
    assert "gemmtune_co_resident_order(device)" in headers["split_gemm"]
    assert "staged_gemm_order(device)" in headers["staged_gemm"] and sources["staged_gemm"].staged
    assert "gemmtune_order_state" not in headers["plain_gemm"] and "<mutex>" not in headers["plain_gemm"]
    for name in ("split_gemm", "staged_gemm"):
        text = headers[name]
        lock, wait = text.index("std::lock_guard<std::mutex> hold(order.lock);"), text.index("cudaStreamWaitEvent(stream, order.done, 0)")
        launch, record = text.index("cudaError_t launched = "), text.index("cudaEventRecord(order.done, stream)")
        assert lock < wait < launch < record
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc: the headers were checked as text only")
    for name, text in headers.items():
        (tmp_path / f"{name}.cuh").write_text(text)
    calls = " + ".join(f"(int){name}(a, b, d, s)" for name in headers)
    (tmp_path / "main.cu").write_text("".join(f'#include "{name}.cuh"\n' for name in headers)
                                      + f"int main() {{ cudaStream_t s = 0; __nv_bfloat16 *a = nullptr, *b = nullptr, *d = nullptr; return {calls}; }}\n")
    built = subprocess.run([nvcc, "-std=c++17", "-gencode", "arch=compute_90a,code=sm_90a", "-c", "main.cu", "-o", "main.o"],
                           cwd=tmp_path, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
