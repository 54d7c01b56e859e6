"""ModelPair: the target causal LM with its tokenizer, device, dtype and engine; and the loader, which builds it
and, beside it, what the runs draft with (``drafters.LoadedDrafters``): a draft model sharing the tokenizer, a
feature head, or a drafter built from the target itself.

Sources are a hub id, a local directory, or the word ``embedded``. Loading errors become
``ModelLoadError`` with a message that names the model; the UI and CLIs show it as one line."""
from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import embedded
from .drafters.drafter import Drafter
from .drafters.feature_head import is_head_dir
from .drafters.kinds import entry_for_name
from .drafters.loaded import LoadedDrafters
from .llama.target import LlamaTarget
from .packed_linear import PackedLinear, pack_linear_layers, packing_wanted

PROBE_STRINGS = (
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "def add(a, b):\n    return a + b  # 42",
    "Ünïcödé ✓ 漢字 — émoji 🙂 and\ttabs",
    "<|im_start|>user\nHi<|im_end|>",
)
DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
          "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


class ModelLoadError(RuntimeError):
    """A model or tokenizer could not be loaded, or the pair does not fit together."""


@dataclass(frozen=True)
class ModelPair:
    """The target in eval mode with its tokenizer, device, dtype and engine: what every run of every drafter shares.
    It holds no drafter (a run names its own: ``RunRequest.drafter``; what the loader built beside the target is a
    ``drafters.LoadedDrafters``) and nothing changes it once loaded (frozen).

    ``vocab_size``: the ids every run scores, the narrower of the target's and its draft model's logit widths (the
    loader's). ``target_engine``: llama.cpp's when it runs the target (llama/target.py); None: torch.
    ``measured_file``: the measured_defaults.json with the settings each drafter of this target starts with
    (``drafters.measured``; "" without one). ``load_note``: one line for the page about how this pair was chosen
    (e.g. a GPU default that fell back)."""
    target: torch.nn.Module
    tokenizer: object
    target_id: str = "target"
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    dtype: torch.dtype = torch.float32
    vocab_size: int = 0
    use_chat_template: bool = True
    target_engine: LlamaTarget | None = None
    measured_file: str = ""
    load_note: str = ""

    @property
    def eos_token_ids(self) -> set[int]:
        ids = set()
        for model in (self.target,):
            configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
            if configured is None:
                configured = getattr(model.config, "eos_token_id", None)
            if isinstance(configured, int):
                ids.add(configured)
            elif configured:
                ids.update(int(i) for i in configured)
        if getattr(self.tokenizer, "eos_token_id", None) is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        return {i for i in ids if i < self.vocab_size}

    @property
    def max_context(self) -> int:
        return int(getattr(self.target.config, "max_position_embeddings", 2048) or 2048)

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
        """This pair as runs drafting with ``drafter`` see it (the page's model line, traces, benchmark records)."""
        from .llama.engine import engine_label
        return {"target": self.target_id, "draft": drafter.name, "drafter": drafter.describe(),
                "target_engine": engine_label(self, drafter),
                "device": str(self.device), "linear_kernels": linear_kernels(self.target),
                "dtype": str(self.dtype).replace("torch.", ""), "vocab_size": self.vocab_size,
                "chat_template": self.use_chat_template}


def pair_from_models(target_model, draft_model, tokenizer, target_id: str = "target", draft_id: str = "draft",
                     check_tokenizer: bool = True, draft_tokenizer=None,
                     use_chat_template: bool = True) -> tuple[ModelPair, Drafter]:
    """A pair of models already built (tests, tools): the target's ``ModelPair`` and the draft model as its
    ``IndependentDrafter`` (None without a draft model); both score the narrower of the two logit widths."""
    from .drafters import IndependentDrafter
    target_model.eval()
    if draft_model is not None:
        draft_model.eval()
    if check_tokenizer and draft_tokenizer is not None:
        check_tokenizers_match(tokenizer, draft_tokenizer, target_id, draft_id)
    pair = target_pair(target_model, tokenizer, target_id, draft_model, use_chat_template)
    drafter = IndependentDrafter(draft_model, pair.vocab_size, draft_id) if draft_model is not None else None
    return pair, drafter


def target_pair(target_model, tokenizer, target_id: str, draft_model, use_chat_template: bool) -> ModelPair:
    """The pair for a target in memory, on its parameters' device and dtype, scoring the ids both it and
    ``draft_model`` (None: none) have logits for; the chat template only where the tokenizer has one."""
    parameter = next(target_model.parameters())
    vocab = min(_logit_width(model) for model in (target_model, draft_model) if model is not None)
    return ModelPair(target=target_model, tokenizer=tokenizer, target_id=target_id, device=parameter.device,
                     dtype=parameter.dtype, vocab_size=vocab,
                     use_chat_template=use_chat_template and bool(getattr(tokenizer, "chat_template", None)))


