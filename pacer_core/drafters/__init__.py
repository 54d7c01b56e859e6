"""Drafters: what proposes tokens for the target to verify.

Every drafter hands each decoding run a cache that is a ``kvcache.ModelCache`` (feed tokens and get logits
over the full vocabulary, crop to a length, reorder batch rows), so fixed SD, PACER, the oracle and SMC-SD
draft with any of them unchanged. Five entries of one table (``kinds.py``, which also defines the words key,
kind and name), four kinds of object:

* ``small`` (kind ``independent``, ``independent.py``): a small causal LM with its own KV cache, optionally
  scoring only its most frequent ids (``vocabulary.py``).
* ``head`` (kind ``feature-head``, ``feature_head.py``, ``head_model.py``): one decoder layer that reads the
  target's own hidden state (EAGLE, Li et al. 2024, arXiv 2401.15077), optionally with a reduced output
  vocabulary (FR-Spec, Zhao et al. 2025, arXiv 2502.14856).
* ``self-int8``, ``self-int4`` (kind ``self-quantized``, ``self_quantized.py``, ``lean_decoder.py``): the loaded
  target's own weights, quantized weight-only at load time (QSpec, Zhao et al. 2025, arXiv 2410.11305).
* ``gguf`` (kind ``gguf``, ``gguf_drafter.py``): a GGUF file of the target run by llama.cpp.

Each kind's module also builds it for a target (or says why not); ``drafter.py`` declares what every drafter
has (``Drafter``), ``caches.py`` makes a run's two caches, ``measured.py`` reads the settings each starts with.
What the loader built beside the target is a ``LoadedDrafters`` (``loaded.py``): the drafter runs use unless told
otherwise and what the builders build the others from. A run names the drafter it drafts with (its
``RunRequest.drafter``); the ``models.Target`` holds the target only, is the same for every drafter, and nothing is
reloaded. ``construction.py`` builds what the loader loads beside the target (the draft models, the drafter
``--draft`` names). This package does not import ``models`` (the loader imports the drafters, never the reverse);
what both need of loading a model is ``loading.py``'s. Docs: docs/drafters.md."""
from __future__ import annotations

from ..kvcache import CachedModel, ModelCache
from ..quantized_linear import QuantizationUnavailable
from .caches import new_caches
from .drafter import Drafter
from .feature_head import head_drafter
from .gguf_drafter import GGUF_ENV, GGUFDrafter, gguf_drafter_for, gguf_path, gguf_unavailable
from .independent import (IndependentDrafter, ReducedVocabularyCache, kept_output_layer, reduced_vocabulary_drafter,
                          small_drafter)
from .kinds import (KINDS, DrafterEntry, all_names_text, drafter_key, drafter_keys, entry_for_key, entry_for_name,
                    entry_of_drafter, load_drafter, valid_drafter_name)
from .loaded import LoadedDrafters
from .measured import (MEASURED_DEFAULTS_FILE, measured_defaults, measured_drafter, measured_gamma, measured_settings,
                       method_starts)
from .self_quantized import SELF_DRAFTERS, SelfQuantizedDrafter, self_drafter
from .vocabulary import OFF_VOCABULARY_MASS, full_vocabulary_logits, load_frequent_ids


__all__ = ["Drafter", "LoadedDrafters", "ModelCache", "IndependentDrafter", "SelfQuantizedDrafter", "GGUFDrafter",
           "KINDS", "DrafterEntry", "drafter_keys", "entry_for_key", "new_caches", "load_drafter", "valid_drafter_name",
           "all_names_text", "reduced_vocabulary_drafter", "SELF_DRAFTERS", "drafter_key", "measured_drafter",
           "measured_gamma", "measured_settings", "method_starts"]
