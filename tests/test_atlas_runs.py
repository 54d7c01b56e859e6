"""The atlas on tiny random pairs: its aggregates equal a direct count over the very events the decoders
yielded (several methods, greedy and sampling), and its greedy α equals the bench's."""
import json
import threading

import pytest

from pacer_core.atlas import runner
from pacer_core.atlas.cli import main
from pacer_core.atlas.report import build_atlas
from pacer_core.atlas.runner import AtlasPrompt, atlas_lane, run_prompts
from pacer_core.drafters import LoadedDrafters
from pacer_core.settings import Limits, SettingsError
from pacer_core.testing.tiny import tiny_pair

PROMPTS = [AtlasPrompt(f"t{i} t{i + 5} t{(3 * i) % 64}", ("chat", "code", "math")[i % 3], f"p{i}") for i in range(1, 7)]


@pytest.fixture
def recorded(monkeypatch):
    """Every (events, result) the atlas's engine call returned, in order."""
    calls = []
    decode = runner.decode

    def recording(target, request, cancel=None):
        events, result = decode(target, request, cancel)
        calls.append((request.method, events, result))
        return events, result

    monkeypatch.setattr(runner, "decode", recording)
    return calls


def run_atlas(target, drafter, method, raw, prompts=PROMPTS, **options):
    lane = atlas_lane(target, drafter, None, "small", method, raw, prompts, Limits())
    runs = list(run_prompts(prompts, [lane], **options))
    return build_atlas(method, ["small"], lane.requests[0].settings, prompts, runs)


def direct_counts(events_per_prompt: list[list], categories: list[str]) -> dict:
    """The same aggregates counted straight from n_drafted / n_accepted and token lists."""
    out = {"drafted": 0, "accepted": 0, "position": {}, "category": {}, "rejections": []}
    for index, events in enumerate(events_per_prompt):
        for event in events:
            out["drafted"] += event.n_drafted
            out["accepted"] += event.n_accepted
            judged = min(event.n_drafted, event.n_accepted + 1)
            for depth in range(1, judged + 1):
                drafted, accepted = out["position"].get(depth, (0, 0))
                out["position"][depth] = (drafted + 1, accepted + (depth <= event.n_accepted))
            drafted, accepted = out["category"].get(categories[index], (0, 0))
            out["category"][categories[index]] = (drafted + judged, accepted + event.n_accepted)
            if event.n_accepted < event.n_drafted:
                out["rejections"].append((index, event.n_accepted + 1, event.tokens[event.n_accepted].text,
                                          event.tokens[-1].text))
    return out


METHODS = ["fixed:2", "fixed:4", "pacer", "pacer:2:8:0.1+on_fail=discard", "pacer:1:6+stop_rule=cost",
           "pacer+phrase_len=4"]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("temperature", [0.0, 0.9])
@pytest.mark.parametrize("method", METHODS)
def test_aggregates_equal_a_direct_count(recorded, method, temperature, seed):
    target, drafter = tiny_pair(draft_seed=seed + 1, draft_noise=(0.2, 0.5)[seed], scale=40)   # confident: PACER drafts
    atlas = run_atlas(target, drafter, method, {"temperature": temperature, "seed": seed, "max_new_tokens": 20})
    events = [events for _, events, _ in recorded]
    direct = direct_counts(events, [prompt.category for prompt in PROMPTS])
    assert direct["drafted"] > 0 and (atlas["drafted"], atlas["accepted"]) == (direct["drafted"], direct["accepted"])
    assert atlas["alpha"] == pytest.approx(direct["accepted"] / direct["drafted"])
    assert {row["position"]: (row["drafted"], row["accepted"]) for row in atlas["by_position"]} == direct["position"]
    assert {row["category"]: (row["drafted"], row["accepted"]) for row in atlas["by_category"]} == direct["category"]
    judged = sum(drafted for drafted, _ in direct["position"].values())
    assert atlas["judged"] == judged == sum(row["drafted"] for row in atlas["by_token_kind"])
    assert sum(row["accepted"] for row in atlas["by_token_kind"]) == direct["accepted"]
    assert [(r["prompt_index"], r["position"], r["drafted"], r["target"]) for r in atlas["rejections"]] == \
        direct["rejections"]
    assert sum(row["drafted"] for row in atlas["calibration"]) <= judged
    for row, (_, events, result) in zip(atlas["per_prompt"], recorded):
        assert (row["tau"], row["alpha"], row["tokens"]) == (result.metrics.tau, result.metrics.alpha,
                                                             result.metrics.new_tokens)
        assert row["steps"] == len(events)
    json.dumps(atlas)


