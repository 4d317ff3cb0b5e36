"""A KV cache of fixed slots, one per answer being decoded, each at its own position, plugged
into a transformers model through its attention interface.

transformers' caches keep one position for the whole batch (StaticCache) or grow by
concatenation (DynamicCache), so a finished row cannot take the next chat while the others
go on. Here the model runs with no cache of its own (`use_cache=False`): its registered
attention function (transformers' `AttentionInterface`, the library's hook for custom
kernels) writes each new key and value into the row's slot at the row's position and
attends over the slot up to it. Rotary positions come from the `position_ids` the caller
passes, so every row can be anywhere. A slot keeps what a chat's earlier turns computed, so
the next turn prefills only the tokens that are new. A decode step attends lane by lane
(lanes.py), each contiguous range of slots only as wide as its own longest chat.

The buffers have one spare column at the end that no query attends: padding tokens of a
prefill write there. Grouped-query heads are folded into the query length, so SDPA's fused
kernels with a mask serve and the keys are never repeated per head.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F

from pipeline.sizes import format_bytes

NAME = "eagle3_regen_slots"
_ACTIVE: SlotKV | None = None


class UnsupportedAttention(Exception):
    """The model asks its attention for something the slots do not do (a sliding window...)."""


class CacheTooLarge(Exception):
    """The slots' buffers would not fit in what the device has free: on a CPU the kernel would
    kill the process, on a GPU torch would fail mid-step; this says so first."""

    def __init__(self, needed: int, free: int, positions: int) -> None:
        super().__init__(f"the slots' KV cache needs {format_bytes(needed)} more to hold {positions:,} positions "
                         f"a slot, and {format_bytes(HEADROOM)} beside it for the forward; {format_bytes(free)} "
                         "are free")
        self.needed, self.free, self.positions = needed, free, positions


HEADROOM = 1 << 30  # left free beside the cache: the forward's own tensors


def free_bytes(device: torch.device) -> int:
    """Memory a new buffer can take: the GPU's free memory and what torch holds unused, or the
    host's available memory."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    import psutil

    return psutil.virtual_memory().available


def _attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
               **kwargs: object) -> tuple[torch.Tensor, None]:
    kv = _ACTIVE
    if kv is None:
        raise RuntimeError(f"attention implementation {NAME} called outside a SlotKV forward")
    for what in ("sliding_window", "softcap", "s_aux"):
        if kwargs.get(what) is not None:
            raise UnsupportedAttention(f"the target's attention uses {what}, which the regenerate slots do not apply")
    return kv.attend(cast(int, module.layer_idx), query, key, value, scaling), None


def register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, _attention)


