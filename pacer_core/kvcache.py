"""The cache contract every model of a run meets, target and drafter alike (``ModelCache``), the one growing KV store the torch models
write through (``GrowingLayer``), and a causal LM's cache (``CachedModel``).

Invariant: a cache holds exactly the first ``length`` tokens of the sequence being decoded (every batch row the
same length). Rolling back is ``crop``; SMC-SD copies rows with ``reorder``. Decoders never touch cache internals:
they speak only ``ModelCache``, so fixed SD, PACER, the oracle and SMC-SD draft with every kind of drafter unchanged.

Devices: ``device`` is the model's first parameter's (its input embedding's). Token ids are moved there
before the forward and the logits and hidden states are returned there, even when ``device_map="auto"``
put the last layer on another GPU; recorded ``features`` stay where the output layer read them (readers
move them). The KV cache's layers stay on their own devices (``reorder_cache`` moves the index)."""
from __future__ import annotations

import functools
import inspect
from typing import Protocol, runtime_checkable

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer


@runtime_checkable
class ModelCache(Protocol):
    """One run's state of one model (the target on torch or llama.cpp, or a drafter), as every decoder uses it (shape letters: B rows, T fed, V vocabulary, H hidden).

    ``forward(new_token_ids, output_hidden_states=False, keep=None)``: append tokens (a list of ids for one row, or
    a [B, T] tensor) and return float32 logits [B, T, V] (and hidden states [B, T, H] when asked); with ``keep``
    only the last ``keep`` positions are returned (T becomes min(keep, T)) and a cache computes no more than it
    must for them. ``crop(length)``: forget every token past ``length``. ``reorder(ancestor_index)``: row i
    becomes old row ancestor_index[i]; the row count may change (SMC-SD's 1 → N after its prefill).
    ``feed_sequence``: see ``FeedsSequence``. ``length``: tokens held; ``calls``: forwards made; ``features``:
    the target's recorded hidden states [B, length, H] (a target cache asked to keep them), else None;
    ``feature_length``: positions of ``features`` held (0 without them); ``device``: where its input ids go and
    its logits come back (the run's device when it is the target's cache)."""

    length: int
    calls: int
    features: torch.Tensor | None
    feature_length: int
    device: torch.device

    def forward(self, new_token_ids, output_hidden_states: bool = False, keep: int | None = None): ...

    def crop(self, length: int) -> None: ...

    def reorder(self, ancestor_index: torch.Tensor) -> None: ...

    def feed_sequence(self, sequence: list[int], extra: list[int] = (), output_hidden_states: bool = False,
                      keep: int | None = None): ...


def prefill_prompt(cache: ModelCache, prompt_ids, counted: bool = True) -> None:
    """Feed prompt[:-1] into an empty one-row cache, as a run starts: the llama.cpp target's own ``prefill`` (the
    same chunks for every run of the prompt, which its flash attention may tile: pacer_core/llama/target.py), any
    other cache a forward that computes one row of logits, unused. The run's first step feeds the last token.
    ``counted``: whether the llama.cpp target counts the prefill among its calls (a run that needs it apart from
    its first step); any other cache always counts its forward."""
    prefix = [int(token_id) for token_id in prompt_ids[:-1]]
    if hasattr(cache, "prefill"):
        cache.prefill(prefix, counted)
    else:
        cache.forward(prefix, keep=1)


def first_pass_in_prefill(cache: ModelCache, prompt_ids) -> torch.Tensor | None:
    """A run's first pass fed with its prefill where the cache can do that without changing a bit
    (``LlamaTargetCache.first_pass``): the last prompt token's logits row [V], every prompt token fed and the pass
    counted; None where it cannot, with nothing fed (then ``prefill_prompt`` and a first step)."""
    first_pass = getattr(cache, "first_pass", None)
    return first_pass(prompt_ids) if first_pass is not None else None


def token_rows(new_token_ids) -> torch.Tensor:
    """Token ids as a [B, T] long tensor: a list of ids is one row."""
    if torch.is_tensor(new_token_ids):
        return new_token_ids
    return torch.tensor([list(new_token_ids)], dtype=torch.long)


def last_positions(states: torch.Tensor, keep: int | None) -> torch.Tensor:
    """The last ``keep`` positions of [B, T, ...] (all of them without ``keep``)."""
    return states[:, -keep:] if keep else states