def linear_kernels(model) -> str:
    """Which kernel the model's linear layers run: "oneDNN packed" on a float32 CPU model (packed_linear.py)."""
    return "oneDNN packed" if any(isinstance(m, PackedLinear) for m in model.modules()) else "default"


def _logit_width(model) -> int:
    head = model.get_output_embeddings()
    if head is not None and hasattr(head, "weight"):
        return int(head.weight.shape[0])
    return int(model.config.vocab_size)


def check_tokenizers_match(target_tokenizer, draft_tokenizer, target_id: str, draft_id: str) -> None:
    """Draft and target must map the same strings to the same ids, over the ids both know."""
    target_vocab, draft_vocab = target_tokenizer.get_vocab(), draft_tokenizer.get_vocab()
    common_limit = min(len(target_vocab), len(draft_vocab))
    target_common = {tok: i for tok, i in target_vocab.items() if i < common_limit}
    draft_common = {tok: i for tok, i in draft_vocab.items() if i < common_limit}
    differing = [tok for tok, i in target_common.items() if draft_common.get(tok) != i]
    if differing:
        raise ModelLoadError(
            f"Tokenizers do not match: '{target_id}' and '{draft_id}' give different ids to "
            f"{len(differing)} tokens (e.g. {differing[0]!r}). Speculative decoding needs one shared tokenizer.")
    for probe in PROBE_STRINGS:
        target_ids = target_tokenizer(probe, add_special_tokens=False)["input_ids"]
        draft_ids = draft_tokenizer(probe, add_special_tokens=False)["input_ids"]
        if list(target_ids) != list(draft_ids):
            raise ModelLoadError(
                f"Tokenizers do not match: '{target_id}' and '{draft_id}' split {probe[:30]!r} differently.")


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


def resolve_source(source: str, role: str) -> tuple[str, str]:
    """Map a source to (path or hub id, display name)."""
    if source is None or str(source).strip() == "":
        source = embedded.EMBEDDED
    source = str(source).strip()
    if role == "draft" and source == embedded.EMBEDDED:
        source = embedded.DEFAULT_EMBEDDED_DRAFTER
    if role == "draft":     # the page's drafter names for the embedded drafters
        source = {"small": embedded.EMBEDDED_SMALL, "head": embedded.EMBEDDED_HEAD}.get(source, source)
    try:
        if role == "target" and source == embedded.EMBEDDED:
            return str(embedded.ensure_embedded_target()), embedded.TARGET_NAME
        if role == "draft" and source == embedded.EMBEDDED_SMALL:
            return str(embedded.embedded_draft_dir()), embedded.EMBEDDED_DRAFT_LABEL
        if role == "draft" and source == embedded.EMBEDDED_HEAD:
            return str(embedded.embedded_head_dir()), embedded.EMBEDDED_HEAD_LABEL
    except embedded.EmbeddedModelMissing as missing:
        raise ModelLoadError(str(missing)) from missing
    return source, source


def _load_one(location: str, name: str, role: str, device, dtype, device_map=None):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    is_local = Path(location).expanduser().exists()
    if not is_local and (location.startswith((".", "/", "~")) or os.sep in location.strip("/").replace("/", "", 1)):
        raise ModelLoadError(f"The {role} model path '{location}' does not exist.")
    kwargs = {"dtype": dtype}
    if device_map:
        kwargs["device_map"] = device_map
    try:
        tokenizer = AutoTokenizer.from_pretrained(location)
        model = AutoModelForCausalLM.from_pretrained(location, **kwargs)
    except (OSError, ValueError, EnvironmentError) as failure:
        first_line = str(failure).strip().splitlines()[0] if str(failure).strip() else type(failure).__name__
        hint = "" if is_local else " (is it a valid hub id, and is the network or HF cache available?)"
        raise ModelLoadError(f"Could not load the {role} model '{name}'{hint}: {first_line}") from failure
    if not device_map:
        model.to(device)
        if packing_wanted(device, dtype):
            pack_linear_layers(model)
    model.eval()
    return model, tokenizer


