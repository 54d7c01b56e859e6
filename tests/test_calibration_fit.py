"""The cost rule's calibration of a trained layer's greedy estimates (``training/calibration.py``): the Platt fit
recovers a known map, the pre-verifier applies it to greedy estimates only, and the fitting command runs in its tiny
form on the embedded pair."""
from __future__ import annotations

import math

import pytest
import torch

from pacer_core.preverifier.model import PreVerifierLayer, TrainedPreVerifier
from pacer_core.stopping import clipped_logit, platt
from pacer_core.training.calibration import fit_platt, main


def test_the_platt_fit_recovers_the_map_that_made_the_outcomes():
    """Outcomes given as the probabilities σ(2 logit(e) − 1): the likelihood's maximum is that map exactly; and 0/1
    outcomes drawn from it come back within sampling error."""
    estimates = [0.05 + 0.9 * index / 199 for index in range(200)]
    truth = [platt(estimate, 2.0, -1.0) for estimate in estimates]
    assert fit_platt(estimates, truth) == pytest.approx((2.0, -1.0), abs=1e-6)
    generator = torch.Generator().manual_seed(0)
    drawn_estimates = estimates * 40
    outcomes = [float(torch.rand((), generator=generator) < platt(e, 2.0, -1.0)) for e in drawn_estimates]
    slope, offset = fit_platt(drawn_estimates, outcomes)
    assert slope == pytest.approx(2.0, abs=0.25) and offset == pytest.approx(-1.0, abs=0.25)


def test_platt_is_the_identity_at_slope_one_and_offset_zero_and_clips_certainty():
    assert platt(0.3, 1.0, 0.0) == pytest.approx(0.3)
    assert math.isfinite(clipped_logit(1.0)) and math.isfinite(clipped_logit(0.0))


def test_the_cost_rule_reads_greedy_estimates_through_the_layers_calibration_and_sampled_ones_as_they_are():
    layer = PreVerifierLayer(0)
    plain = TrainedPreVerifier(layer, {"threshold_greedy": 0.5})
    calibrated = TrainedPreVerifier(layer, {"threshold_greedy": 0.5,
                                            "greedy_calibration": {"slope": 1.0, "offset": -math.log(9.0)}})
    assert plain.cost_rule_estimate(0.5, sampled=False) == 0.5
    assert calibrated.cost_rule_estimate(0.5, sampled=False) == pytest.approx(0.1)
    assert calibrated.cost_rule_estimate(0.5, sampled=True) == 0.5


@pytest.mark.embedded
def test_the_calibration_command_runs_in_its_tiny_form(capsys):
    assert main(["--limit", "1", "--max-new-tokens", "16", "--max-draft-len", "3", "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert '"slope"' in printed and "wrote" not in printed
