"""The gdpo block's typed settings (gdpo_nemo/config/settings.py): one place for its defaults,
read by the composer, the local engine and the NeMo RL hook alike; the estimator options of
issue 16 settable from the run config; the whole block validated before any work."""

from __future__ import annotations

from pathlib import Path

from dataclasses import fields

import pytest

from gdpo_nemo import config as cc
from gdpo_nemo.estimators import PRESETS, AdvantageOptions
from gdpo_nemo.config.derive import get_path
from gdpo_nemo.config.settings import EstimatorSettings, GdpoSettings, describe, gdpo_defaults
from gdpo_nemo.engines.local.config import load_run_config, resolve_and_check
from gdpo_nemo.engines.nemo.estimators import AdvantageEstimator, create_estimator

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "configs" / "local" / "tiny.yaml"
SET_BY_GROUPS = {"experiment", "task", "model_tag", "algo", "estimator", "reward_components", "engine", "local", "computed_by"}


def _nemo_settings(config: dict) -> EstimatorSettings:
    """The settings the NeMo RL hook builds its estimator from (forced to ours)."""
    config["grpo"]["adv_estimator"]["name"] = "gdpo_no_bn" if config["gdpo"]["estimator"] == "gdpo_no_bn" else "grpo"
    built = create_estimator(config, lambda master: None)
    if built is None:  # NeMo RL's native estimator: the hook would not build ours
        return EstimatorSettings.from_gdpo(config["gdpo"], nemo_engine=True)
    assert isinstance(built, AdvantageEstimator)
    return built.settings


def test_every_setting_documents_its_meaning_and_source():
    for path, _default, meaning, source in describe(GdpoSettings):
        assert path.startswith("gdpo.") and meaning and source, path


def test_composed_and_local_configs_take_their_gdpo_defaults_from_the_settings():
    defaults = gdpo_defaults()
    composed = cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "gdpo")["gdpo"]
    assert {k: v for k, v in composed.items() if k not in SET_BY_GROUPS} == {
        k: v for k, v in defaults.items() if k not in SET_BY_GROUPS
    }
    local, _ = load_run_config(TINY)
    assert local["gdpo"]["local"]["warm_start"]["steps"] == defaults["local"]["warm_start"]["steps"] == 10
    for key in ("std_ddof", "eps", "scale_rewards", "single_sample_groups", "strict", "batch_norm"):
        assert local["gdpo"][key] == composed[key] == defaults[key], key


def test_std_ddof_and_eps_default_to_the_presets_so_preset_trl_gives_trls_numerics():
    assert (gdpo_defaults()["std_ddof"], gdpo_defaults()["eps"]) == (None, None)
    local = resolve_and_check(cc.compose("gsm8k", "tiny", "gdpo", overrides=["gdpo.preset=trl"]))[0]
    nemo = cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "gdpo", cluster="nemo_1n1g", overrides=["gdpo.preset=trl"])
    for gdpo in (local["gdpo"], nemo["gdpo"]):
        options = EstimatorSettings.from_gdpo(gdpo).options
        # TRL: group eps 1e-4 and batch eps 1e-4 (before: group eps 1e-6 with TRL's batch eps)
        assert (options.std_ddof, options.eps, options.batch_norm_eps) == (1, 1e-4, 1e-4)
    plain = cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "gdpo", cluster="nemo_1n1g")
    assert cc.needs_our_estimator(plain["gdpo"], plain["env"]) is False  # null numerics are NeMo RL's own


@pytest.mark.parametrize(
    "algo, override, value",
    [
        ("grpo", "gdpo.scale_rewards=batch", "batch"),
        ("gdpo", "gdpo.scale_rewards=none", "none"),
        ("gdpo", "gdpo.single_sample_groups=raise", "raise"),
    ],
)
def test_estimator_options_are_set_from_the_gdpo_block_and_route_the_nemo_run_to_our_estimator(algo, override, value):
    key = override.split("=")[0].split(".")[1]
    nemo = cc.compose("gsm8k", "qwen2.5-1.5b-instruct", algo, cluster="nemo_1n1g", overrides=[override])
    assert cc.needs_our_estimator(nemo["gdpo"], nemo["env"]) is True
    assert getattr(_nemo_settings(nemo).options, key) == value
    local, _ = load_run_config(TINY, [f"gdpo.estimator={algo}", override])
    assert getattr(EstimatorSettings.from_gdpo(local["gdpo"]).options, key) == value


