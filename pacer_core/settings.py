"""Every decoding setting, its limits and its validation, in one place.

``FIELDS`` is the one table of settings (name, label, default, range, which methods use it, help): the
validator below and the app's controls both read it, so a range cannot differ between them. The front
doors (the UI, ``generate()``/``stream()``, the benchmark and every script) validate once, through
``pacer_core.request``; a bad value raises ``SettingsError`` whose message a workshop attendee can act
on. Space owners cap the expensive settings with environment variables (documented in docs/running.md), read
once per process or call into ``Limits`` and passed down."""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass

from . import method_table

MIN_TEMPERATURE = 0.05   # logits / T stays far from float overflow (below ~1e-37 every sampler hit inf/nan)


class SettingsError(ValueError):
    """A setting is missing, of the wrong type or out of range. The message is for end users."""


def _env_int(name: str, default: int) -> int:
    try:
        return max(1, int(os.environ.get(name, default)))
    except ValueError:
        return default


@dataclass(frozen=True)
class Limits:
    max_new_tokens: int = 512
    max_prompt_tokens: int = 1536
    max_particles: int = 16
    max_prompt_chars: int = 20000

    @classmethod
    def from_env(cls) -> "Limits":
        return cls(max_new_tokens=_env_int("PACER_MAX_NEW_TOKENS", 512),
                   max_prompt_tokens=_env_int("PACER_MAX_PROMPT_TOKENS", 1536),
                   max_particles=_env_int("PACER_MAX_PARTICLES", 16),
                   max_prompt_chars=_env_int("PACER_MAX_PROMPT_CHARS", 20000))


@dataclass(frozen=True)
class SettingField:
    """One setting: what the validator accepts and what the app's control shows."""
    name: str
    label: str
    default: object
    kind: str                         # int | float | choice
    low: float = 0
    high: float = 0
    step: float = 1
    methods: tuple[str, ...] = ()     # the methods that read it; empty: every method (``used_by``)
    help: str = ""
    options: tuple[str, ...] = ()     # kind "choice"
    optional: bool = False            # None is allowed (its meaning is in ``help``)
    cap: str | None = None            # a Limits field that replaces ``high``
    app_value: object = None          # where the app's control starts, when not at ``default``

    def used_by(self, method: str) -> bool:
        """Whether ``method`` reads this setting (a method registered later reads every shared one)."""
        return not self.methods or method in self.methods

    def high_for(self, limits: Limits):
        return getattr(limits, self.cap) if self.cap else self.high


