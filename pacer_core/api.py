"""The public convenience calls: build a decoder from validated settings and run it."""
from __future__ import annotations

from typing import Iterator

from .decoders import Autoregressive, FixedSpeculative, Pacer
from .events import Result
from .settings import (DecodeSettings, Limits, SettingsError, check_method_settings, validate_method, validate_prompt,
                       validate_settings)


def make_decoder(method: str, settings: DecodeSettings, pair=None, preverifier=None):
    """The decoder object for a method name (ar, fixed, pacer, smc)."""
    if method == "ar":
        return Autoregressive()
    if method == "fixed":
        return FixedSpeculative(settings.gamma)
    if method == "pacer":
        if preverifier is None and pair is not None:
            from .preverifier import default_preverifier
            preverifier = default_preverifier(pair)
        return Pacer(settings.block_size, settings.max_draft_len, settings.threshold, preverifier, settings.on_fail)
    if method == "smc":
        from .decoders.smc import SMC
        return SMC(settings.n_particles, settings.draft_len, settings.ess_threshold, settings.draft_temperature,
                   settings.power, settings.final)
    raise SettingsError(f"Unknown method {method!r}.")


def prepare_prompt(pair, prompt: str, chat: bool | None = None, limits: Limits | None = None) -> tuple[list[int], str | None]:
    """Encode a validated prompt. Over the token limit the START is cut (the end matters for what
    comes next); the second value is then a note saying so."""
    limits = limits or Limits.from_env()
    prompt_ids = pair.encode_prompt(validate_prompt(prompt, limits), chat)
    allowed = min(limits.max_prompt_tokens, pair.max_context - 1)
    if len(prompt_ids) <= allowed:
        return prompt_ids, None
    note = (f"The prompt had {len(prompt_ids):,} tokens; only its last {allowed:,} were kept "
            f"(limit PACER_MAX_PROMPT_TOKENS / model context).")
    return prompt_ids[-allowed:], note


def apply_preverifier_defaults(settings: DecodeSettings, preverifier, raw_settings: dict) -> DecodeSettings:
    """A trained pre-verifier ships the block size its threshold was measured with; it applies unless
    the caller chose a block size."""
    shipped = getattr(preverifier, "config", {}).get("block_size")
    if shipped is None or "block_size" in raw_settings:
        return settings
    return validate_settings(**(settings.to_dict() | {"block_size": int(shipped),
                                                      "max_draft_len": max(settings.max_draft_len, int(shipped))}))


def stream(pair, method: str, prompt: str, cancel=None, preverifier=None, chat: bool | None = None,
           **raw_settings) -> Iterator:
    """Validate everything, then yield the decoder's events and finally its Result."""
    method = validate_method(method)
    settings = validate_settings(**raw_settings)
    check_method_settings(method, settings)
    prompt_ids, note = prepare_prompt(pair, prompt, chat)
    room = pair.max_context - len(prompt_ids)
    if settings.max_new_tokens > room:
        settings = validate_settings(**(settings.to_dict() | {"max_new_tokens": max(1, room)}))
    if method == "pacer":
        if preverifier is None:
            from .preverifier import default_preverifier
            preverifier = default_preverifier(pair)
        settings = apply_preverifier_defaults(settings, preverifier, raw_settings)
    decoder = make_decoder(method, settings, pair, preverifier)
    for item in decoder.run(pair, prompt_ids, settings, cancel):
        if isinstance(item, Result) and note:
            item.info["prompt_note"] = note
        yield item


def generate(pair, method: str, prompt: str, cancel=None, preverifier=None, chat: bool | None = None,
             **raw_settings) -> Result:
    """Run one method to the end and return its Result (.text, .token_ids, .events, .metrics)."""
    result = None
    for item in stream(pair, method, prompt, cancel, preverifier, chat, **raw_settings):
        result = item
    return result
