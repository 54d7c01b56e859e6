"""A gguf draft step with two llama-cpp-python builds side by side: the project's (scripts/llama_cpu_flags.sh:
GGML_NATIVE=OFF with the CPU's listed features, never AMX) against another, e.g. a GGML_NATIVE=ON wheel.

    pip wheel --no-cache-dir --no-deps llama-cpp-python==0.3.36 -w /tmp/native   (with CMAKE_ARGS=-DGGML_NATIVE=ON)
    python benchmarks/llama_build_flags.py --other /tmp/native/llama_cpp_python-*.whl --label-other native \\
        --out benchmarks/results/llama-build-flags/this-cpu.json

Each measurement is a child process (the library is chosen by PYTHONPATH: an unpacked wheel goes first) that
loads the embedded GGUF, feeds a 64-token prompt and times single-token decode steps of 1 and 4 rows (what a
draft and SMC-SD's particles cost). The two builds alternate, ``--repeats`` times each; the report gives the
medians and their ratio."""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS = 48


def child(gguf_file: str, rows: int) -> dict:
    """Time STEPS decode steps of one token on each of ``rows`` rows after a 64-token prompt."""
    _, model, context, batch = proof_module().open_context(gguf_file, 1024, 256, rows, 2)
    n_vocab = int(model.n_vocab())

    def decode(entries):
        raw = batch.batch
        for index, (sequence, position, token) in enumerate(entries):
            raw.token[index], raw.pos[index] = token, position
            raw.seq_id[index][0], raw.n_seq_id[index], raw.logits[index] = sequence, 1, index == len(entries) - 1 or rows > 1
        raw.n_tokens = len(entries)
        context.decode(batch)

    prompt = [(7 * index + 11) % n_vocab for index in range(64)]
    for row in range(rows):
        decode([(row, position, token) for position, token in enumerate(prompt)])
    times = []
    for step in range(STEPS):
        token = (13 * step + 5) % n_vocab
        started = time.perf_counter()
        decode([(row, len(prompt) + step, token) for row in range(rows)])
        times.append(time.perf_counter() - started)
    return {"step_ms": 1000 * statistics.median(times[4:])}


def proof_module():
    """pacer_core/llama/proof.py loaded by its path: the child imports nothing else of the project (no torch), so
    the build on PYTHONPATH is the only native library it loads."""
    spec = importlib.util.spec_from_file_location("llama_proof", ROOT / "pacer_core" / "llama" / "proof.py")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)   # dataclasses look it up there
    spec.loader.exec_module(module)
    return module


def site_for(library: str, scratch: Path) -> str:
    """A folder to put first on PYTHONPATH for this library: an unpacked wheel, or '' for the installed one."""
    if not library:
        return ""
    path = Path(library)
    if path.suffix == ".whl":
        target = scratch / path.stem
        if not target.exists():
            with zipfile.ZipFile(path) as wheel:
                wheel.extractall(target)
        return str(target)
    return str(path)


def measure(site: str, gguf_file: str, rows: int) -> float:
    environment = dict(os.environ)
    if site:
        environment["PYTHONPATH"] = site + os.pathsep + environment.get("PYTHONPATH", "")
    completed = subprocess.run([sys.executable, "-P", __file__, "--child", gguf_file, str(rows)], capture_output=True,
                               text=True, env=environment, timeout=600)
    if completed.returncode != 0:
        raise SystemExit(f"the build at {site or 'the installed library'} failed (exit {completed.returncode}):\n"
                         f"{completed.stderr[-2000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])["step_ms"]


def main(argv=None) -> int:
    if argv is None and sys.argv[1:2] == ["--child"]:
        print(json.dumps(child(sys.argv[2], int(sys.argv[3]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--other", required=True, help="the other build: a wheel file or a folder holding llama_cpp")
    parser.add_argument("--label-other", default="other")
    parser.add_argument("--label-ours", default="project flags")
    parser.add_argument("--gguf", default="", help="GGUF file (default: the embedded target's)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from benchmarks.results_writer import print_and_write     # here: the child imports nothing of the project
    if not args.gguf:
        from pacer_core.embedded import find_gguf_file
        args.gguf = str(find_gguf_file())
    with tempfile.TemporaryDirectory() as scratch:
        sites = {args.label_ours: "", args.label_other: site_for(args.other, Path(scratch))}
        samples = {(label, rows): [] for label in sites for rows in (1, 4)}
        for _ in range(args.repeats):
            for rows in (1, 4):
                for label, site in sites.items():
                    samples[(label, rows)].append(measure(site, args.gguf, rows))
    medians = {f"{label} {rows} row(s)": round(statistics.median(values), 2) for (label, rows), values in samples.items()}
    ratios = {f"{rows} row(s)": round(statistics.median(samples[(args.label_ours, rows)]) /
                                      statistics.median(samples[(args.label_other, rows)]), 3) for rows in (1, 4)}
    report = {"file": Path(args.gguf).name, "repeats": args.repeats, "steps": STEPS, "threads": 2,
              "median_step_ms": medians, "ours_over_other": ratios,
              "flags": subprocess.run(["bash", str(ROOT / "scripts" / "llama_cpu_flags.sh")], capture_output=True,
                                      text=True).stdout.strip(),
              "samples_ms": {f"{label} {rows}": [round(value, 2) for value in values]
                             for (label, rows), values in samples.items()}}
    print_and_write(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
