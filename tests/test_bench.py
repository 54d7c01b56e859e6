"""The benchmark CLI on a tiny saved pair: parses methods, runs interleaved, writes json/csv/md."""
import json

import pytest

from pacer_core import SettingsError
from pacer_core.bench import main, parse_method
from test_models import WORDS, save_model, word_tokenizer
from tiny import noisy_copy, tiny_llama


def test_parse_method():
    assert parse_method("fixed:4").overrides == {"gamma": 4}
    assert parse_method("smc:8:4").overrides == {"n_particles": 8, "draft_len": 4}
    assert parse_method("smc:8:4:0.5").overrides == {"n_particles": 8, "draft_len": 4, "draft_temperature": 0.5}
    assert parse_method("pacer:2:8:0.4").overrides == {"block_size": 2, "max_draft_len": 8, "threshold": 0.4}
    with pytest.raises(SettingsError):
        parse_method("fixed:x")


def test_bench_runs_end_to_end(tmp_path, capsys):
    tokenizer = word_tokenizer(WORDS)
    target = tiny_llama(64, seed=0)
    target_dir = save_model(tmp_path / "target", target, tokenizer)
    draft_dir = save_model(tmp_path / "draft", noisy_copy(target, 0.2, 1), tokenizer)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"id": f"p{i}", "category": c, "prompt": f"w{i} w{i + 1}"})
                                 for i, c in enumerate(["chat", "code", "math", "story"])))
    out = tmp_path / "out"
    code = main(["--methods", "ar,hf,hf-assisted:3,fixed:3,pacer,oracle", "--prompts", str(prompts),
                 "--max-new-tokens", "12", "--repeats", "2", "--target", target_dir, "--draft", draft_dir,
                 "--device", "cpu", "--dtype", "float32", "--out", str(out)])
    assert code == 0
    report = json.loads((out / "results.json").read_text())
    rows = {row["method"]: row for row in report["methods"]}
    assert set(rows) == {"ar", "hf", "hf-assisted:3", "fixed:3", "pacer", "oracle"}
    assert rows["ar"]["speedup_vs_ar"] == 1.0 and rows["ar"]["tau"] == 1.0
    assert rows["fixed:3"]["texts"] == rows["ar"]["texts"] == rows["hf"]["texts"]
    assert (out / "results.csv").read_text().startswith("method,tau,alpha")
    assert "| fixed:3 |" in (out / "report.md").read_text()


def test_bench_bad_prompt_file_is_one_line_error(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    assert main(["--prompts", str(bad), "--methods", "ar"]) == 2
    assert "not valid JSON" in capsys.readouterr().err
