"""The graphed engine of one causal LM (``GraphedEngine``, one per model and process): static KV buffers sized
once, static input buffers per shape, and the graphs captured over them.

Why per process and not per run: a CUDA graph replays fixed memory addresses, so the buffers it reads must outlive
the run that captured it. A run's cache (``cache.GraphedCache``) therefore leases a *slot* (buffers and graphs) from
its model's engine and hands it back when the run is dropped; the next run reuses the slot and its graphs. Runs
alive at the same time (the page's Step ▸ walks three columns at once) lease different slots.

Capacity: every slot holds ``capacity`` positions, by default the longest run the app allows (the prompt limit,
the new-token limit and the longest draft a setting allows, rounded up), so graphs never depend on a run's
prompt; a run that needs more grows its slot (the slot's graphs are captured again, and the engine says so)."""
from __future__ import annotations

import inspect
import threading
from dataclasses import dataclass, field

import torch

from ..kvcache import accepts_logits_to_keep, cache_argument
from ..settings import FIELDS, Limits
from .graphs import MAX_GRAPHED_TOKENS, Capturer, GraphPool, StepShape, cuda_capturer
from .static_kv import StaticKV, causal_mask

CAPACITY_QUANTUM = 256
DRAFT_LENGTH_FIELDS = ("gamma", "max_draft_len", "draft_len", "phrase_len")
ENGINE_ATTRIBUTE = "_pacer_graphed_engine"


