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

Every launch outside a graph capture records the order's event on its stream right after it is
enqueued; a launch on another stream than the last first makes its stream wait on that event, so it
runs after the last launch and nothing else of the other stream (which may be gone by then: only the
event is kept). Launching holds the order's lock, so two host threads launching at once take turns.
The cost is two driver calls a launch (cuStreamIsCapturing, cuEventRecord; host time, not yet measured)
and one more on a change of stream; no GPU time unless the launches would have overlapped.

Under CUDA-graph capture nothing is recorded or waited on (an event from outside a capture cannot
join it, nor one recorded inside it be waited on outside): a captured launch is ordered as its graph
is. A graph's replays still share the kernel's memory with the same kernel's launches outside the
graph, so replaying it on one stream while the kernel runs on another is not protected
(docs/interfaces.md).
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator

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
    """The event recorded after a stateful kernel's last launch outside a capture, and that launch's
    stream. Thread-safe; `close()` destroys the event."""

    def __init__(self) -> None:
        self._last: int | None = None  # the stream handle of the last launch outside a capture
        self._event: Any = None  # recorded after that launch
        self._lock = threading.Lock()

    @contextmanager
    def launching(self, stream: Any) -> Iterator[None]:
        """Around enqueuing a launch on `stream`: before it, where the last launch was on another
        stream, `stream` waits for that launch; after it, the event marks this launch."""
        with self._lock:
            if is_capturing(stream):
                yield  # the graph orders it
                return
            cu = driver()
            key = int(stream)
            if self._last is not None and self._last != key:
                checked(cu.cuStreamWaitEvent(stream, self._event, 0), "cuStreamWaitEvent (the last launch, on another stream)")
            yield
            if self._event is None:
                self._event = checked(cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING), "cuEventCreate")
            checked(cu.cuEventRecord(self._event, stream), "cuEventRecord (after a launch)")
            self._last = key

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
