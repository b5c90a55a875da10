"""`gdpo-nemo config`: show a composed run config, list the paper's experiments.

    gdpo-nemo config show task=toolcall model=qwen2.5-1.5b-instruct algo=gdpo [cluster=nemo_1n8g]
                          [seed=3] [experiment=toolcall] [grpo.max_num_steps=10 +key=value ...]
    gdpo-nemo config list               # experiments and the options of each config group
    gdpo-nemo config list toolcall      # the runs of one experiment

`show` prints the resolved YAML (NeMo RL keys + gdpo block) after validation (our copy of
NeMo RL's schema, then, for a nemo-engine config where NeMo RL can be imported, NeMo RL's own
loader and MasterConfig: gdpo_nemo.engines.nemo.validation); any
`key=value` that is not task/model/algo/cluster/seed/experiment is a Hydra override. The
YAML is what `python -m gdpo_nemo.commands.nemo_run --config FILE` and `gdpo-nemo train
--config FILE` take.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gdpo_nemo.errors import UserError
from gdpo_nemo.commands.args import key_value

CHOICE_KEYS = ("task", "model", "algo", "cluster", "seed", "experiment")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `config` subcommand's arguments (no heavy imports)."""
    actions = parser.add_subparsers(dest="config_action", metavar="ACTION")
    show = actions.add_parser(
        "show",
        help="print the resolved run config of task=... model=... algo=...",
        description="Compose, validate and print one run config as YAML.",
    )
    show.add_argument(
        "items",
        nargs="*",
        metavar="KEY=VALUE",
        help="task=, model=, algo= (required), cluster= (default local), seed= (default 42),"
        " experiment= (default adhoc), then Hydra overrides such as grpo.max_num_steps=10",
    )
    show.add_argument("--output", "-o", metavar="FILE", help="write the YAML to FILE instead of stdout")
    show.add_argument(
        "--nemo-rl-python",
        metavar="PYTHON",
        help="also check the config with NeMo RL's own loader and MasterConfig, run by this Python of NeMo RL's"
        " venv (default: $GDPO_NEMO_RL_PYTHON, or this Python when it imports nemo_rl; otherwise not run)",
    )
    listing = actions.add_parser(
        "list",
        help="list the paper's experiments (or the runs of one)",
        description="List experiments/*.yaml with their descriptions and the config group options,"
        " or, given an experiment name, its runs.",
    )
    listing.add_argument("experiment", nargs="?", help="an experiment name: list its runs")


def _parse_show_items(items: list[str]) -> tuple[dict, list[str]]:
    """`config show` items -> ({task/model/algo/...: value}, [Hydra overrides]); ValueError
    on an item that is not KEY=VALUE or when task=, model= or algo= is missing."""
    choices: dict = {}
    overrides: list[str] = []
    for item in items:
        if item.startswith("~"):  # Hydra's delete (`~key`, `~key=value`): the same grammar as `train`
            overrides.append(item)
            continue
        # Hydra overrides may set an empty value (`key=`), so one is no error here.
        key, value = key_value(item, flag="config show", example="task=toolcall or grpo.max_num_steps=10",
                               empty_value=True)
        if key in CHOICE_KEYS:
            choices[key] = value
        else:
            overrides.append(item)
    missing = [key for key in ("task", "model", "algo") if key not in choices]
    if missing:
        from gdpo_nemo.config import group_options

        hints = "; ".join(f"{key}= one of {group_options(key)}" for key in missing)
        raise UserError(f"config show needs {', '.join(k + '=' for k in missing)}: {hints}")
    if "seed" in choices:
        if not choices["seed"].isdigit():
            raise UserError(f"seed={choices['seed']!r} must be a non-negative int")
        choices["seed"] = int(choices["seed"])
    return choices, overrides


def _show(args: argparse.Namespace) -> int:
    """Compose, validate (NeMo RL's own check too for a nemo config where it runs), print or write."""
    from gdpo_nemo import config as run_config

    choices, overrides = _parse_show_items(args.items)
    config = run_config.compose(
        choices["task"],
        choices["model"],
        choices["algo"],
        cluster=choices.get("cluster", "local"),
        seed=choices.get("seed", 42),
        experiment=choices.get("experiment", "adhoc"),
        overrides=overrides,
    )
    from gdpo_nemo.config.engines import ENGINES

    check = ENGINES[config["gdpo"]["engine"]].native_check(getattr(args, "nemo_rl_python", None), name_each=False)
    if check is not None:
        check.run({"config": config})  # the engine's own check (NeMo RL's MasterConfig): a ConfigError names the key
    text = run_config.dump(config)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)  # a new folder is made, as --out's are
        with open(args.output, "w") as handle:
            handle.write(text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _list(args: argparse.Namespace) -> int:
    """Print the experiments and config group options, or one experiment's runs."""
    from gdpo_nemo import config as run_config

    if args.experiment:
        for spec in run_config.load_experiment(args.experiment):
            extra = f"  [{' '.join(spec.overrides)}]" if spec.overrides and args.experiment != "smoke" else ""
            print(f"{spec.run_id.name}  task={spec.task} model={spec.model} algo={spec.algo} cluster={spec.cluster}{extra}")
        return 0
    experiments = run_config.list_experiments()
    width = max((len(name) for name in experiments), default=0)
    print("experiments (gdpo-nemo config list NAME shows the runs):")
    for name, description in experiments.items():
        print(f"  {name:<{width}}  {description}")
    print("config groups (configs/):")
    for group in run_config.GROUPS:
        print(f"  {group}: {', '.join(run_config.group_options(group))}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run `config show` or `config list`; bad input raises ValueError (exit code 2)."""
    action = getattr(args, "config_action", None)
    if action == "show":
        return _show(args)
    if action == "list":
        return _list(args)
    raise UserError("config needs an action: show or list (gdpo-nemo config --help)")
