"""One run request: everything a run needs, validated and resolved ONCE at a front door (the UI session,
``generate()``/``stream()``, the bench CLI, the training CLIs and the scripts). Below the front door
nothing validates again or encodes the prompt again: ``api.run_request`` hands ``request.settings`` to the
decoder as they are.

Resolving a method's settings: the values the caller chose, over where the page starts for the run's drafter
(``drafters.method_starts``: its measured settings, ``measured_defaults.json``), FIELDS' defaults for the rest (all
checked by ``validate_settings``), then PACER's pre-verifier defaults for whatever is still unset: a trained
pre-verifier ships the block size its threshold was tuned with, and that threshold. Every front door
resolves the same way, so the benchmark's ``pacer`` row runs what the app and ``generate()`` run by
default (tests/test_run_request.py)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .settings import (FIELD_BY_NAME, DecodeSettings, Limits, check_method_settings, validate_method,
                       validate_prompt, validate_settings)

if TYPE_CHECKING:
    from .drafters.drafter import Drafter


@dataclass(frozen=True)
class EncodedPrompt:
    ids: tuple[int, ...]
    note: str | None = None          # set when the prompt's start was cut to fit the token limit


@dataclass(frozen=True)
class RunRequest:
    """One method on one prompt with resolved settings, and the drafter it drafts with. ``explicit``: the settings
    the caller chose; every other setting is its default (or the pre-verifier's, for PACER)."""
    method: str
    drafter: Drafter                 # AR drafts with none: its target runs on the engine the drafted runs verify on
    settings: DecodeSettings
    limits: Limits
    prompt_ids: tuple[int, ...]
    prompt_note: str | None = None
    preverifier: object = None       # PACER's; None for the other methods
    explicit: frozenset[str] = frozenset()
    keep_rows: bool = False   # the Result keeps the target's logits rows along its output (the page's scoring)

    @property
    def defaulted(self) -> frozenset[str]:
        return frozenset(FIELD_BY_NAME) - self.explicit

    def reseeded(self, offset: int) -> "RunRequest":
        """The same request with its seed moved by ``offset`` (the bench's sampling repeats)."""
        return replace(self, settings=replace(self.settings, seed=self.settings.seed + offset))


def encode_prompt(target, prompt: str, chat: bool | None, limits: Limits) -> EncodedPrompt:
    """Check and encode the prompt. Over the token limit the START is cut (the end matters for what comes
    next) and the note says so."""
    prompt_ids = target.encode_prompt(validate_prompt(prompt, limits), chat)
    allowed = min(limits.max_prompt_tokens, target.max_context - 1)
    if len(prompt_ids) <= allowed:
        return EncodedPrompt(tuple(prompt_ids))
    note = (f"The prompt had {len(prompt_ids):,} tokens; only its last {allowed:,} were kept "
            f"(limit PACER_MAX_PROMPT_TOKENS / model context).")
    return EncodedPrompt(tuple(prompt_ids[-allowed:]), note)


def chosen_names(raw: dict) -> frozenset[str]:
    """The settings a caller chose: every one given a value (None asks for the default)."""
    return frozenset(name for name, value in raw.items() if value is not None)


def preverifier_for(method: str, target, drafter, settings: DecodeSettings, preverifier=None):
    """PACER's pre-verifier: the one given, else the layer trained for the target and ``drafter`` or the
    confidence rule; the confidence rule whenever the run chose it (setting ``preverifier_choice``)."""
    if method != "pacer":
        return None
    from .preverifier import chosen_preverifier, default_preverifier

    available = preverifier if preverifier is not None else default_preverifier(target, drafter)
    return chosen_preverifier(target, drafter, available, settings.preverifier_choice)


def with_preverifier_defaults(settings: DecodeSettings, preverifier, explicit: frozenset[str]) -> DecodeSettings:
    """PACER: the shipped block size unless chosen (the max draft length grows to it), and the
    pre-verifier's own threshold for this temperature unless chosen."""
    from .preverifier import ConfidencePreVerifier, own_threshold

    preverifier = preverifier if preverifier is not None else ConfidencePreVerifier()
    changes = {}
    shipped = getattr(preverifier, "config", {}).get("block_size")
    if shipped is not None and "block_size" not in explicit:
        changes |= {"block_size": int(shipped), "max_draft_len": max(settings.max_draft_len, int(shipped))}
    if settings.threshold is None:
        changes["threshold"] = own_threshold(preverifier, settings.temperature)
    return replace(settings, **changes)


def settings_for_method(method: str, settings: DecodeSettings, explicit: frozenset[str],
                        preverifier=None) -> DecodeSettings:
    """Validated settings → one method's: its own rules (SettingsError), then PACER's defaults."""
    check_method_settings(method, settings)
    if method == "pacer":
        return with_preverifier_defaults(settings, preverifier, explicit)
    return settings


def fit_to_context(settings: DecodeSettings, prompt_len: int, max_context: int) -> DecodeSettings:
    room = max_context - prompt_len
    return settings if settings.max_new_tokens <= room else replace(settings, max_new_tokens=max(1, room))


def request_for(target, drafter, method: str, settings: DecodeSettings, explicit: frozenset[str],
                prompt: EncodedPrompt, limits: Limits, preverifier=None) -> RunRequest:
    """A request from settings validated once by the caller, for one method drafting with ``drafter`` and one
    encoded prompt."""
    preverifier = preverifier_for(method, target, drafter, settings, preverifier)
    resolved = settings_for_method(method, settings, explicit, preverifier)
    resolved = fit_to_context(resolved, len(prompt.ids), target.max_context)
    return RunRequest(method, drafter, resolved, limits, prompt.ids, prompt.note, preverifier, explicit)


@dataclass(frozen=True)
class RunInputs:
    """One run's inputs, checked once for all the methods that run them: the prompt (validated, and encoded for the
    target), the settings validated but not yet resolved for any method, which of them the caller chose, the
    limits. ``request(method)`` resolves them for one method."""
    prompt: str
    encoded: EncodedPrompt
    settings: DecodeSettings
    explicit: frozenset[str]
    limits: Limits

    def request(self, target, drafter, method: str, preverifier=None) -> RunRequest:
        """One method's request (SettingsError when the method refuses these settings)."""
        return request_for(target, drafter, method, self.settings, self.explicit, self.encoded, self.limits,
                           preverifier)


def run_inputs(target, prompt: str, raw: dict | None = None, *, chat: bool | None = None,
               limits: Limits | None = None) -> RunInputs:
    """Validate the settings and encode the prompt, once for any number of methods (the page's session runs
    several on the same inputs). Without ``limits`` the environment's apply (read here, once)."""
    limits = limits if limits is not None else Limits.from_env()
    raw = dict(raw or {})
    settings = validate_settings(limits, **raw)
    encoded = encode_prompt(target, prompt, chat, limits)
    return RunInputs(prompt, encoded, settings, chosen_names(raw), limits)   # encode_prompt validated it


def build_request(target, drafter, method: str, prompt: str, raw: dict | None = None, *, chat: bool | None = None,
                  preverifier=None, limits: Limits | None = None) -> RunRequest:
    """The whole front door for one method drafting with ``drafter``: validate the method and settings, encode the
    prompt, resolve (``run_inputs``, then its ``request``)."""
    from .drafters import method_starts

    method = validate_method(method)
    chosen = method_starts(target, drafter, method) | dict(raw or {})
    return run_inputs(target, prompt, chosen, chat=chat, limits=limits).request(target, drafter, method, preverifier)


def row_requests(target, drafter, spec, raw: dict, prompts: list, limits: Limits, preverifier) -> list[RunRequest]:
    """One request per prompt for a method row (``methods.MethodSpec``): the row's own values over the CLI's over
    what the app starts with for the row's drafter (``method_starts``; a row that names none drafts with the default
    drafter and starts from its values), validated once and resolved exactly as the app and generate() resolve them
    (PACER: the pre-verifier's block size and threshold unless chosen)."""
    from .drafters import method_starts

    chosen = method_starts(target, drafter, spec.kind, spec.drafter) | raw | spec.overrides
    settings = validate_settings(limits, **chosen)
    return [request_for(target, drafter, spec.kind, settings, chosen_names(chosen), prompt, limits, preverifier)
            for prompt in prompts]
