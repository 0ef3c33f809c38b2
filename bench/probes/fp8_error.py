"""fp8 error against cuBLAS's at the same scaling (issue 70: ours ≤ 1.2× cuBLAS's on four input classes).

For each input class, scaling and shape: float32 A (M×K) and W (N×K) are quantized to e4m3 on the GPU with
the scaling's scales (amax / 448 per tensor, per row of A and row of W, or per 1×128 group of A and 128×128
block of W), and both gemmtune.torch.scaled_mm and torch._scaled_mm (cuBLAS; its blockwise kernel for block
scales) multiply the same codes and scales into bf16. The reference is the float64 product of the
dequantized codes, so the error is each kernel's own (accumulation and the bf16 output), not the
quantization's. Error = ‖D − ref‖_F / ‖ref‖_F; the ratio is ours / cuBLAS's.

Classes: normal (randn); outlier channels (1% of A's K columns ×50, as activations have); per-block ranges
(each 128×128 block of A and W times 10^u, u uniform in [-3, 3]); near saturation (|x| uniform in
[0.85, 1]·amax, so codes sit near e4m3's 448).

Promotion (`--promote`, per-tensor and rowwise scales): the grouped kernel's default tile built at each listed
`promote_every` (k-blocks of 128 values wgmma sums before the consumer adds them into fp32; 0: the whole K in
wgmma's accumulator, as before issue 70's fix) and called directly, so M = 16 runs it too (scaled_mm takes the
decode GEMV there). Each gets an error column and its ratio to cuBLAS's; "ours" stays what scaled_mm runs.

    PYTHONPATH=$PWD/src:$PWD/bench python bench/probes/fp8_error.py --out /tmp/fp8-error.md
    PYTHONPATH=$PWD/src:$PWD/bench python bench/probes/fp8_error.py --promote 0,1,2,4,8 --classes normal
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

E4M3_MAX = 448.0
BLOCK = 128
SHAPES = ((4096, 4096, 4096), (2048, 4096, 14336), (16, 4096, 4096), (200, 2816, 2048))  # last: odd M, MoE-sized
CLASSES = ("normal", "outlier channels", "per-block ranges", "near saturation")
SCALINGS = ("tensor", "rowwise", "block")


def _blocks(x: torch.Tensor, rows: int) -> torch.Tensor:
    """x (R, C) padded to whole blocks and viewed (R/rows, rows, C/128, 128)."""
    r, c = x.shape
    pad = torch.zeros(math.ceil(r / rows) * rows, math.ceil(c / BLOCK) * BLOCK, device=x.device)
    pad[:r, :c] = x
    return pad.view(pad.shape[0] // rows, rows, pad.shape[1] // BLOCK, BLOCK)


def make(kind: str, rows: int, k: int, gen: torch.Generator, role: str) -> torch.Tensor:
    x = torch.randn(rows, k, device="cuda", generator=gen)
    if kind == "outlier channels" and role == "a":
        cols = torch.randperm(k, device="cuda", generator=gen)[: max(1, k // 100)]
        x[:, cols] *= 50
    elif kind == "per-block ranges":
        b = _blocks(x, BLOCK)
        u = torch.rand(b.shape[0], 1, b.shape[2], 1, device="cuda", generator=gen) * 6 - 3
        x = (b * 10 ** u).view(b.shape[0] * BLOCK, -1)[:rows, :k].contiguous()
    elif kind == "near saturation":
        x = torch.sign(x) * (0.85 + 0.15 * torch.rand(rows, k, device="cuda", generator=gen))
    return x


def quantize(x: torch.Tensor, scaling: str, role: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(codes e4m3, scales as gemmtune takes them, scales expanded to x's shape)."""
    rows, k = x.shape
    if scaling == "tensor":
        s = (x.abs().amax() / E4M3_MAX).clamp_min(1e-30).reshape(1, 1)
        full = s.expand(rows, k)
    elif scaling == "rowwise":
        s = (x.abs().amax(1, keepdim=True) / E4M3_MAX).clamp_min(1e-30)  # (rows, 1)
        full = s.expand(rows, k)
        s = s if role == "a" else s.reshape(1, rows)
    else:
        b = _blocks(x, 1 if role == "a" else BLOCK)
        s = (b.abs().amax((1, 3)) / E4M3_MAX).clamp_min(1e-30)  # (rows or N/128, K/128)
        full = s[:, None, :, None].expand(b.shape).reshape(b.shape[0] * b.shape[1], -1)[:rows, :k]
        s = s.contiguous()
    codes = (x / full).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return codes, s.contiguous(), full


def torch_scales(sa: torch.Tensor, sb: torch.Tensor, scaling: str) -> tuple[torch.Tensor, torch.Tensor]:
    """cuBLAS's layouts: blockwise A scales column-major (M, K/128), B's as (K/128, N/128)."""
    if scaling == "block":
        return sa.t().contiguous().t(), sb.t()
    return sa, sb