def test_stopping_keeps_finished_prompts(recorded):
    (target, drafter), cancel = tiny_pair(), threading.Event()
    lane = atlas_lane(target, drafter, None, "small", "fixed:3", {"max_new_tokens": 12}, PROMPTS, Limits())
    kept = []
    for run in run_prompts(PROMPTS, [lane], cancel=cancel):
        kept.append(run.index)
        if len(kept) == 2:
            cancel.set()
    assert kept == [0, 1] and len(recorded) == 2


def test_ar_baseline_gives_a_speedup(recorded):
    atlas = run_atlas(*tiny_pair(), "fixed:2", {"max_new_tokens": 10}, PROMPTS[:2], measure_ar=True)
    assert [method for method, _, _ in recorded] == ["fixed", "ar", "fixed", "ar"]
    assert atlas["speedup"] > 0 and all(row["speedup"] > 0 for row in atlas["per_prompt"])


def test_comparison_of_two_drafters():
    target, first = tiny_pair()
    _, second = tiny_pair(draft_seed=5, draft_noise=0.6)
    raw = {"max_new_tokens": 16}
    lanes = [atlas_lane(target, first, None, "small", "fixed:3", raw, PROMPTS, Limits()),
             atlas_lane(target, second, None, "other", "fixed:3", raw, PROMPTS, Limits())]
    runs = list(run_prompts(PROMPTS, lanes))
    atlas = build_atlas("fixed:3", ["small", "other"], lanes[0].requests[0].settings, PROMPTS, runs)
    other, agreement = atlas["compare"], atlas["compare"]["agreement"]
    assert other["drafter"] == "other" and other["prompts"] == len(PROMPTS)
    assert agreement["compared"] == sum(agreement[k] for k in ("both", "only_first", "only_second", "neither"))
    # Greedy: both outputs are the target's, so every output position the two drafters both judged is compared.
    judged = [{(j.prompt_index, j.output_position) for run in runs for j in run.records[name].judgments}
              for name in ("small", "other")]
    assert agreement["compared"] == len(judged[0] & judged[1]) > 0
    assert all(example["first_accepted"] != example["second_accepted"] for example in agreement["examples"])


def test_non_judging_methods_are_refused():
    target, drafter = tiny_pair()
    for method in ("ar", "smc:4:4", "pacer@small"):
        with pytest.raises(SettingsError, match="fixed"):
            atlas_lane(target, drafter, None, "small", method, {}, PROMPTS, Limits())


def test_greedy_alpha_equals_the_bench(tmp_path):
    from pacer_core.bench import main as bench_main
    from test_bench import saved_pair_and_prompts

    target_dir, draft_dir, prompts = saved_pair_and_prompts(tmp_path)
    common = ["--prompts", str(prompts), "--max-new-tokens", "16", "--temperature", "0", "--target", target_dir,
              "--draft", draft_dir, "--device", "cpu", "--dtype", "float32"]
    assert bench_main(common + ["--methods", "ar,fixed:3@small,pacer@small", "--repeats", "1",
                                "--out", str(tmp_path / "bench")]) == 0
    bench = {row["method"]: row for row in json.loads((tmp_path / "bench" / "results.json").read_text())["methods"]}
    for method in ("fixed:3", "pacer"):
        out = tmp_path / f"atlas-{method}"
        assert main(common + ["--method", method, "--drafter", "small", "--out", str(out)]) == 0
        atlas = json.loads((out / "atlas.json").read_text())
        assert atlas["alpha"] == pytest.approx(bench[f"{method}@small"]["alpha"], abs=1e-12)
        assert atlas["tau"] == pytest.approx(bench[f"{method}@small"]["tau"], abs=1e-12)
        assert (out / "atlas.csv").read_text().startswith("index,id,category,tau,alpha")
        assert "## By draft position" in (out / "report.md").read_text()


def test_command_errors_are_one_line(tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "t1 t2"}) + "\n")
    common = ["--prompts", str(prompts), "--out", str(tmp_path / "out")]
    target, drafter = tiny_pair()
    drafters = LoadedDrafters.around(drafter)
    assert main(common + ["--method", "smc:4:4"], target=target, drafters=drafters) == 2
    assert "error: The atlas counts the target's verdicts" in capsys.readouterr().err
    assert main(common + ["--compare", "small"], target=target, drafters=drafters) == 2
    assert "--compare needs a drafter other than --drafter" in capsys.readouterr().err
    assert main(common + ["--drafter", "nonesuch"], target=target, drafters=drafters) == 2
    assert not (tmp_path / "out").exists()
