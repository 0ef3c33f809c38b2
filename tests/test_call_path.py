"""The torch call path's launch plans without a GPU (issue 68): a plan binds a launch once per pointer
set and stream and reuses it, keeps at most BOUND_PER_PLAN of them (oldest out first), binds only the
arguments the kernel takes, and eager calls take the direct path only where the dispatcher is not needed."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
ops = pytest.importorskip("gemmtune.torch.operators")


class FakeSource:
    args = ("A", "B", "D", "bias")
    tensor_maps = ()


class FakeLoaded:
    source = FakeSource()

    def __init__(self):
        self.binds, self.launched = [], 0

    def bind(self, bindings, stream):
        self.binds.append((dict(bindings), stream))
        return self._launch

    def _launch(self):
        self.launched += 1


def _plan() -> "ops._Plan":
    plan = ops._Plan.__new__(ops._Plan)
    plan.loaded, plan.launches = FakeLoaded(), {}
    return plan


def test_a_pointer_set_is_bound_once_and_launched_every_call():
    plan = _plan()
    key = (0x1000, 0x2000, 0x3000, 0, 0x4000, 1.0, 1.0, 7)
    for _ in range(5):
        plan.launch(key, 7)
    assert len(plan.loaded.binds) == 1 and plan.loaded.launched == 5
    bindings, stream = plan.loaded.binds[0]
    assert bindings == {"A": 0x1000, "B": 0x2000, "D": 0x3000, "bias": 0x4000} and stream == 7  # no C, no scalars


def test_new_pointers_or_streams_bind_again_and_the_oldest_leaves_first():
    plan = _plan()
    keys = [(0x1000, 0x2000, 0x3000 + 256 * i, 0, 0, 1.0, 1.0, i % 2) for i in range(ops.BOUND_PER_PLAN + 1)]
    for key in keys:
        plan.launch(key, key[-1])
    assert len(plan.loaded.binds) == len(keys) and len(plan.launches) == ops.BOUND_PER_PLAN
    assert keys[0] not in plan.launches and keys[-1] in plan.launches


def test_the_direct_path_skips_the_dispatcher_only_for_plain_eager_cuda_calls():
    meta = torch.empty(4, 4, device="meta")
    assert not ops._direct(meta, meta)  # not CUDA: the fake implementation answers
    param = torch.nn.Parameter(torch.empty(4, 4, device="meta"))
    assert type(param) in ops._PLAIN and torch.Tensor in ops._PLAIN
