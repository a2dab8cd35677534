"""NVML event sets for the simulator: XIDs and lost GPUs delivered to `nvmlEventSetWait_v2`.

Waiting blocks on a condition variable for at most the caller's timeout (real seconds, not
simulated time: an XID watcher thread must really block), then raises NVMLError_Timeout,
as NVML does. Delivery never blocks the producer: queues are unbounded per set but only
registered sets receive events.
"""

import threading
from collections import deque
from typing import Any

import pynvml

from gpufleet.lab.nvml.handles import HandleTable
from gpufleet.lab.nvml.machine import UINT_MAX, Machine, Node, nvml_error

SUPPORTED_EVENTS = (
    pynvml.nvmlEventTypeSingleBitEccError
    | pynvml.nvmlEventTypeDoubleBitEccError
    | pynvml.nvmlEventTypePState
    | pynvml.nvmlEventTypeXidCriticalError
    | pynvml.nvmlEventTypeClock
)


class _EventSet:
    __slots__ = ("closed", "queue", "registered")

    def __init__(self) -> None:
        self.registered: dict[int, int] = {}  # gpu index -> event type mask
        self.queue: deque[tuple[Node, int, int, int, int]] = deque()
        self.closed = False


class EventHub:
    """All event sets of one simulator; one condition variable wakes their waiters."""

    def __init__(self) -> None:
        self.sets: HandleTable[_EventSet] = HandleTable(pynvml.c_nvmlEventSet_t)
        self.cond = threading.Condition(threading.Lock())

    def deliver(self, gpu: Node, event_type: int, data: int, gi_id: int, ci_id: int) -> None:
        with self.cond:
            for s in self.sets.values():
                if s.registered.get(gpu.gpu.index, 0) & event_type:
                    s.queue.append((gpu, event_type, data, gi_id, ci_id))
            self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            for s in self.sets.values():
                s.closed = True
            self.cond.notify_all()


class EventCalls:
    """pynvml's event functions."""

    _m: Machine
    _events: EventHub

    def nvmlEventSetCreate(self) -> Any:
        self._m.enter_system("nvmlEventSetCreate")
        with self._events.cond:
            return self._events.sets.new(_EventSet())

    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int:
        self._m.enter("nvmlDeviceGetSupportedEventTypes", handle, mig_ok=False)
        return SUPPORTED_EVENTS

    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None:
        node = self._m.enter("nvmlDeviceRegisterEvents", handle, mig_ok=False)
        if eventTypes & ~SUPPORTED_EVENTS:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        with self._events.cond:
            s = self._events.sets.get(eventSet)
            if s is None:
                raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            s.registered[node.gpu.index] = s.registered.get(node.gpu.index, 0) | eventTypes

    def nvmlEventSetWait_v2(self, eventSet: Any, timeoutms: int) -> Any:
        """Next event of the set, or NVMLError_Timeout after `timeoutms` real milliseconds."""
        self._m.enter_system("nvmlEventSetWait_v2")
        with self._events.cond:
            s = self._events.sets.get(eventSet)
            if s is None:
                raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            self._events.cond.wait_for(lambda: s.queue or s.closed, timeout=timeoutms / 1000)
            if s.closed:
                raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)
            if not s.queue:
                raise nvml_error(pynvml.NVML_ERROR_TIMEOUT)
            gpu, event_type, data, gi_id, ci_id = s.queue.popleft()
        event = pynvml.c_nvmlEventData_t()
        event.device = gpu.handle
        event.eventType = event_type
        event.eventData = data
        event.gpuInstanceId = gi_id
        event.computeInstanceId = ci_id
        return event

    def nvmlEventSetWait(self, eventSet: Any, timeoutms: int) -> Any:
        self._m.enter_system("nvmlEventSetWait")
        return self.nvmlEventSetWait_v2(eventSet, timeoutms)

    def nvmlEventSetFree(self, eventSet: Any) -> None:
        self._m.enter_system("nvmlEventSetFree")
        with self._events.cond:
            s = self._events.sets.drop(eventSet)
            if s is None:
                raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            s.closed = True
            self._events.cond.notify_all()

    def _deliver_xid(self, gpu: Node, xid: int, gi_id: int | None) -> None:
        ci = UINT_MAX if gi_id is None else 0
        gi = UINT_MAX if gi_id is None else gi_id
        self._events.deliver(gpu, pynvml.nvmlEventTypeXidCriticalError, xid, gi, ci)