def load_pair(target: str = "embedded", draft: str = "embedded", device=None, dtype=None,
              use_chat_template: bool = True, device_map: str | None = None, draft_dtype=None,
              draft_vocab=None, draft_gguf: str | None = None,
              target_engine: str | None = None) -> tuple[ModelPair, LoadedDrafters]:
    """Load a target and a draft (hub ids, local dirs or ``embedded``) on one device and dtype: the target's
    ``ModelPair`` and what was built beside it to draft with (``LoadedDrafters``; its ``default`` is ``draft``).

    ``draft_dtype`` (default: ``dtype``) changes only the drafter's numerics: exactness depends on the
    target's alone, so e.g. a float32 target with a bfloat16 draft still returns AR's greedy tokens.
    ``device_map="auto"`` spreads a target too large for one GPU over all visible GPUs (accelerate).
    ``draft_vocab``: how many of its most frequent ids the independent draft scores ("all", a number, or None
    for its folder's recommendation; see ``small_drafter_of``). ``draft_gguf``: the GGUF file the
    ``gguf`` drafter runs (default: for the embedded target, the file it was converted from). ``target_engine``:
    auto (default), torch or llama.cpp (llama/engine.py: auto is llama.cpp for the embedded target in float32 on a
    CPU with llama-cpp-python, torch otherwise)."""
    device = torch.device(device) if device else default_device()
    dtype = parse_dtype(dtype) or default_dtype(device)
    draft_dtype = parse_dtype(draft_dtype) or dtype
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("A CUDA device was requested but no GPU is visible.")
    target_location, target_name = resolve_source(target, "target")
    target_model, target_tokenizer = _load_one(target_location, target_name, "target", device, dtype, device_map)
    is_embedded_target = target_location == str(embedded.converted_target_dir())
    if is_embedded_target:
        draft = default_embedded_drafter(draft, device)
    draft_location, draft_name = resolve_source(draft, "draft")
    small_location, small_name = _small_model_source(draft_location, draft_name, is_embedded_target)
    small_model = _load_draft(small_location, small_name, device, draft_dtype, target_model, target_tokenizer,
                              target_name) if small_location else None
    loaded = LoadedDrafters(default=None, small_model=small_model, small_model_id=small_name,   # what the builders
                            gguf_file=str(draft_gguf or ""))                                 # read; default below
    pair = target_pair(target_model, target_tokenizer, target_name, small_model, use_chat_template)
    pair = dataclasses.replace(pair, device=device if not device_map else pair.device,
                               measured_file=_measured_file(loaded.small_model_folder))
    pair = dataclasses.replace(pair, target_engine=load_target_engine(target_engine,
                                                                      is_embedded_target and not device_map, pair))
    chosen = _named_drafter(pair, loaded, draft_location, draft_name, draft_dtype, draft_vocab)
    return pair, dataclasses.replace(loaded, default=chosen)


def _builds_from_target(draft_location: str) -> bool:
    """Whether the draft is a drafter made of the target itself (``self-int8``, ``self-int4``, ``gguf``)."""
    named = entry_for_name(draft_location)
    return named is not None and named.kind in ("self-quantized", "gguf")


def _small_model_source(draft_location: str, draft_name: str, is_embedded_target: bool) -> tuple[str | None, str]:
    """Where the independent draft model loads from, and its name: the draft itself; when a feature head or the
    target itself drafts, the embedded small draft beside the embedded target (the assisted baselines and ``small``
    need it), else none."""
    if not (is_head_dir(draft_location) or _builds_from_target(draft_location)):
        return draft_location, draft_name
    return resolve_source(embedded.EMBEDDED_SMALL, "draft") if is_embedded_target else (None, "")


def _named_drafter(pair: ModelPair, loaded: LoadedDrafters, draft_location: str, draft_name: str, draft_dtype,
                   draft_vocab) -> Drafter:
    """The drafter ``--draft`` named, built from what was loaded: a feature head's folder, a drafter made of the
    target, or the independent draft model (scoring the ids ``draft_vocab`` asks for)."""
    if is_head_dir(draft_location):
        return loaded_head(pair, draft_location, draft_name, draft_dtype)
    if _builds_from_target(draft_location):
        return drafter_by_name(pair, loaded, draft_location)
    return small_drafter_of(pair, loaded, draft_vocab)


def _load_draft(location: str, name: str, device, dtype, target_model, target_tokenizer, target_name: str):
    """The independent draft model, checked against the target's tokenizer (a draft larger than the target loads,
    with a warning: speculative decoding will be slower than plain decoding)."""
    draft_model, draft_tokenizer = _load_one(location, name, "draft", device, dtype)
    check_tokenizers_match(target_tokenizer, draft_tokenizer, target_name, name)
    if _parameter_count(draft_model) > _parameter_count(target_model):
        import warnings
        warnings.warn(f"The draft '{name}' is larger than the target '{target_name}': "
                      "speculative decoding will be slower than plain decoding.")
    return draft_model


