"""benchmarks/llamacpp_peer.py: reading llama.cpp's tools' output and the table's arithmetic (fast, pure); the tools
themselves are built and run by the script, outside CI."""

import pytest
from script_module import load_script

peer = load_script("benchmarks/llamacpp_peer.py")

COMPLETION_LOG = """
llama_perf_sampler_print:    sampling time =       9.61 ms /   102 runs   (    0.09 ms per token, 10613.94 tokens per second)
llama_perf_context_print:        load time =     181.84 ms
llama_perf_context_print: prompt eval time =      97.13 ms /    38 tokens (    2.56 ms per token,   391.23 tokens per second)
llama_perf_context_print:        eval time =    1720.40 ms /    63 runs   (   27.31 ms per token,    36.62 tokens per second)
llama_perf_context_print:       total time =    1843.47 ms /   101 tokens
"""
SPECULATIVE_LOG = """
encoded   38 tokens in    0.101 seconds, speed:  376.238 t/s
decoded   66 tokens in    1.437 seconds, speed:   45.929 t/s

n_draft   = 8
n_predict = 66
n_drafted = 72
n_accept  = 61
accept    = 84.722%
"""


@pytest.mark.pure
def test_the_tools_speeds_are_read_from_their_own_summary_lines():
    completion = peer.completion_speed(COMPLETION_LOG)
    assert completion["tokens"] == 63 and completion["prompt_tokens"] == 38
    assert completion["tokens_per_s"] == pytest.approx(63 / 1.7204)
    # 64 tokens generated (63 decode runs and the prompt's eval), over the prompt's eval, the runs and the sampling
    assert completion["generated_tokens"] == 64 and completion["sampling_seconds"] == pytest.approx(0.00961)
    assert completion["tokens_per_s_with_prompt"] == pytest.approx(64 / (1.7204 + 0.09713 + 0.00961))
    speculative = peer.speculative_speed(SPECULATIVE_LOG)
    assert speculative["tokens"] == 66 and speculative["tokens_per_s"] == pytest.approx(66 / 1.437)
    assert speculative["acceptance"] == pytest.approx(0.84722)
    assert speculative["tokens_per_s_with_prompt"] == pytest.approx(66 / (1.437 + 0.101))
    # the tools of llama-cpp-python 0.3.36's sources print the sampling line without its runs
    current = peer.completion_speed(
        "0.01.544 I common_perf_print:    sampling time =       7.14 ms\n"
        "0.01.544 I common_perf_print: prompt eval time =      46.28 ms /    15 tokens (    3.09 ms per token)\n"
        "0.01.544 I common_perf_print:        eval time =    1245.55 ms /    63 runs   (   19.77 ms per token)\n")
    assert current["sampling_seconds"] == pytest.approx(0.00714) and current["generated_tokens"] == 64
    assert current["tokens_per_s_with_prompt"] == pytest.approx(64 / (1.24555 + 0.04628 + 0.00714))
    with pytest.raises(peer.PeerError, match="no 'eval time' line"):
        peer.completion_speed("llama_perf_context_print: prompt eval time = 1.0 ms / 3 tokens")
    with pytest.raises(peer.PeerError, match="no 'decoded N tokens"):
        peer.speculative_speed("encoded 3 tokens in 0.1 seconds")


@pytest.mark.pure
def test_the_table_takes_medians_per_prompt_then_over_prompts():
    samples = {"llama.cpp ar": {"a": [30, 40, 35], "b": [20, 20, 22]},
               "llama.cpp spec n_max=8": {"a": [50, 40, 45], "b": [30, 31, 29]},
               "ours pacer": {"a": [60, 61, 59], "b": [40, 44, 42]}, "ours ar": {"a": [35, 35, 35], "b": [21, 21, 21]}}
    medians = peer.per_prompt_medians(samples)
    assert medians["llama.cpp ar"] == {"a": 35, "b": 20}
    table = {row["row"]: row for row in peer.summary_table(medians, "llama.cpp ar")}
    assert table["ours pacer"]["tokens_per_s"] == pytest.approx(51.0)
    assert table["ours pacer"]["ratio_to_llama.cpp ar"] == pytest.approx((60 / 35 + 42 / 20) / 2)
    best = peer.best_ratio(medians, ["ours ar", "ours pacer"], ["llama.cpp spec n_max=8"])
    assert best["ours"] == "ours pacer" and best["theirs"] == "llama.cpp spec n_max=8"
    assert best["ratio_of_medians"] == pytest.approx(51.0 / 37.5)
    assert best["median_per_prompt_ratio"] == pytest.approx((60 / 45 + 42 / 30) / 2)


