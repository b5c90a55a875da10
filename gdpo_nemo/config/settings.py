"""The run config's ``gdpo:`` block as typed settings: every key with its default, meaning
and source, written once.

This module is where the block's defaults live. The composer's ``configs/base.yaml`` takes
them from here (`gdpo_defaults`, stored as Hydra's ``gdpo_settings`` config), the local
engine fills missing keys from here, the NeMo RL hook builds its estimator from here
(`EstimatorSettings`), and validation checks each key with the check written beside it.

A ``null`` numeric option means "the preset's": ``std_ddof``, ``eps`` and
``single_sample_groups`` take the value of ``gdpo.preset`` (``gdpo_nemo.estimators.PRESETS``:
nemo_rl std_ddof 1, eps 1e-6; trl 1, 1e-4; verl 1, 1e-6), so ``preset: trl`` alone gives
TRL's numerics.

Nothing here imports torch until an estimator name is checked: the estimator registry
(gdpo_nemo.estimators.ESTIMATORS) is the one list of estimators and is read live.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields, make_dataclass
from typing import Any, Mapping

from gdpo_nemo.checks import Check, boolean, integer, mapping, number, one_of, text
from gdpo_nemo.config.engines import ENGINES as _ENGINE_REGISTRY
from gdpo_nemo.tasks import TASKS as _REGISTERED_TASKS
from gdpo_nemo.estimators.options import (
    BATCH_NORMS,
    PRESETS as _PRESET_NUMERICS,
    SCALE_REWARDS,
    SINGLE_SAMPLE_GROUPS,
    AdvantageOptions,
)

__all__ = [
    "BATCH_NORMS",
    "ENGINES",
    "PRESETS",
    "SCALE_REWARDS",
    "SINGLE_SAMPLE_GROUPS",
    "TASKS",
    "EstimatorSettings",
    "GdpoSettings",
    "LocalSettings",
    "WarmStartSettings",
    "describe",
    "estimator_check",
    "estimator_names",
    "estimator_registry",
    "gdpo_defaults",
    "multi_component_estimators",
    "setting_table",
]

# The estimators' own option values (gdpo_nemo.estimators.options, torch-free).
PRESETS = tuple(_PRESET_NUMERICS)
# The registries themselves, read live (a task or engine registered after import is in them):
TASKS = _REGISTERED_TASKS  # gdpo_nemo.tasks' registry {name: task class}
ENGINES = _ENGINE_REGISTRY  # gdpo_nemo.config.engines {name: Engine}
COMPUTED_BY = ("nemo_rl", "gdpo_nemo")


def estimator_registry():
    """{name: EstimatorInfo} of gdpo_nemo.estimators' registry, the one list of estimators
    (imported on first use; torch-free: gdpo_nemo.estimators.builtin)."""
    from gdpo_nemo.estimators import ESTIMATORS  # with the built-ins registered

    return ESTIMATORS


def estimator_names() -> tuple[str, ...]:
    """The estimator names gdpo.estimator accepts: the registry's, NeMo RL's own estimators
    first (in registration order), then those only gdpo_nemo's hook computes."""
    registry = estimator_registry()
    return tuple(sorted(registry, key=lambda name: registry[name].nemo_rl is None))


def multi_component_estimators() -> tuple[str, ...]:
    """The estimators that normalize each reward component separately (need >= 2)."""
    return tuple(name for name, info in estimator_registry().items() if info.multi_component)


def task_check(value) -> str | None:
    """None for a registered task name (gdpo_nemo.tasks.TASKS, read at each check, so a task
    registered later is accepted), else the accepted names."""
    return None if isinstance(value, str) and value in _REGISTERED_TASKS else f"one of {list(_REGISTERED_TASKS)}"


def engine_check(value) -> str | None:
    """None for a registered engine name (read at each check), else the accepted names."""
    return None if isinstance(value, str) and value in _ENGINE_REGISTRY else f"one of {list(_ENGINE_REGISTRY)}"


def estimator_check(value) -> str | None:
    """None for a registered estimator name, else the accepted names."""
    names = estimator_names()
    return None if isinstance(value, str) and value in names else f"one of {list(names)}"


def _components_check(value) -> str | None:
    if value is None or (isinstance(value, list) and value and all(isinstance(n, str) and n for n in value)):
        return None
    return "a non-empty list of component names or null"


