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
    assert completion["tokens_per_s_with_prompt"] == pytest.approx(63 / (1.7204 + 0.09713))
    speculative = peer.speculative_speed(SPECULATIVE_LOG)
    assert speculative["tokens"] == 66 and speculative["tokens_per_s"] == pytest.approx(66 / 1.437)
    assert speculative["acceptance"] == pytest.approx(0.84722)
    assert speculative["tokens_per_s_with_prompt"] == pytest.approx(66 / (1.437 + 0.101))
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
