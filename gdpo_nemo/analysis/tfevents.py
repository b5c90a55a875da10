"""Scalars from TensorBoard event files (NeMo RL's ``tensorboard/`` logs), read by tensorboard.

The file is read by tensorboard's own loader (``EventFileLoader``), which needs no
TensorFlow: it frames the TFRecord stream, checks each record's CRC, stops quietly at a
truncated last record (a run killed mid-write) and migrates old summaries to the current
form, so ``simple_value`` scalars (what torch's ``SummaryWriter.add_scalar`` writes, and
NeMo RL's TensorboardLogger calls it) and one-element ``tensor`` scalars (newer writers)
arrive alike as a tensor. A value counts as a scalar when its tensor holds exactly one
number; images, histograms, text and hparams summaries are skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from gdpo_nemo.errors import UserError


def read_scalars(path: str | Path) -> Iterator[tuple[int, str, float]]:
    """Every scalar of one event file as (step, tag, value), in file order.

    Raises ValueError naming the file when a record is not an ``Event`` protocol buffer
    (not an event file); a truncated last record ends the file without an error."""
    from google.protobuf.message import DecodeError
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    try:
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if not value.HasField("tensor"):
                    continue
                try:
                    array = tensor_util.make_ndarray(value.tensor)
                except (TypeError, ValueError):  # a dtype numpy has no match for: not a number
                    continue
                if array.size == 1 and (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
                    yield event.step, value.tag, float(array.reshape(-1)[0])
    except DecodeError as err:
        raise UserError(f"{path}: not a TensorBoard event file ({err})") from None
