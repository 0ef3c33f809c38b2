"""Run a numba ladder kernel in numba's CUDA simulator: a GPU-free check of its indexing and edges.

The simulator executes the kernel's Python with one thread per CUDA thread, so it is slow: use
small shapes (a few blocks). NUMBA_ENABLE_CUDASIM=1 must be set before numba is first imported,
which is why the tests run this in a child process (`python -m gemmtune.numba_ladder.simulate`).
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from ..errors import GemmtuneError
from ..kernels.simt.config import ladder
from ..spec import GemmSpec
from ..verify import VerifyResult, compare, make_inputs, reference


def simulate(spec: GemmSpec, step: str, seed: int = 0) -> VerifyResult:
    """Run ladder step `step` on fresh inputs (D poisoned with NaN) and judge it like the GPU path."""
    from numba import cuda

    if not _simulating():
        raise GemmtuneError("simulate() needs NUMBA_ENABLE_CUDASIM=1 set before numba is imported")
    from .compile import check_spec
    from .kernels import kernel_for

    config = dict(ladder("sm_90"))[step]
    check_spec(spec, config, "sm_90")
    plan = kernel_for(spec, config)
    inputs = make_inputs(spec, np.random.default_rng(seed))
    d = np.full(spec.m * spec.n, np.nan, dtype=np.float32)
    a, b = (np.ascontiguousarray(inputs[x]).reshape(-1) for x in ("A", "B"))
    cuda.jit(plan.function)[plan.grid, plan.block](a, b, d)
    return compare(d.reshape(spec.m, spec.n), reference(spec, inputs, use_gpu=False), spec.dtype, spec.k)


def _simulating() -> bool:
    from numba.cuda import config

    return bool(config.ENABLE_CUDASIM)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="run numba ladder steps in the CUDA simulator; prints JSON")
    parser.add_argument("--shape", type=int, nargs=3, required=True, metavar=("M", "N", "K"))
    parser.add_argument("--layout", default="nn")
    parser.add_argument("--steps", nargs="+", required=True)
    args = parser.parse_args(argv)
    spec = GemmSpec(*args.shape, layout=args.layout)
    results = {step: simulate(spec, step).to_json() for step in args.steps}
    print(json.dumps(results))
    return 0


if __name__ == "__main__":  # pragma: no cover - run by the tests in a child process
    sys.exit(main())