def test_grpo_with_scale_rewards_none_is_nemo_rls_normalize_rewards_false():
    c = cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "grpo", cluster="nemo_1n1g", overrides=["gdpo.scale_rewards=none"])
    assert c["grpo"]["adv_estimator"]["normalize_rewards"] is False and c["grpo"]["normalize_rewards"] is False
    assert cc.needs_our_estimator(c["gdpo"], c["env"]) is False


def test_strict_is_passed_to_the_estimator_on_both_engines():
    nemo = cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "gdpo", cluster="nemo_1n1g", overrides=["gdpo.strict=true"])
    assert _nemo_settings(nemo).options.strict is True
    local, _ = load_run_config(TINY, ["gdpo.strict=true"])
    assert EstimatorSettings.from_gdpo(local["gdpo"]).options.strict is True


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["gdpo.scale_rewards=batch"], r"gdpo.scale_rewards: 'batch' is TRL's GRPO option"),
        (["gdpo.strict=true", "gdpo.preset=null"], r"gdpo.strict: true .* needs gdpo.preset"),
        (["gdpo.strict=true", "gdpo.eps=0.001"], r"gdpo.eps: 0.001 with gdpo.strict true"),
        (["gdpo.reward_weights={bogus: 2.0}"], r"gdpo.reward_weights: \['bogus'\] name no reward component"),
    ],
)
def test_contradicting_options_are_refused_by_both_engines_at_validation(overrides, message):
    with pytest.raises(cc.ConfigError, match=message):
        cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "gdpo", overrides=overrides)
    with pytest.raises(cc.ConfigError, match=message):
        load_run_config(TINY, overrides)  # before any model loads


def test_local_engine_refuses_weights_of_unknown_components_before_the_model_loads():
    # tiny.yaml leaves reward_components null: the task's paper set (format, correctness, integer)
    with pytest.raises(ValueError, match=r"gdpo.reward_weights: \['length'\] name no reward component"):
        load_run_config(TINY, ["gdpo.reward_weights={length: 0.5}"])
    config, _ = load_run_config(TINY, ["gdpo.reward_weights={integer: 0.5}"])
    assert config["gdpo"]["reward_weights"] == {"integer": 0.5}


def test_the_run_config_docs_table_is_the_settings_classes():
    rows = [line for line in (REPO / "docs" / "interfaces.md").read_text().splitlines() if line.startswith("| `gdpo.")]
    documented = [tuple(cell.strip().strip("`") for cell in row.strip("|").split("|"))[:2] for row in rows]
    shown = {None: "null", True: "true", False: "false"}
    expected = [
        (path, shown[d] if d is None or isinstance(d, bool) else ("{}" if d == {} else str(d)))
        for path, d, _meaning, _source in describe(GdpoSettings)
    ]
    assert documented == expected


def test_a_newly_registered_estimator_is_accepted_by_both_engines_configs_and_computed_by_ours():
    from gdpo_nemo.estimators import ESTIMATORS, register_estimator, unregister_estimator

    register_estimator("toy_centred", label="toy")(ESTIMATORS["grpo_no_std"].fn)
    try:
        composed = cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "grpo", cluster="nemo_1n1g",
                              overrides=["gdpo.estimator=toy_centred"])
        assert composed["grpo"]["adv_estimator"]["name"] == "toy_centred"  # no NeMo RL equivalent
        assert cc.needs_our_estimator(composed["gdpo"], composed["env"]) is True
        assert isinstance(create_estimator(composed, lambda master: None), AdvantageEstimator)
        local, _ = load_run_config(TINY, ["gdpo.estimator=toy_centred", "grpo.adv_estimator.name=toy_centred"])
        assert local["gdpo"]["estimator"] == "toy_centred"
    finally:
        unregister_estimator("toy_centred")
    with pytest.raises(cc.ConfigError, match="gdpo.estimator: 'toy_centred' is not accepted"):
        cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "grpo", overrides=["gdpo.estimator=toy_centred"])


