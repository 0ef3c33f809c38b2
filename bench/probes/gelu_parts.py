"""Which part of a fused GELU makes the kernel slower (issue 67): the FMA-pipe instructions or the MUFU?

The 2026-11-29 clock64 study (git show 1d8574d:docs/journal.md) found a ping-pong consumer's GELU epilogue
does run under the other consumer's main loop, but that loop runs 10-12% longer meanwhile: the epilogue's work
competes with the tensor cores. This probe tells which work: it rewrites one kernel's `gelu_tanh` body
(timing-only variants; they do not compute GELU) and times them in turn (L2 flushed, balanced order, medians)
beside cuBLAS's GEMM alone, on the chooser's pick and on the ping-pong 128x128 tile, bf16 nt, shapes outside
the model suite:

    gelu       as shipped: 3 FMUL, 2 FFMA, 1 MUFU.TANH an element
    packed     GELU in packed bf16x2 arithmetic: half the FMA-pipe instructions, the same MUFU (a real
               GELU: its error is checked and printed; offline it is up to 8 bf16 ulp where |GELU| < 0.06)
    identity   no GELU work (the plain kernel's epilogue)
    fma_only   the FMA-pipe instructions without the MUFU;   fma_x2: twice them
    mufu_only  one MUFU without the FMA-pipe instructions;   mufu_x2: two

    PYTHONPATH=$PWD/src:$PWD/bench python bench/probes/gelu_parts.py OUT.json [rounds]   # ~2 min with compiles

If fma_only costs what gelu costs over identity, the packed form (or fewer instructions) is the lever; if
mufu_only does, the MUFU has to move off the critical path (part of the tanh on the FMA pipe).
"""
from __future__ import annotations

import dataclasses
import json
import statistics
import sys

HEAD = "__device__ __forceinline__ float gelu_tanh(float x) {"
TANH = 'asm("tanh.approx.f32 %0, %1;" : "=f"({out}) : "f"({arg}));'
BODIES = {
    "gelu": None,
    "packed": "packed",
    "identity": "    return x;\n}",
    "fma_only": ("    const float half_x = 0.5f * x;\n    const float z = x * fmaf(0.0356f, x * x, 0.7978f);\n"
                 "    return fmaf(half_x, z, half_x);\n}"),
    "fma_x2": ("    const float half_x = 0.5f * x;\n    float z = x * fmaf(0.0356f, x * x, 0.7978f);\n"
               "    z = z * fmaf(0.0356f, z * z, 0.7978f);\n    const float w = fmaf(z, x, half_x);\n"
               "    return fmaf(half_x, w, half_x);\n}"),
    "mufu_only": "    float t;\n    " + TANH.format(out="t", arg="x") + "\n    return t;\n}",
    "mufu_x2": ("    float t, u;\n    " + TANH.format(out="t", arg="x") + "\n    const float s = t + 1.0f;\n    "
                + TANH.format(out="u", arg="s") + "\n    return u;\n}"),
}

# GELU of a pair of outputs in packed bf16x2 arithmetic: x², the polynomial, z, 0.5·x and the last FMA are one
# instruction a pair each (6 with the pack), tanh.approx.bf16x2 two MUFU. Constants rounded to bf16:
# 0.0356445 (√(2/π)·0.044715), 0.796875 (√(2/π)), 0.5.
GELU_PAIR = r"""
__device__ __forceinline__ u32 gelu_pair(float lo, float hi) {
    u32 x = pack_pair(lo, hi, (out_t*)0), x2, p, z, t, hx, out;
    const u32 c2 = 0x3D123D12u, c1 = 0x3F4C3F4Cu, half = 0x3F003F00u;
    asm("mul.rn.bf16x2 %0, %1, %1;" : "=r"(x2) : "r"(x));
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(p) : "r"(x2), "r"(c2), "r"(c1));
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(z) : "r"(x), "r"(p));
    asm("tanh.approx.bf16x2 %0, %1;" : "=r"(t) : "r"(z));
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(hx) : "r"(x), "r"(half));
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out) : "r"(hx), "r"(t), "r"(hx));
    return out;
}
"""
# The write-back's pair sites (gelu epilogue, no bias) and what they become with gelu_pair.
PAIR_SITES = {
    "v0 = apply_epilogue(v0, row, col); v1 = apply_epilogue(v1, row, col + 1); "
    "words[mb][jj / 2][b] = pack_pair(v0, v1, (out_t*)0);": "words[mb][jj / 2][b] = gelu_pair(v0, v1);",
    "v0 = apply_epilogue(v0, row, col); v1 = apply_epilogue(v1, row, col + 1); "
    "store_pair_smem(tile + pair_offset(r, jj, lane), v0, v1);":
        "*reinterpret_cast<u32*>(tile + pair_offset(r, jj, lane)) = gelu_pair(v0, v1);",
    "write_pair(D + at, apply_epilogue(v0, row, col), apply_epilogue(v1, row, col + 1));":
        "*reinterpret_cast<u32*>(D + at) = gelu_pair(v0, v1);",
}
SHAPES = ((6000, 3072, 768), (4000, 4096, 1024))


