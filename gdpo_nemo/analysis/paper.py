"""The paper's reported numbers (``paper_figures/paper_values.yaml``) as flat records."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from gdpo_nemo.errors import UserError
from gdpo_nemo.layout import REPO_ROOT

DEFAULT_PAPER_VALUES = REPO_ROOT / "paper_figures" / "paper_values.yaml"
_LEVELS = ("model", "benchmark", "method")


def normalize_model(tag: str) -> str:
    """A model tag compared loosely: lower case, no '-instruct', letters and digits only."""
    return re.sub(r"[^a-z0-9]", "", tag.lower().replace("-instruct", ""))


@dataclass
class PaperValues:
    """Paper numbers keyed by (table, model key, benchmark or "", method, metric) -> value."""

    values: dict = field(default_factory=dict)
    models: dict = field(default_factory=dict)  # paper model key -> {"label", "aliases"}
    titles: dict = field(default_factory=dict)
    extra_aliases: dict = field(default_factory=dict)  # normalized run tag -> paper model key

    def get(self, table: str, model: str, benchmark: str, method: str, metric: str) -> float | None:
        """The paper's number for one cell (`model` is a paper model key), or None."""
        return self.values.get((table, model, benchmark, method, metric))

    def model_key(self, tag: str) -> str | None:
        """The paper model key a run-id model tag stands for, or None if the paper has none."""
        wanted = normalize_model(tag)
        if wanted in self.extra_aliases:
            return self.extra_aliases[wanted]
        for key, info in self.models.items():
            names = [key, *(info.get("aliases") or [])]
            if wanted in {normalize_model(n) for n in names}:
                return key
        return None

    def model_label(self, tag: str) -> str:
        """The paper's name for a run's model, or the tag itself."""
        key = self.model_key(tag)
        return self.models[key].get("label", key) if key else tag


def load_paper_values(path: str | Path | None = None, model_map: dict[str, str] | None = None) -> PaperValues:
    """Read and flatten the paper-values YAML; ValueError names the file and the bad entry."""
    path = Path(path) if path else DEFAULT_PAPER_VALUES
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise UserError(f"paper values {path}: {err}") from None
    if not isinstance(data, dict):
        raise UserError(f"paper values {path}: expected a mapping at the top level")
    out = PaperValues(models=data.get("models") or {})
    for table, spec in data.items():
        if not (isinstance(spec, dict) and "layout" in spec):
            continue
        out.titles[table] = spec.get("title", table)
        layout = spec["layout"]
        if not layout or layout[-1] != "metric" or any(level not in _LEVELS for level in layout[:-1]):
            raise UserError(f"paper values {path}: {table}.layout = {layout!r}; expected levels from {list(_LEVELS)} ending in 'metric'")

        def walk(node, keys, depth):
            if depth == len(layout) - 1:
                if not isinstance(node, dict):
                    raise UserError(f"paper values {path}: {table} at {'/'.join(keys)}: expected {{metric: number}}")
                for metric, value in node.items():
                    if value is None:
                        continue
                    if isinstance(value, bool) or not isinstance(value, (int, float)):
                        raise UserError(f"paper values {path}: {table} {'/'.join(keys)}/{metric} = {value!r} is not a number")
                    named = dict(zip(layout[:-1], keys))
                    out.values[(table, named.get("model", ""), named.get("benchmark", ""), named.get("method", ""), metric)] = float(value)
                return
            if not isinstance(node, dict):
                raise UserError(f"paper values {path}: {table} at {'/'.join(keys) or 'values'}: expected a mapping by {layout[depth]}")
            for key, child in node.items():
                walk(child, [*keys, str(key)], depth + 1)

        walk(spec.get("values") or {}, [], 0)
    for tag, key in (model_map or {}).items():
        if key not in out.models:
            raise UserError(f"--model-map {tag}={key}: unknown paper model {key!r}; expected one of {sorted(out.models)}")
        out.extra_aliases[normalize_model(tag)] = key
    return out
