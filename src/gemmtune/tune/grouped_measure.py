"""Measuring grouped candidates: verified against float64 over a NaN-poisoned D, then timed against
torch._grouped_mm in the same rounds, in the watched child process of worker.py (a candidate that faults or
hangs costs a restart of the child, never the tune).

Child side (`gpu_grouped_evaluator`): inputs drawn once per (spec, group sizes) and kept for the next
candidates; the check covers every row (no NaN left in any group's rows) and compares up to 2·SAMPLE_ROWS
rows (a group's first and last) of up to SAMPLE_GROUPS groups with the float64 reference; the timing is
timing.measure_alternating over our bound launch and torch's call replayed from a CUDA graph (its host time
untimed), L2 emptied before each launch. torch's call is torch._grouped_mm, then + bias[group of the row] and
the activation where the epilogue has them (what a model would run without gemmtune); fp8 specs (issue 70) draw
fp8 codes and scales, and time torch._scaled_mm / torch._scaled_grouped_mm (grouped_fp8.py says which form).

Parent side (`WorkerMeasurer`): the environment of the GPU and a MeasureWorker.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import NoDeviceError, SpecError
from ..grouped.config import GroupedConfig
from ..grouped.spec import GroupedSpec, group_offsets, reference
from . import grouped_fp8
from .grouped_records import GroupedTrial, config_from_json
from .trial import Environment, Status
from .worker import Evaluator, MeasureOutcome, MeasureWorker

SAMPLE_GROUPS = 8  # groups whose rows are compared with the float64 reference (the busiest among them)
SAMPLE_ROWS = 32  # of each: its first and last this many rows (group edges are where tiles go wrong)
LEAD_S = 20e-6  # the GPU kept busy this long before each start event (timing.measure_alternating)


@dataclass(frozen=True)
class GroupedJob:
    """One candidate to verify and time: plain data, pickled to the child."""

    spec: GroupedSpec
    rows: tuple[int, ...]
    config_json: dict
    rounds: int
    ordinal: int = 0


@dataclass(frozen=True)
class GroupedOutcome(MeasureOutcome):
    """MeasureOutcome plus torch._grouped_mm's seconds of the same rounds."""

    torch_samples_s: tuple[float, ...] = ()
    torch_op: str = ""  # the torch call timed, in words


# --- in the child ----------------------------------------------------------------------------------------
@dataclass
class _Prepared:
    spec: GroupedSpec
    rows: tuple[int, ...]
    tensors: dict[str, Any]  # a, w (G, N, K), bias, offs, d: torch tensors on the GPU
    samples: list[tuple[np.ndarray, np.ndarray]]  # (row indices, float64 reference of those rows)
    torch_replay: Any  # torch's call captured in a CUDA graph, or None where torch lacks it
    torch_op: str = ""  # what torch_replay runs, in words


_PREPARED: list[_Prepared] = []  # the last (spec, rows) only: a tune measures one distribution