def default_capacity(limits: Limits | None = None) -> int:
    """Positions a slot holds: the prompt and new-token limits plus the longest draft any setting allows and its
    bonus token, rounded up to CAPACITY_QUANTUM (1536 + 512 + 64 + 1 -> 2304 by default)."""
    limits = limits or Limits.from_env()
    longest_draft = max(int(field.high) for field in FIELDS if field.name in DRAFT_LENGTH_FIELDS)
    needed = limits.max_prompt_tokens + limits.max_new_tokens + longest_draft + 1
    return -(-needed // CAPACITY_QUANTUM) * CAPACITY_QUANTUM


def takes_position_argument(model_class: type, name: str) -> bool:
    try:
        return name in inspect.signature(model_class.forward).parameters
    except (TypeError, ValueError):
        return False


@dataclass
class Slot:
    """One lease of the engine: KV stores by row count, token-id buffers by (rows, fed), the start position
    ([1] long: where the call's first token goes) and the graphs over them."""
    capacity: int
    device: torch.device
    pool: GraphPool
    stores: dict[int, StaticKV] = field(default_factory=dict)
    token_buffers: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)
    in_use: bool = False

    def __post_init__(self):
        self.start = torch.zeros(1, dtype=torch.long, device=self.device)
        self.offsets = torch.arange(MAX_GRAPHED_TOKENS, dtype=torch.long, device=self.device)
        self.key_positions = torch.arange(self.capacity, dtype=torch.long, device=self.device)

    def store(self, rows: int) -> StaticKV:
        if rows not in self.stores:
            self.stores[rows] = StaticKV(self.capacity)
        return self.stores[rows]

    def grow(self, needed: int) -> int:
        """Room for ``needed`` positions: every store moved to larger buffers and the graphs forgotten."""
        capacity = -(-max(needed, self.capacity + self.capacity // 4) // CAPACITY_QUANTUM) * CAPACITY_QUANTUM
        for store in self.stores.values():
            store.grow(capacity)
        self.capacity = capacity
        self.key_positions = torch.arange(capacity, dtype=torch.long, device=self.device)
        self.pool.clear()
        return capacity


class GraphedEngine:
    """Runs one causal LM's calls over static buffers, captured as graphs where ``capturer`` allows (default: CUDA
    graphs on a CUDA model, eager elsewhere). ``capture_seconds`` and ``captures`` sum over every slot; ``notes``
    says what happened that a page should show (a fallback to eager and why, a slot that grew)."""

    def __init__(self, model, capacity: int | None = None, capturer: Capturer | None | str = "auto"):
        self.model = model
        parameter = next(model.parameters())
        self.device, self.dtype = parameter.device, parameter.dtype
        self.capacity = capacity or default_capacity()
        if capturer == "auto":
            capturer = cuda_capturer() if self.device.type == "cuda" else None
        self.capturer = capturer
        self.slots: list[Slot] = []
        self.leasing = threading.Lock()          # runs of concurrent page sessions lease slots from threads
        self.notes: list[str] = []
        self.logits_to_keep = accepts_logits_to_keep(type(model))
        self.position_keywords = [name for name in ("position_ids", "cache_position")
                                  if takes_position_argument(type(model), name)]

    @property
    def graphs_on(self) -> bool:
        return self.capturer is not None

    @property
    def capture_seconds(self) -> float:
        return sum(slot.pool.capture_seconds for slot in self.slots)

    @property
    def captures(self) -> int:
        return sum(slot.pool.captures for slot in self.slots)

    @property
    def fallback_reason(self) -> str | None:
        return next((slot.pool.fallback_reason for slot in self.slots if slot.pool.fallback_reason), None)

    def describe(self) -> str:
        """One line for a model line: how this model's calls run."""
        if not self.graphs_on:
            return f"static cache, eager ({self.device.type}: CUDA graphs need a CUDA device)"
        if self.fallback_reason:
            return f"static cache, eager after a failed graph capture: {self.fallback_reason}"
        return f"CUDA graphs: {self.captures} captured in {self.capture_seconds:.2f} s"

    def acquire(self) -> Slot:
        """A free slot (its graphs kept from earlier runs), or a new one."""
        with self.leasing:
            slot = next((slot for slot in self.slots if not slot.in_use), None)
            if slot is None:
                slot = Slot(self.capacity, self.device,
                            GraphPool(self.capturer, lambda key: key.fed <= MAX_GRAPHED_TOKENS))
                self.slots.append(slot)
            slot.in_use = True
            return slot

    @staticmethod
    def release(slot: Slot) -> None:
        slot.in_use = False

    def ensure_room(self, slot: Slot, needed: int) -> None:
        if needed > slot.capacity:
            capacity = slot.grow(needed)
            self.notes.append(f"a run needed {needed} positions: its slot grew to {capacity} and captures again")

    def call(self, slot: Slot, shape: StepShape, token_ids: torch.Tensor, start: int) -> tuple[tuple, bool]:
        """The model over ``token_ids`` [B, T] at positions start..start+T-1 of the slot's B-row store: (logits
        [B, T', V] (T' = keep or T), last hidden states [B, T', H] or None, features [B, T, H] or None), and
        whether those are a replay's static outputs."""
        buffer = slot.token_buffers.get((shape.rows, shape.fed))
        if buffer is None:
            buffer = slot.token_buffers[(shape.rows, shape.fed)] = torch.zeros(
                shape.rows, shape.fed, dtype=torch.long, device=self.device)
        buffer.copy_(token_ids)
        slot.start.fill_(start)
        store = slot.store(shape.rows)
        store.length = start
        writes_before = store.writes
        outputs, replayed = slot.pool.run(shape, lambda: self._step(slot, shape, buffer, store))
        if not replayed and store.writes == writes_before:
            raise RuntimeError("The model did not write into the static cache handed to it: this transformers "
                               "release takes the cache under another argument name.")
        return outputs, replayed

    def _step(self, slot: Slot, shape: StepShape, token_ids: torch.Tensor, store: StaticKV) -> tuple:
        """One model call reading only the slot's buffers (so a graph of it replays right)."""
        positions = slot.start + slot.offsets[: shape.fed] if shape.fed <= MAX_GRAPHED_TOKENS else \
            slot.start + torch.arange(shape.fed, device=self.device)                              # [T]
        store.write_positions = positions
        store.span = shape.span
        mask = causal_mask(positions, slot.key_positions[: shape.span], self.dtype)                # [1, 1, T, S]
        given = {"position_ids": positions[None], "cache_position": positions}
        extra = {name: given[name] for name in self.position_keywords}
        if shape.keep and not shape.features and self.logits_to_keep:
            extra["logits_to_keep"] = shape.keep
        captured = {}
        hook = (self.model.get_output_embeddings().register_forward_pre_hook(
            lambda module, args: captured.__setitem__("features", args[0])) if shape.features else None)
        try:
            outputs = self.model(input_ids=token_ids, attention_mask=mask, use_cache=True,
                                 output_hidden_states=shape.hidden, **cache_argument(self.model, store), **extra)
        finally:
            if hook is not None:
                hook.remove()
        logits = outputs.logits if not shape.keep else outputs.logits[:, -shape.keep:]
        hidden = outputs.hidden_states[-1][:, -(shape.keep or shape.fed):] if shape.hidden else None
        return logits, hidden, captured.get("features")


def engine_for(model, **options) -> GraphedEngine:
    """The model's engine for this process, made at first use (``options``: ``GraphedEngine``'s, used only then)."""
    engine = getattr(model, ENGINE_ATTRIBUTE, None)
    if engine is None:
        engine = GraphedEngine(model, **options)
        object.__setattr__(model, ENGINE_ATTRIBUTE, engine)   # beside the module's own state, not a submodule
    return engine


def install_engine(model, engine: GraphedEngine) -> GraphedEngine:
    """Give ``model`` this engine (tests: a fake capturer, a small capacity)."""
    object.__setattr__(model, ENGINE_ATTRIBUTE, engine)
    return engine
