"""Tests marked `gpu` skip cleanly on a machine without a CUDA driver and GPU."""
from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    from gemmtune.device import gpu_available

    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and driver")
    for item in gpu_items:
        item.add_marker(skip)
