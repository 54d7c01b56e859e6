"""The project against llama.cpp's own tools on the same weights: llama.cpp's AR (``llama-completion``) and its
speculative decoding (``llama-speculative-simple --spec-type draft-simple``, several ``--spec-draft-n-max``),
float32 target (the embedded target's Q4_1 file requantized to F32 by ``llama-quantize``) and the Q4_1 file as the
draft, beside the project's AR and the page's default fixed SD and PACER with the ``gguf`` drafter, on the same
held-out chat prompts. Greedy, the same number of new tokens (EOS ignored on both sides), 2 threads, interleaved
prompt by prompt (every configuration on prompt 1, then on prompt 2, ...), repeated; medians per prompt, then the
median and the total over prompts.

    python benchmarks/llamacpp_peer.py                       # builds the tools once (~4 min on 2 cores), then runs
    python benchmarks/llamacpp_peer.py --repeats 3 --limit 12 --out benchmarks/results/llamacpp-peer

The tools come from the llama.cpp that llama-cpp-python 0.3.36 vendors (its sdist, ``pip download``), built with the
flags ``scripts/llama_cpu_flags.sh`` prints (GGML_NATIVE=OFF, never AMX) into a git-ignored folder (``--work``) and
reused; or give a folder that holds them with ``--bin``. Timing: llama.cpp's tools print their decode time without
the prompt (``eval time``; ``decoded N tokens in S seconds``) and the prompt's apart (``prompt eval time``;
``encoded N tokens in S seconds``, the target's prefill: the draft's is inside the decode time). The table's rows
count both, as the project's Result's ``tokens_per_s`` does (its prefill included): long prompts make the prefill
a large part of the time, so comparing llama.cpp's decode time alone with the project's whole run leaned against
the project (the JSON keeps llama.cpp's decode-only speeds, ``decode_only``). llama-completion's row also counts
its sampling (``sampling time``: the project's rows count their own) and every token it generated: N new tokens
take it N - 1 decode runs, the first token coming from the prompt's eval (``completion_speed``).

The kernel factor alone (``--library-ab``): llama-completion on the stock library and on the project's, in
back-to-back pairs, with the decoding (one-row steps) and the prompt's prefill timed apart:

    python benchmarks/llamacpp_peer.py --library-ab --prompts assets/prompts/code.jsonl --repeats 8 --out ...

Not part of CI as a measurement (it builds C++ and runs for minutes); tests/test_llamacpp_peer.py parses the tools'
output (fast) and runs both modes end to end on a few tokens with stand-in tools that print llama.cpp's lines
(``--bin``, ``--bin-ours``), the project's rows on the embedded pair for real."""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import re
import shlex
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results_writer import fmt, write_folder  # noqa: E402

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
TOOLS = ("llama-completion", "llama-speculative-simple", "llama-quantize")
BUILD_FLAGS = "-DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF"
EVAL_LINE = re.compile(r"print:\s+eval time =\s*([\d.]+) ms /\s*(\d+) (?:runs|tokens)")
DECODED_LINE = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
ACCEPT_LINE = re.compile(r"accept\s+=\s+([\d.]+)%")
PROMPT_LINE = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
SAMPLING_LINE = re.compile(r"sampling time =\s*([\d.]+) ms")   # "... ms / N runs" in older tools, "... ms" now
ENCODED_LINE = re.compile(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds")


class PeerError(RuntimeError):
    """A tool could not be built, found or run (one line)."""


# ---- reading the tools' output (pure) ------------------------------------------------------------------------

def completion_speed(log: str) -> dict:
    """llama-completion's speeds from its perf lines: ``tokens_per_s``, its decoding alone (``eval time``: one
    token a run); ``tokens_per_s_with_prompt``, the whole run as the project's rows count theirs: every token it
    generated (``generated_tokens``: its runs and one more, the first token sampled from the prompt's eval) over the
    prompt's eval, the runs and its sampling (``sampling time``, 0 where the line is missing)."""
    match = EVAL_LINE.search(log)
    if not match:
        raise PeerError("llama-completion printed no 'eval time' line (is its output cut?).")
    milliseconds, runs = float(match.group(1)), int(match.group(2))
    prompt, sampling = PROMPT_LINE.search(log), SAMPLING_LINE.search(log)
    prompt_seconds = float(prompt.group(1)) / 1000 if prompt else 0.0
    sampling_seconds = float(sampling.group(1)) / 1000 if sampling else 0.0
    generated = runs + 1 if prompt else runs
    return {"tokens": runs, "seconds": milliseconds / 1000, "tokens_per_s": runs / (milliseconds / 1000),
            "prompt_tokens": int(prompt.group(2)) if prompt else None, "prompt_seconds": prompt_seconds,
            "sampling_seconds": sampling_seconds, "generated_tokens": generated,
            "tokens_per_s_with_prompt": generated / (milliseconds / 1000 + prompt_seconds + sampling_seconds)}


def speculative_speed(log: str) -> dict:
    """llama-speculative-simple's decode speed and acceptance from its summary lines."""
    match = DECODED_LINE.search(log)
    if not match:
        raise PeerError("llama-speculative-simple printed no 'decoded N tokens in S seconds' line.")
    tokens, seconds = int(match.group(1)), float(match.group(2))
    accept, encoded = ACCEPT_LINE.search(log), ENCODED_LINE.search(log)
    prompt_seconds = float(encoded.group(2)) if encoded else 0.0
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
            "acceptance": float(accept.group(1)) / 100 if accept else None, "prompt_seconds": prompt_seconds,
            "tokens_per_s_with_prompt": tokens / (seconds + prompt_seconds)}


