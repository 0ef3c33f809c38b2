"""Why is a kernel as fast as it is? Nsight Compute's few GEMM-relevant metrics, and a torch trace.

`profile_with_ncu` runs this module as a child process under `ncu` (`python -m gemmtune.profile
--target JSON`): the child builds one kernel, uploads inputs, and launches it; ncu profiles the
first launch whose name matches. Clocks are left alone (`--clock-control none`: the GPU runs at the
clocks it has, and gemmtune never changes them). ncu's raw page (CSV) is parsed into the metrics
below, each looked up under the names different ncu versions and architectures use.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import ConfigError, GemmtuneError, Timeout
from .spec import GemmSpec

NCU_HINT = ("ncu (Nsight Compute) is not on PATH: install it (CUDA toolkit or "
            "https://developer.nvidia.com/nsight-compute) or use --torch-profiler for a trace")
NCU_SECTIONS = ("SpeedOfLight", "ComputeWorkloadAnalysis", "Occupancy", "MemoryWorkloadAnalysis",
                "MemoryWorkloadAnalysis_Tables", "WarpStateStats", "LaunchStats")
NCU_TIMEOUT_S = 600.0
CUBLAS_FAMILIES = ("cublas", "cublas-tf32")  # torch.mm in the spec's types / fp32 with TF32 on
CUBLAS_KERNELS = "regex:gemm|nvjet|cutlass|xmma|sm90|sm80"

# label -> candidate raw metric names, first present wins (ncu renames between versions).
METRICS: dict[str, tuple[str, ...]] = {
    "duration (µs)": ("gpu__time_duration.sum",),
    "SM throughput (% of peak)": ("sm__throughput.avg.pct_of_peak_sustained_elapsed",),
    "FMA pipe (% of active cycles)": ("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
                                      "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active"),
    "achieved occupancy (% of warps)": ("sm__warps_active.avg.pct_of_peak_sustained_active",),
    "theoretical occupancy (% of warps)": ("sm__maximum_warps_per_active_cycle_pct",),
    "registers per thread": ("launch__registers_per_thread",),
    "DRAM throughput (% of peak)": ("dram__throughput.avg.pct_of_peak_sustained_elapsed",
                                    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
    "DRAM bytes read": ("dram__bytes_read.sum",),
    "DRAM bytes written": ("dram__bytes_write.sum",),
    "L2 hit rate (%)": ("lts__t_sector_hit_rate.pct",),
    "L2 throughput (% of peak)": ("lts__throughput.avg.pct_of_peak_sustained_elapsed",
                                  "lts__t_sectors.avg.pct_of_peak_sustained_elapsed"),
    "L1/shared throughput (% of peak)": ("l1tex__throughput.avg.pct_of_peak_sustained_active",),
    "shared load bank conflicts": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
                                   "smsp__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"),
    "shared store bank conflicts": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
                                    "smsp__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"),
    "shared load wavefronts": ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",),
}
_TENSOR_PIPE = re.compile(r"^sm__pipe_tensor\w*_cycles_active\.avg\.pct_of_peak_sustained_active$")
_STALL = re.compile(r"^smsp__average_warps?_(?:issue_stalled|latency_issue_stalled)_(\w+?)_per_issue_active\.ratio$")


@dataclass(frozen=True)
class ProfileSummary:
    kernel: str
    metrics: dict[str, float]  # label -> value, only those ncu reported
    tensor_pipe_pct: float | None  # the busiest tensor pipe (hmma, gmma, ...), % of active cycles
    stalls: tuple[tuple[str, float], ...]  # top warp-stall reasons: (reason, warps per issued instruction)
    raw_count: int = 0  # how many raw metrics ncu reported
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict:
        return asdict(self)

    def lines(self) -> list[str]:
        out = [f"kernel: {self.kernel}"]
        out += [f"  {label:<36} {_number(value)}" for label, value in self.metrics.items()]
        tensor = "not reported" if self.tensor_pipe_pct is None else f"{self.tensor_pipe_pct:.1f}"
        out.append(f"  {'tensor pipe (% of active cycles)':<36} {tensor}")
        out.append("  top warp stalls (warps stalled per issued instruction):")
        out += [f"    {reason:<34} {value:.2f}" for reason, value in self.stalls] or ["    not reported"]
        out += [f"  note: {n}" for n in self.notes]
        return out


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.2f}"


# --- parsing ncu's raw CSV (no GPU: tested on a recorded file) -------------------------------------
def parse_raw_csv(text: str) -> list[dict[str, str]]:
    """Rows of `ncu --csv --page raw`: a header of metric names, a row of units, one row per kernel."""
    lines = [line for line in text.splitlines() if line.startswith('"')]  # drop ncu's ==PROF== chatter
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if len(rows) < 3:
        raise GemmtuneError("ncu reported no profiled kernel (did the kernel name filter match?)")
    header, kernels = rows[0], rows[2:]
    return [dict(zip(header, values)) for values in kernels]


def _value(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def summarize(row: dict[str, str], top_stalls: int = 5) -> ProfileSummary:
    """The metrics that explain a GEMM, from one kernel's raw row."""
    metrics: dict[str, float] = {}
    for label, names in METRICS.items():
        value = next((v for v in (_value(row.get(n)) for n in names) if v is not None), None)
        if value is not None:
            metrics[label] = value / 1e3 if label.startswith("duration") else value  # ns -> µs
    tensor = [v for name, text in row.items() if _TENSOR_PIPE.match(name) and (v := _value(text)) is not None]
    stalls = sorted(((m.group(1), v) for name, text in row.items()
                     if (m := _STALL.match(name)) and m.group(1) != "selected"  # issuing, not stalled
                     and (v := _value(text)) is not None and v > 0),
                    key=lambda item: -item[1])
    notes = () if "duration (µs)" not in metrics else (
        "duration is under ncu's replay with its cache control; time kernels with gemmtune bench instead",)
    return ProfileSummary(row.get("Kernel Name", "?"), metrics, max(tensor) if tensor else None,
                          tuple(stalls[:top_stalls]), len(row), notes)


