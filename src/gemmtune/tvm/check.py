"""Numerical checks of TVM kernels: on the GPU through gemmtune, or the workload on the CPU.

A GPU-scheduled module cannot run on the llvm target, so without a GPU the check runs the
unscheduled workload (the same TensorIR the schedules transform) on the CPU; schedule
primitives preserve semantics, and the GPU check covers the schedule and its conversion.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..compiler import CompiledKernel
from ..spec import GemmSpec
from ..verify import VerifyResult, compare, make_inputs, reference
from .target import cpu_target
from .workloads import gemm, module


def cpu_run(func: Any, arrays: list[np.ndarray], out_shape: tuple[int, ...]) -> np.ndarray:
    """Run PrimFunc `func` on the CPU with `arrays` as inputs and one float32 output appended."""
    import tvm

    executable = tvm.compile(module(func), cpu_target())
    device = tvm.cpu()
    args = [tvm.runtime.tensor(np.ascontiguousarray(a), device) for a in arrays]
    out = tvm.runtime.empty(out_shape, "float32", device)
    executable["main"](*args, out)
    return out.numpy()


def _gemm_arrays(spec: GemmSpec, inputs: dict) -> list[np.ndarray]:
    # The workload's parameter order: A, B, then C when the epilogue adds it (D is appended).
    return [inputs["A"], inputs["B"], *[inputs[op.name] for op in spec.epilogue.operands()]]


def cpu_rounds(spec: GemmSpec, rounds: int = 5, seed: int = 0) -> list[VerifyResult]:
    """The unscheduled workload on the CPU against the float64 reference, fresh inputs each round."""
    func = gemm(spec)
    results = []
    for index in range(rounds):
        inputs = make_inputs(spec, np.random.default_rng(seed + index))
        out = cpu_run(func, _gemm_arrays(spec, inputs), (spec.m, spec.n))
        results.append(compare(out, reference(spec, inputs, use_gpu=False), spec.dtype, spec.k, spec.out_dtype))
    return results


def gpu_rounds(compiled: CompiledKernel, rounds: int = 5, seed: int = 0) -> list[VerifyResult]:
    """The compiled kernel on the GPU, verified on fresh random inputs each round (not timed)."""
    from ..evaluate import evaluate

    return [evaluate(compiled, rng=np.random.default_rng(seed + index), verify_only=True).verify
            for index in range(rounds)]