def per_prompt_medians(samples: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    """{row: {prompt: [tok/s per repeat]}} → {row: {prompt: median}}."""
    return {row: {prompt: statistics.median(values) for prompt, values in by_prompt.items()}
            for row, by_prompt in samples.items()}


def summary_table(medians: dict[str, dict[str, float]], reference: str) -> list[dict]:
    """Per row: the median over prompts of its per-prompt median tok/s, and the median over prompts of its per-prompt
    ratio to ``reference`` (same prompt, same run)."""
    rows = []
    for row, by_prompt in medians.items():
        ratios = [value / medians[reference][prompt] for prompt, value in by_prompt.items()
                  if medians.get(reference, {}).get(prompt)]
        rows.append({"row": row, "tokens_per_s": statistics.median(by_prompt.values()),
                     "ratio_to_" + reference: statistics.median(ratios) if ratios else None,
                     "prompts": len(by_prompt)})
    return rows


def best_ratio(medians: dict[str, dict[str, float]], ours: list[str], theirs: list[str]) -> dict:
    """The project's fastest exact row over llama.cpp's fastest speculative row (by median tok/s over prompts), and
    the median over prompts of that pair's per-prompt ratio."""
    def fastest(names):
        present = [name for name in names if name in medians]
        return max(present, key=lambda name: statistics.median(medians[name].values())) if present else None
    mine, peer = fastest(ours), fastest(theirs)
    if mine is None or peer is None:
        return {}
    per_prompt = [medians[mine][prompt] / medians[peer][prompt] for prompt in medians[mine] if prompt in medians[peer]]
    return {"ours": mine, "theirs": peer,
            "ratio_of_medians": statistics.median(medians[mine].values()) / statistics.median(medians[peer].values()),
            "median_per_prompt_ratio": statistics.median(per_prompt)}


def prompt_file_name(position: int, prompt_id: str) -> str:
    """A file name for a prompt whatever its id holds (public sets use ids such as ``HumanEval/82``): the id's
    letters, digits, dots, dashes and underscores, the rest as ``_``, after its position in the set, which keeps
    ``a/b`` and ``a_b`` apart."""
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", str(prompt_id)).strip(".")[:80] or "prompt"
    return f"{position:04d}-{readable}.txt"


# ---- building or finding the tools ---------------------------------------------------------------------------

def find_tools(folder: Path, needed=TOOLS) -> dict[str, Path] | None:
    paths = {tool: folder / tool for tool in needed}
    return paths if all(path.is_file() and os.access(path, os.X_OK) for path in paths.values()) else None


INSTALLED_BLOCK = """
if (PEER_INSTALLED_LIB_DIR)  # benchmarks/llamacpp_peer.py --link-installed: llama-cpp-python's own libraries
    add_library(ggml SHARED IMPORTED GLOBAL)
    set_target_properties(ggml PROPERTIES IMPORTED_LOCATION ${PEER_INSTALLED_LIB_DIR}/libggml.so
        INTERFACE_INCLUDE_DIRECTORIES ${CMAKE_CURRENT_SOURCE_DIR}/ggml/include
        INTERFACE_LINK_LIBRARIES "${PEER_INSTALLED_LIB_DIR}/libggml-base.so;${PEER_INSTALLED_LIB_DIR}/libggml-cpu.so")
    add_library(llama SHARED IMPORTED GLOBAL)
    set_target_properties(llama PROPERTIES IMPORTED_LOCATION ${PEER_INSTALLED_LIB_DIR}/libllama.so
        INTERFACE_INCLUDE_DIRECTORIES ${CMAKE_CURRENT_SOURCE_DIR}/include INTERFACE_LINK_LIBRARIES ggml)
endif()
"""


def patch_for_installed_libraries(source: Path) -> None:
    """Let the tools link llama-cpp-python's installed libllama/libggml instead of compiling the library (~190 files):
    the tools then run the very library the project runs. Idempotent."""
    cmake = source / "CMakeLists.txt"
    text = cmake.read_text()
    if "PEER_INSTALLED_LIB_DIR" in text:
        return
    text = text.replace("if (LLAMA_USE_SYSTEM_GGML)", INSTALLED_BLOCK + "\nif (LLAMA_USE_SYSTEM_GGML)", 1)
    text = text.replace("add_subdirectory(src)", "if (NOT PEER_INSTALLED_LIB_DIR)\n    add_subdirectory(src)\nendif()", 1)
    text = text.replace("set_target_properties(llama\n", "if (NOT PEER_INSTALLED_LIB_DIR)\nset_target_properties(llama\n", 1)
    text = text.replace("install(TARGETS llama LIBRARY PUBLIC_HEADER)", "install(TARGETS llama LIBRARY PUBLIC_HEADER)\nendif()", 1)
    cmake.write_text(text)


def write_prompt_file(target, folder: Path, position: int, prompt: dict) -> Path:
    """The prompt as llama.cpp's tools read it (``-f``): the pair's chat template applied, as the project's runs
    apply it, written to ``folder``."""
    text = target.tokenizer.apply_chat_template([{"role": "user", "content": prompt["prompt"]}],
                                                add_generation_prompt=True, tokenize=False)
    path = folder / prompt_file_name(position, prompt["id"])
    path.write_text(text)
    return path


def installed_library_dir() -> Path:
    import llama_cpp
    return Path(llama_cpp.__file__).parent / "lib"


def linked_library(args) -> Path | None:
    """The library folder the tools link to: --link-library, --link-installed's, or None (compile the library)."""
    if args.link_library:
        return Path(args.link_library)
    return installed_library_dir() if args.link_installed else None


def tools_library_words(args) -> str:
    if args.link_library:
        return f"the libllama/libggml in {args.link_library} (--link-library)"
    if args.link_installed:
        return ("llama-cpp-python's installed libllama/libggml (--link-installed): the library the project runs, "
                "with setup.sh's one-row patch (scripts/patch_llama_source.py)")
    return "llama.cpp built from the sdist's sources, unpatched"


def build_tools(work: Path, log=print, link_library: Path | None = None) -> dict[str, Path]:
    """The tools in ``work``/sdist/*/vendor/llama.cpp/build*/bin, built once from the sdist llama-cpp-python vendors:
    with the library compiled from those (unpatched) sources, or linked to the libllama/libggml in ``link_library``."""
    build = "build"
    if link_library:
        build = "build-linked-" + hashlib.sha256(str(Path(link_library).resolve()).encode()).hexdigest()[:8]
    found = next((tools for tools in map(find_tools, work.glob(f"sdist/*/vendor/llama.cpp/{build}/bin")) if tools), None)
    if found:
        return found
    work.mkdir(parents=True, exist_ok=True)
    archives = sorted(work.glob("llama_cpp_python-*.tar.gz"))
    if not archives:
        log(f"[peer] downloading the {LLAMA_CPP_PYTHON} source distribution...")
        run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-python",
             LLAMA_CPP_PYTHON, "-d", str(work)])
        archives = sorted(work.glob("llama_cpp_python-*.tar.gz"))
    if not archives:
        raise PeerError(f"pip download left no llama_cpp_python-*.tar.gz in {work}.")
    source = extract_vendored(archives[-1], work)
    binaries = source / build / "bin"
    extra = []
    if link_library:
        patch_for_installed_libraries(source)
        extra = [f"-DPEER_INSTALLED_LIB_DIR={Path(link_library).resolve()}"]
    flags = subprocess.run(["bash", str(ROOT / "scripts" / "llama_cpu_flags.sh")], capture_output=True, text=True,
                           check=True).stdout.split()
    log(f"[peer] configuring llama.cpp with {' '.join(flags)} {BUILD_FLAGS}")
    run(["cmake", "-S", str(source), "-B", str(source / build), "-DCMAKE_BUILD_TYPE=Release", *flags,
         *BUILD_FLAGS.split(), *extra])
    log("[peer] building llama-completion, llama-speculative-simple, llama-quantize (~4 min on 2 cores)...")
    run(["cmake", "--build", str(source / build), "--config", "Release", "-j", str(os.cpu_count() or 2),
         "--target", *TOOLS])
    found = find_tools(binaries)
    if not found:
        raise PeerError(f"the build finished but {binaries} lacks one of {', '.join(TOOLS)}.")
    return found