def sampled_groups(rows: tuple[int, ...]) -> list[int]:
    """Up to SAMPLE_GROUPS non-empty groups, spread over the groups, the busiest always among them."""
    full = [g for g, r in enumerate(rows) if r > 0]
    picks = {full[i * len(full) // SAMPLE_GROUPS] for i in range(min(SAMPLE_GROUPS, len(full)))}
    return sorted(picks | {max(full, key=lambda g: rows[g])})


def sampled_rows(rows: tuple[int, ...], group: int) -> np.ndarray:
    """The rows of `group` (indices into A) that are checked: its first and last SAMPLE_ROWS."""
    begin = sum(rows[:group])
    count = rows[group]
    head = np.arange(begin, begin + min(count, SAMPLE_ROWS))
    tail = np.arange(begin + max(count - SAMPLE_ROWS, 0), begin + count)
    return np.unique(np.concatenate([head, tail]))


def _prepare(spec: GroupedSpec, rows: tuple[int, ...], ordinal: int) -> _Prepared:
    import torch

    device = torch.device("cuda", ordinal)
    gen = torch.Generator(device=device).manual_seed(len(rows) * 7919 + spec.total_m)
    offs = torch.tensor(group_offsets(rows), device=device, dtype=torch.int32)
    if spec.fp8:
        tensors = grouped_fp8.fp8_tensors(torch, spec, gen, device)
        tensors.update(offs=offs, d=torch.empty(spec.total_m, spec.n, device=device,
                                                dtype=getattr(torch, grouped_fp8.TORCH_OUT[spec.out_dtype])))
    else:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[spec.dtype]
        uniform = lambda *shape: (torch.rand(*shape, generator=gen, device=device) * 2 - 1).to(dtype)  # noqa: E731
        tensors = {"a": uniform(spec.total_m, spec.k), "w": uniform(spec.groups, spec.weight_rows, spec.k),
                   "bias": uniform(spec.groups, spec.n) if spec.has_bias else None, "offs": offs,
                   "d": torch.empty(spec.total_m, spec.n, device=device, dtype=dtype)}
    samples = [_sample_reference(spec, rows, tensors, g) for g in sampled_groups(rows)]
    replay, name = _torch_replay(torch, spec, rows, tensors, samples[0])
    return _Prepared(spec, rows, tensors, samples, replay, name)


def _sample_reference(spec: GroupedSpec, rows: tuple[int, ...], tensors: dict, group: int) -> tuple[np.ndarray, np.ndarray]:
    """(row indices, their float64 reference): spec.reference on a one-group spec of the sampled rows."""
    index = sampled_rows(rows, group)
    if spec.fp8:
        return index, grouped_fp8.sample_reference(spec, tensors, group, index, _on_device)
    one = GroupedSpec(1, len(index), spec.n, spec.k, spec.dtype, spec.epilogue, spec.swiglu)
    a = tensors["a"][_on_device(tensors["a"], index)].double().cpu().numpy()
    w = tensors["w"][group].double().cpu().numpy().T[None]  # (1, K, rows of the weights)
    bias = tensors["bias"][group:group + 1].double().cpu().numpy() if spec.has_bias else None
    return index, reference(one, a, w, np.array([len(index)], dtype=np.int32), bias)


def _on_device(tensor: Any, index: np.ndarray) -> Any:
    """`index` as a long tensor on `tensor`'s GPU."""
    import torch

    return torch.as_tensor(index, device=tensor.device, dtype=torch.long)


def _torch_replay(torch: Any, spec: GroupedSpec, rows: tuple[int, ...], tensors: dict,
                  sample: tuple[np.ndarray, np.ndarray]) -> tuple[Any, str]:
    """(torch's call captured in a CUDA graph, its name): torch._grouped_mm (+ bias of each row's group, + the
    activation), fp8 grouped_fp8.torch_call's; (None, "") where torch cannot run it (an older torch, fp16,
    SwiGLU: not compared)."""
    if spec.fp8:
        found = grouped_fp8.torch_call(torch, spec, rows, tensors, sample)
        return (_captured(torch, found[0]), found[1]) if found is not None else (None, "")
    if spec.swiglu or not hasattr(torch, "_grouped_mm"):
        return None, ""
    a, wt, offs = tensors["a"], tensors["w"].transpose(1, 2), tensors["offs"]
    group_of_row = torch.repeat_interleave(torch.arange(spec.groups, device=a.device),
                                           torch.tensor(rows, device=a.device))
    activation = {"relu": torch.relu, "gelu": lambda y: torch.nn.functional.gelu(y, approximate="tanh")}
    act = next((activation[op] for op in spec.epilogue.ops if op in activation), None)

    def call() -> Any:
        y = torch._grouped_mm(a, wt, offs=offs)
        if spec.has_bias:
            y = y + tensors["bias"][group_of_row]
        return act(y) if act is not None else y
    try:
        call()
        torch.cuda.synchronize()
    except RuntimeError:  # not supported for this dtype or GPU by this torch
        return None, ""
    return _captured(torch, call), "torch._grouped_mm"


def _captured(torch: Any, call: Any) -> Any:
    """`call` (run once already) captured in a CUDA graph."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    torch.cuda.synchronize()
    return graph


def _prepared(job: GroupedJob) -> _Prepared:
    if not _PREPARED or (_PREPARED[0].spec, _PREPARED[0].rows) != (job.spec, job.rows):
        _PREPARED.clear()
        _PREPARED.append(_prepare(job.spec, job.rows, job.ordinal))
    return _PREPARED[0]


def _verify(prepared: _Prepared, launch: Any) -> str:
    """'' when D is right after one launch into a NaN-poisoned D, else the verifier's message."""
    import torch

    from ..verify import compare

    spec, d = prepared.spec, prepared.tensors["d"]
    d.fill_(float("nan"))
    launch()
    torch.cuda.synchronize()
    end = sum(prepared.rows)
    if torch.isnan(d[:end]).any():
        return f"{int(torch.isnan(d[:end]).any(dim=1).sum())} of {end} rows the groups hold were left unwritten"
    for index, expected in prepared.samples:
        got = d[_on_device(d, index)].double().cpu().numpy()
        # fp8: bf16 inputs' tolerance (the reference holds the fp8 values exactly: what differs is the fp32 sums
        # and D's rounding), as tests/test_fp8_grouped.py's _check_configs
        result = compare(got, expected, "bf16" if spec.fp8 else spec.dtype, spec.k)
        if not result.ok:
            return result.message
    return ""


def gpu_grouped_evaluator(job: GroupedJob) -> GroupedOutcome:
    """Build (NVRTC), verify, then time against torch in alternating rounds."""
    from ..device import query_device
    from ..grouped.launch import build
    from ..timing import TimingProtocol, measure_alternating

    prepared = _prepared(job)
    t = prepared.tensors
    kernel = build(job.spec, config_from_json(job.config_json), job.ordinal)
    bias = t["bias"].data_ptr() if t["bias"] is not None else None
    args = (t["a"].data_ptr(), t["w"].data_ptr(), t["offs"].data_ptr(), t["d"].data_ptr(), bias, 0)
    scales = grouped_fp8.launch_scales(t) if job.spec.fp8 else {}
    problem = _verify(prepared, lambda: kernel(*args, **scales))
    if problem:
        return GroupedOutcome(Status.VERIFY_ERROR, error=f"VerifyError: {problem}")
    launches = {"ours": lambda: kernel(*args, **scales)}
    if prepared.torch_replay is not None:
        launches["torch"] = prepared.torch_replay.replay
    times = measure_alternating(launches, job.rounds, query_device(job.ordinal).l2_bytes, TimingProtocol(),
                                lead_s=LEAD_S)
    ours, torch_s = tuple(times["ours"]), tuple(times.get("torch", ()))
    protocol = {"method": "alternating rounds, L2 flushed", "rounds": job.rounds, "lead_s": LEAD_S}
    return GroupedOutcome(Status.OK, float(np.median(ours)), ours, protocol, torch_samples_s=torch_s,
                          torch_op=prepared.torch_op if torch_s else "")


# --- in the parent ---------------------------------------------------------------------------------------
class WorkerMeasurer:
    """Candidates measured in a watched child process on GPU `ordinal` (an sm_90 one: wgmma and TMA)."""

    def __init__(self, rounds: int = 30, timeout_s: float = 120.0, ordinal: int = 0,
                 evaluator: Evaluator = gpu_grouped_evaluator, environment: Environment | None = None):
        if rounds < 1:
            raise SpecError(f"--rounds must be at least 1, got {rounds}")
        self.rounds, self.ordinal = rounds, ordinal
        self.environment = environment or _environment(ordinal)
        self.worker = MeasureWorker(evaluator, timeout_s)

    def measure(self, spec: GroupedSpec, rows: tuple[int, ...], config: GroupedConfig) -> GroupedTrial:
        outcome = self.worker.measure(GroupedJob(spec, rows, config.to_json(), self.rounds, self.ordinal))
        torch_s = getattr(outcome, "torch_samples_s", ())
        return GroupedTrial(config, outcome.status, outcome.median_s, outcome.samples_s,
                            float(np.median(torch_s)) if torch_s else None, torch_s, outcome.error,
                            getattr(outcome, "torch_op", ""))

    def close(self) -> None:
        self.worker.close()


def _environment(ordinal: int) -> Environment:
    from ..compiler import nvrtc_version
    from ..device import query_device

    device = query_device(ordinal)  # NoDeviceError (one line, exit 3) without a GPU
    if device.cc != (9, 0):
        raise NoDeviceError(f"grouped GEMM kernels use wgmma and TMA (sm_90a); GPU {ordinal} ({device.name}) is {device.arch}")
    return Environment.from_device(device, nvrtc_version())
