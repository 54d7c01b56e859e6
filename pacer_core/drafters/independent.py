"""The ``small`` drafter: a separate causal LM that shares the target's tokenizer, with a KV cache of its own
(the kind transformers' assisted generation drafts with). With ``kept_ids`` its output layer scores only the
draft's most frequent ids and every other id gets q = 0, or a small shared mass for SMC-SD (``vocabulary.py``)."""
from __future__ import annotations

import torch
from torch import nn

from ..kvcache import CachedModel, ModelCache, forward_with_cache, last_positions
from ..packed_linear import PackedLinear
from .vocabulary import OFF_VOCABULARY_MASS, full_vocabulary_logits, load_frequent_ids


class IndependentDrafter:
    """A separate causal LM that shares the target's tokenizer. With ``kept_ids`` its output layer scores
    only those ids (q = 0 elsewhere; vocabulary.py)."""

    kind = "independent"
    reads_target_features = False

    def __init__(self, model, vocab_size: int, name: str, kept_ids: torch.Tensor | None = None, model_id: str = ""):
        self.model, self.vocab_size, self.name = model, vocab_size, name
        self.model_id = model_id or name     # the draft model's own name (``name`` adds [small-N] when reduced)
        self.hidden_size = int(getattr(model.config, "hidden_size", 0))
        self.kept_ids = None if kept_ids is None else kept_ids.long()
        self.output_layer = None if kept_ids is None else kept_output_layer(model, self.kept_ids)

    def new_cache(self, target_cache: ModelCache | None, full_support: bool = False) -> CachedModel:
        if self.kept_ids is None:
            return CachedModel(self.model, self.vocab_size)   # a causal LM's softmax already has full support
        return ReducedVocabularyCache(self, OFF_VOCABULARY_MASS if full_support else 0.0)

    def describe(self) -> dict:
        parameter = next(self.model.parameters())
        described = {"kind": self.kind, "name": self.name, "dtype": str(parameter.dtype).replace("torch.", ""),
                     "parameters": sum(p.numel() for p in self.model.parameters())}
        if self.kept_ids is not None:
            described["kept_ids"] = int(self.kept_ids.numel())
        return described


def kept_output_layer(model, kept_ids: torch.Tensor) -> nn.Module:
    """The model's output layer cut to the kept ids' rows (packed like the original, if it was)."""
    output = model.get_output_embeddings()
    if getattr(model.config, "final_logit_softcapping", None) or not isinstance(output, (nn.Linear, PackedLinear)):
        raise ValueError("A reduced vocabulary needs a draft whose output layer is a plain linear layer.")
    weight = output.weight.detach()
    kept_ids = kept_ids.to(weight.device)
    rows = nn.Linear(weight.shape[1], kept_ids.numel(), bias=output.bias is not None,
                     device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        rows.weight.copy_(weight[kept_ids])
        if output.bias is not None:
            rows.bias.copy_(output.bias.detach()[kept_ids])
    rows.requires_grad_(False)
    return PackedLinear(rows) if isinstance(output, PackedLinear) else rows


class ReducedVocabularyCache(CachedModel):
    """An independent draft's cache whose logits come from the kept rows only: the draft's decoder runs as
    usual, the output layer reads K rows instead of the vocabulary (the last ``keep`` positions only, when
    given), every other id gets -inf (or, for SMC-SD, a shared share ``off_mass`` of the probability)."""

    def __init__(self, drafter: IndependentDrafter, off_mass: float = 0.0):
        super().__init__(drafter.model, drafter.vocab_size)
        self.decoder = drafter.model.get_decoder()
        self.drafter, self.off_mass = drafter, off_mass

    def _run(self, token_ids: torch.Tensor, output_hidden_states: bool):
        hidden = forward_with_cache(self.decoder, self.cache, token_ids).last_hidden_state
        hidden = last_positions(hidden, self.keep_logits)
        logits = full_vocabulary_logits(self.drafter.output_layer(hidden), self.drafter.kept_ids, self.vocab_size,
                                        self.off_mass)
        return logits, hidden


# ---- for a pair: the builder and the availability check of the table's row (kinds.KINDS) ------------------------------

def small_drafter(target, drafters, name: str = "small", head_dir=None) -> IndependentDrafter:
    """The loaded independent draft model (``small``), or its N most frequent ids (``small-N``)."""
    if drafters.small_model is None:
        raise ValueError(f"The drafter '{name}' needs an independent draft model, and none was loaded.")
    if name == "small":
        return IndependentDrafter(drafters.small_model, target.vocab_size, drafters.small_model_id)
    return reduced_vocabulary_drafter(target, drafters, int(name[len("small-"):]))


def reduced_vocabulary_drafter(target, drafters, count: int, name: str | None = None) -> IndependentDrafter:
    """The loaded draft model scoring only its ``count`` most frequent ids (its folder's frequent_ids.json);
    named ``name``, by default the draft model's name with [small-N]."""
    model_id = drafters.small_model_id
    frequent = load_frequent_ids(drafters.small_model_folder)
    if frequent is None:
        raise ValueError(f"The draft '{model_id}' has no frequent_ids.json in its folder, so it cannot "
                         f"draft from its {count} most frequent ids (python -m pacer_core.training.vocabulary "
                         "writes one).")
    kept = frequent[:count]
    return IndependentDrafter(drafters.small_model, target.vocab_size, name or f"{model_id} [small-{kept.numel()}]",
                              kept, model_id=model_id)


def small_unavailable(target, drafters) -> str | None:
    return None if drafters.small_model is not None else "no independent draft model was loaded"