def extract_vendored(archive: Path, work: Path) -> Path:
    """The sdist unpacked in ``work``/sdist; its vendor/llama.cpp folder."""
    unpacked = work / "sdist"
    if not unpacked.exists():
        with tarfile.open(archive) as tar:
            tar.extractall(unpacked, filter="data")
    found = sorted(unpacked.glob("*/vendor/llama.cpp/CMakeLists.txt"))
    if not found:
        raise PeerError(f"{archive.name} holds no vendor/llama.cpp.")
    return found[0].parent


def run(command: list[str], timeout: float | None = None, env: dict | None = None) -> str:
    """Run a command; its stdout and stderr together, or PeerError with its last lines."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    output = done.stdout + done.stderr
    if done.returncode != 0:
        tail = " | ".join(output.strip().splitlines()[-3:])
        raise PeerError(f"{Path(command[0]).name} failed (exit {done.returncode}): {tail}")
    return output


def f32_target(tools: dict[str, Path], source: Path, work: Path, env=None) -> Path:
    """The target as float32 GGUF, written by llama.cpp's own llama-quantize (once)."""
    destination = work / "target-f32.gguf"
    if not destination.exists():
        run([str(tools["llama-quantize"]), "--allow-requantize", str(source), str(destination), "F32"], env=env)
    return destination


