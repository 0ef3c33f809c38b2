"""Probe the wgmma family on a Hopper GPU without the rest of the pipeline: every ladder step on many
shapes, layouts and dtypes checked against a float64 reference (torch on the GPU), then timed against
cuBLAS (torch.matmul) in the same process with gemmtune's timing protocol.

    python bench/wgmma_probe.py --check --time --out results/
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

import torch

from gemmtune.compiler import compile_kernel
from gemmtune.device import query_device
from gemmtune.runtime import LoadedKernel, synchronize
from gemmtune.spec import GemmSpec
from gemmtune.timing import TimingProtocol, measure

config_module = importlib.import_module("gemmtune.kernels.wgmma.config")
render_module = importlib.import_module("gemmtune.kernels.wgmma.render")
TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}
TOL = {"bf16": 8e-3, "fp16": 2e-3, "tf32": 3e-3}


def operands(spec: GemmSpec, gen: torch.Generator) -> dict:
    def rand(shape, dtype):
        return (torch.rand(shape, generator=gen, device="cuda") * 2 - 1).to(dtype)

    x = {"A": rand(spec.a_shape, TORCH[spec.dtype]), "B": rand(spec.b_shape, TORCH[spec.dtype])}
    out_t = TORCH[render_module.out_dtype(spec)]
    for op in spec.epilogue.operands():
        x[op.name] = rand(op.shape(spec.m, spec.n), out_t) if op.kind != "scalar" else 1.5
    x["D"] = torch.full((spec.m, spec.n), float("nan"), device="cuda", dtype=out_t)
    return x


def reference(spec: GemmSpec, x: dict) -> torch.Tensor:
    a, b = x["A"].double(), x["B"].double()
    acc = (a.t() if spec.a_trans else a) @ (b.t() if spec.b_trans else b)
    ops = {k: (v.double() if torch.is_tensor(v) else v) for k, v in x.items() if k in ("C", "bias", "alpha", "beta")}
    for name in spec.epilogue.ops:
        acc = {"relu": lambda v: v.clamp_min(0), "add": lambda v: v + ops["C"],
               "alpha": lambda v: v * ops["alpha"], "beta": lambda v: v + ops["beta"] * ops["C"],
               "bias_row": lambda v: v + ops["bias"][:, None], "bias_col": lambda v: v + ops["bias"][None, :],
               "gelu": lambda v: 0.5 * v * (1 + torch.tanh(0.7978845608028654 * (v + 0.044715 * v ** 3)))}[name](acc)
    return acc


def bindings(x: dict) -> dict:
    return {k: (v.data_ptr() if torch.is_tensor(v) else v) for k, v in x.items()}


def check(spec: GemmSpec, step: str, cfg, gen) -> dict:
    row = {"spec": spec.short(), "step": step, "config": cfg.describe()}
    problems = config_module.rejections(cfg, spec, "sm_90a")
    if problems:
        return {**row, "status": "rejected", "why": "; ".join(problems.values())[:120]}
    try:
        compiled = compile_kernel(render_module.render(spec, cfg, "sm_90a"), "sm_90a")
        with LoadedKernel(compiled) as kern:
            x = operands(spec, gen)
            kern.launch(bindings(x))
            synchronize()
            ref = reference(spec, x)
            out = x["D"].double()
            nans = int((~torch.isfinite(out)).sum())
            rel = float((out - ref).norm() / ref.norm().clamp_min(1e-30))
            rms = float(ref.pow(2).mean().sqrt().clamp_min(1e-30))
            worst = float((out - ref).abs().max() / rms) if nans == 0 else float("inf")
    except Exception as exc:  # every failure is a row: the probe must report all of them
        return {**row, "status": type(exc).__name__, "why": str(exc)[:300]}
    ok = nans == 0 and rel <= TOL[spec.dtype] and worst <= 10 * TOL[spec.dtype]
    return {**row, "status": "ok" if ok else "WRONG", "rel": rel, "worst": worst, "nans": nans,
            "regs": compiled.resources.registers, "spills": compiled.resources.spills}


def time_kernel(spec: GemmSpec, cfg, protocol, l2) -> float:
    compiled = compile_kernel(render_module.render(spec, cfg, "sm_90a"), "sm_90a")
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = operands(spec, gen)
    with LoadedKernel(compiled) as kern:
        launch = kern.bind(bindings(x))
        return measure(launch, protocol, l2).median_s


def time_torch(spec: GemmSpec, protocol, l2, epilogue: bool) -> float:
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = operands(spec, gen)
    a = x["A"].t() if spec.a_trans else x["A"]
    b = x["B"].t() if spec.b_trans else x["B"]
    if spec.dtype == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
    out = torch.empty((spec.m, spec.n), device="cuda", dtype=TORCH[render_module.out_dtype(spec)])

    def run():
        if epilogue:
            torch.add(torch.relu(torch.mm(a, b)), x["C"], out=out)
        else:
            torch.mm(a, b, out=out)
    result = measure(run, protocol, l2).median_s
    torch.backends.cuda.matmul.allow_tf32 = False
    return result


CHECK_SHAPES = [(64, 64, 64), (200, 136, 72), (8, 8, 8), (1000, 1000, 1000), (3000, 5000, 704), (1, 4096, 4096),
                (4096, 1, 4096)]


def _compile_job(job):
    spec, cfg = job
    try:
        compile_kernel(render_module.render(spec, cfg, "sm_90a"), "sm_90a")
    except Exception:  # reported again, with its reason, when the probe reaches this job
        pass


def precompile(jobs) -> None:
    """NVRTC is the slow part: fill the disk cache from every core first."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(_compile_job, jobs, chunksize=4))


