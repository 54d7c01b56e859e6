"""The llama.cpp build flags (scripts/llama_cpu_flags.sh): the CPU's listed x86 features, GGML_NATIVE off and AMX
never on, also on a CPU that advertises AMX (where a native build compiled ggml's AMX kernels and died with
SIGILL at the first decode)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from script_module import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "llama_cpu_flags.sh"
SAPPHIRE_RAPIDS = ("fpu vme sse sse2 avx f16c fma avx2 bmi1 bmi2 avx512f avx512dq avx512cd avx512bw avx512vl "
                   "avx512_vnni avx512_bf16 avx512vbmi avx_vnni amx_bf16 amx_tile amx_int8")
ZEN3 = "fpu vme sse sse2 avx f16c fma avx2 bmi1 bmi2 sha_ni"
pytestmark = [pytest.mark.pure,
              pytest.mark.skipif(shutil.which("bash") is None or not Path("/proc").exists(), reason="needs bash")]


def flags_for(cpu_flags: str, tmp_path, *arguments) -> dict[str, str]:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {cpu_flags}\n")
    printed = subprocess.run(["bash", str(SCRIPT), *arguments], capture_output=True, text=True, check=True,
                             env={"CPUINFO_FILE": str(cpuinfo), "PATH": "/usr/bin:/bin"}).stdout.split()
    return dict(item[2:].split("=", 1) for item in printed)


def test_an_amx_cpu_gets_its_avx512_set_and_never_amx(tmp_path):
    flags = flags_for(SAPPHIRE_RAPIDS, tmp_path)
    if flags.get("GGML_NATIVE") is None:
        pytest.skip("not an x86 machine: llama.cpp's defaults")
    assert flags["GGML_NATIVE"] == "OFF"
    assert all(flags[name] == "OFF" for name in ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16"))
    assert all(flags[name] == "ON" for name in ("GGML_AVX2", "GGML_FMA", "GGML_F16C", "GGML_BMI2", "GGML_AVX512",
                                                "GGML_AVX512_VNNI", "GGML_AVX512_VBMI", "GGML_AVX512_BF16",
                                                "GGML_AVX_VNNI"))


def test_an_avx2_cpu_gets_no_avx512_and_the_fallback_is_plain_avx2(tmp_path):
    flags = flags_for(ZEN3, tmp_path)
    if flags.get("GGML_NATIVE") is None:
        pytest.skip("not an x86 machine: llama.cpp's defaults")
    assert flags["GGML_AVX2"] == "ON" and flags["GGML_AVX512"] == "OFF" and flags["GGML_AVX_VNNI"] == "OFF"
    fallback = flags_for(SAPPHIRE_RAPIDS, tmp_path, "avx2")
    assert fallback["GGML_NATIVE"] == "OFF" and fallback["GGML_AVX2"] == "ON" and "GGML_AVX512" not in fallback
    assert fallback["GGML_AMX_INT8"] == "OFF"


def run_patch(source_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["python3", str(ROOT / "scripts" / "patch_llama_source.py"), str(source_dir)],
                          capture_output=True, text=True)


def load_patch_module():
    return load_script("scripts/patch_llama_source.py")


def test_the_source_patch_makes_each_edit_once_and_refuses_another_source(tmp_path):
    """scripts/patch_llama_source.py on a tree holding sgemm.cpp's, ops.cpp's and the llama graph's lines as
    llama-cpp-python 0.3.36 ships them: every edit made once (the one-row gate, tinyBLAS's one-row kernel, flash
    attention's split off and its tiles only from 128 rows, the short head), a second run leaves the tree alone, and a source without one of those exact
    passages fails with a message naming it, writing nothing."""
    module = load_patch_module()
    shipped = {relative: f"// {relative.name}\n" + "\n// ...\n".join(original for original, _ in edits.values())
               + "\n// end\n" for relative, edits in module.EDITS.items()}
    source = tmp_path / "src"

    def write(texts):
        for relative, text in texts.items():
            (source / relative).parent.mkdir(parents=True, exist_ok=True)
            (source / relative).write_text(text)

    write(shipped)
    first = run_patch(source)
    assert first.returncode == 0, first.stderr
    patched = {relative: (source / relative).read_text() for relative in shipped}
    sgemm, ops = patched[module.SGEMM], patched[module.OPS]
    assert "if (n < 2 && ((Atype != GGML_TYPE_F32 && Atype != GGML_TYPE_F16) || ldb != k))" in sgemm
    assert "    if (n < 2)\n" not in sgemm and sgemm.endswith("// end\n")
    assert "if (n == 1 && m % 4 == 0) {" in sgemm and "NOINLINE void gemv(int64_t m) {" in sgemm
    assert "use_split_kv_path = false && !use_ref" in ops and "bool use_tiled = !use_ref && neq1 >= 128 &&" in ops
    from pacer_core.llama.target import TILED_ROWS         # the engine keeps a step's feeds below the tiles
    assert module.TILED_ROWS == TILED_ROWS == 128
    assert all(new in patched[relative] for relative, edits in module.EDITS.items() for _, new in edits.values())
    graph = patched[module.LLAMA_GRAPH]
    assert 'model.gguf_kv.find("pacer.head_rows")' in graph and "ggml_pad(ctx0, cur," in graph
    assert "build_lora_mm(model.output, cur, model.output_s);" in graph       # files without the key: unchanged
    from pacer_core.llama.short_head import HEAD_ROWS_KEY   # the key the drafter's copy writes
    assert module.HEAD_ROWS_KEY == HEAD_ROWS_KEY
    again = run_patch(source)
    assert again.returncode == 0 and again.stdout.count("already patched") == len(module.EDITS)
    assert {relative: (source / relative).read_text() for relative in shipped} == patched
    for relative, edits in module.EDITS.items():
        for name, (original, _) in edits.items():
            first = len(original) - len(original.lstrip()) + 1          # a letter into its first word
            changed = original[:first] + "X" + original[first:]
            broken = shipped | {relative: shipped[relative].replace(original, changed)}
            write(broken)
            other = run_patch(source)
            assert other.returncode != 0 and f"the lines of {name} were not found" in other.stderr
            assert {path: (source / path).read_text() for path in shipped} == broken      # nothing written
    assert run_patch(tmp_path / "nothing").returncode != 0


def test_a_changed_patch_changes_the_kept_wheels_key(tmp_path):
    """build_llama.sh keys its kept wheels (and the venv's record of what it installed) on the patch script's
    hash, so a machine holding a wheel built with an earlier patch builds again."""
    script = (ROOT / "scripts" / "build_llama.sh").read_text()
    assert 'sha256sum < scripts/patch_llama_source.py' in script and 'dir="$WHEELS/$(build_key "$1")"' in script
    assert 'MARKER="$VENV/pacer-llama-build"' in script and 'VENV="${PACER_VENV:-.venv}"' in script
