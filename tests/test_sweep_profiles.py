"""Specification of cluster profiles (slurm/profiles/*.yaml, gdpo_nemo.sweep.profiles)."""

from pathlib import Path

import pytest
import yaml

from gdpo_nemo.sweep.errors import SweepError
from gdpo_nemo.sweep.profiles import PROFILE_DIR, REQUIRED, list_profiles, load_profile, parse_profile

MINIMAL = {"account": "acct", "partition": "batch", "time": "01:00:00", "gpus_per_node": 8}


def parse(**changes):
    raw = {**MINIMAL, **changes}
    return parse_profile({k: v for k, v in raw.items() if v is not ...}, name="t", path=Path("/p/t.yaml"))


def test_shipped_profiles_are_example_and_local_and_both_load():
    assert {"example", "local"} <= set(list_profiles())
    for name in list_profiles():
        assert load_profile(name).name == name


def test_example_profile_is_an_eight_gpu_nemo_cluster_passing_secrets_by_name():
    p = load_profile("example")
    assert (p.nodes, p.gpus_per_node, p.node_gres) == (None, 8, "gpu:8")
    p.check_engine("nemo")
    assert p.env == ("HF_HOME", "HF_TOKEN", "WANDB_API_KEY")
    assert p.container and Path(p.nemo_rl_dir).is_absolute()


def test_local_profile_is_the_test_clusters_cpu_partition():
    p = load_profile("local")
    assert (p.partition, p.nodes, p.gpus_per_node, p.node_gres, p.cpus_per_task) == ("local", 1, 0, None, 1)


def test_a_profile_can_be_given_as_a_path(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(MINIMAL))
    assert load_profile(str(path)).name == "mine"


def test_unknown_profile_names_the_known_ones():
    with pytest.raises(SweepError, match=r"'nope' is not a known profile: known profiles are .*example.*local"):
        load_profile("nope")


@pytest.mark.parametrize("key", REQUIRED)
def test_missing_required_key_is_named(key):
    with pytest.raises(SweepError, match=rf"missing required key\(s\) {key} \({key}: "):
        parse(**{key: ...})


def test_account_may_be_null_but_not_absent():
    assert parse(account=None).account is None


def test_nodes_is_optional_and_pins_the_job_size_when_given():
    assert parse().nodes is None
    assert parse(nodes=2).nodes == 2


def test_unknown_key_lists_the_accepted_ones():
    with pytest.raises(SweepError, match=r"unknown key\(s\) gpus; accepted keys are .*gpus_per_node"):
        parse(gpus=8)


def test_env_with_values_is_refused_names_only():
    with pytest.raises(SweepError, match="env must list variable NAMES only"):
        parse(env={"HF_TOKEN": "hf_secret"})
    with pytest.raises(SweepError, match="not variable names"):
        parse(env=["HF_TOKEN=hf_secret"])


@pytest.mark.parametrize("time", ["30", "30:00", "04:00:00", "1-00", "1-12:00", "2-00:00:00"])
def test_slurm_time_formats_are_accepted(time):
    assert parse(time=time).time == time


@pytest.mark.parametrize("time", ["4h", "04:00:00:00", "", "1-"])
def test_other_times_are_refused_with_the_accepted_formats(time):
    with pytest.raises(SweepError, match="time .*MM, MM:SS, HH:MM:SS"):
        parse(time=time)


def test_unquoted_yaml_time_read_as_a_number_is_refused_with_a_hint():
    assert yaml.safe_load("time: 4:00:00")["time"] == 14400
    with pytest.raises(SweepError, match='time must be a quoted string such as "4:00:00", got 14400'):
        parse(time=14400)


@pytest.mark.parametrize(("key", "value"), [("nodes", 0), ("nodes", "2"), ("gpus_per_node", -1), ("nodes", True)])
def test_counts_must_be_integers_in_range(key, value):
    with pytest.raises(SweepError, match=rf"{key} must be an integer >= "):
        parse(**{key: value})


def test_gres_defaults_to_all_gpus_of_the_node_and_none_without_gpus():
    assert parse().node_gres == "gpu:8"
    assert parse(gres="gpu:h100:8").node_gres == "gpu:h100:8"
    assert parse(gpus_per_node=0).node_gres is None


def test_nemo_engine_needs_container_and_checkout_local_engine_does_not():
    profile = parse()
    profile.check_engine("local")
    with pytest.raises(SweepError, match="lacks container, nemo_rl_dir, which the nemo engine needs"):
        profile.check_engine("nemo")
    with pytest.raises(SweepError, match="engine 'ray' is not known: use one of local, nemo"):
        profile.check_engine("ray")


def test_nemo_rl_dir_must_be_absolute():
    with pytest.raises(SweepError, match="nemo_rl_dir must be an absolute path"):
        parse(nemo_rl_dir="nemo-rl")


def test_profile_dir_is_the_repos_slurm_profiles():
    assert PROFILE_DIR.parts[-2:] == ("slurm", "profiles")


def test_nemo_engine_refuses_an_ngc_release_older_than_the_pinned_nemo_rl():
    with pytest.raises(SweepError, match=r"container 'nvcr.io/nvidia/nemo-rl:v0.4.0' is NeMo RL release 0.4.0, older than"):
        parse(container="nvcr.io/nvidia/nemo-rl:v0.4.0", nemo_rl_dir="/nemo-rl").check_engine("nemo")
    parse(container="/images/nemo-rl-7ea279ab.sqsh", nemo_rl_dir="/nemo-rl").check_engine("nemo")
    parse(container="nvcr.io/nvidia/nemo-rl:v0.6.0", nemo_rl_dir="/nemo-rl").check_engine("nemo")


def test_the_nemo_cpu_profile_needs_no_container_and_fills_in_every_size():
    p = load_profile("local_nemo_cpu")
    p.check_engine("nemo")  # no container, no NeMo RL checkout: the CPU path
    assert dict(p.nemo_cpu) == {"model": "tiny", "steps": 2, "prompts": 2, "generations": 2, "max_new_tokens": 32,
                                "val_period": 1, "max_gen_batches": 2, "overrides": (), "wandb": True}
    assert dict(parse(nemo_cpu=None).nemo_cpu)["model"] == "tiny"  # an empty block: every default
    with pytest.raises(SweepError, match="lacks container, nemo_rl_dir"):
        parse().check_engine("nemo")


@pytest.mark.parametrize("block, message", [
    ({"modle": "tiny"}, "nemo_cpu: unknown key\\(s\\) modle; accepted keys are model, steps"),
    ({"steps": 0}, "nemo_cpu.steps must be a positive integer, got 0"),
    ({"wandb": "yes"}, "nemo_cpu.wandb must be true or false, got 'yes'"),
    ({"max_gen_batches": 0}, "nemo_cpu.max_gen_batches must be a positive integer, got 0"),
    ({"overrides": "grpo.batch_multiplier=2"}, "nemo_cpu.overrides must be a list of KEY=VALUE overrides, got 'grpo"),
    ({"overrides": ["grpo.batch_multiplier"]}, "nemo_cpu.overrides must be a list of KEY=VALUE overrides"),
    ("tiny", "nemo_cpu must be a mapping of model, steps"),
])
def test_a_bad_nemo_cpu_block_names_the_key_and_what_is_accepted(block, message):
    with pytest.raises(SweepError, match=message):
        parse(nemo_cpu=block)
