"""Probe: one launch of the mma family's tuned step at bf16 4096^3 nt, for ncu:

    ncu --metrics l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,smsp__inst_executed_op_ldsm.sum \
        -k regex:_mma python bench/probes/mma_one_launch.py
"""
import numpy as np
from gemmtune.compiler import compile_kernel
from gemmtune.dtypes import to_storage
from gemmtune.kernels import get_family
from gemmtune.runtime import DeviceBuffer, LoadedKernel, synchronize
from gemmtune.spec import GemmSpec
from gemmtune.verify import make_inputs
F = get_family("mma")
spec = GemmSpec(4096, 4096, 4096, "nt", "bf16")
cfg = dict(F.ladder("sm_90"))["tuned"]
k = LoadedKernel(compile_kernel(F.render(spec, cfg, "sm_90"), "sm_90"))
inputs = make_inputs(spec, np.random.default_rng(0))
bind = {}
for name in ("A", "B"):
    data = to_storage(inputs[name], spec.storage_dtype(name)).tobytes()
    b = DeviceBuffer.alloc(len(data)); b.upload(np.frombuffer(data, dtype=np.uint8).copy()); bind[name] = b.ptr
d = DeviceBuffer.alloc(spec.m * spec.n * 2); bind["D"] = d.ptr
k.launch(bind); synchronize()
print("launched", cfg.describe())