# ---- the runs ------------------------------------------------------------------------------------------------

def tool_env(link_library: Path | None) -> dict | None:
    """The tools' environment: for tools linked to a library folder (--link-installed, --link-library), that folder
    first on the loader's path; None (this process's environment) for tools that carry their own library."""
    if not link_library:
        return None
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(Path(link_library).resolve()),
                                                           env.get("LD_LIBRARY_PATH")]))
    return env


def llama_ar(tools, target: Path, prompt_file: Path, tokens: int, threads: int, env=None, extra=()) -> dict:
    log = run([str(tools["llama-completion"]), "-m", str(target), "-f", str(prompt_file), "-n", str(tokens),
               "--ignore-eos", "-no-cnv", "--temp", "0", "-t", str(threads), "-tb", str(threads), "-c", "2048",
               "--no-warmup", *extra], timeout=600, env=env)
    return completion_speed(log)


def engine_context_flags(options: dict | None = None) -> list[str]:
    """llama-completion's flags for a context of the project's target engine (pacer_core/llama/target.py: flash
    attention, the KV cache's types, the prefill's chunk), so a tool run differs from ours only in the loop.
    ``options``: the context's, as the loaded engine proved it (default: ``FLASH_CONTEXT``, the one it proves on
    setup.sh's library)."""
    from pacer_core.llama.target import CHUNK_TOKENS, FLASH_CONTEXT
    options = options or FLASH_CONTEXT
    types = {0: "f32", 1: "f16"}
    return ["-fa", {0: "off", 1: "on"}.get(options["flash_attn_type"], "auto"),
            "-ctk", types[options["type_k"]], "-ctv", types[options["type_v"]],
            "-b", str(CHUNK_TOKENS), "-ub", str(CHUNK_TOKENS)]


DECOMPOSITION_ROWS = ("llama.cpp ar, our library", "llama.cpp ar, our library and context")


def gap_shares(medians: dict[str, dict[str, float]], ours: list[str]) -> dict:
    """How each of the project's rows stands against llama.cpp's AR, as a product of factors (medians over prompts
    of per-prompt ratios): ``kernel`` = llama.cpp's AR on the project's library over it on the stock library (the
    one-row kernel; same context), ``cache`` = on the project's library in the engine's context over its own context
    (KV type, flash attention, prefill chunks), ``loop`` = the project's row over llama.cpp's AR in the engine's
    context on the project's library (what the project's own loop adds or, for a speculative row, gains)."""
    stock, library, context = "llama.cpp ar", *DECOMPOSITION_ROWS
    if not all(name in medians for name in (stock, library, context)):
        return {}

    def ratio(top: str, bottom: str) -> float:
        return statistics.median(medians[top][prompt] / medians[bottom][prompt]
                                 for prompt in medians[top] if prompt in medians[bottom])
    kernel, cache = ratio(library, stock), ratio(context, library)
    return {row: {"total": ratio(row, stock), "kernel": kernel, "cache": cache, "loop": ratio(row, context)}
            for row in ours if row in medians}


def llama_speculative(tools, target: Path, draft: Path, prompt_file: Path, tokens: int, threads: int,
                      n_max: int, env=None) -> dict:
    log = run([str(tools["llama-speculative-simple"]), "-m", str(target), "-md", str(draft), "-f", str(prompt_file),
               "-n", str(tokens), "--ignore-eos", "--temp", "0", "-t", str(threads), "-tb", str(threads),
               "-td", str(threads), "-tbd", str(threads), "-c", "2048", "--spec-type", "draft-simple",
               "--spec-draft-n-max", str(n_max)], timeout=600, env=env)
    return speculative_speed(log)


def without_eos(target):
    """A view of the pair that never stops at EOS (llama.cpp's rows run with --ignore-eos)."""
    from pacer_core.models import Target

    class NoEosPair(Target):
        @property
        def eos_token_ids(self) -> set[int]:
            return set()
    return NoEosPair(**{field.name: getattr(target, field.name) for field in dataclasses.fields(target)})


def project_rows(target, drafter, gamma: int | None):
    """(row name, method, settings) for the project's rows: AR and the page's default fixed SD and PACER with
    ``drafter`` (measured_defaults.json's starting settings)."""
    from pacer_core.drafters import drafter_key, measured_gamma, measured_settings
    key = drafter_key(drafter)
    fixed = gamma or measured_gamma(target, drafter) or 4
    return [("ours ar", "ar", {}), (f"ours fixed:{fixed}", "fixed", {"gamma": fixed}),
            ("ours pacer", "pacer", measured_settings(target, drafter, key, "pacer"))]


def project_run(target, drafter, method: str, settings: dict, prompt_ids, tokens: int) -> tuple[float, list[int]]:
    from pacer_core.api import run_request
    from pacer_core.request import EncodedPrompt, request_for
    from pacer_core.settings import Limits, validate_settings

    limits = Limits.from_env()
    raw = {"max_new_tokens": tokens, "temperature": 0.0, **settings}
    request = request_for(target, drafter, method, validate_settings(limits, **raw), frozenset(raw),
                          EncodedPrompt(tuple(prompt_ids)), limits)
    *_, result = list(run_request(target, request))
    return result.metrics.tokens_per_s, list(result.token_ids)