class FeedsSequence:
    """The one ``feed_sequence`` every cache shares: crop to ``sequence``'s length (the cache holds a prefix of
    it: the invariant above; the caller crops what it rejected), then feed the rest of ``sequence`` plus ``extra``. Returns row 0's logits of the fed positions, [T, V] (the last
    ``keep`` only, when given), and its hidden states [T, H] when asked. At least one token is always fed: a
    cache that already holds all of ``sequence`` (and no ``extra`` is given) re-feeds its last token, whose
    logits are the next token's distribution."""

    def feed_sequence(self, sequence: list[int], extra: list[int] = (), output_hidden_states: bool = False,
                      keep: int | None = None):
        self.crop(min(self.length, len(sequence) - 1 if not extra else len(sequence)))
        pending = list(sequence[self.length:]) + list(extra)
        result = self.forward(pending, output_hidden_states, keep)
        if output_hidden_states:
            return result[0][0], result[1][0]
        return result[0]


def records_rows(cache: ModelCache) -> bool:
    """Whether a run may keep ``cache``'s rows along its output (``RowRecorder``): only where a position's logits
    row has the same bits however many rows a feed computes (``row_invariant_logits``: the llama.cpp caches). On
    torch a head over two rows rounds the last one otherwise than over one, so recording would make a kept-rows
    run draw other samples than the same run unrecorded; those runs' rows come from a pass after the run."""
    return bool(getattr(cache, "row_invariant_logits", False))


def rows_over(rows: dict[int, torch.Tensor], start: int, end: int) -> torch.Tensor | None:
    """The rows predicting positions start..end-1 ({position: row [V]}) as one [end - start, V] tensor; None when
    any of them is missing (or the span is empty)."""
    if end <= start or any(position not in rows for position in range(start, end)):
        return None
    return torch.stack([rows[position] for position in range(start, end)])


class RowRecorder(FeedsSequence):
    """A one-row ``ModelCache`` that keeps the logits row of every position fed to the cache it wraps, by the
    position that row predicts (a row fed at index i predicts index i + 1): the drafter's q along a run's output,
    which the page would otherwise compute with another pass over it (``Result.draft_rows``). ``forward`` computes
    every fed position's row (a step's first feed is one or two tokens: one more row at most) and returns the
    ``keep`` asked for; ``crop`` forgets the rows whose context it cut, so every row kept was computed from the
    tokens the cache holds now. Everything else is the wrapped cache's."""

    def __init__(self, cache: ModelCache):
        self.cache = cache
        self.rows: dict[int, torch.Tensor] = {}     # position predicted -> logits row [V]

    def __getattr__(self, name):
        if name == "cache":          # not set yet (a copy under construction): never look it up in itself
            raise AttributeError(name)
        return getattr(self.cache, name)

    def forward(self, new_token_ids, output_hidden_states: bool = False, keep: int | None = None):
        start = self.cache.length
        fed = new_token_ids.shape[1] if torch.is_tensor(new_token_ids) else len(new_token_ids)
        result = self.cache.forward(new_token_ids, output_hidden_states)
        logits = result[0] if output_hidden_states else result
        for offset in range(fed):
            self.rows[start + offset + 1] = logits[0, offset]
        if output_hidden_states:
            return last_positions(logits, keep), last_positions(result[1], keep)
        return last_positions(logits, keep)

    def crop(self, length: int) -> None:
        self.cache.crop(length)
        for position in [position for position in self.rows if position > length]:
            del self.rows[position]

    def reorder(self, ancestor_index: torch.Tensor) -> None:
        raise NotImplementedError("RowRecorder records one row; SMC-SD keeps its rows by lineage (decoders/smc.py).")

    def rows_along(self, start: int, end: int) -> torch.Tensor | None:
        return rows_over(self.rows, start, end)

    def complete(self, sequence: list[int]) -> None:
        """Feed what the cache lacks of ``sequence`` but its last token: the rows predicting every position of it
        after the cache's own (a run's last bonus token, which no draft call fed)."""
        if self.cache.length < len(sequence) - 1:
            self.forward(list(sequence[self.cache.length: -1]))


