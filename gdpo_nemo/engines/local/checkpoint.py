"""Checkpoints of the local engine: `<run_dir>/checkpoints/step_<N>/`.

A checkpoint holds everything the next step depends on, so a resumed run continues on the
same trajectory as one that never stopped:

    model.safetensors   policy weights
    state.pt            optimizer and LR-scheduler state, RNG states (the sampling
                        generator, torch's global generator, Python's `random`), the data
                        position (epoch, offset), the step number

It is written to `step_<N>.tmp` and renamed when complete: a run killed while saving
leaves no half checkpoint that `latest_checkpoint` could pick up.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import torch

from gdpo_nemo.errors import UserError
from gdpo_nemo.runs import rundir


def checkpoint_root(run_dir) -> Path:
    return rundir.checkpoints_dir(run_dir)


def list_checkpoints(run_dir) -> list[tuple[int, Path]]:
    """Complete checkpoints of a run as (step, path), oldest first."""
    return [(step, path) for step, path in rundir.checkpoint_steps(checkpoint_root(run_dir))
            if (path / "state.pt").is_file() and (path / "model.safetensors").is_file()]


def latest_checkpoint(run_dir) -> tuple[int, Path] | None:
    checkpoints = list_checkpoints(run_dir)
    return checkpoints[-1] if checkpoints else None


def save_checkpoint(run_dir, step: int, *, model, optimizer, scheduler, generator: torch.Generator,
                    data_position: dict, keep: int | None = None, metrics: dict | None = None) -> Path:
    """Write the checkpoint of `step` atomically; keep only the newest `keep` (None: all).

    `metrics`: the step's metrics record. The run logs a step after checkpointing it, so a
    kill between the two would otherwise lose that record: a resume from this checkpoint
    does not run the step again, and logs the saved record instead (trainer)."""
    from safetensors.torch import save_file

    root = checkpoint_root(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step}"
    tmp = root / f"step_{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    # Tied weights share storage; safetensors wants each tensor once, contiguous.
    state = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    save_file(state, str(tmp / "model.safetensors"))
    torch.save(
        {
            "step": step,
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "generator": generator.get_state(),
            "generator_device": generator.device.type,
            "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(),
            "data_position": dict(data_position),
            "metrics": dict(metrics) if metrics is not None else None,
        },
        tmp / "state.pt",
    )
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    if keep is not None:
        for _, old in list_checkpoints(run_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def load_weights(path, model) -> None:
    """Load a checkpoint's `model.safetensors` into `model` (a tied LM head may be absent);
    ValueError naming the checkpoint when the keys do not fit."""
    from safetensors.torch import load_file

    path = Path(path)
    weights = load_file(str(path / "model.safetensors"))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if not k.endswith("lm_head.weight")]
    if missing or unexpected:
        raise UserError(f"checkpoint {path} does not fit the model: missing {missing[:5]}, unexpected {unexpected[:5]}")


def load_checkpoint(path, *, model, optimizer, scheduler, generator: torch.Generator) -> dict:
    """Restore a checkpoint into the given objects; returns `{"step", "data_position",
    "metrics"}` (`metrics`: the step's record, None in checkpoints written without it).
    The optimizer state is read to the CPU and moved to its parameters' device by torch.
    ValueError when the checkpoint was sampled on another kind of device than `generator`'s."""
    path = Path(path)
    state = torch.load(path / "state.pt", weights_only=False, map_location="cpu")
    sampled_on = state.get("generator_device", "cpu")
    if sampled_on != generator.device.type:
        raise UserError(f"checkpoint {path} was sampled on {sampled_on} and this run's gdpo.local.device resolves to"
                         f" {generator.device.type}: resume on a {sampled_on} device (the sampling RNG differs by device)")
    load_weights(path, model)
    optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None and state["scheduler"] is not None:
        scheduler.load_state_dict(state["scheduler"])
    generator.set_state(state["generator"])
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["python_rng"])
    return {"step": state["step"], "data_position": state["data_position"], "metrics": state.get("metrics")}