def packed(code: str) -> str:
    if not any(site in code for site in PAIR_SITES):
        raise ValueError("no write-back pair site to rewrite")
    for site, replacement in PAIR_SITES.items():
        code = code.replace(site, replacement)
    at = code.index("__device__ __forceinline__ float apply_epilogue(")
    return code[:at] + GELU_PAIR + code[at:]


def patched(code: str, body: str | None) -> str:
    """The kernel's source with gelu_tanh's body replaced (or the pair sites rewritten: 'packed')."""
    if body == "packed":
        return packed(code)
    if body is None:
        return code
    start = code.index(HEAD) + len(HEAD)
    end = code.index("\n}", start) + 2
    return code[:start] + "\n" + body + code[end:]


def variants(spec, config):
    from gemmtune.compiler import compile_kernel
    from gemmtune.kernels import family_of_config

    base = family_of_config(config).render(spec, config, "sm_90a")
    return {name: compile_kernel(dataclasses.replace(base, code=patched(base.code, body)), "sm_90a")
            for name, body in BODIES.items()}


def time_case(spec, config, rounds: int) -> dict:
    import torch

    from gemmtune.device import query_device
    from gemmtune.evaluate import _with_loaded, prepare
    from gemmtune.timing import measure_alternating

    kernels = variants(spec, config)
    names = list(kernels)
    prepared = prepare(spec)
    checks = {}

    def body(runs, check, poison, hold):
        launches = dict(zip(names, runs))
        for name in ("gelu", "packed"):  # the two that compute GELU: against float64
            poison()
            launches[name]()
            torch.cuda.synchronize()
            checks[name] = check.judge(check.read()).message
        a = torch.randn(spec.m, spec.k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(spec.n, spec.k, device="cuda", dtype=torch.bfloat16)
        launches["cuBLAS"] = lambda: torch.mm(a, b.t())
        return measure_alternating(launches, rounds, query_device(0).l2_bytes)

    times = _with_loaded([kernels[n] for n in names], spec, prepared.inputs, prepared.expected, 0, body)
    return {"us": {name: statistics.median(t) * 1e6 for name, t in times.items()}, "checks": checks}


def main(out: str, rounds: int = 10) -> None:
    from gemmtune.build import choose_config
    from gemmtune.epilogue import Epilogue
    from gemmtune.kernels.wgmma.config import ladder
    from gemmtune.spec import GemmSpec

    rows = []
    for m, n, k in SHAPES:
        spec = GemmSpec(m, n, k, layout="nt", dtype="bf16", epilogue=Epilogue.parse("gelu"))
        for name, config in (("pick", choose_config(spec, "sm_90a").config), ("pingpong", dict(ladder())["pingpong"])):
            found = time_case(spec, config, rounds)
            rows.append({"shape": f"{m}x{n}x{k}", "config": f"{name}: {config.describe()}", **found})
            print(json.dumps(rows[-1]), flush=True)
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)
    cols = [*BODIES, "cuBLAS"]
    print("| shape | config | " + " | ".join(cols) + " |")
    for r in rows:
        print(f"| {r['shape']} | {r['config']} | " + " | ".join(f"{r['us'][c]:.1f}" for c in cols) + " |")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10)
