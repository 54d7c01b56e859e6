"""What the loader built beside a target for drafting. ``DraftModels``: what the table's builders
(``kinds.load_drafter``) build drafters from, the independent draft model and the GGUF file. ``LoadedDrafters``:
those and the drafter runs use unless told otherwise. The target's record (``models.Target``) holds the target only;
a run names its drafter (``RunRequest.drafter``), a page session holds the one its menu chose, and none of them
changes these records (they are frozen) or the target."""
from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from .drafter import Drafter


@dataclass(frozen=True)
class DraftModels:
    """``small_model``: the independent draft model (None when none was loaded), named ``small_model_id``; the
    ``small`` drafters draft with it and its folder holds frequent_ids.json. ``gguf_file``: the GGUF file the
    ``gguf`` drafter runs ("": for the embedded target, the file it was converted from; ``gguf_drafter.gguf_path``)."""

    small_model: nn.Module | None = None
    small_model_id: str = ""
    gguf_file: str = ""

    @property
    def small_model_folder(self) -> str:
        """Where the independent draft model was loaded from ("" without one)."""
        if self.small_model is None:
            return ""
        return getattr(self.small_model.config, "_name_or_path", "") or ""


@dataclass(frozen=True, kw_only=True)
class LoadedDrafters(DraftModels):
    """``default``: the drafter runs use unless told otherwise (``--draft``, $PACER_DRAFT, the page's first menu
    entry), beside the draft models the other drafters are built from."""

    default: Drafter

    @classmethod
    def beside(cls, models: DraftModels, default: Drafter) -> "LoadedDrafters":
        """The record of a load: ``models`` and the drafter built from them that runs use unless told otherwise."""
        return cls(default=default, small_model=models.small_model, small_model_id=models.small_model_id,
                   gguf_file=models.gguf_file)

    @classmethod
    def around(cls, drafter, gguf_file: str = "") -> "LoadedDrafters":
        """The record of a load whose drafter is an independent draft model (``IndependentDrafter``): that model is
        also the ``small`` drafters' model (tests and tools that build a target from models in-process)."""
        return cls.beside(DraftModels(small_model=drafter.model, small_model_id=drafter.model_id, gguf_file=gguf_file),
                          drafter)