class SlotKV:
    """K and V buffers [slots, kv_heads, capacity + 1, head_dim] per layer, and what the
    forward about to run writes and reads: which slots, the position of each token, and the
    columns each query may see."""

    def __init__(self, layers: int, slots: int, kv_heads: int, head_dim: int, capacity: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        self.shape = (slots, kv_heads, capacity + 1, head_dim)
        self.layers, self.dtype, self.device = layers, dtype, device
        self._room_for(capacity, 0)
        self.k = [torch.zeros(self.shape, dtype=dtype, device=device) for _ in range(layers)]
        self.v = [torch.zeros(self.shape, dtype=dtype, device=device) for _ in range(layers)]
        self.rows: torch.Tensor | None = None  # slot of each batch row; None: every slot, in order
        self.pos: torch.Tensor | None = None  # [rows, q] column each token writes
        self.mask: torch.Tensor | None = None  # [rows, 1, q, width] which columns each query sees
        self.width = 0
        self.lanes: list[tuple[int, int, int, torch.Tensor]] = []  # decode: (first slot, end, width, mask)

    @property
    def capacity(self) -> int:
        return self.shape[2] - 1

    def grow(self, capacity: int) -> None:
        """Room for `capacity` positions per slot, keeping what the slots hold."""
        if capacity <= self.capacity:
            return
        old = self.capacity
        self._room_for(capacity, old)
        self.shape = (*self.shape[:2], capacity + 1, self.shape[3])
        for bufs in (self.k, self.v):
            for i, b in enumerate(bufs):
                new = torch.zeros(self.shape, dtype=self.dtype, device=self.device)
                new[:, :, :old] = b[:, :, :old]
                bufs[i] = new

    def bytes_at(self, capacity: int) -> int:
        """Bytes of every layer's K and V buffers with room for `capacity` positions a slot."""
        slots, kv_heads, _, dim = self.shape
        return 2 * self.layers * slots * kv_heads * (capacity + 1) * dim * self.dtype.itemsize

    def _room_for(self, capacity: int, old: int) -> None:
        needed = self.bytes_at(capacity) - (self.bytes_at(old) if old else 0)
        free = free_bytes(self.device)
        if needed + HEADROOM > free:
            raise CacheTooLarge(needed, free, capacity)

    def set_decode(self, pos: torch.Tensor, lanes: list[tuple[int, int, int]]) -> None:
        """Every slot feeds one token at `pos` [slots] (in place, so a captured graph replays
        it); the slots `start:end` of each lane attend over their first `width` columns."""
        self.rows, self.width = None, max(w for _, _, w in lanes)
        self.pos = pos[:, None]
        self.lanes = []
        for start, end, width in lanes:
            cols = torch.arange(width, device=pos.device)
            self.lanes.append((start, end, width, (cols[None, :] <= pos[start:end, None])[:, None, None, :]))

    def set_prefill(self, rows: torch.Tensor, pos: torch.Tensor, width: int) -> None:
        """Slots `rows` feed tokens at `pos` [rows, q]; a padding token has position -1."""
        self.rows, self.width = rows, width
        pad = pos < 0
        self.pos = torch.where(pad, self.capacity, pos)
        cols = torch.arange(width, device=pos.device)
        mask = cols[None, None, :] <= pos[:, :, None]
        mask[:, :, 0] |= pad  # a padding query sees column 0 so its softmax is defined; nothing reads it
        self.mask = mask[:, None]

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               scaling: float | None) -> torch.Tensor:
        kb, vb = self.k[layer], self.v[layer]
        n, heads, qlen, dim = q.shape
        groups = heads // kb.shape[1]
        slots = torch.arange(n, device=q.device)[:, None] if self.rows is None else self.rows[:, None]
        kb[slots, :, self.pos] = k.transpose(1, 2).to(kb.dtype)
        vb[slots, :, self.pos] = v.transpose(1, 2).to(vb.dtype)
        if self.rows is None:
            folded = q.reshape(n, kb.shape[1], groups * qlen, dim)
            outs = [F.scaled_dot_product_attention(folded[a:b], kb[a:b, :, :w], vb[a:b, :, :w], attn_mask=mask,
                                                   scale=scaling) for a, b, w, mask in self.lanes]
            out = outs[0] if len(outs) == 1 else torch.cat(outs)
            return out.reshape(n, heads, qlen, dim).transpose(1, 2)
        keys, values = kb[self.rows, :, : self.width], vb[self.rows, :, : self.width]
        kv_heads = keys.shape[1]
        folded = q.reshape(n, kv_heads, groups * qlen, dim)
        mask = self.mask
        if mask is None:
            raise RuntimeError("prefill rows attended before set_prefill gave their mask")
        if groups > 1 and qlen > 1:
            mask = mask[:, :, None].expand(n, 1, groups, qlen, self.width).reshape(n, 1, groups * qlen, self.width)
        out = F.scaled_dot_product_attention(folded, keys, values, attn_mask=mask, scale=scaling)
        return out.reshape(n, heads, qlen, dim).transpose(1, 2)


class active:
    """`with active(kv):` routes the registered attention to `kv` for the forwards inside."""

    def __init__(self, kv: SlotKV) -> None:
        self.kv = kv

    def __enter__(self) -> SlotKV:
        global _ACTIVE
        _ACTIVE = self.kv
        return self.kv

    def __exit__(self, *exc: object) -> None:
        global _ACTIVE
        _ACTIVE = None
