"""No `.aligned` cluster barrier where a warp may not reach it whole (issue 66), without a GPU.

`barrier.cluster.arrive/wait.aligned` promise that every thread of a warp executes that instruction
together. The rule checked here: such a barrier may stand only where no thread of the kernel can have
branched yet, i.e. nothing before it in the kernel's body (helpers inlined) is a branch, a loop, a
conditional expression, a lambda or an asm `bra`. Everywhere else the generators must use the
non-aligned forms (kernels/parts/cluster_barrier.py). Named barriers (`bar.sync`) are left to their
why-comments: they are reached like __syncthreads (wgmma/ptx.py's named_barrier, gemv/columns_ring.py).

Checked on every gemv variant (gemv_variants.py, issue 66's K split 1x1023x4099 fp32 nn relu among them),
the K split in 2-byte types, and the wgmma cluster kernels (the ladder's and every shipped cluster config).
"""
from __future__ import annotations

import json
import re
from importlib import resources

import pytest

from gemmtune.chooser.candidates import split_config
from gemmtune.kernels import get_family
from gemmtune.kernels.parts.cluster_barrier import ALIGNED_CLUSTER_BARRIER
from gemmtune.spec import GemmSpec
from gemv_variants import VARIANT_SHAPES, chosen_config, spec_of

# What lets threads of a warp part ways (or runs code elsewhere, a lambda's body); `bra` is PTX's branch. A
# `return` parts them only under one of these (a helper's own final return does not).
CONTROL_FLOW = re.compile(r"\b(?:if|for|while|do|switch|goto|bra)\b|\?|&&|\|\||\[[&=]\]")
HELPER = re.compile(r"__device__[^;{}]*?\b(\w+)\s*\([^;{}]*\)\s*\{")
CALL = re.compile(r"\b(\w+)\s*(?:<[^;<>()]*>)?\s*\(")
INLINE_DEPTH = 6  # helpers calling helpers, at most this deep


def _without_comments(code: str) -> str:
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", code, flags=re.S))


def _block(code: str, opening: int) -> str:
    """The text inside the braces whose `{` is at `opening`."""
    depth = 0
    for at in range(opening, len(code)):
        depth += {"{": 1, "}": -1}.get(code[at], 0)
        if depth == 0:
            return code[opening + 1:at]
    raise ValueError("unbalanced braces")


def _helpers(code: str) -> dict[str, str]:
    """Every __device__ function's body, by name."""
    return {m.group(1): _block(code, m.end() - 1) for m in HELPER.finditer(code)}


def _kernel_body(code: str) -> str:
    start = code.index("__global__")
    return _block(code, code.index("{", start))


def _inlined(text: str, helpers: dict[str, str], depth: int = 0) -> str:
    """`text` with each call of a helper preceded by that helper's (inlined) body."""
    if depth == INLINE_DEPTH:
        return text
    return CALL.sub(lambda m: (f" {_inlined(helpers[m.group(1)], helpers, depth + 1)} {m.group(0)}"
                               if m.group(1) in helpers else m.group(0)), text)


def kernel_text(code: str) -> str:
    """The kernel's body as the rule reads it: comments dropped, helpers inlined where they are called."""
    code = _without_comments(code)
    return _inlined(_kernel_body(code), _helpers(code))


def misplaced_aligned_barriers(code: str) -> list[str]:
    """Each `.aligned` cluster barrier of the kernel that follows a possible branch, with that branch."""
    text = kernel_text(code)
    found = []
    for barrier in ALIGNED_CLUSTER_BARRIER.finditer(text):
        branch = CONTROL_FLOW.search(text, 0, barrier.start())
        if branch:
            found.append(f"{barrier.group(0)} after '{branch.group(0)}' in: "
                         + " ".join(text[max(0, branch.start() - 60):branch.end() + 40].split()))
    return found


def _gemv_sources():
    family = get_family("gemv")
    for _, dtype, layout, m, n, k in VARIANT_SHAPES:
        spec = spec_of(dtype, layout, m, n, k, "relu")
        yield spec.short(), family.render(spec, chosen_config(spec, "sm_90a"), "sm_90a").code
    for spec in (GemmSpec(1, 4096, 4096, "nn", "bf16", "bias_col+gelu"), GemmSpec(1, 301, 1077, "nn", "fp32")):
        yield spec.short(), family.render(spec, chosen_config(spec, "sm_90a"), "sm_90a").code
    # The K split over a cluster (no pick since 2026-11-29, still built by name): issue 66's export, split.
    for spec in (GemmSpec(1, 1023, 4099, "nn", "fp32", "relu"), GemmSpec(1, 1024, 4096, "nn", "bf16")):
        yield spec.short() + " split", family.render(spec, split_config(spec, 132), "sm_90a").code


