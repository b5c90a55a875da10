"""Where the checkout's folders are: the one place the package finds its repository root.

gdpo_nemo runs from a checkout (an editable install): configs/, experiments/, slurm/ and the
NeMo RL jobs' PYTHONPATH are beside the package. Imports nothing of the package.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["REPO_ROOT"]

# The folder that holds gdpo_nemo/, configs/, experiments/, slurm/.
REPO_ROOT = Path(__file__).resolve().parents[1]