class GrowingLayer(DynamicLayer):
    """One attention layer's keys and values in buffers with room to grow, so a forward writes its new positions
    in place: the KV store of every torch drafter and target (transformers models through ``GrowingCache``, the
    lean decode step and the feature head directly). DynamicLayer appends with ``torch.cat``, which copies every
    cached position at every forward: a cost that grows with the position apart from attention itself
    (docs/measurements.md, "Long answers and long prompts"). ``keys`` / ``values`` are views of the first
    ``length`` positions ([B, H, length, D] of [B, H, capacity, D]); a full buffer grows by a quarter (at least
    GROW_BY positions), so an append copies the cache once every GROW_BY or more tokens. Cropping moves
    ``length``; the row count changes only through ``reorder_cache`` (or while the layer is empty)."""

    GROW_BY = 256

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self.key_buffer = self.value_buffer = None
        self.length = 0

    def _views(self) -> None:
        self.keys, self.values = self.key_buffer[:, :, : self.length], self.value_buffer[:, :, : self.length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Append [B, H, T, D] keys and values; returns every cached position's (views, [B, H, length, D])."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, end = self.length, self.length + key_states.shape[-2]
        buffer = self.key_buffer
        if buffer is None or end > buffer.shape[-2] or buffer.shape[0] != key_states.shape[0]:
            self._reserve(key_states, value_states, end)
        self.key_buffer[:, :, start:end] = key_states
        self.value_buffer[:, :, start:end] = value_states
        self.length = end
        self._views()
        return self.keys, self.values

    def _reserve(self, key_states: torch.Tensor, value_states: torch.Tensor, end: int) -> None:
        """New buffers with room for ``end`` positions and more, holding the cached ones."""
        batch, heads, _, key_dim = key_states.shape
        if self.length and self.key_buffer.shape[0] != batch:
            raise ValueError(f"The cache holds {self.key_buffer.shape[0]} rows and {batch} were fed: rows change "
                             "only through reorder.")
        capacity = end + max(self.GROW_BY, end // 4)
        keys = key_states.new_empty(batch, heads, capacity, key_dim)
        values = value_states.new_empty(batch, heads, capacity, value_states.shape[-1])
        if self.length:
            keys[:, :, : self.length] = self.key_buffer[:, :, : self.length]
            values[:, :, : self.length] = self.value_buffer[:, :, : self.length]
        self.key_buffer, self.value_buffer = keys, values

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def crop(self, tokens_to_remove: int) -> None:
        """DynamicLayer's signature: the number of tokens to remove, as a negative integer."""
        if tokens_to_remove > 0:
            raise ValueError(f"GrowingLayer.crop takes the number of tokens to remove as a negative integer "
                             f"(got {tokens_to_remove}).")
        if tokens_to_remove == 0 or not self.is_initialized:
            return
        self.length = max(self.length + tokens_to_remove, 0)
        self._views()

    def crop_to(self, length: int) -> None:
        """Keep the first ``length`` positions."""
        if self.is_initialized and length < self.length:
            self.crop(length - self.length)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Row i becomes old row beam_idx[i] (the batch may change size: SMC-SD's 1 → N after prefill)."""
        if self.is_initialized and self.key_buffer is not None:
            index = beam_idx.to(self.key_buffer.device)
            self.key_buffer = self.key_buffer.index_select(0, index)
            self.value_buffer = self.value_buffer.index_select(0, index)
            self._views()

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.is_initialized and self.key_buffer is not None:
            self.key_buffer = self.key_buffer.repeat_interleave(repeats, dim=0)
            self.value_buffer = self.value_buffer.repeat_interleave(repeats, dim=0)
            self._views()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized and self.key_buffer is not None:
            self.key_buffer, self.value_buffer = self.key_buffer[indices, ...], self.value_buffer[indices, ...]
            self._views()

    def reset(self) -> None:
        self.key_buffer = self.value_buffer = None
        self.length = 0
        super().reset()


class GrowingCache(DynamicCache):
    """A DynamicCache made of ``GrowingLayer``s (same interface: crop, reorder_cache, get_seq_length)."""

    def __init__(self):
        Cache.__init__(self, layer_class_to_replicate=GrowingLayer)

    def layer(self, index: int) -> GrowingLayer:
        """Layer ``index``, created (empty) on first use."""
        while len(self.layers) <= index:
            self.layers.append(GrowingLayer())
        return self.layers[index]


@functools.lru_cache(maxsize=None)
def accepts_logits_to_keep(model_class: type) -> bool:
    """Whether a model class's forward computes only the last positions' logits when asked (transformers'
    ``logits_to_keep``)."""
    try:
        return "logits_to_keep" in inspect.signature(model_class.forward).parameters
    except (TypeError, ValueError):
        return False


@functools.lru_cache(maxsize=None)
def cache_keyword(model_class: type) -> str:
    """The name under which a model class's forward takes its KV cache: ``cache`` from transformers 5.24,
    ``past_key_values`` before (a name the forward does not know would be swallowed by its ``**kwargs`` and
    every call would decode without context)."""
    try:
        parameters = inspect.signature(model_class.forward).parameters
    except (TypeError, ValueError):
        return "cache"
    return "cache" if "cache" in parameters or "past_key_values" not in parameters else "past_key_values"


def cache_argument(model, cache) -> dict:
    """The keyword argument that hands ``cache`` to ``model``'s forward (``cache_keyword``)."""
    return {cache_keyword(type(model)): cache}


def returned_cache(outputs):
    """The KV cache a forward returned (``cache`` from transformers 5.24, ``past_key_values`` before)."""
    cache = getattr(outputs, "cache", None)
    return cache if cache is not None else getattr(outputs, "past_key_values", None)


def forward_with_cache(model, cache: Cache, token_ids: torch.Tensor, **kwargs):
    """``model``'s forward over ``token_ids`` after what ``cache`` holds, the cache under the name the model takes
    (``cache_argument``). The call must leave the new tokens in ``cache``: else the model ignored it and decoded
    without context, which would give wrong tokens silently, so that is an error."""
    before = cache.get_seq_length()
    outputs = model(input_ids=token_ids, use_cache=True, **cache_argument(model, cache), **kwargs)
    if cache.get_seq_length() != before + token_ids.shape[1]:
        raise RuntimeError(f"The model did not use the KV cache handed to it (it holds {cache.get_seq_length()} "
                           f"tokens, {before + token_ids.shape[1]} expected): this transformers release takes the "
                           "cache under another argument name.")
    return outputs


class CachedModel(FeedsSequence):
    """A causal LM run incrementally over one growing (or batched) token sequence, its KV store a
    ``GrowingCache``; a ``ModelCache``. Subclasses change only ``_run`` (one model call over the new tokens)."""

    def __init__(self, model, vocab_size: int, keep_features: bool = False):
        self.keep_logits: int | None = None   # this forward's ``keep`` (read by _run)
        self.model = model
        self.vocab_size = vocab_size
        self.cache = GrowingCache()
        self.length = 0
        self.calls = 0
        self.device = next(model.parameters()).device
        self.keep_features = keep_features
        self.features: torch.Tensor | None = None   # [B, length, H] what the output layer read (if kept)

    @property
    def feature_length(self) -> int:
        return 0 if self.features is None else self.features.shape[1]

    @torch.inference_mode()
    def forward(self, new_token_ids, output_hidden_states: bool = False, keep: int | None = None):
        """``ModelCache.forward``. With ``keep`` the model computes only those positions' logits when it can
        (``logits_to_keep``; not while features are recorded): a long prompt's logits for every position would
        cost a fifth of the target's prefill (docs/measurements.md)."""
        new_token_ids = token_rows(new_token_ids).to(self.device)
        self.keep_logits = keep
        logits, hidden = self._run(new_token_ids, output_hidden_states)   # the cache grows in place
        self.length += new_token_ids.shape[1]
        self.calls += 1
        logits = last_positions(logits, keep)[..., : self.vocab_size].float().to(self.device)
        if output_hidden_states:
            return logits, last_positions(hidden, keep).float().to(self.device)
        return logits

    def _run(self, token_ids: torch.Tensor, output_hidden_states: bool):
        """One model call over the new tokens: (logits, last hidden states or None). Records features if kept."""
        captured = {}
        hook = (self.model.get_output_embeddings().register_forward_pre_hook(
            lambda module, args: captured.__setitem__("features", args[0])) if self.keep_features else None)
        keep = self.keep_logits
        extra = ({"logits_to_keep": int(keep)} if keep and not self.keep_features
                 and accepts_logits_to_keep(type(self.model)) else {})
        try:
            outputs = forward_with_cache(self.model, self.cache, token_ids,
                                         output_hidden_states=output_hidden_states, **extra)
        finally:
            if hook is not None:
                hook.remove()
        if self.keep_features:
            new_features = captured["features"]
            self.features = new_features if self.features is None else torch.cat([self.features, new_features], 1)
        return outputs.logits, (outputs.hidden_states[-1] if output_hidden_states else None)

    def crop(self, length: int) -> None:
        """Roll the cache back to its first ``length`` tokens."""
        if length < self.length:
            self.cache.crop(length - self.length)  # negative: tokens to drop
            self.length = length
            if self.features is not None:
                self.features = self.features[:, :length]

    def reorder(self, ancestor_index: torch.Tensor) -> None:
        """Copy batch rows: row i becomes old row ancestor_index[i] (SMC resampling)."""
        self.cache.reorder_cache(ancestor_index.to(self.device))
        if self.features is not None:
            self.features = self.features.index_select(0, ancestor_index.to(self.features.device))
