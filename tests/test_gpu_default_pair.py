"""On a GPU with no target configured the app loads a hub pair chosen for the GPU's memory (issue 42, item 3), and
the embedded pair with a note on the page when that pair cannot load. No GPU needed: CUDA is stood in
(tests/gpu_stand_in.py) and the hub by a local hub cache of random-weight models with the real architectures
(Qwen2, Llama) at tiny sizes, read offline."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models as tokenizer_models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from pacer_core.default_target import GPU_DEFAULT_PAIRS, gpu_default_pair
from pacer_core.testing.app_runner import free_port

ROOT = Path(__file__).resolve().parent.parent
STAND_IN = ROOT / "tests" / "gpu_stand_in.py"
QWEN, SMOLLM2 = GPU_DEFAULT_PAIRS
VOCAB = 320


@pytest.mark.pure
@pytest.mark.parametrize("memory_gb, expected", [
    (16.1, SMOLLM2),   # T4: 15360 MiB
    (20.0, SMOLLM2),
    (24.15, QWEN),     # L4 / A10G: 23034 MiB
    (85.0, QWEN),      # A100 80 GB, H100
    (0.0, SMOLLM2),    # memory unreadable
])
def test_the_pair_is_chosen_by_the_gpus_memory(memory_gb, expected):
    assert gpu_default_pair(memory_gb) == expected


def byte_level_tokenizer():
    """A small byte-level BPE, the kind both families ship (transformers reads a Qwen2 repo's with its own class)."""
    backend = Tokenizer(tokenizer_models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(["Hello world, the quick brown fox jumps over the lazy dog."] * 10, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>")


def tiny_model(repo_id: str, layers: int):
    shape = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    if repo_id.startswith("Qwen/"):
        return Qwen2ForCausalLM(Qwen2Config(**shape))
    return LlamaForCausalLM(LlamaConfig(**shape))


def put_in_hub_cache(hub_cache: Path, repo_id: str, layers: int) -> None:
    """A model as huggingface_hub keeps a download: models--org--name/refs/main and snapshots/<commit>/."""
    folder = hub_cache / ("models--" + repo_id.replace("/", "--"))
    commit = "0123456789abcdef0123456789abcdef01234567"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    snapshot = folder / "snapshots" / commit
    tiny_model(repo_id, layers).save_pretrained(snapshot)
    byte_level_tokenizer().save_pretrained(snapshot)


@pytest.mark.pure
def test_the_device_check_names_each_default_pair_by_its_target():
    """benchmarks/device_check.py --target picks a default pair by its target's hub id, and refuses any other id."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("device_check_script", ROOT / "benchmarks" / "device_check.py")
    device_check = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = device_check          # its dataclasses resolve their module while it loads
    try:
        spec.loader.exec_module(device_check)
        for hub_pair in GPU_DEFAULT_PAIRS:
            assert device_check.named_gpu_pair_ids(hub_pair.target) == (hub_pair.target, hub_pair.draft)
        with pytest.raises(SystemExit, match="--target must be one of"):
            device_check.named_gpu_pair_ids("no/such-model")
    finally:
        del sys.modules[spec.name]


@pytest.fixture(scope="module")
def hub_home(tmp_path_factory) -> Path:
    """$HF_HOME holding both default pairs (tiny, random weights)."""
    home = tmp_path_factory.mktemp("hf-home")
    for hub_pair in GPU_DEFAULT_PAIRS:
        put_in_hub_cache(home / "hub", hub_pair.target, layers=2)
        put_in_hub_cache(home / "hub", hub_pair.draft, layers=1)
    return home


def stand_in_env(hf_home: Path) -> dict:
    env = {key: value for key, value in os.environ.items()
           if key not in ("PACER_TARGET", "PACER_DRAFT", "PACER_DEVICE", "PACER_DTYPE")}
    return env | {"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False",
                  "PYTHONUNBUFFERED": "1"}


def load_as_on_gpu(memory_gb: float, hf_home: Path) -> tuple[dict, str]:
    done = subprocess.run([sys.executable, str(STAND_IN), str(memory_gb), "pair"], env=stand_in_env(hf_home),
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.mark.parametrize("memory_gb, expected, model_type", [(16.1, SMOLLM2, "llama"), (24.15, QWEN, "qwen2")])
def test_a_gpu_with_no_target_set_loads_its_pair_from_the_hub(hub_home, memory_gb, expected, model_type):
    loaded, log = load_as_on_gpu(memory_gb, hub_home)
    assert (loaded["target"], loaded["draft"], loaded["model_type"]) == (expected.target, expected.draft, model_type)
    assert loaded["requested_devices"] == ["cuda"] and loaded["tokens"] == 4 and loaded["note"] == ""
    assert (f"GPU with {memory_gb:.1f} GB and no target set: loading {expected.target} with {expected.draft}"
            in log), log[-2000:]


@pytest.mark.embedded
def test_without_the_hub_a_gpu_falls_back_to_the_embedded_pair_saying_why(tmp_path):
    loaded, log = load_as_on_gpu(24.15, tmp_path / "empty-hf-home")
    assert loaded["target"].startswith("SmolLM2-135M-Instruct (embedded") and loaded["tokens"] == 4
    assert loaded["requested_devices"] == ["cuda", "cuda"]       # the default pair, then the embedded one
    note = loaded["note"]
    assert note.startswith(f"The GPU default pair ({QWEN.target} with {QWEN.draft}) could not load: ")
    assert note.endswith("Serving the embedded pair.") and "\n" not in note and note in log


@pytest.mark.server
@pytest.mark.embedded
def test_the_fallback_note_is_on_the_page(tmp_path):
    port = free_port()
    with open(tmp_path / "app.log", "w") as log:
        app = subprocess.Popen([sys.executable, str(STAND_IN), "24.15", "app", "--host", "127.0.0.1", "--port",
                                str(port)], env=stand_in_env(tmp_path / "empty-hf-home"), cwd=ROOT, stdout=log,
                               stderr=subprocess.STDOUT)
    try:
        config = wait_for_config(f"http://127.0.0.1:{port}/config", app, tmp_path / "app.log")
    finally:
        app.terminate()
        app.wait(timeout=30)
    status = [c["props"]["value"] for c in config["components"] if c.get("props", {}).get("elem_id") == "pair-status"]
    assert len(status) == 1 and "The GPU default pair (Qwen/Qwen2.5-7B-Instruct" in status[0], status


def wait_for_config(url: str, app: subprocess.Popen, log_path: Path, limit_s: float = 300) -> dict:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        assert app.poll() is None, f"app exited with {app.returncode}: {log_path.read_text()[-3000:]}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return json.loads(response.read())
        except OSError:
            time.sleep(1)
    raise AssertionError(f"app did not serve within {limit_s} s: {log_path.read_text()[-3000:]}")
