"""Which shapes and configs ping-pong gets wrong (debug run): verify-only over a grid of cases."""
import sys
import numpy as np
from gemmtune.compiler import compile_kernel
from gemmtune.evaluate import evaluate
from gemmtune.kernels import get_family
from gemmtune.spec import GemmSpec

FAMILY = get_family("wgmma")
steps = dict(FAMILY.ladder("sm_90a"))
cases = [((2056, 2184, 200), "nt"), ((2056, 2184, 256), "nt"), ((2056, 2184, 320), "nt"), ((2048, 2176, 200), "nt"),
         ((1000, 3000, 64), "tn"), ((520, 4100, 1000), "nn"), ((4096, 4096, 256), "nt"), ((4096, 4096, 1024), "nt")]
for step in ("pingpong", "tma_store"):
    for shape, layout in cases:
        spec = GemmSpec(*shape, layout=layout, dtype="fp16")
        try:
            r = evaluate(compile_kernel(FAMILY.render(spec, steps[step], "sm_90a"), "sm_90a"), verify_only=True,
                         rng=np.random.default_rng(3))
            print(step, spec.short(), "ok" if r.verify.ok else "WRONG", r.verify.message[:300], flush=True)
        except Exception as exc:
            print(step, spec.short(), type(exc).__name__, str(exc)[:200], flush=True)
            if "context" in str(exc):
                sys.exit(1)