FIELDS = (
    SettingField("max_new_tokens", "Max new tokens", 64, "int", 1, cap="max_new_tokens", app_value=48,
                 help="Tokens to generate at most (capped by PACER_MAX_NEW_TOKENS)."),
    SettingField("temperature", "Temperature (0 = greedy)", 0.0, "float", 0.0, 5.0, 0.05, app_value=0.7,
                 help=f"0 is greedy; sampling needs at least {MIN_TEMPERATURE}. SMC-SD needs a temperature above 0."),
    SettingField("top_k", "Top-k (0 = off)", 0, "int", 0, 1_000_000, help="Sample among the k likeliest tokens."),
    SettingField("top_p", "Top-p", 1.0, "float", 0.01, 1.0, 0.01, help="Sample within this probability mass."),
    SettingField("seed", "Seed", 0, "int", 0, 2**31 - 1, help="Seed of the run's random generator."),
    SettingField("gamma", "Draft length γ", 4, "int", 1, 32, methods=("fixed",),
                 help="Tokens the draft proposes every step."),
    SettingField("gamma_schedule", "Draft length schedule", "constant", "choice", methods=("fixed",),
                 options=("constant", "dynamic"),
                 help="constant: γ every step; dynamic: transformers' assisted-generation schedule, starting at γ, "
                      "+2 after a step that kept every drafted token, −1 (at least 1) otherwise."),
    SettingField("block_size", "Block size", 3, "int", 1, 16, methods=("pacer",),
                 help="Tokens per pre-verified block (default: the trained pre-verifier's own)."),
    SettingField("max_draft_len", "Max draft length", 16, "int", 1, 64, methods=("pacer",),
                 help="Most tokens drafted in one step; at least the block size."),
    SettingField("threshold", "Pre-verifier threshold", None, "float", 0.0, 1.0, 0.01, methods=("pacer",),
                 optional=True, help="A block scoring below it stops drafting (None: the pre-verifier's own)."),
    SettingField("on_fail", "On a failed block", "submit", "choice", methods=("pacer",),
                 options=("submit", "discard"),
                 help="submit sends the failing block too (lossless); discard drops it (exact only when greedy)."),
    SettingField("preverifier_choice", "Pre-verifier", "trained", "choice", methods=("pacer",),
                 options=("trained", "confidence"),
                 help="trained: the layer trained for this drafter (the confidence rule where it has none); "
                      "confidence: the draft's own probability of its token (greedy), the run's acceptance so far "
                      "(sampling)."),
    SettingField("stop_rule", "Stopping rule", "threshold", "choice", methods=("pacer",),
                 options=("threshold", "cost", "auto"),
                 help="threshold: stop at the first block the pre-verifier scores below the threshold; cost: draft "
                      "another block only while it raises the expected tokens per unit of measured time; auto: "
                      "the cost rule, priced with the pre-verifier's estimates."),
    SettingField("cost_source", "Cost rule's costs", "auto", "choice", methods=("pacer",),
                 options=("auto", "run", "stored"),
                 help="run: this run's own draft and verify seconds so far (the host's prices); stored: the drafter's "
                      "measured model (a seeded sampled run repeats token for token); auto: run when greedy, stored "
                      "when sampling."),
    SettingField("phrase_len", "Phrase draft length (0 = off)", 8, "int", 0, 32, methods=("pacer",),
                 help="Copy up to this many tokens that followed an earlier occurrence of the last tokens "
                      "(from the prompt or the output) as a draft block, without a draft model call."),
    SettingField("n_particles", "Particles N", 4, "int", 1, cap="max_particles", methods=("smc",),
                 help="Draft particles (capped by PACER_MAX_PARTICLES)."),
    SettingField("draft_len", "Draft length K", 4, "int", 1, 32, methods=("smc",),
                 help="Tokens every particle drafts per cycle."),
    SettingField("ess_threshold", "ESS threshold (share of the range 1..N)", 0.5, "float", 0.05, 1.0, 0.05,
                 methods=("smc",),
                 help="Resample when the effective sample size falls below 1 + threshold × (N − 1): 0.5 is half-way "
                      "between one particle holding all the weight (ESS 1) and even weights (ESS N), at every N ≥ 2."),
    SettingField("draft_temperature", "Draft temperature", None, "float", MIN_TEMPERATURE, 5.0, 0.05,
                 methods=("smc",), optional=True, help="The proposal's temperature (None: the temperature)."),
    SettingField("power", "Power exponent", 1.0, "float", 0.0, 4.0, 0.1, methods=("smc",),
                 help="Weights use p_T to this power (1: the target itself)."),
    SettingField("final", "Final particle choice", "sample", "choice", methods=("smc",), options=("sample", "argmax"),
                 help="Draw the output particle by weight, or take the heaviest."),
)
FIELD_BY_NAME = {field.name: field for field in FIELDS}
DEFAULTS = {field.name: field.default for field in FIELDS}


@dataclass(frozen=True)
class DecodeSettings:
    """Settings shared by every method, plus each method's own (ignored by the others); defaults: FIELDS."""
    max_new_tokens: int = DEFAULTS["max_new_tokens"]
    temperature: float = DEFAULTS["temperature"]
    top_k: int = DEFAULTS["top_k"]
    top_p: float = DEFAULTS["top_p"]
    seed: int = DEFAULTS["seed"]
    gamma: int = DEFAULTS["gamma"]                      # fixed-length SD: drafted tokens per step
    gamma_schedule: str = DEFAULTS["gamma_schedule"]    # constant | dynamic (+2 after a full accept, -1 otherwise)
    block_size: int = DEFAULTS["block_size"]            # PACER
    max_draft_len: int = DEFAULTS["max_draft_len"]
    threshold: float | None = DEFAULTS["threshold"]     # None: the pre-verifier's own (trained) threshold
    on_fail: str = DEFAULTS["on_fail"]                  # submit (lossless) | discard (exact only when greedy)
    preverifier_choice: str = DEFAULTS["preverifier_choice"]   # trained (the drafter's layer, when shipped) | confidence
    stop_rule: str = DEFAULTS["stop_rule"]              # threshold | cost | auto (docs/algorithms.md#cost-aware-stopping)
    cost_source: str = DEFAULTS["cost_source"]          # auto | run | stored: what the cost rule's costs are
    phrase_len: int = DEFAULTS["phrase_len"]            # 0: no phrase drafts (docs/algorithms.md#phrase-drafts)
    n_particles: int = DEFAULTS["n_particles"]          # SMC-SD
    draft_len: int = DEFAULTS["draft_len"]
    ess_threshold: float = DEFAULTS["ess_threshold"]
    draft_temperature: float | None = DEFAULTS["draft_temperature"]   # None: same as temperature
    power: float = DEFAULTS["power"]
    final: str = DEFAULTS["final"]                      # sample | argmax

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict:
        return asdict(self)


