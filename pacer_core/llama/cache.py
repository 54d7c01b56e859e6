"""One run's state of a model in a pooled llama.cpp context (``GGUFCache``), a ``kvcache.ModelCache``: the gguf
drafter's cache, and (through ``target.LlamaTargetCache``) the llama.cpp target's.

Batch row r is llama.cpp sequence r of one context with a unified KV buffer; a crop removes each row's cells past
the length, a reorder copies sequences (cells are shared, not copied). Contexts come from the owner's
``model.ContextPool`` and go back to it when the cache is dropped.

The prompt's keys and values can come from the target (``GGUFCache.adopt``): beside the llama.cpp target engine,
whose model has the same attention layout as the draft's file, the target runs over the prompt first and its
cells are copied into the draft's context (``drafters/gguf_drafter.py`` says why)."""
from __future__ import annotations

import ctypes
import weakref
from typing import Protocol

import torch

from ..drafters.vocabulary import full_vocabulary_logits
from ..kvcache import FeedsSequence
from . import model as llama_model
from .model import BATCH_TOKENS, MAX_ROWS, ContextPool, GGUFModel, llama_cpp_module


class ContextOwner(Protocol):
    """What a cache's owner holds: the gguf drafter or the llama.cpp target engine."""

    model: GGUFModel
    vocab_size: int
    pool: ContextPool