def test_the_option_values_the_settings_accept_are_the_estimators_own():
    from gdpo_nemo.config import settings

    assert settings.PRESETS == tuple(PRESETS)
    for value in settings.SINGLE_SAMPLE_GROUPS:
        AdvantageOptions.resolve(single_sample_groups=value)  # accepted there too
    for name in ("preset", "reward_weights", "leave_one_out", "std_ddof", "eps", "scale_rewards",
                 "single_sample_groups", "strict"):
        assert name in AdvantageOptions.names() and any(f.name == name for f in fields(settings.GdpoSettings)), name


def _tree_paths_in(config: dict, leaves: dict, prefix: str = "") -> set[str]:
    """The key paths of `config` down to the key tree's leaves (a leaf may hold a mapping)."""
    paths = set()
    for key, value in config.items():
        path = prefix + key
        if isinstance(value, dict) and path not in leaves:
            paths |= _tree_paths_in(value, leaves, path + ".")
        else:
            paths.add(path)
    return paths


def test_the_key_tree_is_the_local_engines_only_list_of_nemo_rl_keys():
    """From a config of nothing but a gdpo block, the local engine builds exactly the tree's
    leaves it uses (at their defaults) and those it refuses (at their neutral values)."""
    from gdpo_nemo.config import key_walk, nemo_keys
    from gdpo_nemo.engines.local.config import check_config

    config, note = check_config({"gdpo": {}})
    leaves = {path: leaf.fate("local") for path, leaf in key_walk.leaves()}  # the local column
    used = {path for path, fate in leaves.items() if fate.kind == nemo_keys.USED}
    refused = {path for path, fate in leaves.items()
               if fate.kind == nemo_keys.REFUSED and fate.accepted[0] is not nemo_keys.ABSENT}
    assert note is None
    assert _tree_paths_in({k: v for k, v in config.items() if k != "gdpo"}, leaves) == used | refused
    for path in used:
        assert get_path(config, path) == leaves[path].default, path  # a Fate: its default
    assert config["gdpo"] == gdpo_defaults()
    # the loss reads the used keys of loss_fn, no other
    from gdpo_nemo.engines.local.loss import LossConfig

    assert {f"loss_fn.{name}" for name in LossConfig.__dataclass_fields__} == {p for p in used if p.startswith("loss_fn.")}


def test_the_local_engine_names_exactly_the_keys_the_tree_marks_ignored():
    from gdpo_nemo.config import key_walk, nemo_keys
    from gdpo_nemo.config.validate import check_keys

    composed = cc.compose("gsm8k", "tiny", "gdpo")
    found = check_keys(composed, engine="local")
    leaves = dict(key_walk.leaves())
    assert found.problems == [] and len(found.ignored) > 20
    for path in found.ignored:  # a key, or a section all of whose keys are ignored
        under = [leaf for key, leaf in leaves.items() if key == path or key.startswith(path + ".")]
        assert under and all(leaf.fate("local").kind == nemo_keys.IGNORED for leaf in under), path
    present = _tree_paths_in({k: v for k, v in composed.items() if k != "gdpo"}, leaves)
    ignored_present = {path for path in present if path in leaves and leaves[path].fate("local").kind == nemo_keys.IGNORED}
    named = {path for path in ignored_present if any(path == i or path.startswith(i + ".") for i in found.ignored)}
    assert named == ignored_present


def test_the_local_engine_passes_the_gdpo_blocks_estimator_options_to_compute_advantages():
    import torch

    from gdpo_nemo.estimators import compute_advantages
    from gdpo_nemo.engines.local.trainer import advantages_for

    rewards = {"format": torch.tensor([1.0, 0.0, 1.0, 0.0]), "correctness": torch.tensor([0.0, 0.0, 1.0, 0.0])}
    groups, mask = torch.tensor([0, 0, 1, 1]), torch.ones(4, 3)
    config, _ = load_run_config(TINY, ["gdpo.estimator=grpo", "gdpo.scale_rewards=none"])
    got = advantages_for(rewards, groups, config["gdpo"], mask)
    # sums [1, 0 | 2, 0]: centred +-0.5 and +-1, not divided by the group std (0.71, 1.41)
    assert torch.equal(got, torch.tensor([0.5, -0.5, 1.0, -1.0]))
    assert torch.equal(got, compute_advantages(rewards, groups, "grpo", preset="nemo_rl", scale_rewards="none"))


