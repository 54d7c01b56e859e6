"""``GraphedCache``: one run's state of a causal LM on the graphed engine, a ``kvcache.ModelCache`` like
``kvcache.CachedModel`` (same contract, same logits) over a slot of static buffers leased from the model's engine.

What each operation costs: ``forward`` copies the new ids into the slot's [B, T] buffer and the start position into
its [1] buffer, then runs (or replays) the call of that shape; ``crop`` moves ``length`` (the stale entries are
masked by position, ``static_kv``); ``reorder`` is an index copy into the slot's buffers for the new row count
(in place when the count is unchanged, so graphs over those buffers stay valid)."""
from __future__ import annotations

import weakref

import torch

from ..kvcache import FeedsSequence, token_rows
from .engine import GraphedEngine
from .graphs import StepShape
from .static_kv import span_for


class GraphedCache(FeedsSequence):
    """A causal LM's cache on static buffers (``ModelCache``). ``keep_features``: record what the output layer
    reads (the target of a drafter that reads its hidden states), [B, length, H]."""

    def __init__(self, engine: GraphedEngine, vocab_size: int, keep_features: bool = False):
        self.engine = engine
        self.model = engine.model
        self.vocab_size = vocab_size
        self.keep_features = keep_features
        self.slot = engine.acquire()
        weakref.finalize(self, GraphedEngine.release, self.slot)    # the slot goes back when the run is dropped
        self.device = engine.device
        self.length = 0
        self.calls = 0
        self.rows = 1
        self.features: torch.Tensor | None = None

    @property
    def feature_length(self) -> int:
        return 0 if self.features is None else self.features.shape[1]

    @torch.inference_mode()
    def forward(self, new_token_ids, output_hidden_states: bool = False, keep: int | None = None):
        """``ModelCache.forward``: float32 logits [B, T', V] (and hidden states [B, T', H]), T' = min(keep, T)."""
        token_ids = token_rows(new_token_ids)
        rows, fed = token_ids.shape
        if self.length and rows != self.rows:
            raise ValueError(f"The cache holds {self.rows} rows and {rows} were fed: rows change only through "
                             "reorder.")
        self.rows = rows
        keep = min(keep, fed) if keep else None
        self.engine.ensure_room(self.slot, self.length + fed)
        shape = StepShape(rows, fed, keep, output_hidden_states, self.keep_features,
                          span_for(self.length + fed, self.slot.capacity))
        (logits, hidden, features), replayed = self.engine.call(self.slot, shape, token_ids, self.length)
        self.length += fed
        self.calls += 1
        if self.keep_features:
            new_features = features.clone() if replayed else features
            self.features = new_features if self.features is None else torch.cat([self.features, new_features], 1)
        logits = logits[..., : self.vocab_size].float()
        if replayed:                   # a replay's outputs are overwritten by the next replay: keep a copy
            logits, hidden = logits.clone(), None if hidden is None else hidden.clone()
        if output_hidden_states:       # on the run's device, as ``CachedModel.forward`` returns them
            return logits.to(self.device), hidden.float().to(self.device)
        return logits.to(self.device)

    def crop(self, length: int) -> None:
        """Forget every position from ``length`` on (they stay in the buffers, masked, until overwritten)."""
        if length < self.length:
            self.length = length
            if self.features is not None:
                self.features = self.features[:, :length]

    def reorder(self, ancestor_index: torch.Tensor) -> None:
        """Row i becomes old row ancestor_index[i]; the row count may change (SMC-SD's 1 -> N)."""
        ancestor_index = ancestor_index.to(self.device)
        rows = int(ancestor_index.shape[0])
        source = self.slot.store(self.rows)
        self.slot.store(rows).copy_rows_from(source, ancestor_index, self.length)
        self.rows = rows
        if self.features is not None:
            self.features = self.features.index_select(0, ancestor_index.to(self.features.device))
