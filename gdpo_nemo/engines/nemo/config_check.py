"""``python -m gdpo_nemo.engines.nemo.config_check FILE...``: NeMo RL's own verdict on each
run config file, as one JSON line ``{file: [problem, ...]}`` (``[]``: accepted).

Not typed by users: `gdpo_nemo.engines.nemo.validation.check_configs` runs it with NeMo RL's
Python (its venv, where this project's own dependencies may be missing) and reads the last
line of its output; that module does the checking (`check_config_file`). It is the engine's
own process entry, so the engine never starts its callers (gdpo_nemo.commands) by name.
"""

from __future__ import annotations

import json
import sys

from gdpo_nemo.engines.nemo.validation import check_config_file


def main(argv: list[str] | None = None) -> int:
    """Print ``{file: [problems]}`` for the files in `argv` (default: the command line) as
    the last line of stdout. 0 once every file is checked (a refused config is an answer,
    not a failure); without ``nemo_rl`` importable, the ImportError's traceback and 1."""
    files = sys.argv[1:] if argv is None else argv
    verdicts = {path: check_config_file(path) for path in files}
    sys.stdout.write("\n" + json.dumps(verdicts) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