def promoted_errors(qa, sa, qw, sw, ref: torch.Tensor, scaling: str, promotes: tuple[int, ...]) -> list[float]:
    """The grouped kernel's default tile at each promote_every in `promotes`, on the same codes and scales: the
    relative errors (per-tensor and rowwise scales only)."""
    from gemmtune.grouped.config import default_config
    from gemmtune.grouped.launch import build
    from gemmtune.grouped.spec import GroupedSpec

    (m, k), n = qa.shape, qw.shape[0]
    spec = GroupedSpec(1, m, n, k, "e4m3", scaling=scaling)
    offs = torch.tensor([m], device="cuda", dtype=torch.int32)
    errors = []
    for every in promotes:
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        kernel = build(spec, default_config(spec).with_(promote_every=every))
        kernel(qa.data_ptr(), qw.data_ptr(), offs.data_ptr(), out.data_ptr(), None,
               torch.cuda.current_stream().cuda_stream, scale_a=sa.contiguous().data_ptr(), scale_b=sw.contiguous().data_ptr())
        errors.append(float((out.double() - ref).norm() / ref.norm()))
    return errors


def case(kind: str, scaling: str, m: int, n: int, k: int, seed: int,
         promotes: tuple[int, ...] = ()) -> tuple[float, float | None, str, list[float]]:
    """(ours, cuBLAS's or None, a note, the promote_every variants' errors) for one input."""
    import gemmtune.torch as gt

    gen = torch.Generator(device="cuda").manual_seed(seed)
    a, w = make(kind, m, k, gen, "a"), make(kind, n, k, gen, "b")
    qa, sa, fa = quantize(a, scaling, "a")
    qw, sw, fw = quantize(w, scaling, "b")
    ref = (qa.double() * fa.double()) @ (qw.double() * fw.double()).t()
    norm = ref.norm()
    ours = gt.scaled_mm(qa, qw.t(), sa, sw, out_dtype=torch.bfloat16)
    err_ours = float((ours.double() - ref).norm() / norm)
    note = ""
    try:
        ta, tb = torch_scales(sa, sw, scaling)
        theirs = torch._scaled_mm(qa, qw.t(), ta, tb, out_dtype=torch.bfloat16)
        err_torch: float | None = float((theirs.double() - ref).norm() / norm)
    except Exception as err:  # noqa: BLE001 - the table says what cuBLAS refused
        err_torch, note = None, f"torch: {type(err).__name__}: {str(err).splitlines()[0][:80]}"
    variants = promoted_errors(qa, sa, qw, sw, ref, scaling, promotes) if scaling != "block" else []
    return err_ours, err_torch, note, variants


def _promotes(text: str) -> tuple[int, ...]:
    from gemmtune.grouped.config import PROMOTE_INTERVALS

    values = tuple(int(v) for v in text.split(",") if v.strip())
    bad = [v for v in values if v not in PROMOTE_INTERVALS]
    if bad:
        raise argparse.ArgumentTypeError(f"promote_every {bad[0]}: one of {PROMOTE_INTERVALS}")
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--seeds", type=int, default=2, help="inputs per case; the table shows the larger error")
    parser.add_argument("--promote", type=_promotes, default=None, metavar="P,P,...",
                        help="promote_every values to build the grouped kernel's default tile at, per-tensor and "
                             "rowwise scales (default: 0 and the default config's, unpromoted and promoted; '' for none)")
    parser.add_argument("--classes", default=",".join(CLASSES), help="input classes, comma-separated")
    parser.add_argument("--scalings", default=",".join(SCALINGS), help="scalings, comma-separated")
    args = parser.parse_args()
    if args.promote is None:
        from gemmtune.grouped.config import DEFAULT_PROMOTE_EVERY
        args.promote = (0, DEFAULT_PROMOTE_EVERY)
    promotes: tuple[int, ...] = args.promote
    extra = "".join(f" promote_every={p} | ×cuBLAS |" for p in promotes)
    lines = [f"| class | scaling | M×N×K | ours rel. error | cuBLAS rel. error | ours / cuBLAS |{extra} note |",
             "|---|---|---|---:|---:|---:|" + "---:|---:|" * len(promotes) + "---|"]
    worst = 0.0
    worst_variant = {p: 0.0 for p in promotes}
    for kind in args.classes.split(","):
        for scaling in args.scalings.split(","):
            for m, n, k in SHAPES:
                results = [case(kind, scaling, m, n, k, seed, promotes) for seed in range(args.seeds)]
                ours = max(r[0] for r in results)
                theirs = None if any(r[1] is None for r in results) else max(r[1] for r in results)
                ratio = ours / theirs if theirs else float("nan")
                worst = max(worst, ratio) if theirs else worst
                cells = ""
                for i, p in enumerate(promotes):
                    if scaling == "block":
                        cells += " — | — |"
                        continue
                    error = max(r[3][i] for r in results)
                    cells += f" {error:.2e} | {error / theirs if theirs else float('nan'):.3f} |"
                    worst_variant[p] = max(worst_variant[p], error / theirs) if theirs else worst_variant[p]
                lines.append(f"| {kind} | {scaling} | {m}x{n}x{k} | {ours:.2e} | "
                             f"{'—' if theirs is None else f'{theirs:.2e}'} | {ratio:.3f} |{cells} {results[0][2]} |")
                print(lines[-1], flush=True)
                if args.out:
                    args.out.write_text("\n".join(lines) + "\n")
    print(f"largest ours / cuBLAS: {worst:.3f} (bar: 1.2)")
    for p, value in worst_variant.items():
        print(f"largest promote_every={p} / cuBLAS (tensor, rowwise): {value:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