def _measured_file(small_model_folder: str) -> str:
    """The measured_defaults.json in the independent draft model's folder ("" without a draft model)."""
    from .drafters import MEASURED_DEFAULTS_FILE
    return str(Path(small_model_folder) / MEASURED_DEFAULTS_FILE) if small_model_folder else ""


def loaded_head(pair: ModelPair, directory: str, name: str, dtype) -> Drafter:
    """The feature head in ``directory`` (a folder with head_config.json) reading the pair's target."""
    from .drafters.feature_head import FeatureHeadDrafter
    try:
        return FeatureHeadDrafter.load(directory, pair.target, pair.vocab_size, name, dtype=dtype)
    except (OSError, KeyError, RuntimeError, ValueError) as failure:
        raise ModelLoadError(f"Could not load the feature head '{name}': {failure}") from failure


def drafter_by_name(pair: ModelPair, loaded: LoadedDrafters, name: str) -> Drafter:
    """``drafters.load_drafter`` for the loader: a drafter that cannot be built is a ModelLoadError."""
    from .drafters import load_drafter
    try:
        return load_drafter(pair, loaded, name)
    except ValueError as failure:
        raise ModelLoadError(str(failure)) from failure


def load_target_engine(requested, is_embedded_target: bool, pair: ModelPair):
    """The llama.cpp engine for the pair's target when ``choose_engine`` picks it, else None (torch);
    ModelLoadError saying why an explicit llama.cpp cannot run."""
    from .llama.engine import choose_engine, parse_engine
    from .llama.model import GGUFUnavailable
    try:
        requested = parse_engine(requested)
        chosen = choose_engine(requested, is_embedded_target, pair.device.type, str(pair.dtype).replace("torch.", ""))
        if chosen == "torch":
            return None
        return LlamaTarget.for_embedded(pair.tokenizer, pair.vocab_size,
                                        log=lambda line: print(line, file=sys.stderr, flush=True))
    except (ValueError, GGUFUnavailable, embedded.EmbeddedModelMissing) as failure:
        if requested == "auto":      # the fastest engine could not start: say so and run the target in torch
            print(f"[pacer] target engine: torch ({failure})", file=sys.stderr, flush=True)
            return None
        raise ModelLoadError(str(failure)) from None


def default_embedded_drafter(draft, device: torch.device) -> str:
    """What ``embedded`` (or no draft) means for the embedded target: ``gguf`` (the target's own GGUF file run by
    llama.cpp) on a CPU where llama-cpp-python is installed and its build passed its proof in a child process
    (``llama.proof``), the drafter with which the app's defaults show the
    most of the papers' claims on held-out prompts (README, "Measured"); else the small draft model. Any other
    name is kept."""
    if draft not in (None, "", embedded.EMBEDDED):
        return draft
    from .llama.availability import embedded_gguf_unavailable
    if device.type == "cpu":
        why_not = embedded_gguf_unavailable()
        if why_not is None:
            return "gguf"
        print(f"[pacer] gguf drafter left out: {why_not}; drafting with the small draft model", file=sys.stderr,
              flush=True)
    return embedded.DEFAULT_EMBEDDED_DRAFTER


def small_drafter_of(pair: ModelPair, loaded: LoadedDrafters, draft_vocab) -> Drafter:
    """The independent draft model as a drafter, scoring the ids ``draft_vocab`` asks for (drafters/vocabulary.py):
    None → what its folder's frequent_ids.json recommends (``default_kept``; all ids without one), "all" or 0 →
    every id, N → the N most frequent."""
    from .drafters import reduced_vocabulary_drafter, small_drafter
    from .drafters.vocabulary import recommended_kept

    text = "" if draft_vocab is None else str(draft_vocab).strip().lower()
    every_id = text in ("all", "0", "full")
    if text and not every_id and not text.isdigit():
        raise ModelLoadError(f"Unknown draft vocabulary '{draft_vocab}': use all or a number of ids such as 16384.")
    count = 0 if every_id else int(text) if text else recommended_kept(loaded.small_model_folder)
    if not count:
        return small_drafter(pair, loaded)
    try:
        return reduced_vocabulary_drafter(pair, loaded, count, name=loaded.small_model_id)
    except ValueError as missing:
        raise ModelLoadError(str(missing)) from missing


