"""Prove a native drafter build in a child process before the app trusts it with its own process.

Why: the ``gguf`` drafter runs llama.cpp's native code inside the app's Python process. A library built for
CPU features the machine lacks (or with kernels that fault on it, such as ggml's AMX path on some Intel Xeons)
dies with SIGILL or SIGSEGV at its first decode, and takes every visitor of a shared server with it. So the
first time a GGUF file is to be drafted with a given llama-cpp-python library on a given CPU, a child process
loads the file and decodes a few tokens on two rows with a row copy and a crop: the calls the drafter makes
(``cache.GGUFCache``). The child's verdict is cached under ``$PACER_CACHE/gguf-proof/``, keyed by the
library's files, the GGUF file and the CPU's feature flags; a pass or a crash is kept, a time-out is not (a
busy machine may pass next time).

The child needs only the standard library and ``llama_cpp``: this file runs as a script
(``python proof.py --child FILE``), importing nothing of the project, so a proof does not pay for
torch. ``python -m pacer_core.llama.proof [--again] [FILE]`` proves a file from a shell and prints
the one-line verdict (setup.sh does; README, "The gguf drafter's build").

Test hook: ``PACER_GGUF_PROOF_CRASH=SIGSEGV`` (or ``SIGILL``) makes the child kill itself with that signal
where it would decode, standing in for a broken build (``HANG``: it never finishes); the hook is part of the
cache key."""
from __future__ import annotations

import hashlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

CRASH_HOOK = "PACER_GGUF_PROOF_CRASH"
TIMEOUT_ENV = "PACER_GGUF_PROOF_TIMEOUT"
DEFAULT_TIMEOUT_S = 120.0        # loading a 100 MB file and a few decodes take ~1-3 s; a loaded machine is slower
REBUILD_COMMAND = "bash scripts/build_llama.sh --rebuild"
SIGNAL_MEANINGS = {signal.SIGILL: "an illegal instruction: the library was built for CPU features this CPU "
                                  "lacks or faults on",
                   signal.SIGSEGV: "a segmentation fault", signal.SIGBUS: "a bus error",
                   signal.SIGFPE: "a floating-point exception", signal.SIGABRT: "an abort"}


@dataclass(frozen=True)
class Verdict:
    """What the child showed: ``ok``, or ``reason`` (one line); ``cached`` when read from an earlier proof."""
    ok: bool
    reason: str
    seconds: float
    key: str
    cached: bool = False

    def line(self) -> str:
        """The one-line verdict setup.sh and the app's log print."""
        if self.ok:
            return f"gguf drafter proven: llama.cpp decoded in a child process ({self.seconds:.1f} s)"
        return f"gguf drafter left out: {self.reason}"


# ---- the key ---------------------------------------------------------------------------------------------------

def llama_library_dir() -> Path | None:
    """The installed llama_cpp package's folder, found without importing it (None when not installed)."""
    import importlib.util
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def file_identity(path: Path) -> str:
    stat = path.stat()
    return f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"


def library_identity(package_dir: Path | None) -> str:
    """The native libraries' names, sizes and times (a rebuild changes them)."""
    if package_dir is None:
        return "none"
    libraries = sorted(path for pattern in ("*.so*", "*.dylib", "*.dll")
                       for path in package_dir.rglob(pattern) if path.is_file())
    return ";".join(file_identity(path) for path in libraries) or "no-libraries"