def run_checks(steps, dtypes, layouts, shapes, epilogues) -> list[dict]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    jobs = [(GemmSpec(m, n, k, layout, dtype, epi), cfg) for dtype in dtypes
            for layout in (layouts if dtype != "tf32" else ["nt"]) for (m, n, k) in shapes for epi in epilogues
            for _, cfg in steps]
    precompile([j for j in jobs if not config_module.rejections(j[1], j[0], "sm_90a")])
    for dtype in dtypes:
        for layout in (layouts if dtype != "tf32" else ["nt"]):
            for (m, n, k) in shapes:
                for epi in epilogues:
                    spec = GemmSpec(m, n, k, layout, dtype, epi)
                    for step, cfg in steps:
                        row = check(spec, step, cfg, gen)
                        rows.append(row)
                        if row["status"] not in ("ok", "rejected"):
                            print("FAIL", json.dumps(row), flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--time", action="store_true")
    parser.add_argument("--sizes", default="4096,8192")
    parser.add_argument("--out", default=".")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = query_device()
    print(dev.summary(), flush=True)
    steps = config_module.ladder()
    if args.check:
        started = time.time()
        rows = run_checks(steps, ["bf16", "fp16", "tf32"], ["nt", "nn", "tn", "tt"], CHECK_SHAPES, [None])
        rows += run_checks(steps, ["fp16"], ["nt", "nn"], [(200, 136, 72), (1000, 1000, 1000)],
                           ["relu+add", "alpha+beta", "bias_row+gelu", "bias_col+relu"])
        (out / "checks.json").write_text(json.dumps(rows, indent=1))
        counts = {}
        for r in rows:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        print(f"checks: {counts} in {time.time() - started:.0f} s", flush=True)
    if args.time:
        protocol = TimingProtocol(min_time_s=0.2)
        table = []
        for size in [int(s) for s in args.sizes.split(",")]:
            for dtype, layout, epi in [("bf16", "nt", None), ("fp16", "nt", None), ("bf16", "nn", None),
                                       ("tf32", "nt", None), ("fp16", "nt", "relu+add")]:
                if dtype == "tf32" and size > 4096 or epi and size > 4096:
                    continue
                spec = GemmSpec(size, size, size, layout, dtype, epi)
                base = time_torch(spec, protocol, dev.l2_bytes, epi is not None)
                table.append({"spec": spec.short(), "kernel": "torch", "us": base * 1e6, "ratio": 1.0})
                print(f"{spec.short():<34} {'torch':<18} {base * 1e6:9.1f} us", flush=True)
                for step, cfg in steps:
                    if config_module.rejections(cfg, spec, "sm_90a"):
                        continue
                    try:
                        t = time_kernel(spec, cfg, protocol, dev.l2_bytes)
                    except Exception as exc:
                        print(f"{spec.short():<34} {step:<18} {type(exc).__name__}: {str(exc)[:100]}", flush=True)
                        continue
                    table.append({"spec": spec.short(), "kernel": step, "us": t * 1e6, "ratio": base / t,
                                  "tflops": spec.flops / t / 1e12})
                    print(f"{spec.short():<34} {step:<18} {t * 1e6:9.1f} us  {base / t:5.3f}x  "
                          f"{spec.flops / t / 1e12:6.1f} TF", flush=True)
        (out / "timing.json").write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
