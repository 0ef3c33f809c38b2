"""Launches of a kernel that keeps state between launches, one after another across streams.

Some generated kernels keep working memory of their own rather than taking it as an argument:
split-K partial tiles and the flags their blocks wait on live in module memory (`__device__`
arrays that every launch leaves zeroed for the next; wgmma split tails, simt split-K), and staged
operands are copied into a workspace that belongs to the loaded kernel (runtime.LoadedKernel). Two
launches of one loaded kernel that run at once would share that memory: partial sums of one would
be added into the other's tile, or a block would wait on a flag the other reset, and hang.

Kernels whose blocks wait on each other (a split tail's pieces spin on the flags of the other pieces
of their tile: KernelSource.co_resident) need their whole grid resident at once, which the runtime
checks for each alone. Two such grids started together on two streams could each hold part of the
GPU, their resident blocks waiting for blocks that cannot start: so all of them on one GPU share one
order (`shared_order`), and run one after another across streams, different kernels included.

On one stream launches run in order, so nothing is needed. When a launch comes on another stream
than the kernel's last one, `StreamOrder.before` makes the new stream wait for everything enqueued
so far on the old one (an event recorded there, cuStreamWaitEvent): the two launches then run one
after the other. Launches on one stream pay an integer comparison; a change of stream two driver
calls more (a few µs of host time, no GPU time unless the launches would have overlapped).

Under CUDA-graph capture nothing is recorded or waited on (an event from outside a capture cannot
join it): a captured launch is ordered as its graph is. A graph's replays still share the kernel's
memory with the same kernel's launches outside the graph, so replaying it on one stream while the
kernel runs on another is not protected (docs/interfaces.md).
"""
from __future__ import annotations

import threading
from typing import Any

from .device import checked, driver


def is_capturing(stream: Any) -> bool:
    """Whether `stream` is being captured into a CUDA graph now (the legacy default stream, asked
    while another stream captures in global mode, counts as capturing: the driver refuses to say)."""
    cu = driver()
    result = cu.cuStreamIsCapturing(stream)
    if result[0] == cu.CUresult.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT:
        return True
    status = checked(result, "cuStreamIsCapturing")
    return int(status) != int(cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE)


class StreamOrder:
    """The stream of a stateful kernel's last launch, and the event that orders the next launch on
    another stream after it. Thread-safe; `close()` destroys the event."""

    def __init__(self) -> None:
        self._last: Any = None  # the stream of the last launch outside a capture
        self._event: Any = None  # created at the first change of stream
        self._lock = threading.Lock()

    def before(self, stream: Any) -> None:
        """Call before enqueuing a launch on `stream`: where the last launch was on another stream,
        `stream` first waits for the work enqueued there."""
        with self._lock:
            last = self._last
            if last is not None and int(last) == int(stream):
                return
            if is_capturing(stream):
                return  # the graph orders it; the stream of the launches outside the capture stays
            if last is not None and not is_capturing(last):
                cu = driver()
                if self._event is None:
                    flags = cu.CUevent_flags.CU_EVENT_DISABLE_TIMING
                    self._event = checked(cu.cuEventCreate(flags), "cuEventCreate")
                checked(cu.cuEventRecord(self._event, last), "cuEventRecord (the last launch's stream)")
                checked(cu.cuStreamWaitEvent(stream, self._event, 0), "cuStreamWaitEvent (a launch on another stream)")
            self._last = stream

    def close(self) -> None:
        with self._lock:
            event, self._event, self._last = self._event, None, None
        if event is not None:
            checked(driver().cuEventDestroy(event), "cuEventDestroy")


_shared: dict[int, StreamOrder] = {}
_shared_lock = threading.Lock()


def shared_order(ordinal: int) -> StreamOrder:
    """The order of GPU `ordinal`'s kernels whose blocks wait on each other (kept for the process)."""
    with _shared_lock:
        return _shared.setdefault(ordinal, StreamOrder())