def _as_int(value, low: int, high: int, label: str) -> int:
    if isinstance(value, bool) or value is None:
        raise SettingsError(f"{label} must be a whole number between {low} and {high}.")
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise SettingsError(f"{label} must be a whole number between {low} and {high} (got {value}).")
        value = int(value)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise SettingsError(f"{label} must be a whole number between {low} and {high} (got {value!r}).") from None
    if not isinstance(value, int):
        raise SettingsError(f"{label} must be a whole number between {low} and {high}.")
    if not low <= value <= high:
        raise SettingsError(f"{label} must be between {low} and {high} (got {value}).")
    return value


def _as_float(value, low: float, high: float, label: str) -> float:
    if isinstance(value, bool) or value is None:
        raise SettingsError(f"{label} must be a number between {low} and {high}.")
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise SettingsError(f"{label} must be a number between {low} and {high} (got {value!r}).") from None
    if not math.isfinite(number) or not low <= number <= high:
        raise SettingsError(f"{label} must be between {low} and {high} (got {value}).")
    return number


def _choice(value, options: tuple[str, ...], label: str) -> str:
    if value not in options:
        raise SettingsError(f"{label} must be one of: {', '.join(options)} (got {value!r}).")
    return value


def _check_field(field: SettingField, value, limits: Limits):
    if field.optional and value is None:
        return None
    if field.kind == "int":
        return _as_int(value, int(field.low), int(field.high_for(limits)), field.label)
    if field.kind == "float":
        return _as_float(value, field.low, field.high_for(limits), field.label)
    return _choice(value, field.options, field.label)


def _check_temperature_floor(temperature: float, raw) -> None:
    """0 means greedy; a sampling temperature must be at least MIN_TEMPERATURE."""
    if 0.0 < temperature < MIN_TEMPERATURE:
        raise SettingsError(f"Temperature must be 0 (greedy) or at least {MIN_TEMPERATURE} (got {raw!r}); "
                            "smaller values overflow the softmax.")


def validate_settings(limits: Limits | None = None, **raw) -> DecodeSettings:
    """Check and convert every given setting against FIELDS; unknown names are an error too. Without
    ``limits`` the environment's apply (front doors read them once and pass them)."""
    limits = limits or Limits.from_env()
    unknown = sorted(set(raw) - set(FIELD_BY_NAME))
    if unknown:
        raise SettingsError(f"Unknown setting(s): {', '.join(unknown)}.")
    values = DEFAULTS | raw
    if "max_new_tokens" not in raw:  # the default never exceeds a Space owner's cap
        values["max_new_tokens"] = min(values["max_new_tokens"], limits.max_new_tokens)
    checked = {field.name: _check_field(field, values[field.name], limits) for field in FIELDS}
    _check_temperature_floor(checked["temperature"], values["temperature"])
    if checked["max_draft_len"] < checked["block_size"]:
        raise SettingsError("Max draft length must be at least the block size.")
    return DecodeSettings(**checked)


def validate_prompt(prompt, limits: Limits | None = None) -> str:
    """A non-empty string within the character limit (the token limit is checked after encoding)."""
    limits = limits or Limits.from_env()
    if not isinstance(prompt, str):
        raise SettingsError("The prompt must be text.")
    if not prompt.strip():
        raise SettingsError("Please type a prompt first: it is empty.")
    if len(prompt) > limits.max_prompt_chars:
        raise SettingsError(f"The prompt is too long ({len(prompt):,} characters; the limit is "
                            f"{limits.max_prompt_chars:,}). Shorten it and try again.")
    return prompt


def check_method_settings(method: str, settings: DecodeSettings) -> None:
    """Rules that depend on the method as well as the values."""
    if method == "smc" and settings.greedy:
        raise SettingsError("SMC-SD samples particles, so it needs a temperature above 0 (try 0.7). "
                            "For greedy decoding choose AR, fixed-length SD or PACER.")


def validate_method(method) -> str:
    name = str(method).strip().lower() if isinstance(method, str) else method
    if method_table.find(name) is None:
        known = ", ".join(row.key for row in method_table.rows())
        raise SettingsError(f"Unknown method {method!r}. Choose one of: {known}.")
    return name
