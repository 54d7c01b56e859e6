#!/usr/bin/env bash
# Builds llama-cpp-python 0.3.36 into .venv for the gguf drafter and proves the build in a child process.
#   bash scripts/build_llama.sh            build if missing, then prove (setup.sh runs this)
#   bash scripts/build_llama.sh --rebuild  build again (the kept wheel for these flags is dropped), then prove
#   PACER_VENV=/path/to/venv bash scripts/build_llama.sh   into another virtual environment than .venv
# Built wheels are kept per version, flags and patch under $PACER_CACHE/llama-wheels (pip's cache ignores the flags).
# The source is llama-cpp-python's sdist patched (scripts/patch_llama_source.py: one-row float32 products go through
# the same kernel as many rows, flash attention runs every row of a step alike (a prefill keeps its tiles), so the
# target engine needs no companion token and decodes with flash attention).
# Flags: scripts/llama_cpu_flags.sh (the CPU's own features, never GGML_NATIVE, never AMX); $CMAKE_ARGS
# overrides them. When the proof's child dies, one rebuild with the plain AVX2 set; when that dies too the
# gguf drafter is left out (the app proves the build again itself and says why under the drafter list).
set -uo pipefail
cd "$(dirname "$0")/.."
VENV="${PACER_VENV:-.venv}"
PY="$VENV/bin/python"
VERSION=0.3.36
have_llama() { "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('llama_cpp') is None)"; }
WHEELS="${PACER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pacer-lab}/llama-wheels"
MARKER="$VENV/pacer-llama-build"   # the key of the build setup last installed (a changed flag or patch rebuilds)
build_key() { printf '%s %s %s' "$VERSION" "$1" "$(sha256sum < scripts/patch_llama_source.py)" | sha256sum | cut -c1-16; }
build() {   # $1: cmake flags; $2: "fresh" to build again even if a wheel with these flags is kept
  # pip's own wheel cache does not key on CMAKE_ARGS (it hands back a wheel built with other flags, such as an
  # old GGML_NATIVE=ON one that dies on this CPU), so wheels are kept in a folder per version, flags and patch.
  local dir wheel source
  dir="$WHEELS/$(build_key "$1")"
  [ "${2:-}" = fresh ] && rm -rf "$dir"
  if ! ls "$dir"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    echo "[setup] building llama-cpp-python $VERSION from source for the gguf drafter (5-9 min the first time)..."
    echo "[setup]   CMAKE_ARGS=$1"
    mkdir -p "$dir"
    source=$(mktemp -d)
    if ! { "$PY" -m pip download -q --no-deps --no-binary :all: llama-cpp-python==$VERSION -d "$source" &&
           tar xzf "$source/llama_cpp_python-$VERSION.tar.gz" -C "$source" &&
           "$PY" scripts/patch_llama_source.py "$source/llama_cpp_python-$VERSION" &&
           CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}" CMAKE_ARGS="$1" \
             "$PY" -m pip wheel -q --no-cache-dir --no-deps "$source/llama_cpp_python-$VERSION" -w "$dir"; }; then
      rm -rf "$dir" "$source"; return 1
    fi
    rm -rf "$source"
  else
    echo "[setup] llama-cpp-python $VERSION with these flags was built before: $dir"
  fi
  wheel=$(ls "$dir"/llama_cpp_python-*.whl | head -1)
  # --force-reinstall: the same version built with other flags counts as installed to pip; then its dependencies
  "$PY" -m pip install -q --force-reinstall --no-deps "$wheel" && "$PY" -m pip install -q "$wheel"
}
prove() { "$PY" -W ignore::RuntimeWarning -m pacer_core.llama.proof --again; }

FLAGS="${CMAKE_ARGS:-$(bash scripts/llama_cpu_flags.sh)}"
KEY=$(build_key "$FLAGS")   # read before building: a patch edited during a build must not be marked as built
if ! command -v cmake >/dev/null 2>&1 || ! { command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1; }; then
  have_llama || { echo "[setup] gguf drafter left out: no C++ compiler or cmake to build llama-cpp-python"; exit 0; }
  echo "[setup] no C++ compiler or cmake: keeping the llama-cpp-python already installed"
elif [ "${1:-}" = "--rebuild" ]; then
  { build "$FLAGS" fresh && echo "$KEY" > "$MARKER"; } || echo "[setup] llama-cpp-python did not build"
elif ! have_llama || [ "$(cat "$MARKER" 2>/dev/null)" != "$KEY" ]; then
  { build "$FLAGS" && echo "$KEY" > "$MARKER"; } || echo "[setup] llama-cpp-python did not build"
fi
have_llama || { echo "[setup] gguf drafter left out: llama-cpp-python is not installed (the build failed)"; exit 0; }
if prove; then exit 0; fi
echo "[setup] the build failed its proof: rebuilding once with the plain AVX2 set"
build "$(bash scripts/llama_cpu_flags.sh avx2)" fresh || echo "[setup] llama-cpp-python did not build with the AVX2 set"
prove || true
exit 0
