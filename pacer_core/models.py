"""Target: the target causal LM with its tokenizer, device, dtype and engine; and its loader (``load_target``), which
builds it and, beside it, what the runs draft with (``drafters.LoadedDrafters``, built by
``drafters/construction.py``): a draft model sharing the tokenizer, a feature head, or a drafter built from the
target itself.

Sources are a hub id, a local directory, or the word ``embedded`` (``loading.resolve_source``). Loading errors are
``ModelLoadError`` with a message that names the model; the UI and CLIs show it as one line. What a process loads
when told nothing else (the environment, a GPU's default pair) is ``default_target.py``'s."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import embedded
from .drafters.construction import default_embedded_drafter, load_draft_models, named_drafter
from .drafters.drafter import Drafter
from .drafters.loaded import LoadedDrafters
from .llama.target import LlamaTarget
from .loading import ModelLoadError, check_tokenizers_match, load_causal_lm, resolve_source
from .packed_linear import PackedLinear

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
          "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


@dataclass(frozen=True)
class Target:
    """The target in eval mode with its tokenizer, device, dtype and engine: what every run of every drafter shares.
    It holds no drafter (a run names its own: ``RunRequest.drafter``; what the loader built beside the target is a
    ``drafters.LoadedDrafters``) and nothing changes it once loaded (frozen).

    ``model``: the torch causal LM. ``name``: its hub id, folder or the embedded target's label. ``vocab_size``: the
    ids every run scores, the narrower of the target's and its draft model's logit widths (the loader's).
    ``engine``: llama.cpp's when it runs the target (llama/target.py); None: torch. ``measured_file``: the
    measured_defaults.json with the settings each drafter of this target starts with (``drafters.measured``; ""
    without one). ``load_note``: one line for the page about how this target was chosen (e.g. a GPU default that
    fell back)."""
    model: torch.nn.Module
    tokenizer: object
    name: str = "target"
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    dtype: torch.dtype = torch.float32
    vocab_size: int = 0
    use_chat_template: bool = True
    engine: LlamaTarget | None = None
    measured_file: str = ""
    load_note: str = ""

    @property
    def eos_token_ids(self) -> set[int]:
        ids = set()
        configured = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        if configured is None:
            configured = getattr(self.model.config, "eos_token_id", None)
        if isinstance(configured, int):
            ids.add(configured)
        elif configured:
            ids.update(int(i) for i in configured)
        if getattr(self.tokenizer, "eos_token_id", None) is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        return {i for i in ids if i < self.vocab_size}

    @property
    def max_context(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 2048) or 2048)

    def encode_prompt(self, prompt: str, chat: bool | None = None) -> list[int]:
        """Token ids of the prompt, wrapped in the chat template when the tokenizer has one."""
        chat = self.use_chat_template if chat is None else chat
        if chat and getattr(self.tokenizer, "chat_template", None):
            messages = [{"role": "user", "content": prompt}]
            encoded = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
        else:
            ids = self.tokenizer(prompt, add_special_tokens=True)["input_ids"]
        return [int(i) for i in ids]

    def decode(self, token_ids) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=False)

    def token_texts(self, token_ids) -> list[str]:
        """Each token's own text (byte-fallback pieces may decode to U+FFFD alone)."""
        return [self.tokenizer.decode([int(t)], skip_special_tokens=False) for t in token_ids]

    def describe(self, drafter) -> dict:
        """The target and ``drafter`` as runs drafting with it see them (the page's model line, traces, benchmark
        records; the keys are the traces' ``pair`` record)."""
        from .llama.engine import engine_label
        return {"target": self.name, "draft": drafter.name, "drafter": drafter.describe(),
                "target_engine": engine_label(self, drafter),
                "device": str(self.device), "linear_kernels": linear_kernels(self.model),
                "dtype": str(self.dtype).replace("torch.", ""), "vocab_size": self.vocab_size,
                "chat_template": self.use_chat_template}


def target_from_models(target_model, draft_model, tokenizer, target_name: str = "target", draft_name: str = "draft",
                       check_tokenizer: bool = True, draft_tokenizer=None,
                       use_chat_template: bool = True) -> tuple[Target, Drafter]:
    """Two models already built (tests, tools): the target's ``Target`` and the draft model as its
    ``IndependentDrafter`` (None without a draft model); both score the narrower of the two logit widths."""
    from .drafters import IndependentDrafter
    target_model.eval()
    if draft_model is not None:
        draft_model.eval()
    if check_tokenizer and draft_tokenizer is not None:
        check_tokenizers_match(tokenizer, draft_tokenizer, target_name, draft_name)
    target = build_target(target_model, tokenizer, target_name, draft_model, use_chat_template)
    drafter = IndependentDrafter(draft_model, target.vocab_size, draft_name) if draft_model is not None else None
    return target, drafter


def build_target(target_model, tokenizer, name: str, draft_model, use_chat_template: bool, device=None,
                 engine: LlamaTarget | None = None, measured_file: str = "", load_note: str = "") -> Target:
    """The ``Target`` of a model in memory, on ``device`` (default: its parameters'), in its parameters' dtype,
    scoring the ids both it and ``draft_model`` (None: none) have logits for; the chat template only where the
    tokenizer has one."""
    parameter = next(target_model.parameters())
    return Target(model=target_model, tokenizer=tokenizer, name=name, device=device or parameter.device,
                  dtype=parameter.dtype, vocab_size=scored_vocab_size(target_model, draft_model),
                  use_chat_template=use_chat_template and bool(getattr(tokenizer, "chat_template", None)),
                  engine=engine, measured_file=measured_file, load_note=load_note)


def linear_kernels(model) -> str:
    """Which kernel the model's linear layers run: "oneDNN packed" on a float32 CPU model (packed_linear.py)."""
    return "oneDNN packed" if any(isinstance(m, PackedLinear) for m in model.modules()) else "default"


def scored_vocab_size(target_model, draft_model) -> int:
    """The ids every run scores: the narrower of the target's and the draft model's (None: none) logit widths."""
    return min(_logit_width(model) for model in (target_model, draft_model) if model is not None)


def _logit_width(model) -> int:
    head = model.get_output_embeddings()
    if head is not None and hasattr(head, "weight"):
        return int(head.weight.shape[0])
    return int(model.config.vocab_size)


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_dtype(device: torch.device) -> torch.dtype:
    """bf16 on a GPU; float32 on a CPU, where greedy speculative decoding then returns exactly AR's tokens
    (in bf16 the verify pass over several tokens rounds differently from AR's one-token passes and flips
    near-ties) and multi-token verify passes cost far less than in emulated bf16 (README, "Measured")."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def parse_dtype(dtype) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    key = str(dtype).lower().replace("torch.", "")
    if key in ("", "auto"):
        return None
    if key not in DTYPES:
        raise ModelLoadError(f"Unknown dtype '{dtype}'. Use one of: float32, bfloat16, float16, auto.")
    return DTYPES[key]


def load_target(target_source: str = "embedded", draft: str = "embedded", device=None, dtype=None,
                use_chat_template: bool = True, device_map: str | None = None, draft_dtype=None,
                draft_vocab=None, draft_gguf: str | None = None, target_engine: str | None = None,
                load_note: str = "") -> tuple[Target, LoadedDrafters]:
    """Load a target and a draft (hub ids, local dirs or ``embedded``) on one device and dtype: the ``Target`` and
    what was built beside it to draft with (``LoadedDrafters``; its ``default`` is ``draft``).

    ``draft_dtype`` (default: ``dtype``) changes only the drafter's numerics: exactness depends on the
    target's alone, so e.g. a float32 target with a bfloat16 draft still returns AR's greedy tokens.
    ``device_map="auto"`` spreads a target too large for one GPU over all visible GPUs (accelerate).
    ``draft_vocab``: how many of its most frequent ids the independent draft scores ("all", a number, or None
    for its folder's recommendation; see ``construction.small_drafter_of``). ``draft_gguf``: the GGUF file the
    ``gguf`` drafter runs (default: for the embedded target, the file it was converted from). ``target_engine``:
    auto (default), torch or llama.cpp (llama/engine.py: auto is llama.cpp for the embedded target in float32 on a
    CPU with llama-cpp-python, torch otherwise). ``load_note``: the target's (how it was chosen)."""
    device = torch.device(device) if device else default_device()
    dtype = parse_dtype(dtype) or default_dtype(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("A CUDA device was requested but no GPU is visible.")
    target_location, target_name = resolve_source(target_source, "target")
    model, tokenizer = load_causal_lm(target_location, target_name, "target", device, dtype, device_map)
    is_embedded_target = target_location == str(embedded.converted_target_dir())
    draft_location, draft_name = resolve_source(default_embedded_drafter(draft, device) if is_embedded_target
                                                else draft, "draft")
    draft_dtype = parse_dtype(draft_dtype) or dtype
    draft_models = load_draft_models(draft_location, draft_name, is_embedded_target, device, draft_dtype, model,
                                     tokenizer, target_name, draft_gguf)
    parameter = next(model.parameters())
    device = parameter.device if device_map else device     # spread over GPUs: where its first layer sits
    engine = load_target_engine(target_engine, is_embedded_target and not device_map, tokenizer,
                                scored_vocab_size(model, draft_models.small_model), device, parameter.dtype)
    target = build_target(model, tokenizer, target_name, draft_models.small_model, use_chat_template,
                          device=device, engine=engine, load_note=load_note,
                          measured_file=_measured_file(draft_models.small_model_folder))
    chosen = named_drafter(target, draft_models, draft_location, draft_name, draft_dtype, draft_vocab)
    return target, LoadedDrafters.beside(draft_models, chosen)


def _measured_file(small_model_folder: str) -> str:
    """The measured_defaults.json in the independent draft model's folder ("" without a draft model)."""
    from .drafters import MEASURED_DEFAULTS_FILE
    return str(Path(small_model_folder) / MEASURED_DEFAULTS_FILE) if small_model_folder else ""


def load_target_engine(requested, is_embedded_target: bool, tokenizer, vocab_size: int, device: torch.device,
                       dtype: torch.dtype) -> LlamaTarget | None:
    """The llama.cpp engine for a target with this tokenizer, scored ids, device and dtype when ``choose_engine``
    picks it, else None (torch); ModelLoadError saying why an explicit llama.cpp cannot run."""
    from .llama.engine import choose_engine, parse_engine
    from .llama.model import GGUFUnavailable
    try:
        requested = parse_engine(requested)
        chosen = choose_engine(requested, is_embedded_target, device.type, str(dtype).replace("torch.", ""))
        if chosen == "torch":
            return None
        return LlamaTarget.for_embedded(tokenizer, vocab_size, log=lambda line: print(line, file=sys.stderr, flush=True))
    except (ValueError, GGUFUnavailable, embedded.EmbeddedModelMissing) as failure:
        if requested == "auto":      # the fastest engine could not start: say so and run the target in torch
            print(f"[pacer] target engine: torch ({failure})", file=sys.stderr, flush=True)
            return None
        raise ModelLoadError(str(failure)) from None
