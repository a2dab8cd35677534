"""Opaque NVML handles (devices, GPU instances, event sets, GPM samples) as real ctypes pointers.

pynvml hands out `POINTER(struct_...)` objects that callers store in structs and read back
as fresh pointer objects, so a handle is identified by the address it holds, never by the
Python object. Each handle points at a one-byte buffer the table keeps alive, so addresses
are unique and valid for the handle's lifetime. Nothing here ever dereferences a handle.
"""

import ctypes
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def address_of(handle: Any) -> int | None:
    """The address a pointer-like handle holds; None for NULL or a non-pointer."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


class HandleTable(Generic[T]):
    """Maps handles of one pointer type to their targets."""

    __slots__ = ("_buffers", "_by_address", "_by_id", "_id_of", "_pointer_type")

    def __init__(self, pointer_type: Any) -> None:
        self._pointer_type = pointer_type
        self._by_address: dict[int, T] = {}
        self._by_id: dict[int, tuple[Any, T]] = {}  # id(our handle) -> (handle, target)
        self._id_of: dict[int, int] = {}  # address -> id(our handle)
        self._buffers: dict[int, Any] = {}

    def new(self, target: T) -> Any:
        buffer = ctypes.create_string_buffer(1)
        address = ctypes.addressof(buffer)
        handle = ctypes.cast(buffer, self._pointer_type)
        self._buffers[address] = buffer
        self._by_address[address] = target
        self._by_id[id(handle)] = (handle, target)
        self._id_of[address] = id(handle)
        return handle

    def get(self, handle: Any) -> T | None:
        # Fast path: the very object we handed out (kept alive here, so its id is unique).
        hit = self._by_id.get(id(handle))
        if hit is not None and hit[0] is handle:
            return hit[1]
        address = address_of(handle)
        return None if address is None else self._by_address.get(address)

    def drop(self, handle: Any) -> T | None:
        address = address_of(handle)
        if address is None or address not in self._by_address:
            return None
        del self._by_id[self._id_of.pop(address)]
        del self._buffers[address]
        return self._by_address.pop(address)

    def values(self) -> list[T]:
        return list(self._by_address.values())