def test_every_estimator_option_is_a_gdpo_key_declared_once():
    # The gdpo block's estimator keys are AdvantageOptions' fields: same names and order, the
    # field's own meaning and check, the run-config default it declares (issue 36: before,
    # batch_norm_eps was an option no gdpo key could set).
    from dataclasses import fields as dc_fields

    from gdpo_nemo.config import settings

    keys = [f.name for f in dc_fields(settings.GdpoSettings)]
    options = list(AdvantageOptions.names())
    assert keys[keys.index(options[0]):keys.index(options[0]) + len(options)] == options
    rows = {path.split(".", 1)[1]: (default, meaning) for path, default, meaning, _ in describe(GdpoSettings)}
    for item in dc_fields(AdvantageOptions):
        assert rows[item.name] == (item.metadata["config_default"], item.metadata["meaning"]), item.name
    composed = cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "gdpo", overrides=["gdpo.batch_norm_eps=0.001",
                                                                            "gdpo.residue_tolerance=0.0"])
    built = EstimatorSettings.from_gdpo(composed["gdpo"]).options
    assert (built.batch_norm_eps, built.residue_tolerance) == (0.001, 0.0)
    assert EstimatorSettings.from_gdpo(cc.compose("gsm8k", "tiny", "gdpo", overrides=["gdpo.preset=verl"])["gdpo"]).options.batch_norm_eps == 1e-8
    with pytest.raises(cc.ConfigError, match=r"gdpo.batch_norm_eps: -1 is not accepted; expected a number >= 0.0 or null"):
        cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "gdpo", overrides=["gdpo.batch_norm_eps=-1"])


def _written_defaults() -> dict:
    """{key path: the source text of the default argument} of every used(...) leaf of the key
    tree as written in gdpo_nemo/config/nemo_keys.py (sections followed through their names)."""
    import ast

    source = (REPO / "gdpo_nemo" / "config" / "nemo_keys.py").read_text()
    named = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            named[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            named[node.target.id] = node.value
    found = {}

    def spec(value, path):
        value = named.get(value.id, value) if isinstance(value, ast.Name) else value
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "used":
            found[path] = ast.get_source_segment(source, value.args[1])
        elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "Alt":
            for option in value.args:
                spec(option, path)
        elif isinstance(value, ast.Dict):
            for key, item in zip(value.keys, value.values):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    spec(item, f"{path}.{key.value.rstrip('?')}" if path else key.value.rstrip("?"))

    spec(named["TREE"], "")
    return found


def test_one_default_per_nemo_rl_key():
    # Issue 47: 42 defaults were written both in configs/base.yaml and in the key tree, and 11
    # differed (a local config without policy.optimizer got lr 5e-6, every composed one 1e-6).
    # Now a used key that base.yaml sets takes base.yaml's value (BASE in the tree), unless
    # nemo_keys.OWN_DEFAULTS says why not; the local engine fills in exactly that value.
    import yaml

    from gdpo_nemo.config import nemo_keys

    base = yaml.safe_load((REPO / "configs" / "base.yaml").read_text())
    written = _written_defaults()
    assert len(written) > 50
    in_base, derived = [], []
    for path, text in written.items():
        value = get_path(base, path) if _has_path(base, path) else None
        if not _has_path(base, path):
            assert path not in nemo_keys.OWN_DEFAULTS, path
            continue
        in_base.append(path)
        if text == "BASE":
            derived.append(path)
            assert path not in nemo_keys.OWN_DEFAULTS, path
            assert _leaf(nemo_keys.TREE, path).fate("local").default == value, path
        else:
            assert path in nemo_keys.OWN_DEFAULTS, f"{path}: written in the key tree ({text}) and in base.yaml ({value!r})"
    assert len(derived) == 44 and len(in_base) == 44 + len(nemo_keys.OWN_DEFAULTS)
    local, _ = load_run_config(TINY, ["~policy.optimizer"])
    assert local["policy"]["optimizer"]["kwargs"]["lr"] == get_path(base, "policy.optimizer.kwargs")["lr"] == 1e-6


_ABSENT = object()


def _has_path(config: dict, path: str) -> bool:
    return get_path(config, path, _ABSENT) is not _ABSENT


def _leaf(tree: dict, path: str):
    from gdpo_nemo.config.nemo_keys import Alt

    node = tree
    for part in path.split("."):
        options = node.options if isinstance(node, Alt) else (node,)
        node = next(o[k] for o in options if isinstance(o, dict) for k in (part, f"{part}?") if k in o)
    return node