def cpu_flags() -> str:
    """The machine and the CPU's feature flags as the kernel lists them (what a build's instructions need)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            flags = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith(("flags", "Features"))), "")
    except OSError:
        flags = ""
    return f"{platform.machine()}:{flags or platform.processor()}"


def proof_key(gguf_file: Path) -> str:
    parts = (library_identity(llama_library_dir()), file_identity(gguf_file), cpu_flags(),
             os.environ.get(CRASH_HOOK, ""), "v1")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


# ---- the cache -------------------------------------------------------------------------------------------------

def cache_dir() -> Path:
    """$PACER_CACHE/gguf-proof (imported here, in the parent: the child never reads the cache)."""
    from ..embedded import cache_root
    return cache_root() / "gguf-proof"


def read_cached(key: str) -> Verdict | None:
    try:
        record = json.loads((cache_dir() / f"{key}.json").read_text())
        return Verdict(bool(record["ok"]), str(record["reason"]), float(record["seconds"]), key, cached=True)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_cached(verdict: Verdict) -> None:
    try:
        folder = cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        temporary = folder / f".{verdict.key}.{os.getpid()}.tmp"
        temporary.write_text(json.dumps({**asdict(verdict), "cached": False, "cpu": cpu_flags()[:200],
                                         "when": time.strftime("%Y-%m-%d %H:%M:%S")}))
        temporary.replace(folder / f"{verdict.key}.json")
    except OSError:
        pass        # an unwritable cache only means proving again next time


# ---- the parent: run the child and read its end ------------------------------------------------------------------

def crash_reason(returncode: int, gguf_file: Path, output: str) -> str:
    """One line: how the child ended and what to do about it."""
    if returncode < 0:
        number = -returncode
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        meaning = SIGNAL_MEANINGS.get(number, "a fatal signal")
        ended = f"llama.cpp died with {name} ({meaning})"
    else:
        last = next((line for line in reversed(output.strip().splitlines()) if line.strip()), "no output")
        ended = f"llama.cpp's test decode failed (exit code {returncode}: {last[-200:]})"
    return f"{ended} in a test decode of {gguf_file.name} on this CPU; rebuild it with {REBUILD_COMMAND}"


def timeout_s() -> float:
    try:
        return max(1.0, float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)))
    except ValueError:
        return DEFAULT_TIMEOUT_S


def run_child(gguf_file: Path, key: str, limit_s: float) -> Verdict:
    started = time.monotonic()
    command = [sys.executable, "-P", str(Path(__file__).resolve()), "--child", str(gguf_file)]   # -P: no script folder on the path
    try:
        completed = subprocess.run(command, capture_output=True, text=True, timeout=limit_s,
                                   stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Verdict(False, f"llama.cpp's test decode of {gguf_file.name} did not finish within {limit_s:.0f} s "
                              f"(set {TIMEOUT_ENV} to wait longer)", time.monotonic() - started, key)
    seconds = time.monotonic() - started
    if completed.returncode == 0 and '"ok": true' in completed.stdout:
        return Verdict(True, "", seconds, key)
    return Verdict(False, crash_reason(completed.returncode, gguf_file, completed.stdout + completed.stderr),
                   seconds, key)


_VERDICTS: dict[str, Verdict] = {}


def prove(gguf_file, again: bool = False, limit_s: float | None = None) -> Verdict:
    """The verdict for drafting ``gguf_file`` with the installed llama-cpp-python on this CPU: from this
    process's memory, else the cache, else a child process (``again``: always a child)."""
    gguf_file = Path(gguf_file)
    key = proof_key(gguf_file)
    if not again:
        known = _VERDICTS.get(key) or read_cached(key)
        if known is not None:
            _VERDICTS[key] = known
            return known
    verdict = run_child(gguf_file, key, limit_s or timeout_s())
    _VERDICTS[key] = verdict
    timed_out = not verdict.ok and "did not finish" in verdict.reason
    if not timed_out:
        write_cached(verdict)
    return verdict


# ---- the child: the drafter's calls on two rows ------------------------------------------------------------------

def stand_in_for_a_broken_build(hook: str) -> None:
    """The test hook: die by the named signal (SIGSEGV, SIGILL, ...) or, for HANG, never finish."""
    if hook == "HANG":
        time.sleep(3600)
    elif hook:
        os.kill(os.getpid(), getattr(signal, hook if hook.startswith("SIG") else "SIG" + hook))


