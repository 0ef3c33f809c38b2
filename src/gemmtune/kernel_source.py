"""KernelSource: the one artifact every generator family ends in.

CUDA text plus everything needed to launch it without knowing who wrote it: entry name, grid,
block, dynamic shared memory and the argument order. Compiling, verifying, timing and exporting
work on this type alone, so a TVM kernel and a native kernel are treated the same.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from .spec import GemmSpec

# Argument kinds a kernel may take, in the names the runtime binds them by.
POINTER_ARGS = ("A", "B", "C", "bias", "D")
SCALAR_ARGS = ("alpha", "beta")


@dataclass(frozen=True)
class KernelSource:
    code: str
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[str, ...]  # names from POINTER_ARGS/SCALAR_ARGS in the kernel's parameter order
    spec: GemmSpec
    family: str
    family_version: str
    config: dict = field(default_factory=dict, compare=False, hash=False)
    dynamic_smem: int = 0
    # Optional compiler flags the kernel needs (e.g. TVM sources want --use_fast_math off).
    options: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = [a for a in self.args if a not in POINTER_ARGS + SCALAR_ARGS]
        if unknown:
            raise ValueError(f"unknown kernel argument names {unknown}")
        if "D" not in self.args:
            raise ValueError("a GEMM kernel must take its output D")

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    def content_hash(self) -> str:
        """Hash of everything that changes the compiled binary."""
        payload = json.dumps({"code": self.code, "entry": self.entry, "options": list(self.options)},
                             sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:20]

    def to_json(self) -> dict:
        return {
            "code": self.code, "entry": self.entry, "grid": list(self.grid), "block": list(self.block),
            "args": list(self.args), "spec": self.spec.to_json(), "family": self.family,
            "family_version": self.family_version, "config": self.config,
            "dynamic_smem": self.dynamic_smem, "options": list(self.options),
        }

    @staticmethod
    def from_json(data: dict) -> "KernelSource":
        return KernelSource(
            code=data["code"], entry=data["entry"], grid=tuple(data["grid"]), block=tuple(data["block"]),
            args=tuple(data["args"]), spec=GemmSpec.from_json(data["spec"]), family=data["family"],
            family_version=data["family_version"], config=data.get("config", {}),
            dynamic_smem=data.get("dynamic_smem", 0), options=tuple(data.get("options", ())),
        )
