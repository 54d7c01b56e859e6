"""Writes assets/prompts/code.jsonl: code prompts of 80-620 tokens (the chat template included), made from this
repository's own functions and classes, which no model here was trained on (the drafters learnt from the target's
replies to everyday and passage prompts, never from code). Three prompts in each band of 80-150, 150-300, 300-450 and
450-620 tokens, the task turning over: complete a function from its signature and docstring, write tests for it,
explain it, refactor it. Deterministic: the same tree gives the same file.

With --calibration it writes assets/prompts/code-calibration.jsonl instead: prompts made the same way from the
functions of pacer_core/training/ only (which code.jsonl leaves out, so the two sets share no function), four in each
band of 120-200, 250-350 and 480-620 tokens, for measuring costs by prompt length (python -m
pacer_core.training.pacer_costs --length-sets) without touching the prompts the benchmarks report on.

    .venv/bin/python benchmarks/prompt_sets/make_code_prompts.py [--out assets/prompts/code.jsonl]
    .venv/bin/python benchmarks/prompt_sets/make_code_prompts.py --calibration
"""
from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

TASKS = [("Complete the body of this Python function. Reply with the whole function in a code block.\n\n"
          "```python\n{head}\n```"),
         "Write pytest unit tests for this Python code.\n\n```python\n{code}\n```",
         "Explain what this Python code does, line by line.\n\n```python\n{code}\n```",
         "Rewrite this Python code so that it is easier to read, and keep its behaviour.\n\n```python\n{code}\n```"]
BANDS = [(80, 150), (150, 300), (300, 450), (450, 620)]
PER_BAND = 3
CALIBRATION_BANDS = [(120, 200), (250, 350), (480, 620)]
CALIBRATION_PER_BAND = 4


def documented_definitions(root: Path, training: bool = False) -> list[tuple[str, str, str, ast.AST]]:
    """(file, name, source, node) of every top-level function or class with a docstring and six lines or more,
    outside pacer_core/training/ (or, with ``training``, only there)."""
    found = []
    for path in sorted(root.glob("pacer_core/**/*.py")):
        if ("training" in path.parts) != training:
            continue
        source = path.read_text()
        for node in ast.parse(source).body:
            if (isinstance(node, (ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(node)
                    and node.end_lineno - node.lineno >= 6):
                found.append((str(path.relative_to(root)), node.name, ast.get_source_segment(source, node), node))
    return found


def signature_and_docstring(source: str, node) -> str:
    docstring_end = node.body[0].end_lineno - node.lineno + 1
    return "\n".join(source.splitlines()[:docstring_end]) + "\n    ..."


def consecutive_runs(definitions: list, longest: int = 4) -> list[tuple[str, str, str, None]]:
    """Runs of up to ``longest`` consecutive definitions of one file, as one piece of code (the training package's
    functions are short: a long prompt needs several)."""
    runs = []
    for size in range(2, longest + 1):
        for start in range(len(definitions) - size + 1):
            window = definitions[start:start + size]
            if len({file for file, *_ in window}) == 1:
                runs.append((window[0][0], "+".join(name for _, name, _, _ in window),
                             "\n\n\n".join(source for _, _, source, _ in window), None))
    return runs


def code_prompts(count_tokens, calibration: bool = False) -> list[dict]:
    rows, used, turn = [], set(), 0
    definitions = documented_definitions(ROOT, training=calibration)
    if calibration:
        definitions += consecutive_runs(definitions)
    bands, per_band = (CALIBRATION_BANDS, CALIBRATION_PER_BAND) if calibration else (BANDS, PER_BAND)
    for low, high in bands:
        in_band = 0
        for file, name, source, node in definitions:
            if (file, name) in used or in_band == per_band:
                continue
            task = TASKS[turn % len(TASKS)] if node is not None else TASKS[1 + turn % (len(TASKS) - 1)]
            prompt = task.format(code=source, head=signature_and_docstring(source, node) if node else "")
            tokens = count_tokens(prompt)
            if low <= tokens < high:
                rows.append({"id": f"{'calibration' if calibration else 'code'}-{tokens:04d}-{name}",
                             "category": f"code-{low}-{high}", "prompt": prompt,
                             "source": f"this repository's {file} ({name}; the project's own code, never trained on)",
                             "prompt_tokens": tokens})
                used.add((file, name))
                turn += 1
                in_band += 1
    return sorted(rows, key=lambda row: row["prompt_tokens"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calibration", action="store_true", help="the calibration set (see above)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    from pacer_core.models import load_target

    target, _ = load_target("embedded", "small", target_engine="torch")
    rows = code_prompts(lambda prompt: len(target.encode_prompt(prompt)), args.calibration)
    args.out = args.out or str(ROOT / "assets/prompts" / ("code-calibration.jsonl" if args.calibration else "code.jsonl"))
    Path(args.out).write_text("".join(json.dumps(row) + "\n" for row in rows))
    for row in rows:
        print(row["id"], row["prompt_tokens"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