def open_context(gguf_file: str, cells: int, batch_tokens: int, sequences: int, threads: int):
    """(llama_cpp, model, context, batch): the file loaded quietly and a context with a unified KV buffer of
    ``cells`` cells for ``sequences`` sequences, decoding ``batch_tokens`` tokens a call. Standard library and
    llama_cpp only, for a child process (this one's, and benchmarks/llama_build_flags.py's)."""
    import llama_cpp
    from llama_cpp import _internals, _logger
    _logger.set_verbose(False)
    llama_cpp.llama_backend_init()
    model = _internals.LlamaModel(path_model=gguf_file, params=llama_cpp.llama_model_default_params(), verbose=False)
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = cells, batch_tokens, batch_tokens, sequences
    params.n_threads = params.n_threads_batch = threads
    params.kv_unified, params.no_perf = True, True
    context = _internals.LlamaContext(model=model, params=params, verbose=False)
    batch = _internals.LlamaBatch(n_tokens=batch_tokens, embd=0, n_seq_max=1, verbose=False)
    return llama_cpp, model, context, batch


def child_decode(gguf_file: str) -> dict:
    """Load the file; decode a short prompt on sequence 0, copy it to sequence 1, decode one token on both rows
    in one batch, crop both and decode again. Rows that share a history must score alike."""
    import ctypes
    import math

    llama_cpp, model, context, batch = open_context(gguf_file, 256, 32, 4, max(1, min(2, os.cpu_count() or 1)))
    n_vocab = int(model.n_vocab())
    prompt = [(7 * index + 1) % n_vocab for index in range(8)]      # any ids: the proof is of the arithmetic

    def decode(entries):      # (sequence, position, token) each wanting logits
        raw = batch.batch
        for index, (sequence, position, token) in enumerate(entries):
            raw.token[index], raw.pos[index] = token, position
            raw.seq_id[index][0], raw.n_seq_id[index], raw.logits[index] = sequence, 1, True
        raw.n_tokens = len(entries)
        stand_in_for_a_broken_build(os.environ.get(CRASH_HOOK, "").strip().upper())
        context.decode(batch)
        rows = []
        for index in range(len(entries)):
            pointer = llama_cpp.llama_get_logits_ith(context.ctx, index)
            rows.append(list(ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float))[:n_vocab]))
        return rows

    decode([(0, position, token) for position, token in enumerate(prompt)])
    context.kv_cache_seq_cp(0, 1, -1, -1)
    step = len(prompt)
    first = decode([(0, step, prompt[-1]), (1, step, prompt[-1])])
    context.kv_cache_seq_rm(0, step, -1)
    context.kv_cache_seq_rm(1, step, -1)
    again = decode([(0, step, prompt[0]), (1, step, prompt[0])])
    rows = first + again
    if not all(math.isfinite(value) for row in rows for value in row):
        raise SystemExit("llama.cpp returned logits that are not finite")
    for left, right in ((first[0], first[1]), (again[0], again[1])):
        if max(range(n_vocab), key=left.__getitem__) != max(range(n_vocab), key=right.__getitem__):
            raise SystemExit("two rows with one history scored different best tokens")
    return {"ok": True, "vocab": n_vocab, "tokens": len(prompt) + 4}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"] and len(argv) == 2:
        print(json.dumps(child_decode(argv[1])), flush=True)
        return 0
    again = "--again" in argv
    named = [argument for argument in argv if not argument.startswith("--")]
    if named:
        gguf_file = Path(named[0])
    else:
        from pacer_core.embedded import EmbeddedModelMissing, find_gguf_file
        try:
            gguf_file = find_gguf_file()
        except EmbeddedModelMissing as missing:
            print(f"gguf drafter left out: {missing}")
            return 1
    if llama_library_dir() is None:
        print("gguf drafter left out: llama-cpp-python is not installed")
        return 1
    verdict = prove(gguf_file, again=again)
    print(verdict.line() + (" (cached verdict)" if verdict.cached else ""))
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
