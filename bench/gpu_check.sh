#!/bin/sh
# One device call: environment facts, the GPU tests, then the core benchmark. Results under $OUT.
export PYTHONPATH=$PWD/src:$PYTHONPATH PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gemmtune-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
python3 -c "import cuda.bindings, numpy, torch; from cuda.bindings import nvrtc; print('cuda-bindings', cuda.bindings.__version__, 'nvrtc', nvrtc.nvrtcVersion()[1:], 'torch', torch.__version__)"
python3 -m pytest -q -m gpu -x ${GPU_TESTS:-tests} 2>&1 | tee "$OUT/gpu-tests.log" | tail -25
python3 bench/bench_core.py --sizes ${SIZES:-4096} --sweep ${SWEEP:-0} --out "$OUT/bench-core.md" 2>&1 | tee "$OUT/bench.log" | tail -30
