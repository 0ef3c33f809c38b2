"""Probe (CPU only): a numerical model of fp32 GEMM accumulation orders, to pick 3xTF32's before
writing its wgmma kernel.

    python bench/probes/tf32_accumulation_model.py [K] [GUARD_BITS]     (default 4096 0; M = 96, N = 128)

The tensor core is modelled as products exact (tf32 x tf32 fits fp32), the addends of one mma (the
accumulator in and the k = 8 products) aligned to the largest one's exponent and truncated to
24 + GUARD_BITS bits, and the sum truncated to fp32. Each method's error against float64 on uniform
[-1, 1] inputs is printed next to a sequential fp32 FMA loop: Frobenius relative, and the worst
element over |A|.|B| (as gemmtune.accuracy reports them). Methods:

- SGEMM: sequential FMA, and split into 4 or 16 K-chunks summed at the end (what cuBLAS likely does
  at the accuracy report's 512x384 shape, where it has too few tiles to fill the GPU);
- 3xTF32 with a fresh partial per k-step (the mma family's build), with big and small products in
  separate partials, with one partial per 32 or 64 of K (a wgmma k-block), and with the running sum
  through the tensor core (the K-tripled probe's behaviour).
"""
import sys

import numpy as np

M, N = 96, 128
K = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
G = int(sys.argv[2]) if len(sys.argv) > 2 else 0  # guard bits of the tensor core's aligned sum
rng = np.random.default_rng(0)
A = rng.uniform(-1, 1, (M, K)).astype(np.float32)
B = rng.uniform(-1, 1, (K, N)).astype(np.float32)
D64 = A.astype(np.float64) @ B.astype(np.float64)
scale = np.abs(A).astype(np.float64) @ np.abs(B).astype(np.float64)

def rna_tf32(x):
    u = x.astype(np.float32).view(np.uint32)
    return ((u + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)

def rz32(x):  # float64 -> float32 rounding toward zero
    f = x.astype(np.float32)
    over = np.abs(f.astype(np.float64)) > np.abs(x)
    f[over] = np.nextafter(f[over], np.float32(0))
    return f

def tc(c, a, b):
    """c (M,N fp32) + sum_k a[:,k] b[k,:] with k=8, products exact, addends aligned to the largest
    exponent and truncated to 24+G bits, then the sum truncated to fp32."""
    prods = a.astype(np.float64)[:, :, None] * b.astype(np.float64)[None, :, :]  # M,8,N
    addends = np.concatenate([c.astype(np.float64)[:, None, :], prods], axis=1)
    mx = np.max(np.abs(addends), axis=1, keepdims=True)
    e = np.frexp(np.where(mx > 0, mx, 1.0))[1]  # mx in [2^(e-1), 2^e)
    q = np.ldexp(1.0, e - 24 - G)
    trunc = np.trunc(addends / q) * q
    return rz32(trunc.sum(axis=1))

Ab, Bb = rna_tf32(A), rna_tf32(B)
As, Bs = rna_tf32(A - Ab), rna_tf32(B - Bb)
def err(D):
    d = np.abs(D.astype(np.float64) - D64)
    return np.linalg.norm(d) / np.linalg.norm(D64), (d / scale).max()

# SGEMM: sequential FMA
acc = np.zeros((M, N), np.float32)
for k in range(K):
    acc = (acc.astype(np.float64) + np.outer(A[:, k], B[k, :]).astype(np.float64)).astype(np.float32)
res = {"SGEMM (sequential FMA)": err(acc)}
# blocked SGEMM-like: 8 partial sums interleaved? keep simple.
zero = np.zeros((M, N), np.float32)
s1 = zero.copy(); s2b = zero.copy(); s2s = zero.copy(); s3 = zero.copy(); s5 = zero.copy(); p5 = zero.copy(); s4 = zero.copy(); p3 = zero.copy()
for k0 in range(0, K, 8):
    sl = slice(k0, k0 + 8)
    a_b, a_s, b_b, b_s = Ab[:, sl], As[:, sl], Bb[sl], Bs[sl]
    p = tc(zero, a_s, b_b); p = tc(p, a_b, b_s); p = tc(p, a_b, b_b)
    s1 = (s1.astype(np.float64) + p).astype(np.float32)
    pb = tc(zero, a_b, b_b); ps = tc(tc(zero, a_s, b_b), a_b, b_s)
    s2b = (s2b.astype(np.float64) + pb).astype(np.float32); s2s = (s2s.astype(np.float64) + ps).astype(np.float32)
    p3 = tc(p3, a_s, b_b); p3 = tc(p3, a_b, b_s); p3 = tc(p3, a_b, b_b)
    if (k0 // 8) % 4 == 3:
        s3 = (s3.astype(np.float64) + p3).astype(np.float32); p3 = zero.copy()
    p5 = tc(p5, a_s, b_b); p5 = tc(p5, a_b, b_s); p5 = tc(p5, a_b, b_b)
    if (k0 // 8) % 8 == 7:
        s5 = (s5.astype(np.float64) + p5).astype(np.float32); p5 = zero.copy()
    s4 = tc(s4, a_s, b_b); s4 = tc(s4, a_b, b_s); s4 = tc(s4, a_b, b_b)
res["3xtf32 per-k-step partial"] = err(s1)
res["3xtf32 big and small partials apart"] = err((s2b.astype(np.float64) + s2s).astype(np.float32))
res["3xtf32 per-32-k partial (wgmma BK=32)"] = err(s3)
res["3xtf32 per-64-k partial (wgmma BK=64)"] = err(s5)
res["3xtf32 running sum through TC"] = err(s4)
for S in (4, 16):
    ch = K // S
    parts = []
    for c0 in range(0, K, ch):
        acc = np.zeros((M, N), np.float32)
        for k in range(c0, c0 + ch):
            acc = (acc.astype(np.float64) + np.outer(A[:, k], B[k, :]).astype(np.float64)).astype(np.float32)
        parts.append(acc)
    tot = np.zeros((M, N), np.float32)
    for p_ in parts:
        tot = (tot.astype(np.float64) + p_).astype(np.float32)
    res[f"SGEMM split-K {S}"] = err(tot)
base = res["SGEMM (sequential FMA)"]
print(f"M={M} N={N} K={K} guard bits {G}")
for name, (rel, worst) in res.items():
    print(f"{name:42s} rel {rel:.2e} ({rel/base[0]:5.2f}x)  worst {worst:.2e} ({worst/base[1]:5.2f}x)")
