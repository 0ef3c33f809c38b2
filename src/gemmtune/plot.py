"""Pictures of where the time goes, from recorded data only (no GPU): PNG and SVG.

- ladder: each ladder step's TFLOP/s, CUDA-C beside numba, against cuBLAS (a line), from the JSON
  `gemmtune ladder --backend numba --json` writes;
- roofline: every measured kernel at its compulsory arithmetic intensity (FLOPs / minimum bytes)
  under the GPU's fp32 peak and memory bandwidth;
- convergence: best time so far against trials and against seconds, from the tuning database.
Optional extra: pip install 'gemmtune[plot]'.
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError, GemmtuneError
from .input_files import InputFileError, json_kind, read_json_object
from .spec import GemmSpec

FORMATS = ("png", "svg")


@dataclass(frozen=True)
class Peaks:
    """Datasheet peaks: fp32 on CUDA cores (no tensor cores) and HBM bandwidth."""

    name: str
    fp32_tflops: float
    bandwidth_tbs: float


# NVIDIA datasheets (SXM parts unless named); matched by substring of the device name, first wins.
KNOWN_PEAKS = (
    ("H100 PCIe", Peaks("H100 PCIe", 51.2, 2.0)),
    ("H100 NVL", Peaks("H100 NVL", 60.0, 3.9)),
    ("H200", Peaks("H200 SXM", 66.9, 4.8)),
    ("H100", Peaks("H100 SXM", 66.9, 3.35)),
    ("A100", Peaks("A100 SXM", 19.5, 2.04)),
)


def peaks_for(device_name: str, fp32_tflops: float | None = None, bandwidth_tbs: float | None = None) -> Peaks:
    """The GPU's peaks, explicit values first (both or neither needed for an unknown GPU)."""
    known = next((p for key, p in KNOWN_PEAKS if key in device_name), None)
    if fp32_tflops and bandwidth_tbs:
        return Peaks(device_name, fp32_tflops, bandwidth_tbs)
    if known is None:
        raise ConfigError(f"no datasheet peaks for '{device_name}': pass --peak-tflops and --bandwidth")
    return Peaks(known.name, fp32_tflops or known.fp32_tflops, bandwidth_tbs or known.bandwidth_tbs)


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise GemmtuneError("plotting needs matplotlib: pip install 'gemmtune[plot]'") from None
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: small, searchable SVGs
    import matplotlib.pyplot as plt

    return plt


def _save(fig, stem: Path) -> list[Path]:
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(f".{fmt}") for fmt in FORMATS]
    for path in paths:
        fig.savefig(path, dpi=100, bbox_inches="tight", metadata={"Date": None} if path.suffix == ".svg" else None)
    fig.clear()
    return paths


LADDER = "a ladder recording (JSON from `gemmtune ladder --backend numba --json`)"


def load_ladder(path: Path) -> dict:
    """A ladder recording, checked for every field the plots read; InputFileError (one line, exit 2)
    naming the file and the first thing wrong with it."""
    data = read_json_object(path, LADDER)
    problem = ladder_problem(data)
    if problem:
        raise InputFileError(f"{path} is not {LADDER}: {problem}")
    return data


def ladder_problem(data: dict) -> str | None:
    """What the plots would trip over in a parsed recording, or None."""
    try:
        GemmSpec.from_json(data["spec"])
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        return f"its 'spec' is not a GEMM spec ({type(err).__name__}: {err})"
    if not isinstance(data.get("device"), dict) or not isinstance(data["device"].get("name"), str):
        return "'device' needs a 'name'"
    if not isinstance(data.get("cublas"), dict) or not _rate_ok(data["cublas"]):
        return "'cublas' must be an object with a numeric (or null) 'tflops'"
    pairs = data.get("pairs")
    if not isinstance(pairs, list):
        return f"'pairs' must be an array, not {json_kind(pairs)}"
    for number, pair in enumerate(pairs, start=1):
        if not (isinstance(pair, dict) and isinstance(pair.get("step"), str)
                and all(isinstance(pair.get(side), dict) and _rate_ok(pair[side]) for side in ("cuda_c", "numba"))):
            return f"pair {number} needs a 'step' name and 'cuda_c' and 'numba' objects with numeric 'tflops'"
    return None


def _rate_ok(row: dict) -> bool:
    rate = row.get("tflops")
    return rate is None or (isinstance(rate, (int, float)) and not isinstance(rate, bool))


def _tflops(row: dict) -> float:
    return row.get("tflops") or 0.0


# --- ladder bars --------------------------------------------------------------------------------------
def ladder_bars(data: dict, stem: Path) -> list[Path]:
    plt = _pyplot()
    pairs, spec = data["pairs"], GemmSpec.from_json(data["spec"])
    steps = [p["step"] for p in pairs]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    x = range(len(steps))
    ax.bar([i - 0.2 for i in x], [_tflops(p["cuda_c"]) for p in pairs], 0.4, label="CUDA-C (NVRTC)", color="#4477aa")
    ax.bar([i + 0.2 for i in x], [_tflops(p["numba"]) for p in pairs], 0.4, label="numba-cuda", color="#ee7733")
    if data["cublas"].get("tflops"):
        ax.axhline(data["cublas"]["tflops"], color="black", linestyle="--", linewidth=1, label="cuBLAS fp32")
    ax.set_xticks(list(x), steps, rotation=25, ha="right")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"SGEMM ladder {spec.m}x{spec.n}x{spec.k} on {data['device']['name']}")
    ax.legend(frameon=False)
    return _save(fig, stem)