class GGUFCache(FeedsSequence):
    """One run's drafting state in a pooled llama.cpp context, a ``kvcache.ModelCache``.

    Invariant: rows 0..B-1 are sequences 0..B-1 and each holds exactly ``row_tokens[r]`` (all rows the same
    length); sequences B..2B-1 are empty outside ``reorder``."""

    features = None
    feature_length = 0
    takes_keep = True         # ``forward(keep=k)``: llama.cpp computes and returns only the last k rows' logits
    row_invariant_logits = True   # each fed position's logits row is computed alone: its bits do not depend on the
                                  # feed's row count (kvcache.records_rows; tests/test_run_log_likelihood.py)

    def __init__(self, owner: ContextOwner, pool: ContextPool | None = None):
        """``owner``: the GGUFDrafter, or the llama.cpp target engine (``target.LlamaTarget``): what
        holds the model and the vocabulary size. ``pool``: where its contexts come from (the owner's pool by
        default; a drafter's contexts laid out like the target's when the cache can ``adopt``)."""
        self.owner, self.vocab_size = owner, owner.vocab_size
        self.pool = pool or owner.pool
        self.adopts_target_prompt = pool is not None and pool is not owner.pool
        self.context, self.batch = self.pool.acquire()
        self._release = weakref.finalize(self, self.pool.release, self.context, self.batch)
        self.row_tokens: list[list[int]] = [[]]
        self.device = torch.device("cpu")
        self.calls = 0
        # a short-head file (short_head.py): ids are fed as its rows, its scored rows read back as ids
        self.short_head = getattr(owner, "short_head", None)
        self.off_vocabulary_mass = 0.0       # > 0: SMC-SD's proposal keeps q > 0 off the scored ids

    @property
    def length(self) -> int:
        return len(self.row_tokens[0])

    @torch.inference_mode()
    def forward(self, new_token_ids, output_hidden_states: bool = False, keep: int | None = None):
        """Append tokens (list of ids, or [B, T] tensor) to every row; logits [B, T or keep, V] float32 (and an
        empty hidden state [B, T or keep, 0]: llama.cpp's are not read)."""
        if torch.is_tensor(new_token_ids):
            rows = new_token_ids.tolist()
        else:
            rows = [[int(token_id) for token_id in new_token_ids]]
        if len(rows) != len(self.row_tokens):
            raise ValueError(f"GGUFCache holds {len(self.row_tokens)} rows; got {len(rows)}.")
        kept = min(keep or len(rows[0]), len(rows[0]))
        logits = self._decode_rows(rows, kept)
        for row, tokens in zip(self.row_tokens, rows):
            row.extend(tokens)
        self.calls += 1
        logits = logits.view(len(rows), kept, -1)
        if self.short_head is not None:
            logits = full_vocabulary_logits(logits[..., : self.short_head.head_rows], self.short_head.kept_ids,
                                            self.vocab_size, self.off_vocabulary_mass)
        else:
            logits = logits[..., : self.vocab_size]
        if output_hidden_states:
            return logits, logits.new_zeros(len(rows), kept, 0)
        return logits

    def _decode_rows(self, rows: list[list[int]], kept: int) -> torch.Tensor:
        """Feed each row's new tokens after its cached ones; the logits of each row's last ``kept`` tokens,
        [B * kept, n_vocab] in row order. Feeds of more than BATCH_TOKENS go in several decode calls."""
        entries = [(row_index, self.length + offset, token_id, offset >= len(tokens) - kept)
                   for row_index, tokens in enumerate(rows) for offset, token_id in enumerate(tokens)]
        outputs, decoded = [], []
        for chunk in self._chunks(entries):
            outputs.append(self._decode(chunk, decoded))
            decoded = decoded + chunk
        return torch.cat(outputs) if len(outputs) > 1 else outputs[0]

    def _chunks(self, entries: list) -> list[list]:
        """The decode calls a feed is split into: BATCH_TOKENS entries each."""
        return [entries[start: start + BATCH_TOKENS] for start in range(0, len(entries), BATCH_TOKENS)]

    def _decode(self, entries, decoded=()) -> torch.Tensor:
        """One llama_decode over (sequence, position, token, wants logits) entries; a full KV buffer is grown
        once and the call retried (``decoded``: this feed's entries already decoded, not yet in ``row_tokens``)."""
        try:
            return self._decode_once(entries)
        except RuntimeError:
            self._grow(len(entries), decoded)
            return self._decode_once(entries)

    def _decode_once(self, entries) -> torch.Tensor:
        llama_cpp = llama_cpp_module()
        batch = self.batch.batch
        outputs = 0
        rows_of = self.short_head.position_of if self.short_head is not None else None
        for index, (sequence, position, token_id, wanted) in enumerate(entries):
            batch.token[index] = token_id if rows_of is None else int(rows_of[token_id])
            batch.pos[index] = position
            batch.seq_id[index][0], batch.n_seq_id[index] = sequence, 1
            batch.logits[index] = wanted
            outputs += int(wanted)
        batch.n_tokens = len(entries)
        self.context.decode(self.batch)
        logits = torch.empty(outputs, self.owner.model.n_vocab)     # [outputs, n_vocab] float32, batch order
        if outputs:       # one copy out of llama.cpp's buffer, which the next decode overwrites
            ctypes.memmove(logits.data_ptr(), llama_cpp.llama_get_logits(self.context.ctx), logits.nbytes)
        return logits

    def _grow(self, extra: int, decoded=()) -> None:
        """A context with twice the cells (at least the rows' tokens plus ``extra``), refilled with every row's
        tokens and the ``decoded`` entries of the feed under way; the old one goes back to the pool."""
        needed = sum(len(row) for row in self.row_tokens) + len(decoded) + extra
        cells = max(2 * self.context.n_ctx(), needed + llama_model.START_CELLS)   # read at call time (tests set it)
        self._release()
        self.context, self.batch = self.pool.acquire(cells)
        self._release = weakref.finalize(self, self.pool.release, self.context, self.batch)
        entries = [(row_index, position, token_id, False) for row_index, tokens in enumerate(self.row_tokens)
                   for position, token_id in enumerate(tokens)]
        entries += [(row_index, position, token_id, False) for row_index, position, token_id, _ in decoded]
        for chunk in self._chunks(entries):
            self._decode_once(chunk)

    def adopt(self, source: "GGUFCache") -> None:
        """Become a copy of ``source``'s one row (an empty cache of one row; ``source`` a cache whose model has
        the same attention layout, in a context with the same cell types: ``GGUFDrafter.pool_beside``): its
        cells are copied through llama.cpp's sequence state (a few ms for a few hundred tokens)."""
        if self.length or len(self.row_tokens) != 1 or len(source.row_tokens) != 1:
            raise ValueError("adopt copies one row into an empty cache of one row.")
        if source.length >= self.context.n_ctx():
            self._grow(source.length)
        llama_cpp = llama_cpp_module()
        size = llama_cpp.llama_state_seq_get_size(source.context.ctx, 0)
        state = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(source.context.ctx, state, size, 0)
        if not written or llama_cpp.llama_state_seq_set_data(self.context.ctx, state, written, 0) != written:
            raise RuntimeError("llama.cpp could not copy the target's cells into the draft's context.")
        self.row_tokens = [list(source.row_tokens[0])]

    def crop(self, length: int) -> None:
        """Roll every row back to its first ``length`` tokens."""
        if length >= self.length:
            return
        for sequence, tokens in enumerate(self.row_tokens):
            self.context.kv_cache_seq_rm(sequence, length, -1)
            del tokens[length:]

    def reorder(self, ancestor_index: torch.Tensor) -> None:
        """Row i becomes old row ancestor_index[i] (the batch may change size: SMC-SD's 1 → N after
        prefill). Copies go through scratch sequences B'..2B'-1 so no source is overwritten before it is read."""
        ancestors = [int(index) for index in ancestor_index.tolist()]
        count, old_count = len(ancestors), len(self.row_tokens)
        if count > MAX_ROWS:
            raise ValueError(f"The gguf drafter holds at most {MAX_ROWS} rows (particles); {count} were asked.")
        if ancestors == list(range(old_count)):
            return
        for row, ancestor in enumerate(ancestors):
            self.context.kv_cache_seq_cp(ancestor, MAX_ROWS + row, -1, -1)
        for sequence in range(max(count, old_count)):
            self.context.kv_cache_seq_rm(sequence, -1, -1)
        for row in range(count):
            self.context.kv_cache_seq_cp(MAX_ROWS + row, row, -1, -1)
            self.context.kv_cache_seq_rm(MAX_ROWS + row, -1, -1)
        self.row_tokens = [list(self.row_tokens[ancestor]) for ancestor in ancestors]
