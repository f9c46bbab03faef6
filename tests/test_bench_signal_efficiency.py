"""bench/signal_efficiency.py without training: every arm is a config the trainer accepts, and
tokens to a target are read at an evaluation and between two."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import signal_efficiency as se  # noqa: E402
from proctor.trainer.config import GRPOConfig  # noqa: E402


@pytest.mark.parametrize("arm", list(se.ARMS))
def test_every_arm_is_a_config_the_trainer_accepts(arm, tmp_path):
    main = yaml.safe_load(se.MAIN_JOB.read_text())
    cfg = se.arm_config(main, arm, 0, None, tmp_path)
    config = GRPOConfig.from_dict(cfg)
    sizes = config.rollout.adaptive_group_size
    assert (sizes is not None) == (arm in ("default", "probe-40"))   # only these size groups from the probe
    budget = config.data.prompts_per_step * config.rollout.group_size
    expected = {"default": main["data"]["prompts_per_step"] * main["rollout"]["group_size"], "probe-40": 40,
                "probe-fixed": 40, "uniform": 64}
    if arm in expected:
        assert budget == expected[arm]                           # completions a step, as the docstring says
    assert se.DROP not in yaml.safe_dump(cfg)                    # a dropped key is gone, not the marker


def test_tokens_to_target_at_an_evaluation_and_between_two():
    mean = {"tokens": [0, 100, 200, 300], "held_out": [0.1, 0.2, 0.3, 0.4]}
    assert se.tokens_to_reach(mean, 0.25) == 200                 # the first evaluation at or above it
    assert se.tokens_to_reach_between(mean, 0.25) == pytest.approx(150)
    assert se.tokens_to_reach_between(mean, 0.1) == 0
    assert se.tokens_to_reach(mean, 0.5) is None and se.tokens_to_reach_between(mean, 0.5) is None
