"""Probe: what does the gemv dependent-launch prologue (kernels/parts/dependent_launch.py) buy, and
what does each part of it cost when launched alone?

    PYTHONPATH=src:bench python bench/probes/gemv_dependent_launch.py [--out rows.md]

For each shape, three builds of the chooser's pick (the same config, tuning database empty):
- none: no prologue (the kernel as it was before the part existed);
- wait: the early start and the wait, no prefetch;
- prologue: the prologue wherever the arch has it (whatever render.depends_on_launch decides);
- across-N: the columns-in-quads block shape with at most N threads across the outputs;
  parts join with '+' (prefetch-16384+across-4);
- prefetch-N: the early start, the L2 prefetch of each row's first step (at most N bytes a block), the
  wait; default: what gemmtune builds (render.PREFETCH_BYTES per kernel).
Each is timed by bench_m1_stream's protocols: single (one flushed launch) and stream (back to back
over rotating operand sets), the stream both launched with programmatic stream serialization and
plainly; cuBLAS and a same-size copy streamed once per shape. Every launch's D is verified.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHAPES = "16x4096x4096,8x4096x4096,1x4096x4096,16x14336x4096,1x1024x4096"


def _variant(name: str):
    """Patch the gemv renderer (and chooser) into variant `name`, parts joined by '+' (e.g.
    prefetch-16384+across-4); returns the undo."""
    undos = [_part(part) for part in name.split("+")]

    def undo():
        for u in reversed(undos):
            u()
    return undo


def _part(name: str):
    import importlib

    from gemmtune.kernels.parts import dependent_launch

    render = importlib.import_module("gemmtune.kernels.gemv.render")  # the package re-exports a function of that name
    candidates = importlib.import_module("gemmtune.chooser.candidates")  # (likewise)

    saved = (render.depends_on_launch, dependent_launch.prologue, dict(render.PREFETCH_BYTES), candidates.QUAD_ACROSS,
             render.ONE_VECTOR_LARGE_W_PREFETCH)
    if name.startswith("prefetch-"):
        render.PREFETCH_BYTES.update({kernel: int(name.split("-")[1]) for kernel in render.PREFETCH_BYTES})
        render.ONE_VECTOR_LARGE_W_PREFETCH = int(name.split("-")[1])
    elif name.startswith("across-"):  # the quads block shape's threads across the outputs, at most this many
        widest = int(name.split("-")[1])
        candidates.QUAD_ACROSS = tuple(x for x in saved[3] if x <= widest)
    elif name == "none":
        render.depends_on_launch = lambda spec, arch, config: False
    elif name == "prologue":  # the prologue wherever the arch has it (whatever depends_on_launch says)
        render.depends_on_launch = lambda spec, arch, config: dependent_launch.supported(arch) and not (
            config.tensor_cores and render.stream_kind(spec) == "columns")
    elif name == "wait":
        full = dependent_launch.prologue
        dependent_launch.prologue = lambda *a: "\n".join(l for l in full(*a).splitlines() if "prefetch_rows_to_l2" not in l) + "\n"
    elif name != "default":
        raise SystemExit(f"unknown variant {name!r}")

    def undo():
        render.depends_on_launch, dependent_launch.prologue = saved[:2]
        render.PREFETCH_BYTES.update(saved[2])
        candidates.QUAD_ACROSS = saved[3]
        render.ONE_VECTOR_LARGE_W_PREFETCH = saved[4]
    return undo


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--dtypes", default="bf16,tf32")
    parser.add_argument("--variants", default="none,wait,default")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import torch
    from bench_m1_stream import poisoned_sets, probe_context, probe_spec, stream_checked, time_cublas, us, write_lines
    from bench_untuned import build_and_time

    context = probe_context(torch)
    protocol, info, stream, copy_bw, pct = context.protocol, context.info, context.stream, context.copy_bw, context.pct
    lines = [f"# gemv dependent launch, part by part ({info.name})", "",
             "`bench/probes/gemv_dependent_launch.py`; GB/s counts A, B and D once, % of the 1 GiB copy "
             f"({copy_bw / 1e9:.0f} GB/s). stream: launched to overlap the launch before it; plain: the same "
             "binary launched plainly.", "",
             "| shape | variant | single µs (% copy) | stream µs (% copy) | plain stream µs (% copy) | cuBLAS stream µs | copy stream µs | verified |",
             "|---|---|---:|---:|---:|---:|---:|---|"]

    for dtype in args.dtypes.split(","):
        for shape in args.shapes.split(","):
            spec = probe_spec(f"{shape}:{dtype}")
            count, prepared, copy = context.operands(torch, spec)
            sets = poisoned_sets(torch, prepared, count)
            cublas = time_cublas(torch, spec, sets, stream).per_launch_s
            del sets
            for variant in args.variants.split(","):
                undo = _variant(variant)
                try:
                    built = build_and_time(spec, protocol, Path(tempfile.mkdtemp()) / "empty.sqlite")
                finally:
                    undo()
                verified, times = built.verified, []
                for dependent in (True, False):
                    timing, verdict = stream_checked(torch, built.kernel.compiled, prepared, count, stream,
                                                     f"{variant} stream", dependent)
                    times.append(timing.per_launch_s)
                    verified += verdict
                has = built.kernel.compiled.source.dependent_launch
                row = (f"| {spec.short()} | {variant} | {pct(spec, built.seconds)} | {pct(spec, times[0])} "
                       f"| {pct(spec, times[1]) if has else '-'} | {us(cublas)} | {us(copy.per_launch_s)} | {verified} |")
                print(row, flush=True)
                lines.append(row)
            torch.cuda.empty_cache()
    write_lines(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
