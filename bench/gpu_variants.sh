export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_wgmma.py -x -k "pingpong" 2>&1 | tail -4 > $OUT/pp-tests.log
cat $OUT/pp-tests.log
if grep -q " passed" $OUT/pp-tests.log && ! grep -q "failed" $OUT/pp-tests.log; then SKIP=""; else SKIP="--skip pingpong"; fi
timeout 330 python3 bench/wgmma_variants.py --json $OUT/variants3.json $SKIP > $OUT/variants3.md 2>&1
cat $OUT/variants3.md
