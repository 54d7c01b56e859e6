"""The static KV store of the graphed engine: every layer's keys and values in buffers preallocated to a fixed
capacity, written in place at positions held in a device tensor, so one model call has the same shapes and the same
memory addresses at every step (what a CUDA graph replays).

Shape letters: B rows, K key/value heads, C capacity (positions the buffers hold), S span (the first positions a
call's attention reads), D head size, T fed tokens.

Why a span: attention over all C positions would read (and, where transformers repeats grouped keys for a masked
attention, copy) the whole capacity at every step, a cost that grows with the app's longest allowed run rather than
with this run's length. A call reads the first S positions instead, S rounded up to SPAN_QUANTUM, so a run crosses
a few spans (each a shape with its own graphs) and attends over at most SPAN_QUANTUM - 1 positions more than it holds.

Invariant: a ``StaticKV`` reallocates only when its slot grows, which drops the slot's graphs; it holds valid entries for the first
``length`` positions of its owner's sequence (the owner, ``cache.GraphedCache``, keeps ``length``); entries past it
are stale and masked out by position (``causal_mask``): a query at position p attends only to keys at positions
<= p, and all of those were written for the current sequence. So ``crop`` only moves the owner's length."""
from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer

SPAN_QUANTUM = 256


def span_for(end: int, capacity: int) -> int:
    """The span a call ending at position ``end`` (exclusive) reads: ``end`` rounded up to SPAN_QUANTUM, at most the
    capacity. Example: end 130 -> 256, end 257 -> 512."""
    return min(capacity, -(-end // SPAN_QUANTUM) * SPAN_QUANTUM)


def causal_mask(query_positions: torch.Tensor, key_positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The additive attention mask [1, 1, T, S] for queries at ``query_positions`` [T] over the keys at
    ``key_positions`` [S]: 0 where key <= query, the dtype's minimum elsewhere (stale and future entries).

    Example: queries at [2, 3] over S = 5 keys allow keys {0, 1, 2} and {0, 1, 2, 3}:
    rows [0, 0, 0, min, min] and [0, 0, 0, 0, min]."""
    allowed = key_positions[None, :] <= query_positions[:, None]                                  # [T, S]
    blocked = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=query_positions.device)
    zero = torch.zeros((), dtype=dtype, device=query_positions.device)
    return torch.where(allowed, zero, blocked)[None, None]


class StaticLayer(DynamicLayer):
    """One attention layer's keys and values, [B, K, C, D] each, allocated at the first write. ``update`` writes
    the new [B, K, T, D] at the owner's ``write_positions`` [T] (a device tensor: the graph reads its value at
    replay) and returns views of the first ``span`` positions, [B, K, S, D]; the mask hides what is not the current
    sequence's."""

    def __init__(self, store: "StaticKV"):
        super().__init__()
        self.store = store
        self.keys = self.values = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        rows, heads, _, key_size = key_states.shape
        self.keys = key_states.new_zeros(rows, heads, self.store.capacity, key_size)
        self.values = value_states.new_zeros(rows, heads, self.store.capacity, value_states.shape[-1])

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if key_states.shape[0] != self.keys.shape[0]:
            raise ValueError(f"The static cache holds {self.keys.shape[0]} rows and {key_states.shape[0]} were fed: "
                             "rows change only through reorder.")
        positions = self.store.write_positions.to(self.keys.device)   # a layer on another device (device_map)
        self.keys.index_copy_(2, positions, key_states)
        self.values.index_copy_(2, positions, value_states)
        self.store.writes += 1
        span = self.store.span
        return self.keys[:, :, :span], self.values[:, :, :span]

    def get_seq_length(self) -> int:
        return self.store.length

    def get_mask_sizes(self, query_length: int, *args) -> tuple[int, int]:
        return self.store.span, 0

    def get_max_length(self) -> int:
        return self.store.capacity

    def grown(self, capacity: int) -> None:
        """Move to buffers of ``capacity`` positions holding everything the old ones held (outside any graph)."""
        if not self.is_initialized:
            return
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = old.new_zeros(*old.shape[:2], capacity, old.shape[-1])
            new[:, :, : old.shape[2]] = old
            setattr(self, name, new)


class StaticKV(Cache):
    """A transformers ``Cache`` of ``StaticLayer``s for one row count (layers made at their first write), handed to
    the model's forward. ``write_positions`` [T]: where the call being run writes, and ``span``: how many positions
    its attention reads (both set by the step before it calls the model); ``length``: the owner's valid positions (what ``get_seq_length`` answers, for code that asks);
    ``writes``: layer writes so far (an eager call that wrote nothing means the model ignored the cache)."""

    def __init__(self, capacity: int):
        super().__init__(layer_class_to_replicate=lambda: StaticLayer(self))
        self.capacity = capacity
        self.write_positions: torch.Tensor | None = None
        self.span = capacity
        self.length = 0
        self.writes = 0

    def grow(self, capacity: int) -> None:
        for layer in self.layers:
            layer.grown(capacity)
        self.capacity = capacity

    def copy_rows_from(self, source: "StaticKV", ancestor_index: torch.Tensor, length: int) -> None:
        """Row i of this store's first ``length`` positions becomes ``source``'s row ancestor_index[i] (an index
        copy into this store's own buffers, so their addresses stay: ``source`` may be this store)."""
        while len(self.layers) < len(source.layers):
            self.layers.append(StaticLayer(self))
        for mine, theirs in zip(self.layers, source.layers):
            if not theirs.is_initialized:
                continue
            index = ancestor_index.to(theirs.keys.device)
            picked_keys = theirs.keys[:, :, :length].index_select(0, index)        # a copy: safe when theirs is mine
            picked_values = theirs.values[:, :, :length].index_select(0, index)
            if not mine.is_initialized:
                mine.lazy_initialization(picked_keys, picked_values)
            mine.keys[:, :, :length] = picked_keys
            mine.values[:, :, :length] = picked_values
