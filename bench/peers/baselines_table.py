"""One markdown table from the JSON files of several `gemmtune bench --baselines ... --json F` runs.

    python bench/peers/baselines_table.py run-fp32.json run-bf16.json run-fp16-fused.json > table.md

The three runs behind the README's baselines table (bench/results/2026-11-23-h100-baselines.md;
CUTLASS needs `pip install ".[torch,cutlass]"` and nvcc on PATH):

    gemmtune bench MNK=4096 --dtype fp32 --steps best --json run-fp32.json
    gemmtune bench MNK=4096 --dtype bf16 --steps best --json run-bf16.json
    gemmtune bench MNK=4096 --dtype fp16 --epilogue relu+add --steps best --json run-fp16-fused.json

Columns are the runs (specs); rows the kernels: time, and cuBLAS's time / this time from the same
run (above 1 is faster than cuBLAS). Below the table: what each row ran, its build / autotune /
compile time, and every skipped baseline with its reason.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ORDER = ("gemmtune best", "cuBLAS", "CUTLASS", "Triton", "inductor", "torch eager", "TVM dlight")


def _name(row: dict) -> str:
    """One table row per kernel kind: gemmtune's best config row is named after where its config
    came from, which differs per spec (the details list says it)."""
    return "gemmtune best" if row["name"].startswith("best") else row["name"]


def _row_key(name: str) -> tuple[int, str]:
    prefix = next((i for i, key in enumerate(ORDER) if name.startswith(key)), len(ORDER))
    return prefix, name


def _spec(run: dict) -> str:
    s = run["spec"]
    epilogue = "" if s.get("epilogue", "none") in ("none", "", None) else f" {s['epilogue']}"
    return f"{s['dtype']} {s['m']}x{s['n']}x{s['k']} {s['layout']}{epilogue}"


def _cell(row: dict | None, cublas: float | None) -> str:
    if row is None:
        return "—"
    if row["status"] != "ok":
        return row["status"]
    ratio = f" ({cublas / row['median_s']:.3f}×)" if cublas else ""
    return f"{row['median_s'] * 1e6:.1f} µs{ratio}"


def table(runs: list[dict]) -> str:
    names = sorted({_name(r) for run in runs for r in run["rows"]}, key=_row_key)
    lines = ["| kernel | " + " | ".join(_spec(run) for run in runs) + " |",
             "|---|" + "---:|" * len(runs)]
    for name in names:
        cells = []
        for run in runs:
            cublas = next((r["median_s"] for r in run["rows"] if r["name"] == "cuBLAS" and r["median_s"]), None)
            cells.append(_cell(next((r for r in run["rows"] if _name(r) == name), None), cublas))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def details(runs: list[dict]) -> str:
    lines = []
    for run in runs:
        lines.append(f"\n**{_spec(run)}** ({run['device']['name']}, {run['date']}):\n")
        for r in run["rows"]:
            compile_s = f", compile {r['compile_s']:.0f} s" if r.get("compile_s") else ""
            error = f", rel. error {r['rel_error']:.1e}" if r.get("rel_error") is not None else ""
            failure = f": {r['message']}" if r["status"] != "ok" else ""
            lines.append(f"- {r['name']}: {r['config']}{error}{compile_s}, {r['samples']} samples, "
                         f"{r['status']}{failure}")
            if r["status"] == "ok" and r.get("message"):
                lines.append(f"  - candidates: {r['message']}")
        lines += [f"- skipped {s['name']}: {s['reason']}" for s in run.get("skipped", [])]
    return "\n".join(lines)


def main(paths: list[str]) -> int:
    runs = [json.loads(Path(p).read_text()) for p in paths]
    print(table(runs))
    print(details(runs))
    return 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", metavar="RUN.json",
                        help="JSON written by `gemmtune bench ... --baselines ... --json RUN.json` (one column each)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main(parse_args(sys.argv[1:]).runs))