def setting(default: Any, meaning: str, source: str, check: Check) -> Any:
    """A dataclass field carrying its documentation (`meaning`, `source`) and its `check`."""
    metadata = {"meaning": meaning, "source": source, "check": check}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def section(cls, meaning: str, source: str) -> Any:
    """A dataclass field holding a nested settings class (filled with its defaults)."""
    return field(default_factory=cls, metadata={"meaning": meaning, "source": source, "section": cls})


@dataclass(frozen=True)
class WarmStartSettings:
    """``gdpo.local.warm_start``: a short supervised fine-tune on the task's reference
    answers before RL, so a tiny model produces the answer format at all (local engine)."""

    enabled: bool = setting(False, "run the warm start before the first RL step", "ours", boolean)
    steps: int = setting(10, "optimizer steps of the warm start", "ours", integer(0))
    lr: float = setting(1e-5, "learning rate of the warm start (AdamW)", "ours", number(0.0))
    batch_size: int = setting(8, "examples per warm-start step", "ours", integer(1))
    examples: int = setting(256, "reference examples drawn from the task", "ours", integer(1))
    seed: int | None = setting(
        None, "seed of the example draw; null: grpo.seed + 1000003 (apart from the RL draw)", "ours", integer(0, nullable=True)
    )


@dataclass(frozen=True)
class LocalSettings:
    """``gdpo.local``: what only the local engine reads (one process, CPU or one GPU)."""

    device: str = setting("cpu", "where the engine computes; auto: cuda when torch sees one", "ours", one_of("cpu", "cuda", "auto"))
    dtype: str = setting("float32", "dtype of the weights", "ours", one_of("float32", "bfloat16"))
    autocast: str | None = setting(None, "mixed precision of the forward passes (null: none)", "ours", one_of(None, "bfloat16"))
    deterministic: bool = setting(True, "CUDA: reproducible kernels (the CPU always is)", "ours", boolean)
    num_threads: int | None = setting(None, "torch CPU threads (null: torch's default)", "ours", integer(1, nullable=True))
    train_size: int | None = setting(
        None, "training prompts used, the first N (null: all: the task's offline set, or the data file)", "ours", integer(1, nullable=True)
    )
    data_source: str = setting("offline", "offline: the task's generated set; file: data.*.data_path", "ours", one_of("offline", "file"))
    task_options: dict = setting({}, "keyword arguments of the task's constructor", "ours", mapping)
    progress: bool = setting(True, "a progress bar on stderr", "ours", boolean)
    ignore_eos: bool = setting(False, "every completion runs to max_new_tokens (vLLM's ignore_eos; benchmarks)", "vLLM", boolean)
    warm_start: WarmStartSettings = section(WarmStartSettings, "supervised warm start before RL", "ours")


def _or_null(check: Check) -> Check:
    """`check`, also accepting null (a gdpo key whose null means "the preset's value")."""

    def nullable(value):
        if value is None:
            return None
        accepted = check(value)
        return None if accepted is None else f"{accepted} or null"

    return nullable


def _option_fields() -> list[tuple[str, Any, Any]]:
    """The gdpo block's estimator-option keys, one per AdvantageOptions field, in its order:
    default, meaning, source and check are the field's own (`estimators.options.option`)."""
    out = []
    for item in fields(AdvantageOptions):
        meta = item.metadata
        check = meta["check"]
        if meta["config_default"] is None and check(None) is not None:
            check = _or_null(check)
        out.append((item.name, Any, setting(meta["config_default"], meta["meaning"], meta["source"], check)))
    return out


@dataclass(frozen=True)
class _RunSettings:
    experiment: str = setting("local", "first part of the run id; the composer writes the experiment's name", "ours", text())
    task: str = setting("gsm8k", "the task: data, prompt and reward set (gdpo_nemo.tasks)", "paper sec. 3", task_check)
    model_tag: str = setting("model", "the model's short name in the run id", "ours", text())
    algo: str = setting("gdpo", "the algorithm's name in the run id (e.g. gdpo_wlen0.5)", "ours", text())
    estimator: str = setting(
        "gdpo", "advantage estimator, a name of gdpo_nemo.estimators' registry", "paper Eqs. 1-6", estimator_check
    )
    reward_components: list | None = setting(
        None, "reward components, by name (null: the task's full set)", "paper sec. 3", _components_check
    )
    batch_norm: str = setting(
        "sample", "GDPO's batch norm per sample, or per token (verl's masked_whiten)", "paper Eq. 6 / verl", one_of(*BATCH_NORMS)
    )