def _wgmma_cluster_sources():
    """The ladder's cluster step and every shipped cluster config, each on its own shape and epilogue."""
    family = get_family("wgmma")
    square = GemmSpec(4096, 4096, 4096, "nt", "bf16")
    yield "cluster_multicast", family.render(square, dict(family.ladder("sm_90a"))["cluster_multicast"], "sm_90a").code
    table = json.loads(resources.files("gemmtune").joinpath("data/known_configs.json").read_text())
    for row in table["entries"]:
        if row.get("family") == "wgmma" and row["config"].get("cluster_m", 1) > 1:
            spec = GemmSpec(row["m"], row["n"], row["k"], row["layout"], row["dtype"], row.get("epilogue", "none"))
            config = family.config_from_json(row["config"])
            yield f"{row['gpu']} {spec.short()}", family.render(spec, config, "sm_90a").code


SOURCES = dict([*_gemv_sources(), *_wgmma_cluster_sources()])


@pytest.mark.parametrize("name", SOURCES)
def test_aligned_cluster_barriers_only_before_any_branch(name):
    assert not misplaced_aligned_barriers(SOURCES[name])


def test_the_cluster_kernels_were_read():
    """The rule saw the cluster barriers: in the K split (issue 66's export) and in every wgmma cluster kernel."""
    split = next(code for name, code in _gemv_sources() if name.startswith("1x1023x4099") and name.endswith("split"))
    assert kernel_text(split).count("barrier.cluster.") == 4  # arrive, wait, and cluster_sync's pair
    for name, code in _wgmma_cluster_sources():
        assert kernel_text(code).count("barrier.cluster.arrive") == 2, name  # at setup and at the end


def test_the_rule_allows_a_barrier_before_any_branch_only():
    helpers = """__device__ __forceinline__ void arrive() { asm volatile("barrier.cluster.arrive.relaxed.aligned;"); }
__device__ __forceinline__ void spin(unsigned* p) { asm volatile("W:\\n ld.u32 x, [%0];\\n @!d bra W;" :: "l"(p)); }
"""
    first = helpers + 'extern "C" __global__ void k(float* p) { const int i = threadIdx.x; arrive(); p[i] = 0; }'
    assert misplaced_aligned_barriers(first) == []
    after_if = helpers + 'extern "C" __global__ void k(float* p) { if (threadIdx.x < 5) p[0] = 1; arrive(); }'
    after_spin = helpers + 'extern "C" __global__ void k(unsigned* p) { spin(p); arrive(); }'
    after_select = helpers + 'extern "C" __global__ void k(float* p) { p[0] = threadIdx.x ? 1 : 2; arrive(); }'
    inline_wait = ('extern "C" __global__ void k(float* p) { for (int i = 0; i < 3; ++i) p[i] = 0;\n'
                   '    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }')
    for code in (after_if, after_spin, after_select, inline_wait):
        assert len(misplaced_aligned_barriers(code)) == 1, code
    # Comments neither hide nor invent a branch.
    commented = helpers + 'extern "C" __global__ void k(float* p) { /* if */ arrive(); // for\n }'
    assert misplaced_aligned_barriers(commented) == []


# An aligned block barrier: __syncthreads() or PTX bar.sync / barrier.sync.aligned (named barriers too).
ALIGNED_BLOCK_BARRIER = re.compile(r"__syncthreads\s*\(|\bbar\.sync\b|\bbarrier\.sync\.aligned\b")
CLUSTER_WAIT = re.compile(r"barrier\.cluster\.wait\b")


def block_barriers_after_cluster_wait(code: str) -> list[str]:
    """Each aligned block barrier that follows a cluster wait in the kernel: a thread leaves the (non-aligned)
    wait on its own, so the warp may reach it split (gemv/render.py's CLUSTER_STARTED says what synccheck saw)."""
    text = kernel_text(code)
    wait = CLUSTER_WAIT.search(text)
    if wait is None:
        return []
    return [" ".join(text[max(0, m.start() - 60):m.end() + 20].split())
            for m in ALIGNED_BLOCK_BARRIER.finditer(text, wait.end())]


@pytest.mark.parametrize("name", [n for n in SOURCES if n.startswith("1x")])
def test_no_aligned_block_barrier_after_a_gemv_cluster_wait(name):
    assert not block_barriers_after_cluster_wait(SOURCES[name])


def test_the_block_barrier_rule_finds_one():
    wait = '__device__ void w() { asm volatile("barrier.cluster.wait.acquire;"); }\n'
    assert block_barriers_after_cluster_wait(wait + 'extern "C" __global__ void k() { w(); __syncthreads(); }')
    assert not block_barriers_after_cluster_wait(wait + 'extern "C" __global__ void k() { __syncthreads(); w(); }')