# --- roofline -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RooflinePoint:
    label: str
    intensity: float  # FLOP per byte of compulsory traffic
    tflops: float


def roofline_points(recordings: list[dict]) -> list[RooflinePoint]:
    """One point per verified, timed kernel of each recording (CUDA-C, numba, cuBLAS)."""
    points = []
    for data in recordings:
        spec = GemmSpec.from_json(data["spec"])
        intensity = spec.flops / spec.min_bytes
        size = f"{spec.m}x{spec.n}x{spec.k}"
        rows = [("cuBLAS", data["cublas"])] + [(f"{side} {p['step']}", p[key]) for p in data["pairs"]
                                               for side, key in (("CUDA-C", "cuda_c"), ("numba", "numba"))]
        points += [RooflinePoint(f"{label} {size}", intensity, row["tflops"]) for label, row in rows
                   if row.get("tflops")]
    return points


def roofline(recordings: list[dict], peaks: Peaks, stem: Path) -> list[Path]:
    plt = _pyplot()
    points = roofline_points(recordings)
    if not points:
        raise ConfigError("no timed kernels in the recordings")
    fig, ax = plt.subplots(figsize=(7.5, 5))
    ridge = peaks.fp32_tflops / peaks.bandwidth_tbs  # FLOP/byte where memory stops limiting
    low, high = min(0.5, min(p.intensity for p in points) / 2), max(ridge * 4, max(p.intensity for p in points) * 2)
    ax.plot([low, ridge, high], [low * peaks.bandwidth_tbs, peaks.fp32_tflops, peaks.fp32_tflops], color="black",
            label=f"{peaks.name}: {peaks.fp32_tflops} TFLOP/s fp32, {peaks.bandwidth_tbs} TB/s")
    styles = {"cuBLAS": ("black", "*"), "CUDA-C": ("#4477aa", "o"), "numba": ("#ee7733", "s")}
    for kind, (color, marker) in styles.items():
        mine = [p for p in points if p.label.startswith(kind)]
        ax.scatter([p.intensity for p in mine], [p.tflops for p in mine], color=color, marker=marker, s=28,
                   label=kind, alpha=0.8, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per compulsory byte)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title("Roofline: measured SGEMM kernels (each size is one column)")
    ax.legend(frameon=False, fontsize=8, loc="upper left")
    return _save(fig, stem)


# --- tuning convergence ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Trace:
    """One tuning context's search trials in order: seconds since the first, and time (None: failed)."""

    label: str
    seconds: tuple[float, ...]
    median_s: tuple[float | None, ...]

    def best_so_far(self) -> list[float | None]:
        best, out = None, []
        for value in self.median_s:
            if value is not None and (best is None or value < best):
                best = value
            out.append(best)
        return out


def convergence_traces(db_path: Path, spec: GemmSpec | None = None) -> list[Trace]:
    """Search-phase trials per (spec, device, family) from the tuning database, in the order measured."""
    from .tune.db_file import check_readable

    check_readable(Path(db_path))  # one line naming the file when it is not a gemmtune database
    conn = sqlite3.connect(f"{Path(db_path).resolve().as_uri()}?mode=ro", uri=True)
    try:
        where, params = ("AND spec_key = ?", [spec.key()]) if spec is not None else ("", [])
        rows = conn.execute("SELECT context_key, m, n, k, device_name, family, created, status, median_s FROM trials "
                            f"WHERE phase = 'search' {where} ORDER BY context_key, id", params).fetchall()
    finally:
        conn.close()
    groups: dict[str, list] = {}
    for row in rows:
        groups.setdefault(row[0], []).append(row)
    traces = []
    for group in groups.values():
        _, m, n, k, device, family, start = group[0][:7]
        label = f"{family} {m}x{n}x{k} on {device}"
        traces.append(Trace(label, tuple(r[6] - start for r in group),
                            tuple(r[8] if r[7] == "ok" else None for r in group)))
    return traces


def convergence(traces: list[Trace], stem: Path) -> list[Path]:
    plt = _pyplot()
    if not traces:
        raise ConfigError("the tuning database has no search trials (for this spec)")
    fig, (by_trial, by_time) = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for trace in traces:
        best = [b * 1e6 if b is not None else float("nan") for b in trace.best_so_far()]
        by_trial.plot(range(1, len(best) + 1), best, label=trace.label)
        by_time.plot(trace.seconds, best, label=trace.label)
    by_trial.set_xlabel("trials")
    by_time.set_xlabel("seconds since the first trial")
    by_trial.set_ylabel("best time so far (µs)")
    by_trial.set_yscale("log")
    by_trial.set_title("tuning convergence")
    by_time.legend(frameon=False, fontsize=8)
    return _save(fig, stem)