def _parameter_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def pair_from_env(**overrides) -> tuple[ModelPair, LoadedDrafters]:
    """load_pair with PACER_TARGET / PACER_DRAFT / PACER_DEVICE / PACER_DTYPE / PACER_DRAFT_DTYPE /
    PACER_DRAFT_VOCAB / PACER_DRAFT_GGUF / PACER_TARGET_ENGINE as defaults. With no target configured the pair is
    the embedded one, except on a GPU: there the hub pair chosen for its memory (``load_gpu_default``)."""
    settings = {"target": os.environ.get("PACER_TARGET") or None,
                "draft": os.environ.get("PACER_DRAFT") or None,
                "device": os.environ.get("PACER_DEVICE") or None,
                "dtype": os.environ.get("PACER_DTYPE") or None,
                "draft_dtype": os.environ.get("PACER_DRAFT_DTYPE") or None,
                "draft_vocab": os.environ.get("PACER_DRAFT_VOCAB") or None,
                "draft_gguf": os.environ.get("PACER_DRAFT_GGUF") or None,
                "target_engine": os.environ.get("PACER_TARGET_ENGINE") or None}
    settings.update({k: v for k, v in overrides.items() if v is not None})
    if settings["target"] is None:
        device = torch.device(settings["device"]) if settings["device"] else default_device()
        if device.type == "cuda" and not settings.get("device_map"):
            return load_gpu_default(settings, device)
    settings["target"] = settings["target"] or embedded.EMBEDDED
    settings["draft"] = settings["draft"] or embedded.EMBEDDED
    return load_pair(**settings)


@dataclass(frozen=True)
class HubPair:
    """A target and drafter from the hub that pay on a GPU with at least ``min_gb`` of memory."""
    min_gb: float
    target: str
    draft: str
    download_gb: float     # both in bfloat16, what the first start downloads


# Checked from the largest: SmolLM2-1.7B with its 135M (~3.7 GB) below ~22 GB (T4 16 GB); Qwen2.5-7B with its 0.5B
# (~16 GB) from a 24 GB card (L4, A10G: 24.1e9 bytes) up, with room for the KV caches (README, "Hardware").
GPU_DEFAULT_PAIRS = (HubPair(22.0, "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", 16.2),
                     HubPair(0.0, "HuggingFaceTB/SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct", 3.7))


def gpu_default_pair(memory_gb: float) -> HubPair:
    """The largest default pair the GPU's memory (decimal GB) holds."""
    return next(pair for pair in GPU_DEFAULT_PAIRS if memory_gb >= pair.min_gb)


def gpu_memory_gb(device: torch.device) -> float:
    """Total memory of the CUDA device in decimal GB; 0 when it cannot be read (the smallest pair then)."""
    try:
        return torch.cuda.get_device_properties(device.index or 0).total_memory / 1e9
    except (RuntimeError, AssertionError, AttributeError) as failure:
        print(f"[pacer] could not read the GPU's memory ({failure}); choosing the smallest GPU pair",
              file=sys.stderr, flush=True)
        return 0.0


def load_gpu_default(settings: dict, device: torch.device) -> tuple[ModelPair, LoadedDrafters]:
    """The hub pair for this GPU's memory (a configured drafter is kept); when it cannot load (the hub out of
    reach, say), the embedded pair on the same device with a one-line ``load_note`` saying why."""
    memory = gpu_memory_gb(device)
    chosen = gpu_default_pair(memory)
    draft = settings["draft"] if settings["draft"] not in (None, embedded.EMBEDDED) else chosen.draft
    print(f"[pacer] GPU with {memory:.1f} GB and no target set: loading {chosen.target} with {draft} as drafter "
          f"from the hub (~{chosen.download_gb:.1f} GB to download the first time; progress below)",
          file=sys.stderr, flush=True)
    try:
        return load_pair(**(settings | {"target": chosen.target, "draft": draft, "device": device}))
    except (ModelLoadError, torch.cuda.OutOfMemoryError) as failure:
        reason = (str(failure).strip().splitlines() or [type(failure).__name__])[0].rstrip(".")
        note = (f"The GPU default pair ({chosen.target} with {draft}) could not load: {reason}. "
                "Serving the embedded pair.")
        print(f"[pacer] {note}", file=sys.stderr, flush=True)
    pair, loaded = load_pair(**(settings | {"target": embedded.EMBEDDED, "draft": embedded.EMBEDDED, "device": device}))
    return dataclasses.replace(pair, load_note=note), loaded
