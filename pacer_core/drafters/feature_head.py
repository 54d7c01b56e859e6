"""The feature-head drafter at decode time: weights on disk ↔ ``FeatureHeadDrafter``, and the per-run
``FeatureHeadCache``, a ``kvcache.ModelCache`` (feed tokens, get logits over the full vocabulary; crop; reorder
rows) whose keys and values live in the same growing store as every torch model's (``kvcache.GrowingLayer``).

How the head's positions line up with the sequence: token x_j (j ≥ 1) is fed to the head as the input
(f_{j-1}, e(x_j)) at position j-1 and yields f̂_j, whose logits score x_{j+1} — the same contract as a
causal LM fed x_j. f_{j-1} is the target's real feature when the target has already run over position
j-1 (the target cache records features, see ``CachedModel(keep_features=True)``), otherwise the head's
own prediction f̂_{j-1}. An entry built from a predicted feature is recomputed as soon as the real one
exists (after the next target pass), so the head always conditions on everything the target has verified.
Token x_0 has no predecessor and gets no entry.

Devices: the head lives on its ``device`` (the target's first parameter's, i.e. its input embedding's);
kept ids, output rows, embeddings of fed tokens, the target's recorded features (which sit wherever the
target's output layer ran, another GPU under ``device_map="auto"``) and positions are all moved or created
there, and the logits come back there."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from .. import embedded
from ..kvcache import FeedsSequence, GrowingLayer, ModelCache, last_positions, token_rows
from .head_model import FeatureHead, HeadConfig, kept_logits
from .vocabulary import OFF_VOCABULARY_MASS, full_vocabulary_logits

CONFIG_FILE = "head_config.json"
WEIGHTS_FILE = "head.safetensors"


def is_head_dir(location) -> bool:
    return (Path(location) / CONFIG_FILE).exists()


class FeatureHeadDrafter:
    """A trained head bound to its target (whose embedding and output rows it borrows)."""

    kind = "feature-head"
    reads_target_features = True

    def __init__(self, head: FeatureHead, kept_ids: torch.Tensor, target, vocab_size: int, name: str):
        self.head = head.eval()
        self.name = name
        self.vocab_size = vocab_size
        parameter = next(head.parameters())
        self.device, self.dtype = parameter.device, parameter.dtype
        self.kept_ids = kept_ids.to(self.device)
        self.embedding = target.get_input_embeddings()
        output_weight = target.get_output_embeddings().weight.detach()        # may sit on another GPU
        self.output_rows = output_weight[self.kept_ids.to(output_weight.device)].to(self.device, self.dtype)
        self.hidden_size = head.config.hidden_size

    @classmethod
    def load(cls, directory, target, vocab_size: int, name: str, dtype=None, kept=None):
        """Read head_config.json + head.safetensors. ``kept``: None keeps the saved ids, N only the first
        (most frequent) N of them, "all" every id of the vocabulary (the target's rows are all there)."""
        from safetensors.torch import load_file
        directory = Path(directory)
        config = json.loads((directory / CONFIG_FILE).read_text())
        head = FeatureHead(HeadConfig(**config["head"]))
        state = load_file(str(directory / WEIGHTS_FILE))
        kept_ids = state.pop("kept_ids").long()
        if kept == "all":
            kept_ids = torch.arange(vocab_size)
        elif kept:
            kept_ids = kept_ids[: int(kept)]
        head.load_state_dict(state)
        parameter = next(target.parameters())
        head.to(device=parameter.device, dtype=dtype or parameter.dtype)
        return cls(head, kept_ids, target, vocab_size, name)

    def new_cache(self, target_cache: ModelCache, full_support: bool = False) -> "FeatureHeadCache":
        """``full_support``: every id keeps some probability (SMC-SD's importance weights need q > 0
        wherever the target has mass); exact methods do not need it and draft only from the kept ids."""
        return FeatureHeadCache(self, target_cache, OFF_VOCABULARY_MASS if full_support else 0.0)

    def describe(self) -> dict:
        return {"kind": self.kind, "name": self.name, "kept_ids": int(self.kept_ids.numel()),
                "dtype": str(self.dtype).replace("torch.", ""),
                "parameters": sum(p.numel() for p in self.head.parameters())}

    def full_logits(self, predicted_features: torch.Tensor, off_mass: float = 0.0) -> torch.Tensor:
        """[..., H] predicted features → float32 logits over the whole vocabulary (vocabulary.py)."""
        scores = kept_logits(predicted_features, self.output_rows)
        return full_vocabulary_logits(scores, self.kept_ids, self.vocab_size, off_mass)


class FeatureHeadCache(FeedsSequence):
    """Per-run state of the head: its keys/values, the tokens it has seen and its predicted features.

    Invariant (``kvcache.ModelCache``'s): it accounts for the first ``length`` tokens of the sequence; entries
    exist for tokens 1..length-1; the first ``real_length`` tokens' entries used real target features."""

    feature_length = 0          # it records no features (it reads the target's)

    def __init__(self, drafter: FeatureHeadDrafter, target_cache: ModelCache, off_mass: float = 0.0):
        self.drafter, self.target, self.off_mass = drafter, target_cache, off_mass
        self.vocab_size = drafter.vocab_size
        self.device = drafter.device
        self.length = self.real_length = self.calls = 0
        self.features = None                                 # it records none (it reads the target's)
        self.token_ids: torch.Tensor | None = None          # [B, length]
        self.kv = GrowingLayer()                             # keys, values [B, kv, length-1, D]
        self.predicted: torch.Tensor | None = None           # [B, length-1, H] f̂ of each entry

    @torch.inference_mode()
    def forward(self, new_token_ids, output_hidden_states: bool = False, keep: int | None = None):
        """``ModelCache.forward``: logits [B, T, V] float32 (and f̂ [B, T, H]); the last ``keep`` positions only
        go through the output rows when given."""
        new_token_ids = token_rows(new_token_ids).to(self.device)
        fed = new_token_ids.shape[1]
        pending = torch.cat([self._stale_tokens(), new_token_ids], dim=1) if self.length else new_token_ids
        start = self.length
        self.token_ids = pending if self.token_ids is None else torch.cat([self.token_ids, pending], dim=1)
        self.length += pending.shape[1]
        self.calls += 1
        outputs = last_positions(self._run(pending, start)[:, -fed:], keep)              # [B, T, H]
        logits = self.drafter.full_logits(outputs, self.off_mass)
        return (logits, outputs.float()) if output_hidden_states else logits

    def _stale_tokens(self) -> torch.Tensor:
        """Crop entries built from a predicted feature whose real feature now exists; return their tokens."""
        features_known = self.target.feature_length
        if self.real_length < self.length and features_known >= self.real_length:
            stale = self.token_ids[:, self.real_length:]
            self.crop(self.real_length)
            return stale
        return self.token_ids[:, :0]

    def _run(self, tokens: torch.Tensor, start: int) -> torch.Tensor:
        """Entries for tokens at positions start..start+P-1: those with real features in one pass, the
        rest one at a time from the head's own predictions. Returns f̂ per token [B, P, H] (zeros for x_0)."""
        batch, count = tokens.shape
        real_end = min(start + count, self.target.feature_length + 1)               # x_j real iff j-1 < Lf
        first = max(start, 1)
        pieces = [torch.zeros(batch, first - start, self.drafter.hidden_size, dtype=self.drafter.dtype,
                              device=self.device)] if first > start else []
        if real_end > first:
            features = self.target.features[:, first - 1: real_end - 1].to(self.device, self.drafter.dtype)
            pieces.append(self._append(features, tokens[:, first - start: real_end - start], first))
            self.real_length = real_end
        for position in range(max(real_end, first), start + count):
            previous = (self.predicted[:, -1:] if self.predicted is not None and self.predicted.shape[1]
                        else torch.zeros(batch, 1, self.drafter.hidden_size, dtype=self.drafter.dtype,
                                         device=self.device))                 # f̂_{j-1} (none for x_1)
            pieces.append(self._append(previous, tokens[:, position - start: position - start + 1], position))
        return torch.cat(pieces, dim=1)

    def _append(self, features: torch.Tensor, tokens: torch.Tensor, first_token: int) -> torch.Tensor:
        embeddings = self.drafter.embedding(tokens).to(self.device, self.drafter.dtype)
        positions = torch.arange(first_token - 1, first_token - 1 + tokens.shape[1], device=self.device)
        past = (self.kv.keys, self.kv.values) if self.kv.get_seq_length() else None
        predicted, (keys, values) = self.drafter.head.predict_features(features, embeddings, positions, past)
        self.kv.update(keys, values)
        self.predicted = predicted if self.predicted is None else torch.cat([self.predicted, predicted], dim=1)
        return predicted

    def crop(self, length: int) -> None:
        if length >= self.length:
            return
        entries = max(length - 1, 0)
        self.kv.crop_to(entries)
        self.predicted = self.predicted[:, :entries] if self.predicted is not None else None
        self.token_ids = self.token_ids[:, :length]
        self.length = length
        self.real_length = min(self.real_length, length)

    def reorder(self, ancestor_index: torch.Tensor) -> None:
        index = ancestor_index.to(self.device)
        self.token_ids = self.token_ids.index_select(0, index) if self.token_ids is not None else None
        self.kv.reorder_cache(index)
        if self.predicted is not None:
            self.predicted = self.predicted.index_select(0, index)


def random_head_drafter(target, vocab_size: int, kept_ids=None, seed: int = 0, scale: float = 1.0) -> FeatureHeadDrafter:
    """An untrained head with random weights for ``target`` (tests and dry runs on tiny models)."""
    generator = torch.Generator().manual_seed(seed)
    head = FeatureHead(HeadConfig.from_target(target.config))
    with torch.no_grad():
        for parameter in head.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * scale / parameter.shape[-1] ** 0.5
                            if parameter.dim() > 1 else torch.ones_like(parameter))
    parameter = next(target.parameters())
    head.to(device=parameter.device, dtype=parameter.dtype)
    kept = torch.arange(vocab_size) if kept_ids is None else torch.as_tensor(kept_ids)
    return FeatureHeadDrafter(head, kept, target, vocab_size, f"random head ({kept.numel()} ids)")


# ---- for a pair: the builder and the availability check of the table's row (kinds.KINDS) ------------------------------

def head_drafter(target, drafters, name: str, head_dir=None) -> FeatureHeadDrafter:
    """The feature head (``head``, ``head-N``, ``head-all``): ``head_dir``'s, else the embedded one."""
    try:
        head_dir, head_name = (str(head_dir), str(head_dir)) if head_dir else (
            str(embedded.embedded_head_dir()), embedded.EMBEDDED_HEAD_LABEL)
    except embedded.EmbeddedModelMissing as missing:
        raise ValueError(str(missing)) from None
    kept = "all" if name == "head-all" else (int(name[5:]) if name.startswith("head-") else None)
    shown = head_name if kept is None else f"{head_name} [{name}]"
    return FeatureHeadDrafter.load(head_dir, target.model, target.vocab_size, shown, kept=kept)


def head_unavailable(target, drafters) -> str | None:
    if getattr(target, "name", "") != embedded.TARGET_NAME or not embedded.EMBEDDED_HEAD_DIR.exists():
        return "a feature head is shipped for the embedded target only (others: the bench's --head FOLDER)"
    return None