@pytest.mark.pure
def test_any_prompt_id_becomes_a_file_name_in_the_scratch_folder(tmp_path):
    ids = ["HumanEval/82", "HumanEval_82", "../../etc/passwd", "", "café: ünïcode?", "a" * 300]
    names = [peer.prompt_file_name(position, prompt_id) for position, prompt_id in enumerate(ids)]
    assert len(set(names)) == len(names)
    assert names[0] == "0000-HumanEval_82.txt"
    for name in names:
        assert "/" not in name and not name.startswith(".") and len(name) < 100
        (tmp_path / name).write_text("a prompt")                  # each one a file directly in the folder
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(names)


@pytest.mark.pure
def test_the_gap_to_llama_cpps_ar_is_the_product_of_kernel_cache_and_loop():
    medians = {"llama.cpp ar": {"a": 50.0, "b": 40.0}, "llama.cpp ar, our library": {"a": 48.0, "b": 38.0},
               "llama.cpp ar, our library and context": {"a": 45.0, "b": 36.0},
               "ours ar": {"a": 40.5, "b": 34.2}, "ours pacer": {"a": 70.0, "b": 60.0}}
    shares = peer.gap_shares(medians, ["ours ar", "ours pacer", "ours fixed:4"])
    assert set(shares) == {"ours ar", "ours pacer"}
    ar = shares["ours ar"]
    assert ar["kernel"] == pytest.approx((48 / 50 + 38 / 40) / 2) and ar["cache"] == pytest.approx((45 / 48 + 36 / 38) / 2)
    assert ar["loop"] == pytest.approx((40.5 / 45 + 34.2 / 36) / 2) and ar["total"] == pytest.approx((0.81 + 0.855) / 2)
    assert shares["ours pacer"]["loop"] > 1 and shares["ours pacer"]["kernel"] == ar["kernel"]
    assert peer.gap_shares({"llama.cpp ar": {"a": 1.0}}, ["ours ar"]) == {}


@pytest.mark.pure
def test_the_tools_context_flags_follow_the_target_engines_context():
    from pacer_core.llama.target import CHUNK_TOKENS, PLAIN_CONTEXT
    flags = peer.engine_context_flags()
    pairs = dict(zip(flags[::2], flags[1::2]))
    assert pairs["-b"] == pairs["-ub"] == str(CHUNK_TOKENS)
    assert pairs["-ctk"] == pairs["-ctv"] == "f16" and pairs["-fa"] == "on"       # what setup.sh's library proves
    plain = peer.engine_context_flags(PLAIN_CONTEXT)
    assert plain[plain.index("-ctk") + 1] == "f32" and plain[plain.index("-fa") + 1] == "off"