# --- running ncu ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """What the child process builds and launches: a spec, a family and a config (step name or JSON;
    None: the best known config, looked up in the tuning database `db`, default the tuner's)."""

    spec: GemmSpec
    family: str = "simt"
    config: str | None = None
    arch: str | None = None
    db: str | None = None

    def to_json(self) -> dict:
        return {"spec": self.spec.to_json(), "family": self.family, "config": self.config, "arch": self.arch,
                "db": self.db}

    @staticmethod
    def from_json(data: dict) -> "Target":
        return Target(GemmSpec.from_json(data["spec"]), data["family"], data.get("config"), data.get("arch"),
                      data.get("db"))


def ncu_path() -> str | None:
    return shutil.which("ncu")


def ncu_command(ncu: str, target: Target, kernel_filter: str) -> list[str]:
    sections = [arg for name in NCU_SECTIONS for arg in ("--section", name)]
    # Filter on mangled names: numba's entries are C++-mangled, and ncu matches demangled ones by default.
    return [ncu, "--clock-control", "none", "--target-processes", "all", "--kernel-name-base", "mangled",
            "--kernel-name", kernel_filter,
            "--launch-count", "1", *sections, "--csv", "--page", "raw", "--print-units", "base",
            sys.executable, "-m", "gemmtune.profile", "--target", json.dumps(target.to_json())]


