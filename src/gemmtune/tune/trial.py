"""The records that cross the tuner's boundaries: where a trial ran and what came of it."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from ..errors import CompileError, ConfigError, LaunchError, ResourceError, Timeout, VerifyError
from ..spec import GemmSpec, stable_hash


# The driver version of a simulated environment: replayed results are filed apart from measured ones.
SIMULATED = "simulated"


class Status(str, enum.Enum):
    """How a trial ended. Stored in the database by value."""

    OK = "ok"
    INVALID = "invalid"  # the generator rejected the config for this spec
    COMPILE_ERROR = "compile_error"
    RESOURCE_ERROR = "resource_error"
    LAUNCH_ERROR = "launch_error"
    VERIFY_ERROR = "verify_error"
    TIMEOUT = "timeout"
    CRASH = "crash"  # the measuring process died (segfault, abort, os._exit)
    ERROR = "error"  # an exception that is not a gemmtune failure class: a bug, recorded not fatal


# Checked in order: a subclass must come before its base.
_ERROR_STATUS: tuple[tuple[type[BaseException], Status], ...] = (
    (ConfigError, Status.INVALID), (CompileError, Status.COMPILE_ERROR), (ResourceError, Status.RESOURCE_ERROR),
    (LaunchError, Status.LAUNCH_ERROR), (VerifyError, Status.VERIFY_ERROR), (Timeout, Status.TIMEOUT),
)


def status_of(error: BaseException) -> Status:
    for kind, status in _ERROR_STATUS:
        if isinstance(error, kind):
            return status
    return Status.ERROR


def error_text(error: BaseException) -> str:
    """One line naming the failure; the type name helps when the message alone is vague."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


@dataclass(frozen=True)
class Environment:
    """Everything about the machine that changes a measurement."""

    device_name: str
    cc: str
    sm_count: int
    arch: str
    driver_version: str
    nvrtc_version: str

    @staticmethod
    def from_device(device: Any, nvrtc_version: str) -> "Environment":
        """From a gemmtune.device.DeviceInfo (duck-typed so this module imports without a GPU)."""
        return Environment(str(device.name), _cc_text(device.cc), int(device.sm_count), str(device.arch),
                           str(device.driver_version), str(nvrtc_version))

    def to_json(self) -> dict:
        return {"device_name": self.device_name, "cc": self.cc, "sm_count": self.sm_count, "arch": self.arch,
                "driver_version": self.driver_version, "nvrtc_version": self.nvrtc_version}

    @staticmethod
    def from_json(data: dict) -> "Environment":
        return Environment(data["device_name"], str(data["cc"]), int(data["sm_count"]), data["arch"],
                           str(data["driver_version"]), str(data["nvrtc_version"]))


def _cc_text(cc: Any) -> str:
    if isinstance(cc, (tuple, list)):
        return ".".join(str(part) for part in cc)
    return str(cc)


@dataclass(frozen=True)
class TuneContext:
    """What a tuning run is about; its key is the database key minus the config."""

    spec: GemmSpec
    environment: Environment
    family: str
    family_version: str

    def key(self) -> str:
        return stable_hash({"spec": self.spec.to_json(), "env": self.environment.to_json(),
                            "family": self.family, "version": self.family_version})


@dataclass(frozen=True)
class TrialResult:
    """One measured (or failed) config. `median_s` is None unless status is OK."""

    config: Any
    status: Status
    median_s: float | None = None
    samples_s: tuple[float, ...] = ()
    compile_s: float | None = None
    resources: dict | None = field(default=None, compare=False)
    protocol: dict | None = field(default=None, compare=False)
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is Status.OK and self.median_s is not None

    def tflops(self, spec: GemmSpec) -> float:
        return spec.flops / self.median_s / 1e12 if self.ok else 0.0

    @staticmethod
    def failed(config: Any, error: BaseException, compile_s: float | None = None) -> "TrialResult":
        return TrialResult(config, status_of(error), compile_s=compile_s, error=error_text(error))
