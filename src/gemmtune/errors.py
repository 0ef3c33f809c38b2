"""Failures as values.

Every stage that can fail for a reason the user should see raises (or returns) one of these.
Each carries a one-line message; the CLI prints ``str(err)`` and exits non-zero, never a traceback.
"""
from __future__ import annotations


class GemmtuneError(Exception):
    """Base class: a failure whose message is fit to show the user as one line."""

    exit_code = 1

    def __init__(self, message: str, source_path: str | None = None):
        super().__init__(message)
        self.message = message
        self.source_path = source_path

    def __str__(self) -> str:
        where = f" (source: {self.source_path})" if self.source_path else ""
        return f"{self.message}{where}"


class SpecError(GemmtuneError, ValueError):
    """Bad user input: a size, layout, dtype or epilogue that cannot describe a GEMM."""

    exit_code = 2


class ConfigError(GemmtuneError, ValueError):
    """A config that a generator rejects for a spec, with the reason."""

    exit_code = 2


class CompileError(GemmtuneError):
    """NVRTC refused the source; the message holds the first error line of the log."""


class ResourceError(GemmtuneError):
    """The kernel compiled but needs more registers/shared memory/threads than the device has."""


class LaunchError(GemmtuneError):
    """The driver refused or faulted the launch (illegal address, misaligned access, ...)."""


class VerifyError(GemmtuneError):
    """The kernel ran but its output is wrong (error above tolerance, NaN, unwritten elements)."""


class Timeout(GemmtuneError):
    """A compile or measurement exceeded its wall-clock budget."""


class NoDeviceError(GemmtuneError):
    """No CUDA GPU (or driver) is available in this process."""

    exit_code = 3
