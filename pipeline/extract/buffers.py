"""Host buffers that captured batches land in, a fixed number of them.

The pool is what bounds memory: the GPU loop must take a free slot before it can copy a
batch out, and a slot comes back only when writers have put every sample of its batch on
disk, so a slow disk stalls the GPU instead of growing RAM. On CUDA the slots are pinned
so device-to-host copies run asynchronously on a side stream. An fp8 store's batches arrive
quantized on the device (engine.py) and take the same slot's bytes read as e4m3 values and
float32 scales (`fp8_views`): about half of what the captured states would.
"""

from __future__ import annotations

import queue
from collections.abc import Callable

import torch


class HostSlot:
    def __init__(self, capacity_tokens: int, hidden: int, dtype: torch.dtype, pin: bool) -> None:
        self.capacity_tokens = capacity_tokens
        self.hidden = hidden
        self.data = torch.empty(capacity_tokens * 4 * hidden, dtype=dtype, pin_memory=pin)
        self.bad = torch.empty(capacity_tokens, dtype=torch.bool, pin_memory=pin)

    def views(self, batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(final [B,T,H], aux [B,T,3H], bad [B]) laid out so each sample's rows are contiguous."""
        h, n = self.hidden, batch * length
        if n > self.capacity_tokens:
            raise ValueError(f"batch of {batch}x{length} tokens exceeds the slot's {self.capacity_tokens}")
        final = self.data[: n * h].view(batch, length, h)
        aux = self.data[n * h : n * 4 * h].view(batch, length, 3 * h)
        return final, aux, self.bad[:batch]

    def fp8_views(self, batch: int, length: int) -> tuple[torch.Tensor, ...]:
        """(final [B,T,H] e4m3, aux [B,T,3H] e4m3, final scales [B,T], aux scales [B,T,3] float32,
        bad [B]) over the slot's bytes: n*4H bytes of values, then 16 bytes a token of scales,
        which fit in the n*4H*2 bytes a 16-bit slot has whenever H >= 4."""
        h, n = self.hidden, batch * length
        raw = self.data.view(torch.uint8)
        if n > self.capacity_tokens or n * (4 * h + 16) > raw.numel():
            raise ValueError(f"batch of {batch}x{length} tokens exceeds the slot's {self.capacity_tokens}")
        values = raw[: n * 4 * h].view(torch.float8_e4m3fn)
        scales = raw[n * 4 * h : n * (4 * h + 16)].view(torch.float32)  # n*4H is a multiple of 4
        return (values[: n * h].view(batch, length, h), values[n * h :].view(batch, length, 3 * h),
                scales[:n].view(batch, length), scales[n:].view(batch, length, 3), self.bad[:batch])


class BufferPool:
    def __init__(self, slots: int, capacity_tokens: int, hidden: int, dtype: torch.dtype, pin: bool) -> None:
        self._free: queue.Queue[HostSlot] = queue.Queue()
        self._args = (capacity_tokens, hidden, dtype, pin)
        # Allocated up front: pinning hundreds of MB takes a while and belongs before the loop.
        for _ in range(slots):
            self._free.put(HostSlot(*self._args))

    @property
    def slot_bytes(self) -> int:
        capacity, hidden, dtype, _ = self._args
        return capacity * 4 * hidden * torch.empty((), dtype=dtype).element_size()

    def acquire(self, abort: Callable[[], bool]) -> HostSlot | None:
        """A free slot, or None once `abort()` turns true."""
        while True:
            try:
                return self._free.get(timeout=0.1)
            except queue.Empty:
                if abort():
                    return None

    def release(self, slot: HostSlot) -> None:
        self._free.put(slot)