def measure(args) -> dict:
    from pacer_core.embedded import find_gguf_file
    from pacer_core.models import load_target
    from pacer_core.prompts import load_prompts

    work = Path(args.work)
    needed = TOOLS[:2] if args.target_gguf else TOOLS       # llama-quantize only writes the F32 target
    library = linked_library(args)
    tools = find_tools(Path(args.bin), needed) if args.bin else build_tools(work, link_library=library)
    if tools is None:
        raise PeerError(f"{args.bin} does not hold {', '.join(needed)}.")
    env = tool_env(library)
    linked = None
    if args.decompose:      # llama-completion linked to the library this process runs (the project's build)
        linked = build_tools(work, link_library=installed_library_dir())
    draft_file = Path(args.draft_gguf) if args.draft_gguf else find_gguf_file()
    target_file = Path(args.target_gguf) if args.target_gguf else f32_target(tools, draft_file, work, env)
    target, drafters = load_target(args.target, args.draft, target_engine=args.target_engine)
    target, drafter = without_eos(target), drafters.default
    prompts = load_prompts(args.prompts)[: args.limit or None]
    ours = project_rows(target, drafter, args.gamma)
    theirs = ["llama.cpp ar"] + [f"llama.cpp spec n_max={n}" for n in args.n_max]
    samples: dict[str, dict[str, list[float]]] = {name: {} for name, _, _ in ours}
    samples.update({name: {} for name in theirs})
    context_flags = engine_context_flags(getattr(getattr(target.engine, "pool", None), "options", None))
    decomposition = [(DECOMPOSITION_ROWS[0], ()), (DECOMPOSITION_ROWS[1], context_flags)] if linked else []
    samples.update({name: {} for name, _ in decomposition})
    decode_only: dict[str, dict[str, list[float]]] = {name: {} for name in theirs}
    acceptance: dict[str, list[float]] = {name: [] for name in theirs[1:]}
    identity = {"prompts": 0, "rows_equal_to_ar": {name: 0 for name, _, _ in ours[1:]}}
    prompt_tokens, failures = {}, []
    with tempfile.TemporaryDirectory() as scratch:
        for repeat in range(args.repeats):
            for position, prompt in enumerate(prompts):
                prompt_id, prompt_ids = prompt["id"], target.encode_prompt(prompt["prompt"])
                prompt_file = write_prompt_file(target, Path(scratch), position, prompt)
                outputs = {}
                for name, method, settings in ours:
                    speed, token_ids = project_run(target, drafter, method, settings, prompt_ids, args.max_new_tokens)
                    samples[name].setdefault(prompt_id, []).append(speed)
                    outputs[name] = token_ids
                try:
                    ar_speed = llama_ar(tools, target_file, prompt_file, args.max_new_tokens, args.threads, env)
                    samples["llama.cpp ar"].setdefault(prompt_id, []).append(ar_speed["tokens_per_s_with_prompt"])
                    decode_only["llama.cpp ar"].setdefault(prompt_id, []).append(ar_speed["tokens_per_s"])
                    prompt_tokens[prompt_id] = {"ours": len(prompt_ids), "llama.cpp": ar_speed["prompt_tokens"]}
                except PeerError as failure:      # one failed run is recorded, the others go on
                    failures.append({"row": "llama.cpp ar", "prompt": prompt_id, "repeat": repeat, "why": str(failure)})
                for name, extra in decomposition:
                    try:
                        speed = llama_ar(linked, target_file, prompt_file, args.max_new_tokens, args.threads,
                                         tool_env(installed_library_dir()), extra)
                        samples[name].setdefault(prompt_id, []).append(speed["tokens_per_s_with_prompt"])
                    except PeerError as failure:
                        failures.append({"row": name, "prompt": prompt_id, "repeat": repeat, "why": str(failure)})
                for n_max, name in zip(args.n_max, theirs[1:]):
                    try:
                        spec = llama_speculative(tools, target_file, draft_file, prompt_file, args.max_new_tokens,
                                                 args.threads, n_max, env)
                    except PeerError as failure:
                        failures.append({"row": name, "prompt": prompt_id, "repeat": repeat, "why": str(failure)})
                        continue
                    samples[name].setdefault(prompt_id, []).append(spec["tokens_per_s_with_prompt"])
                    decode_only[name].setdefault(prompt_id, []).append(spec["tokens_per_s"])
                    if spec["acceptance"] is not None:
                        acceptance[name].append(spec["acceptance"])
                if repeat == 0:
                    identity["prompts"] += 1
                    for name, _, _ in ours[1:]:
                        identity["rows_equal_to_ar"][name] += int(outputs[name] == outputs["ours ar"])
                print(f"[peer] repeat {repeat + 1}/{args.repeats} {prompt_id}: " + ", ".join(
                    f"{name} {values[prompt_id][-1]:.1f}" for name, values in samples.items() if prompt_id in values),
                    flush=True)
    medians = per_prompt_medians(samples)
    exact_rows = [name for name, _, _ in ours]
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": "python " + " ".join(map(shlex.quote, sys.argv)),
            "pair": target.describe(drafter), "threads": args.threads, "max_new_tokens": args.max_new_tokens,
            "repeats": args.repeats, "prompts": [prompt["id"] for prompt in prompts], "target_gguf": str(target_file),
            "tools": {name: str(path) for name, path in tools.items()},
            "tools_library": tools_library_words(args),
            "draft_gguf": str(draft_file), "samples": samples, "per_prompt_medians": medians,
            "decode_only": {"samples": decode_only,
                            "table": summary_table(per_prompt_medians(decode_only), "llama.cpp ar")},
            "table": summary_table(medians, "llama.cpp ar"),
            "acceptance": {name: statistics.median(values) for name, values in acceptance.items() if values},
            "best": best_ratio(medians, exact_rows, theirs[1:]),
            "ours_ar_over_llama_ar": best_ratio(medians, ["ours ar"], ["llama.cpp ar"]),
            "gap_shares": gap_shares(medians, exact_rows),
            "engine_context_flags": context_flags if linked else None,
            "greedy_identity": identity, "prompt_tokens": prompt_tokens, "failures": failures,
            "openmp": openmp_settings()}


