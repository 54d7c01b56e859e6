#!/usr/bin/env bash
# Prints the CMake flags llama-cpp-python is built with on this machine (setup.sh, benchmarks/llamacpp_peer.py).
#
# Never GGML_NATIVE=ON: -march=native turns on -mamx-* on a CPU that advertises AMX (Intel Sapphire Rapids
# and later) and compiles ggml's AMX kernels in, whose first decode of a Q4_1 file dies with SIGILL on such
# machines; it also ties the library to the CPU it was built on (a Space image is built on one machine and runs
# on another). Instead: GGML_NATIVE=OFF with the x86 features /proc/cpuinfo lists, AMX never among them.
#   scripts/llama_cpu_flags.sh          flags for this CPU
#   scripts/llama_cpu_flags.sh avx2     the plain AVX2 set (the fallback when the first build fails its proof)
# CPUINFO_FILE=PATH reads the flags from another cpuinfo (tests/test_llama_build.py).
set -euo pipefail
common="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF"
arch=$(uname -m)
case "$arch" in
  x86_64|amd64|i686) ;;
  *) echo "$common"; exit 0 ;;  # elsewhere llama.cpp's own defaults
esac
flags=" $(grep -m1 '^flags' "${CPUINFO_FILE:-/proc/cpuinfo}" 2>/dev/null | cut -d: -f2) "
has() { [[ "$flags" == *" $1 "* ]]; }
cpu="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
if [ "${1:-}" = "avx2" ]; then
  echo "$common $cpu -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
  exit 0
fi
add() { if has "$1"; then cpu="$cpu -D$2=ON"; else cpu="$cpu -D$2=OFF"; fi; }
add avx GGML_AVX
add avx2 GGML_AVX2
add fma GGML_FMA
add f16c GGML_F16C
add bmi2 GGML_BMI2
add avx_vnni GGML_AVX_VNNI
if has avx512f && has avx512bw && has avx512dq && has avx512vl; then
  cpu="$cpu -DGGML_AVX512=ON"
  add avx512_vnni GGML_AVX512_VNNI
  add avx512vbmi GGML_AVX512_VBMI
  add avx512_bf16 GGML_AVX512_BF16
else
  cpu="$cpu -DGGML_AVX512=OFF"
fi
echo "$common $cpu"