def profile_with_ncu(target: Target, raw_out: Path | None = None) -> ProfileSummary:
    """Profile one launch of `target` under ncu; `raw_out` keeps ncu's raw CSV."""
    ncu = ncu_path()
    if ncu is None:
        raise GemmtuneError(NCU_HINT)
    kernel_filter = CUBLAS_KERNELS if target.family in CUBLAS_FAMILIES else f"regex:{re.escape(entry_of(target))}"
    try:
        done = subprocess.run(ncu_command(ncu, target, kernel_filter), capture_output=True, text=True,
                              timeout=NCU_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise Timeout(f"ncu did not finish within {NCU_TIMEOUT_S:.0f} s") from exc
    if raw_out is not None:
        raw_out.write_text(done.stdout)
    if done.returncode != 0 or "==ERROR==" in done.stdout + done.stderr:
        error = next((line for line in (done.stdout + done.stderr).splitlines() if "ERROR" in line),
                     f"exit status {done.returncode}")
        raise GemmtuneError(f"ncu failed: {error.strip()[:300]}")
    return summarize(parse_raw_csv(done.stdout)[0])


# --- the child process: build one kernel and launch it ---------------------------------------------
def compiled_for(target: Target):
    """The CompiledKernel `target` names (not for the cuBLAS families)."""
    from .build import target_arch
    from .compiler import compile_kernel
    from .kernels.simt.config import SimtConfig, ladder
    from .kernels.simt.render import render as simt_render

    arch = target_arch(target.arch)
    if target.family not in ("simt", "numba"):
        return _registry_kernel(target, arch)  # its own config type (JSON) and ladder
    named = dict(ladder(arch))
    config = _config_named(target.config, named, SimtConfig.from_json, "simt")
    if target.family == "numba":
        from .numba_ladder.compile import compile_numba

        return compile_numba(target.spec, config or named["double_buffer"], arch)
    if config is None:
        from .build import choose_config

        config = choose_config(target.spec, arch, target.db, family="simt").config
    return compile_kernel(simt_render(target.spec, config, arch), arch)


def _registry_kernel(target: Target, arch: str):
    """A family from the registry (e.g. a tensor-core family), its default config unless JSON is given."""
    from .compiler import compile_kernel
    from .kernels import family_for

    family = family_for(target.spec, arch, target.family)
    config = _config_named(target.config, dict(family.ladder(arch)), family.config_from_json, family.name)
    if config is None:  # the best known config, as build, bench and export choose it
        from .build import choose_config

        config = choose_config(target.spec, arch, target.db, family=family.name).config
    return compile_kernel(family.render(target.spec, config, arch), arch)


def _config_named(text: str | None, steps: dict, from_json, family: str):
    """--config: a ladder step's name or a JSON config (None when not given)."""
    if text is None:
        return None
    if text in steps:
        return steps[text]
    try:
        return from_json(json.loads(text))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"--config must be a {family} ladder step ({', '.join(steps)}) or a JSON config: {exc}") from None


def entry_of(target: Target) -> str:
    return compiled_for(target).source.entry


def launch_once(target: Target, repeats: int = 1) -> None:
    """Upload fresh inputs and launch the kernel `repeats` times (the child under ncu, or a trace)."""
    import numpy as np

    from .evaluate import upload_inputs
    from .runtime import LoadedKernel, release, synchronize
    from .verify import make_inputs

    if target.family in CUBLAS_FAMILIES:
        return _cublas_once(target, repeats)
    compiled = compiled_for(target)
    buffers: dict = {}
    kernel = LoadedKernel(compiled)
    try:
        run = kernel.bind(upload_inputs(target.spec, make_inputs(target.spec, np.random.default_rng(0)), buffers))
        for _ in range(repeats):
            run()
        synchronize()
    finally:
        release([kernel.unload] + [b.free for b in buffers.values()], after_error=False)


def _cublas_once(target: Target, repeats: int) -> None:
    """torch.mm on the spec's own types and layout (bf16 as bf16); cublas-tf32 turns TF32 on for fp32."""
    from .baseline import run_cublas_unchecked

    run_cublas_unchecked(target.spec, repeats, tf32=True if target.family == "cublas-tf32" else None)


def torch_trace(target: Target, out: Path, repeats: int = 5) -> str:
    """A Chrome trace (chrome://tracing, Perfetto) of `repeats` launches; returns torch's kernel table."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        raise GemmtuneError("--torch-profiler needs torch: pip install 'gemmtune[torch]'") from None
    launch_once(target, 1)  # compile, load and warm up outside the trace
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        launch_once(target, repeats)
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(out))
    return prof.key_averages().table(sort_by="cuda_time_total", row_limit=8)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="internal: the process gemmtune profile runs under ncu")
    parser.add_argument("--target", required=True, help="Target as JSON")
    args = parser.parse_args(argv)
    launch_once(Target.from_json(json.loads(args.target)))
    return 0


if __name__ == "__main__":  # pragma: no cover - run under ncu
    sys.exit(main())
