"""Peer: Triton's matmul on mma.sync (run with DISABLE_MMA_V3=1, which keeps tl.dot off wgmma on sm_90)
at bf16 4096^3 nt, a few tile shapes, against cuBLAS timed the same way in the same process (CUDA
events around each launch, no L2 flush, median of 50). The PTX of each kernel says which instruction
it uses. Results: bench/results/2026-11-26-h100-mma-deep-slices.md.

    DISABLE_MMA_V3=1 python bench/peers/triton_mma_sync.py
"""
import os
import torch
import triton
import triton.language as tl

@triton.jit
def mm(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = GM * tiles_n
    first = (pid // group) * GM
    rows = min(tiles_m - first, GM)
    pm = first + (pid % group) % rows
    pn = (pid % group) // rows
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = a_ptr + rm[:, None] * K + rk[None, :]
    b = b_ptr + rn[None, :] * K + rk[:, None]   # B stored N x K (nt)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc += tl.dot(tl.load(a), tl.load(b))
        a += BK
        b += BK
    c = c_ptr + rm[:, None] * N + rn[None, :]
    tl.store(c, acc.to(tl.bfloat16))

def bench(f, n=50):
    for _ in range(5): f()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(n):
        s.record(); f(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e) * 1000)
    ts.sort(); return ts[len(ts) // 2]

M = N = K = 4096
a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
ref = a @ b.T
cub = bench(lambda: torch.mm(a, b.T))
print(f"DISABLE_MMA_V3={os.environ.get('DISABLE_MMA_V3')} cuBLAS {cub:.1f} us")
for BM, BN, BK, w, s in ((128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 4, 4), (128, 256, 32, 8, 4),
                         (128, 128, 32, 4, 5), (128, 256, 64, 8, 4), (128, 128, 64, 8, 4), (256, 128, 32, 8, 4)):
    try:
        grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
        k = mm[grid](a, b, c, M, N, K, BM=BM, BN=BN, BK=BK, GM=8, num_warps=w, num_stages=s)
        err = (c.float() - ref.float()).abs().max().item()
        t = bench(lambda: mm[grid](a, b, c, M, N, K, BM=BM, BN=BN, BK=BK, GM=8, num_warps=w, num_stages=s))
        asm = k.asm.get("ptx", "")
        kind = "wgmma" if "wgmma" in asm else ("mma.sync" if "mma.sync" in asm else "?")
        print(f"| {BM}x{BN}x{BK} w{w} s{s} | {kind} | {t:.1f} | {cub / t:.3f} | {2*M*N*K/t/1e6:.0f} | err {err:.2g} | regs {k.n_regs} spills {k.n_spills}", flush=True)
    except Exception as ex:
        print(BM, BN, BK, w, s, "failed", str(ex)[:200], flush=True)
