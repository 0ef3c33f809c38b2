# run: PYTHONPATH=$PWD/src compute-sanitizer --tool memcheck|initcheck|racecheck --report-api-errors no python bench/probes/fp8_sanitizer.py
"""compute-sanitizer over gemmtune's fp8 kernels: scaled_mm per tensor, rowwise, block (the overlapped default) and
the decode GEMV, and scaled_grouped_mm rowwise with an empty and a one-row group; odd shapes."""
import torch
import gemmtune.torch as gt

torch.manual_seed(0)
m, n, k = 200, 304, 1008  # K: 7 full k-blocks and a 112-value tail
a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
w = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
one = torch.ones(1, 1, device="cuda")
outs = []
outs.append(gt.scaled_mm(a, w.t(), one, one))
outs.append(gt.scaled_mm(a, w.t(), torch.rand(m, 1, device="cuda") + .5, torch.rand(1, n, device="cuda") + .5))
outs.append(gt.scaled_mm(a, w.t(), torch.rand(m, 8, device="cuda") + .5, torch.rand(3, 8, device="cuda") + .5))
outs.append(gt.scaled_mm(a[:7].contiguous(), w.t(), one, one))  # decode GEMV (M <= 16)
outs.append(gt.scaled_mm(a[:5].contiguous(), w.t(), torch.rand(5, 1, device="cuda") + .5, torch.rand(1, n, device="cuda") + .5))
g = 4
wg = torch.randn(g, n, k, device="cuda").to(torch.float8_e4m3fn)
offs = torch.tensor([0, 1, 120, 200], device="cuda", dtype=torch.int32)
outs.append(gt.scaled_grouped_mm(a, wg.transpose(1, 2), torch.rand(m, device="cuda") + .5, torch.rand(g, n, device="cuda") + .5, offs))
torch.cuda.synchronize()
print("fp8 kernels ran:", len(outs), "finite:", all(bool(torch.isfinite(o.float()[:200]).all()) for o in outs))
