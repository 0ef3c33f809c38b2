#!/bin/sh
# One device call: the L2 flush tests (the "read" flush now memsets a scratch buffer before its read
# pass) and the flush probe's table.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 120 python3 -m pytest -q -m gpu tests/test_gpu_runtime.py -k flush -rs 2>&1 | tail -4
timeout 150 python3 bench/flush_probe.py
