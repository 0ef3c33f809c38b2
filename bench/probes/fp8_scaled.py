"""fp8 on the grouped wgmma kernel against torch's fp8 GEMMs (issue 70), first numbers: gemmtune.torch.scaled_mm
against torch._scaled_mm (per tensor and rowwise, e4m3, bf16 out; block scales against torch's per-tensor call, as
this torch has no blockwise scaled mm on sm_90) and scaled_grouped_mm against
torch._scaled_grouped_mm (rowwise), each checked against torch's result, then timed in CUDA graphs, rounds in a
balanced order, medians (no L2 flush). Every config of the grouped kernel's candidates is timed, the default marked.

    PYTHONPATH=$PWD/src:$PWD/bench python bench/probes/fp8_scaled.py --out /tmp/fp8.md
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# (M, N, K): squares and prefill shapes of public configs (Llama-3-8B 4096 tokens: MLP up, down, fused QKV;
# Qwen2.5-7B: MLP up, down; Mistral-7B-like o_proj at 8192 tokens).
PLAIN = ((4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (4096, 4096, 14336), (4096, 6144, 4096),
         (4096, 18944, 3584), (4096, 3584, 18944), (8192, 4096, 4096))
GROUPED = ((8, 1024, 14336, 4096), (64, 512, 2816, 2048), (128, 64, 1536, 2048))  # (G, rows each, N, K), balanced


def _time(torch, calls: dict, rounds: int) -> dict[str, float]:
    from bench_models import graph_times

    return {name: statistics.median(t) for name, t in graph_times(torch, calls, rounds).items()}


def _close(torch, got, want) -> float:
    return float((got.float() - want.float()).abs().max() / want.float().abs().max())


def plain(torch, m: int, n: int, k: int, scaling: str, rounds: int) -> list[str]:
    from gemmtune.grouped.config import candidates, default_config
    from gemmtune.grouped.launch import build
    from gemmtune.grouped.spec import GroupedSpec

    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
    one = torch.ones(1, 1, device="cuda")
    if scaling == "block":  # scales of one: the same product as torch's per-tensor call with ones (the time is the point)
        sa, sb = torch.ones(m, -(-k // 128), device="cuda"), torch.ones(-(-n // 128), -(-k // 128), device="cuda")
    else:
        sa, sb = ((one, one) if scaling == "tensor" else
                  (torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5))
    peer_a, peer_b = (one, one) if scaling == "block" else (sa, sb)
    want = torch._scaled_mm(a, w.t(), peer_a, peer_b, out_dtype=torch.bfloat16)
    spec = GroupedSpec(1, m, n, k, "e4m3", scaling=scaling)
    offs = torch.tensor([m], device="cuda", dtype=torch.int32)
    calls = {"torch": lambda: torch._scaled_mm(a, w.t(), peer_a, peer_b, out_dtype=torch.bfloat16)}
    errors = {}
    if scaling == "block":  # torch's own blockwise scaled mm, where this torch and GPU have one
        for layout, (ta, tb) in {"torch block": (sa.t().contiguous().t(), sb.t()), "torch block (row-major a)": (sa, sb.t())}.items():
            try:
                got = torch._scaled_mm(a, w.t(), ta, tb, out_dtype=torch.bfloat16)
                torch.cuda.synchronize()
                errors[layout] = _close(torch, got, want)
                calls[layout] = lambda ta=ta, tb=tb: torch._scaled_mm(a, w.t(), ta, tb, out_dtype=torch.bfloat16)
                break
            except Exception as err:  # noqa: BLE001 - the probe reports what torch refuses
                print(f"probe: {layout} at {m}x{n}x{k}: {type(err).__name__}: {str(err).splitlines()[0][:160]}", flush=True)
    for config in (candidates(spec) if scaling != "block" else [default_config(spec)]):
        out, kernel = torch.empty(m, n, device="cuda", dtype=torch.bfloat16), build(spec, config)

        def call(kernel=kernel, out=out):
            kernel(a.data_ptr(), w.data_ptr(), offs.data_ptr(), out.data_ptr(), None, torch.cuda.current_stream().cuda_stream,
                   scale_a=sa.data_ptr(), scale_b=sb.data_ptr())
            return out
        label = (f"{config.bm}x{config.bn} s{config.stages}{' pp' if config.pingpong else ''}"
                 f"{' st' if config.staged_store else ''}{' (default)' if config == default_config(spec) else ''}")
        errors[label] = _close(torch, call(), want)
        if errors[label] < 2e-2:
            calls[label] = call
    us = _time(torch, calls, rounds)
    flops = 2 * m * n * k
    return [f"| {m}x{n}x{k} | {scaling} | {name} | {t:.1f} | {flops / t / 1e6:.0f} | {us['torch'] / t:.2f} | "
            f"{errors.get(name, 0):.1e} |" for name, t in sorted(us.items(), key=lambda kv: kv[1])]


def grouped(torch, groups: int, rows: int, n: int, k: int, rounds: int) -> list[str]:
    import gemmtune.torch as gt

    total = groups * rows
    a = torch.randn(total, k, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(groups, n, k, device="cuda").to(torch.float8_e4m3fn)
    sa, sb = torch.rand(total, device="cuda") + 0.5, torch.rand(groups, n, device="cuda") + 0.5
    offs = (torch.arange(1, groups + 1, device="cuda") * rows).to(torch.int32)
    calls = {"ours (default)": lambda: gt.scaled_grouped_mm(a, w.transpose(1, 2), sa, sb, offs)}
    error = None
    if hasattr(torch, "_scaled_grouped_mm"):
        calls["torch"] = lambda: torch._scaled_grouped_mm(a, w.transpose(1, 2), sa, sb, offs=offs, out_dtype=torch.bfloat16)
        error = _close(torch, calls["ours (default)"](), calls["torch"]())
    us = _time(torch, calls, rounds)
    base = us.get("torch")
    flops = 2 * total * n * k
    return [f"| G={groups} x {rows} rows, {n}x{k} | rowwise | {name} | {t:.1f} | {flops / t / 1e6:.0f} | "
            f"{(base / t) if base else float('nan'):.2f} | {error if error is not None else float('nan'):.1e} |"
            for name, t in sorted(us.items(), key=lambda kv: kv[1])]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    import torch

    lines = ["| shape | scaling | kernel | µs | TFLOP/s | × torch | max error vs torch |", "|---|---|---|---:|---:|---:|---:|"]
    for m, n, k in PLAIN:
        for scaling in ("tensor", "rowwise", "block"):
            lines += plain(torch, m, n, k, scaling, args.rounds)
            print(lines[-1] if "default" in lines[-1] else next(l for l in lines[::-1] if "default" in l), flush=True)
            if args.out:
                args.out.write_text("\n".join(lines) + "\n")
    for shape in GROUPED:
        lines += grouped(torch, *shape, args.rounds)
        print("\n".join(lines[-2:]), flush=True)
        if args.out:
            args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
