"""Probe: gemmtune's grouped GEMM against torch._grouped_mm and a loop of torch.mm over the experts, four MoE
cases, each captured in a CUDA graph (median of 30 replays); prints one GROUPED line per case.

    PYTHONPATH=src python bench/probes/grouped_vs_torch.py        (an sm_90a GPU)
"""
import torch, statistics
from gemmtune.grouped.torch_ops import grouped_mm

def timed(fn, reps=30):
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn(); fn()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        fn()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b) * 1e3)
    return statistics.median(ts)

cases = [("issue 8 experts", [700, 120, 64, 900, 33, 410, 256, 1], 4096, 2048),
         ("mixtral 8e 512 tok top2", [150, 110, 140, 90, 130, 120, 160, 124], 14336, 4096),
         ("qwen3 128e 2048 tok top8", None, 768, 2048),
         ("deepseek 256e 4096 tok top8", None, 2048, 7168)]
torch.manual_seed(0)
for name, sizes, n, k in cases:
    if sizes is None:
        g = 128 if "qwen" in name else 256
        tokens = 2048 * 8 if "qwen" in name else 4096 * 8
        p = 1.0 / torch.arange(1, g + 1).float() ** 0.8
        sizes = torch.multinomial(p / p.sum(), tokens, replacement=True).bincount(minlength=g).tolist()
    G, M = len(sizes), sum(sizes)
    a = torch.randn(M, k, device="cuda", dtype=torch.bfloat16)
    wt = torch.randn(G, n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    b = wt.transpose(1, 2)
    ours = grouped_mm(a, b, offs); ref = torch._grouped_mm(a, b, offs=offs)
    err = ((ours.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
    t_ours = timed(lambda: grouped_mm(a, b, offs))
    t_torch = timed(lambda: torch._grouped_mm(a, b, offs=offs))
    ends = offs.tolist(); starts = [0] + ends[:-1]
    pieces = [(a[s:e], b[i]) for i, (s, e) in enumerate(zip(starts, ends)) if e > s]
    t_loop = timed(lambda: [torch.mm(x, y) for x, y in pieces])
    tf = 2 * M * n * k / 1e12
    print(f"GROUPED {name:28s} G={G:3d} M={M:6d}: ours {t_ours:7.1f} us ({tf/t_ours*1e6:5.0f} TF)  torch {t_torch:7.1f} ({t_torch/t_ours:.2f}x)  loop {t_loop:7.1f} ({t_loop/t_ours:.2f}x)  relerr {err:.1e}", flush=True)