# The estimator options, declared in gdpo_nemo.estimators.options (AdvantageOptions) alone.
_WithOptions = make_dataclass("_WithOptions", _option_fields(), bases=(_RunSettings,), frozen=True)


@dataclass(frozen=True)
class GdpoSettings(_WithOptions):
    """The ``gdpo:`` block of a run config (docs/interfaces.md, "Run config").

    Identity keys (experiment, task, model_tag, algo) name the run (gdpo_nemo.runs.run_id); the
    composer sets them from the chosen config groups, and the defaults below serve a
    hand-written local config. Then the estimator, the reward components, GDPO's batch-norm
    kind, and one key per field of ``gdpo_nemo.estimators.AdvantageOptions`` (the arguments of
    ``compute_advantages`` of the same names), derived from that one declaration.
    """

    length_limit: float | None = setting(
        None, "token limit of the length reward (math, code; null: none)", "paper sec. 3.2", number(0.0, nullable=True, above=True)
    )
    conditioned_length: bool = setting(
        False, "length reward only when the answer is correct", "paper sec. 3.2 (conditioned)", boolean
    )
    engine: str = setting("local", "which engine runs the config: local or nemo (NeMo RL)", "ours", engine_check)
    computed_by: str | None = setting(
        None, "on NeMo RL, whose estimator computes the advantages: nemo_rl (its own) or gdpo_nemo (the plugin's"
        " hook); written by the composer (null: decided when the run starts)", "ours", one_of(*COMPUTED_BY, None),
    )
    local: LocalSettings = section(LocalSettings, "local-engine-only settings", "ours")


def setting_table(cls) -> dict:
    """{name: (default, check)} of a settings class, a nested dict for each section: the
    walk the composer's defaults and the key tree's gdpo block (config.nemo_keys) are built from."""
    out = {}
    for item in fields(cls):
        nested = item.metadata.get("section")
        if nested is not None:
            out[item.name] = setting_table(nested)
        else:
            default = item.default if item.default is not MISSING else item.default_factory()
            out[item.name] = (default, item.metadata["check"])
    return out


def _defaults_of(table: dict) -> dict:
    return {name: _defaults_of(spec) if isinstance(spec, dict) else spec[0] for name, spec in table.items()}


def gdpo_defaults(*, with_local: bool = True) -> dict:
    """The gdpo block's defaults as a plain dict (`with_local=False`: `local` left empty, as
    the composer writes it: the local engine fills it)."""
    out = _defaults_of(setting_table(GdpoSettings))
    if not with_local:
        out["local"] = {}
    return out


def describe(cls=GdpoSettings, prefix: str = "gdpo") -> list[tuple[str, Any, str, str]]:
    """(key path, default, meaning, source) of every setting of `cls`, nested sections
    flattened: the table docs/interfaces.md shows."""
    rows = []
    for item in fields(cls):
        path = f"{prefix}.{item.name}"
        nested = item.metadata.get("section")
        if nested is not None:
            rows.extend(describe(nested, path))
        else:
            default = item.default if item.default is not MISSING else item.default_factory()
            rows.append((path, default, item.metadata["meaning"], item.metadata["source"]))
    return rows


@dataclass(frozen=True)
class EstimatorSettings:
    """What an engine's advantage step reads from a gdpo block: the estimator, the reward
    components, GDPO's batch-norm kind (a token mask or not) and the `AdvantageOptions`."""

    estimator: str
    components: tuple[str, ...]
    options: AdvantageOptions = AdvantageOptions.resolve(GdpoSettings.preset)  # a gdpo block's defaults
    batch_norm: str = "sample"

    @classmethod
    def from_gdpo(cls, gdpo: Mapping, *, nemo_engine: bool = False) -> "EstimatorSettings":
        """Settings from a (validated) gdpo block; keys it lacks take their defaults.
        nemo_engine: see `AdvantageOptions.from_gdpo`."""
        return cls(
            estimator=gdpo["estimator"], components=tuple(gdpo["reward_components"] or ()),
            options=AdvantageOptions.from_gdpo(gdpo, nemo_engine=nemo_engine),
            batch_norm=gdpo.get("batch_norm", "sample"),
        )
