"""The embedded SmolLM2's conversion (GGUF -> plain fp32 checkpoint), with its file parsed once.

`smollm2_checkpoint` runs transformers' own GGUF loading inside `_gguf_parsed_once` (one
gguf reader per file over the file in memory, gguf's name map built once). Its weights must be
the ones transformers' unpatched loading gave: the committed regeneration run records them (its
`start_weights.base_digest`, converted at ef849d3, before the change), and the regeneration
test starts a study from a conversion of its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
COMMITTED = REPO / "paper_figures" / "regeneration" / "runs" / "regeneration__gsm8k__smollm2-135m__gdpo__seed0"


def _committed_base_digest() -> str:
    from gdpo_nemo.runs import provenance

    [digest] = {record["start_weights"]["base_digest"] for record in provenance.read(COMMITTED)}
    return digest


def test_the_conversion_gives_the_weights_the_committed_run_started_from():
    """The suite's shared cache (tests/conftest.py): converted here, or by another test of this
    run, always through `_gguf_parsed_once`."""
    from transformers import AutoModelForCausalLM

    from gdpo_nemo.engines.local import models
    from gdpo_nemo.runs import provenance

    path = models.smollm2_checkpoint(log=lambda *a: None)
    record = json.loads((path / models.CONVERSION_RECORD).read_text())
    assert record["digest"] == _committed_base_digest()
    # the digest is of the saved weights: a load of the folder gives it again
    model = AutoModelForCausalLM.from_pretrained(str(path))
    assert provenance.state_digest(model) == record["digest"]


def test_gguf_and_numpy_are_restored_after_the_conversion_and_after_a_failed_one():
    import gguf
    import numpy
    from gguf import gguf_reader

    from gdpo_nemo.engines.local import models

    before = (gguf.GGUFReader, gguf.get_tensor_name_map, gguf_reader.np)
    assert gguf_reader.np is numpy
    with models._gguf_parsed_once():
        reader = models.smollm2_gguf_path()
        assert gguf.GGUFReader(reader) is gguf.GGUFReader(str(reader))  # one reader per file
        assert gguf_reader.np is not numpy
    assert (gguf.GGUFReader, gguf.get_tensor_name_map, gguf_reader.np) == before
    with pytest.raises(RuntimeError, match="inside"), models._gguf_parsed_once():
        raise RuntimeError("a conversion that fails inside")
    assert (gguf.GGUFReader, gguf.get_tensor_name_map, gguf_reader.np) == before