# ---- the kernel factor alone: llama.cpp's AR on the stock library against the project's (--library-ab) ------

LIBRARY_SIDES = ("stock", "ours")


def step_costs(speed: dict) -> dict:
    """One llama-completion run as milliseconds a token: the decoding (its one-row steps) and the prompt's prefill."""
    prompt_tokens = speed.get("prompt_tokens") or 0
    return {"decode_ms": 1000 * speed["seconds"] / speed["tokens"],
            "prefill_ms": 1000 * speed["prompt_seconds"] / prompt_tokens if prompt_tokens else None,
            "whole_s": speed["seconds"] + speed["prompt_seconds"]}


def library_split(pairs: dict[str, list[dict]]) -> dict:
    """{prompt: [{"stock": step_costs, "ours": step_costs} per repeat]} → per prompt and overall, the project's
    library against the stock one as speed ratios (stock cost / ours: above 1 is ours faster), each the median of
    the repeats' pairs (a pair ran back to back, so a slow spell of the host moves both), for the decoding, the
    prefill and the whole run; overall, the median over prompts."""
    def pair_ratio(runs: list[dict], key: str) -> float | None:
        ratios = [run["stock"][key] / run["ours"][key] for run in runs if run["stock"][key] and run["ours"][key]]
        return statistics.median(ratios) if ratios else None

    per_prompt = {}
    for prompt, runs in pairs.items():
        per_prompt[prompt] = {f"{side}_{key}": statistics.median(run[side][key] for run in runs)
                              for side in LIBRARY_SIDES for key in ("decode_ms", "prefill_ms")
                              if all(run[side][key] is not None for run in runs)}
        per_prompt[prompt].update({f"{key}_ratio": pair_ratio(runs, key) for key in ("decode_ms", "prefill_ms",
                                                                                     "whole_s")})
        per_prompt[prompt]["pairs"] = len(runs)
    overall = {}
    for key in ("decode_ms_ratio", "prefill_ms_ratio", "whole_s_ratio"):
        values = [row[key] for row in per_prompt.values() if row.get(key) is not None]
        overall[key] = statistics.median(values) if values else None
    return {"per_prompt": per_prompt, "overall": overall}


def library_ab(args) -> dict:
    """llama-completion on the stock library and on the project's (the kernel factor of ``gap_shares``: same tool,
    same default context), back to back in alternating order, ``--repeats`` pairs a prompt, the prompt's prefill
    and the decoding timed apart (the tool's own ``prompt eval time`` and ``eval time``)."""
    from pacer_core.embedded import find_gguf_file
    from pacer_core.models import load_target
    from pacer_core.prompts import load_prompts

    work = Path(args.work)
    needed = TOOLS[:1] if args.target_gguf else TOOLS       # llama-quantize only writes the F32 target
    tools = find_tools(Path(args.bin), needed) if args.bin else build_tools(work)
    linked = (find_tools(Path(args.bin_ours), TOOLS[:1]) if args.bin_ours
              else build_tools(work, link_library=installed_library_dir()))
    if tools is None or linked is None:
        raise PeerError(f"{args.bin if tools is None else args.bin_ours} does not hold the tools needed.")
    target_file = Path(args.target_gguf) if args.target_gguf else f32_target(tools, find_gguf_file(), work, None)
    target, _ = load_target(args.target, args.draft, target_engine=args.target_engine)   # its chat template
    prompts = load_prompts(args.prompts)[: args.limit or None]
    sides = {"stock": (tools, None), "ours": (linked, tool_env(installed_library_dir()))}
    pairs: dict[str, list[dict]] = {}
    prompt_tokens: dict[str, int | None] = {}
    with tempfile.TemporaryDirectory() as scratch:
        prompt_files = [write_prompt_file(target, Path(scratch), position, prompt)
                        for position, prompt in enumerate(prompts)]
        for repeat in range(args.repeats):
            order = LIBRARY_SIDES if repeat % 2 == 0 else LIBRARY_SIDES[::-1]
            for prompt, prompt_file in zip(prompts, prompt_files):
                run_pair = {}
                for side in order:
                    side_tools, env = sides[side]
                    speed = llama_ar(side_tools, target_file, prompt_file, args.max_new_tokens, args.threads, env)
                    run_pair[side] = step_costs(speed)
                    prompt_tokens[prompt["id"]] = speed.get("prompt_tokens")
                pairs.setdefault(prompt["id"], []).append(run_pair)
                print(f"[library-ab] repeat {repeat + 1}/{args.repeats} {prompt['id']}: decode ms "
                      f"{run_pair['stock']['decode_ms']:.2f} stock / {run_pair['ours']['decode_ms']:.2f} ours",
                      flush=True)
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": "python " + " ".join(map(shlex.quote, sys.argv)),
            "kind": "library-ab", "threads": args.threads, "max_new_tokens": args.max_new_tokens,
            "repeats": args.repeats, "prompts": [prompt["id"] for prompt in prompts], "target_gguf": str(target_file),
            "prompt_tokens": prompt_tokens, "pairs": pairs, "split": library_split(pairs), "openmp": openmp_settings()}