@pytest.mark.pure
def test_the_report_says_which_openmp_settings_both_sides_ran_under(monkeypatch):
    """OMP_WAIT_POLICY=PASSIVE slows every llama.cpp step on both sides (the draft's short calls most): a report
    made under it says so, and one made before the settings were recorded says that."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    passive = peer.openmp_words(peer.openmp_settings())
    assert passive.startswith("OpenMP: OMP_WAIT_POLICY=PASSIVE, GOMP_SPINCOUNT=unset") and "1.45x slower" in passive
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.setenv("GOMP_SPINCOUNT", "10000")
    spinning = peer.openmp_words(peer.openmp_settings())
    assert "OMP_WAIT_POLICY=unset, GOMP_SPINCOUNT=10000" in spinning and "slower" not in spinning
    assert peer.openmp_words(None) == "OpenMP settings not recorded."


@pytest.mark.pure
def test_the_library_ab_splits_the_kernel_factor_into_decoding_and_prefill():
    """--library-ab: each llama-completion run as ms a token (decoding, prefill), each prompt's ratio the median of
    its back-to-back pairs' stock/ours (above 1: the project's library is faster), overall the median over prompts."""
    costs = peer.step_costs(peer.completion_speed(COMPLETION_LOG))
    assert costs["decode_ms"] == pytest.approx(1720.40 / 63) and costs["prefill_ms"] == pytest.approx(97.13 / 38)
    assert costs["whole_s"] == pytest.approx(1.72040 + 0.09713)

    def run(decode_ms, prefill_ms):
        return {"decode_ms": decode_ms, "prefill_ms": prefill_ms, "whole_s": decode_ms * 0.064 + prefill_ms * 0.1}
    pairs = {"short": [{"stock": run(22.0, 2.5), "ours": run(20.0, 2.5)},
                       {"stock": run(44.0, 2.6), "ours": run(40.0, 2.6)},      # a slow spell moves both sides
                       {"stock": run(23.0, 2.4), "ours": run(25.0, 3.0)}],
             "long": [{"stock": run(27.0, 2.2), "ours": run(30.0, 2.0)}]}
    split = peer.library_split(pairs)
    short = split["per_prompt"]["short"]
    assert short["decode_ms_ratio"] == pytest.approx(1.1) and short["prefill_ms_ratio"] == pytest.approx(1.0)
    assert short["stock_decode_ms"] == 23.0 and short["ours_decode_ms"] == 25.0 and short["pairs"] == 3
    assert split["per_prompt"]["long"]["decode_ms_ratio"] == pytest.approx(0.9)
    assert split["overall"]["decode_ms_ratio"] == pytest.approx(1.0)
    assert split["overall"]["prefill_ms_ratio"] == pytest.approx((1.0 + 1.1) / 2)
    report = {"date": "d", "command": "c", "threads": 2, "max_new_tokens": 64, "repeats": 3,
              "prompt_tokens": {"short": 38, "long": 540}, "split": split, "openmp": None}
    text = peer.library_markdown(report)
    assert "| short | 38 | 23.00 | 25.00 | 1.100 |" in text and "decode **1.000**" in text


@pytest.mark.pure
def test_a_run_without_a_prompt_line_has_no_prefill_cost():
    costs = peer.step_costs({"seconds": 1.0, "tokens": 50, "prompt_seconds": 0.0, "prompt_tokens": None})
    assert costs["prefill_ms"] is None and costs["decode_ms"] == pytest.approx(20.0)
    split = peer.library_split({"p": [{"stock": costs, "ours": costs}]})
    assert split["per_prompt"]["p"]["prefill_ms_ratio"] is None and split["overall"]["prefill_ms_ratio"] is None
    assert "stock_prefill_ms" not in split["per_prompt"]["p"]


def stand_in_tools(folder, names=("llama-completion", "llama-speculative-simple")):
    """Executables that print what llama.cpp's tools print (their summary lines), whatever they are given."""
    folder.mkdir()
    logs = {"llama-completion": COMPLETION_LOG, "llama-speculative-simple": SPECULATIVE_LOG}
    for name in names:
        tool = folder / name
        tool.write_text(f"#!/bin/sh\ncat >&2 <<'LOG'\n{logs[name]}\nLOG\n")
        tool.chmod(0o755)
    return folder


@pytest.mark.embedded
def test_the_peer_runs_end_to_end_with_stand_in_tools(tmp_path):
    """The script's dry form: the project's rows decode for real (one prompt, 4 tokens), llama.cpp's rows are
    stand-ins; the report is written and says the project's rows equal its AR."""
    import json

    bin_folder, out = stand_in_tools(tmp_path / "bin"), tmp_path / "out"
    code = peer.main(["--bin", str(bin_folder), "--target-gguf", str(tmp_path / "target.gguf"), "--limit", "1",
                      "--repeats", "1", "--max-new-tokens", "4", "--n-max", "4", "--out", str(out)])
    assert code == 0
    report = json.loads((out / "results.json").read_text())
    rows = {row["row"] for row in report["table"]}
    assert {"ours ar", "ours pacer", "llama.cpp ar", "llama.cpp spec n_max=4"} <= rows
    assert report["greedy_identity"]["prompts"] == 1 and report["failures"] == []
    assert all(count == 1 for count in report["greedy_identity"]["rows_equal_to_ar"].values())
    assert "x llama.cpp AR" in (out / "report.md").read_text()


@pytest.mark.embedded
def test_the_library_ab_runs_end_to_end_with_stand_in_tools(tmp_path):
    import json

    stock, ours = stand_in_tools(tmp_path / "stock", ("llama-completion",)), stand_in_tools(tmp_path / "ours",
                                                                                           ("llama-completion",))
    out = tmp_path / "out"
    code = peer.main(["--library-ab", "--bin", str(stock), "--bin-ours", str(ours), "--target-gguf",
                      str(tmp_path / "target.gguf"), "--limit", "2", "--repeats", "2", "--out", str(out)])
    assert code == 0
    report = json.loads((out / "results.json").read_text())
    assert report["kind"] == "library-ab" and len(report["pairs"]) == 2
    assert report["split"]["overall"]["decode_ms_ratio"] == pytest.approx(1.0)
    assert "decode **1.000**" in (out / "report.md").read_text()


def test_the_library_ab_says_which_folder_lacks_its_tool(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    code = peer.main(["--library-ab", "--bin", str(empty), "--bin-ours", str(empty), "--target-gguf",
                      str(tmp_path / "t.gguf"), "--out", str(tmp_path / "out")])
    assert code == 2 and f"{empty} does not hold" in capsys.readouterr().err
