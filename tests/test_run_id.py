"""Run identity: one name for the run dir, the W&B run and the Slurm job."""

import pytest

from gdpo_nemo.runs.run_id import RunId


def test_name_and_group():
    run = RunId("toolcall", "toolcall", "qwen2.5-1.5b", "gdpo", 3)
    assert run.name == "toolcall__toolcall__qwen2.5-1.5b__gdpo__seed3"
    assert run.group == "toolcall__toolcall__qwen2.5-1.5b__gdpo"


def test_parse_round_trips():
    run = RunId("math", "math", "r1-7b", "gdpo_wlen0.5", 0)
    assert RunId.parse(run.name) == run


def test_from_config_reads_the_gdpo_block_and_grpo_seed():
    config = {"gdpo": {"experiment": "e", "task": "gsm8k", "model_tag": "m", "algo": "grpo"}, "grpo": {"seed": 7}}
    assert RunId.from_config(config).name == "e__gsm8k__m__grpo__seed7"


@pytest.mark.parametrize("bad", ["a__b__c__d", "a__b__c__d__e", "a__b__c__d__seedx"])
def test_parse_rejects_non_run_ids(bad):
    with pytest.raises(ValueError, match="not a run id"):
        RunId.parse(bad)


@pytest.mark.parametrize("field, value", [("algo", "gd__po"), ("task", "has space"), ("model", "")])
def test_parts_that_would_break_the_name_are_rejected(field, value):
    parts = dict(experiment="e", task="t", model="m", algo="a", seed=1) | {field: value}
    with pytest.raises(ValueError, match=field):
        RunId(**parts)


def test_negative_seed_is_rejected():
    with pytest.raises(ValueError, match="seed"):
        RunId("e", "t", "m", "a", -1)