def library_markdown(report: dict) -> str:
    split = report["split"]
    lines = ["# llama.cpp's AR on the stock library against the project's (the kernel factor alone)", "",
             f"{report['date']}, `{report['command']}`", "",
             f"llama-completion, greedy, {report['max_new_tokens']} new tokens, {report['threads']} threads, its own "
             f"default context on both sides; {report['repeats']} pairs a prompt, each pair back to back in "
             "alternating order. ms a token from the tool's own lines (decode: `eval time`, one-row steps; prefill: "
             "`prompt eval time` over the prompt's tokens); ratio = stock / ours, the median of the pairs' ratios "
             "(above 1: the project's library is faster).", "", openmp_words(report.get("openmp")), "",
             "| prompt | tokens | decode ms stock | decode ms ours | decode ratio | prefill ms stock | prefill ms ours "
             "| prefill ratio | whole run ratio |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for prompt, row in split["per_prompt"].items():
        lines.append(f"| {prompt} | {report['prompt_tokens'].get(prompt) or ''} | {fmt(row.get('stock_decode_ms'))} | "
                     f"{fmt(row.get('ours_decode_ms'))} | {fmt(row.get('decode_ms_ratio'), 3)} | "
                     f"{fmt(row.get('stock_prefill_ms'))} | {fmt(row.get('ours_prefill_ms'))} | "
                     f"{fmt(row.get('prefill_ms_ratio'), 3)} | {fmt(row.get('whole_s_ratio'), 3)} |")
    overall = split["overall"]
    lines += ["", f"Median over prompts: decode **{fmt(overall['decode_ms_ratio'], 3)}**, prefill "
              f"**{fmt(overall['prefill_ms_ratio'], 3)}**, whole run **{fmt(overall['whole_s_ratio'], 3)}** "
              "(stock / ours)."]
    return "\n".join(lines) + "\n"


OPENMP_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def openmp_settings() -> dict:
    """The OpenMP settings this process and the tools it starts run under (ggml's threads are OpenMP's):
    OMP_WAIT_POLICY=PASSIVE makes a llama.cpp step ~1.45x slower on the 2-vCPU hosts (docs/measurements.md)."""
    return {name: os.environ.get(name) for name in OPENMP_VARIABLES}


def openmp_words(settings: dict | None) -> str:
    if settings is None:
        return "OpenMP settings not recorded."
    words = ", ".join(f"{name}={value if value is not None else 'unset'}" for name, value in settings.items())
    warning = (" PASSIVE puts ggml's threads to sleep between calls: every llama.cpp step on both sides runs ~1.45x "
               "slower, and most of all the draft's short calls." if settings.get("OMP_WAIT_POLICY") == "PASSIVE"
               else "")
    return f"OpenMP: {words} (the tools inherit them).{warning}"


def markdown(report: dict) -> str:
    lines = ["# The project against llama.cpp's own tools on the same weights", "",
             f"{report['date']}, `{report['command']}`", "",
             f"Greedy, {report['max_new_tokens']} new tokens (EOS ignored on both sides), {report['threads']} threads, "
             f"{len(report['prompts'])} prompts interleaved, {report['repeats']} repeats; tok/s = new tokens over the "
             "whole run, the prompt's prefill included on both sides (llama-completion: its prompt eval, eval and "
             "sampling times, over all the tokens it generated), median over prompts of each prompt's median; "
             "ratio = median over prompts of the per-prompt ratio to llama.cpp's AR. llama.cpp's decode time alone "
             "(its tools' headline figure) in the last column.", "",
             f"Target engine: {report['pair'].get('target_engine', '?')}; target file {Path(report['target_gguf']).name},"
             f" draft file {Path(report['draft_gguf']).name}; llama.cpp's tools run {report['tools_library']}.", "",
             openmp_words(report.get("openmp")), "",
             "| row | tok/s | x llama.cpp AR | acceptance | llama.cpp decode only, tok/s |",
             "|---|---:|---:|---:|---:|"]
    decode_only = {row["row"]: row["tokens_per_s"] for row in report.get("decode_only", {}).get("table", [])}
    for row in report["table"]:
        ratio = row.get("ratio_to_llama.cpp ar")
        accept, alone = report["acceptance"].get(row["row"]), decode_only.get(row["row"])
        lines.append(f"| {row['row']} | {row['tokens_per_s']:.1f} | {ratio:.2f}x | "
                     f"{'' if accept is None else f'{accept:.0%}'} | {'' if alone is None else f'{alone:.1f}'} |")
    best, ar = report["best"], report["ours_ar_over_llama_ar"]
    identity = report["greedy_identity"]
    lines += ["", f"Fastest exact row of the project over llama.cpp's fastest speculative configuration: "
              f"**{best.get('ratio_of_medians', 0):.2f}x** ({best.get('ours')} / {best.get('theirs')}; median per-prompt "
              f"ratio {best.get('median_per_prompt_ratio', 0):.2f}x).",
              f"The project's AR over llama.cpp's AR: {ar.get('ratio_of_medians', 0):.2f}x.",
              "Greedy rows equal to the project's AR (first repeat): " + ", ".join(
                  f"{name} {count}/{identity['prompts']}" for name, count in identity["rows_equal_to_ar"].items()) + "."]
    shares = report.get("gap_shares") or {}
    if shares:
        lines += ["", "Each row against llama.cpp's AR as a product of factors (medians over prompts of per-prompt "
                  "ratios): kernel = llama.cpp's AR on the project's library / on the stock one; cache = on the "
                  "project's library in the engine's context (`" + " ".join(report["engine_context_flags"]) +
                  "`) / in its own; loop = the row / llama.cpp's AR in the engine's context on the project's library.",
                  "", "| row | x llama.cpp AR | kernel | cache | loop |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {row} | {share['total']:.2f}x | {share['kernel']:.2f}x | {share['cache']:.2f}x | "
                  f"{share['loop']:.2f}x |" for row, share in shares.items()]
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", default="assets/prompts/heldout.jsonl")
    parser.add_argument("--limit", type=int, default=12, help="the first N prompts (0 = all)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-max", type=lambda text: [int(n) for n in text.split(",")], default=[8, 12, 16],
                        dest="n_max", help="llama.cpp's --spec-draft-n-max values (comma separated)")
    parser.add_argument("--gamma", type=int, default=None, help="the project's fixed length (default: the page's)")
    parser.add_argument("--target", default="embedded")
    parser.add_argument("--draft", default="gguf")
    parser.add_argument("--target-engine", default=None, dest="target_engine")
    parser.add_argument("--target-gguf", default=None, help="llama.cpp's F32 target (default: llama-quantize's)")
    parser.add_argument("--draft-gguf", default=None, help="llama.cpp's draft (default: the embedded Q4_1 file)")
    parser.add_argument("--bin", default=None, help="a folder holding the three tools (default: build them)")
    parser.add_argument("--work", default="work/llamacpp-peer", help="where the tools are built (git-ignored)")
    parser.add_argument("--out", default="benchmarks/results/llamacpp-peer")
    parser.add_argument("--build-only", action="store_true", help="build (or find) the tools and stop")
    parser.add_argument("--decompose", action="store_true",
                        help="also run llama-completion linked to the installed library (the project's build), in "
                        "its own context and in the target engine's: the gap to llama.cpp's AR split into the "
                        "kernel, the cache and the loop (builds those tools too, ~60 files)")
    parser.add_argument("--library-ab", action="store_true", dest="library_ab",
                        help="only llama.cpp's AR, on the stock library and on the project's, in pairs: the kernel "
                        "factor alone, with the decoding and the prompt's prefill apart (--repeats pairs a prompt)")
    parser.add_argument("--bin-ours", default=None, dest="bin_ours",
                        help="with --library-ab: a folder holding llama-completion linked to the project's library "
                        "(default: build it, as --decompose does)")
    parser.add_argument("--link-installed", action="store_true", dest="link_installed",
                        help="link the tools to llama-cpp-python's installed libllama/libggml (the library the project "
                        "runs, with setup.sh's one-row patch) instead of compiling the library: ~60 files to "
                        "compile instead of ~250")
    parser.add_argument("--link-library", default=None, dest="link_library",
                        help="link the tools to the libllama/libggml in this folder instead (for example a stock "
                        "llama-cpp-python's llama_cpp/lib, so llama.cpp runs unpatched at the compile cost of "
                        "--link-installed)")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.build_only:
            print(build_tools(Path(args.work), link_library=linked_library(args)))
            return 0
        report = library_ab(args) if args.library_ab else measure(args)
    except (PeerError, subprocess.TimeoutExpired) as failure:
        print(f"error: {failure}", file=sys.stderr)
        return 2
    write_folder(args.out, report, library_markdown(report) if args.library_ab else markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
