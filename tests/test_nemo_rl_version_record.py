"""What provenance records of NeMo RL's version when it runs from a source tree.

NeMo RL appends "+<short sha>" of whatever git repository holds its source to __version__.
A source that is a repository of its own (a checkout on PYTHONPATH, a container's
/opt/nemo-rl) names NeMo RL's commit; an archive unpacked inside another checkout (this
project's .nemo-rl/) would name that checkout's commit, which is not NeMo RL's. Checked with
real git repositories and a stand-in nemo_rl package that versions itself the way NeMo RL does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

STAND_IN = textwrap.dedent('''
    import os, subprocess
    __version__ = "0.6.0"
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.abspath(__file__)))
    if done.returncode == 0:
        __version__ += "+" + done.stdout.strip()
''')


def _git(folder: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin", "HOME": str(folder)}
    return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, check=True, env=env).stdout.strip()


def _recorded(source: Path) -> dict:
    code = "import json; from gdpo_nemo.engines.nemo.run import nemo_rl_libraries; print(json.dumps(nemo_rl_libraries()))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={"PYTHONPATH": f"{source}:{REPO}", "PATH": "/usr/bin:/bin", "HOME": str(source)})
    return json.loads(done.stdout.strip().splitlines()[-1])


def _source(folder: Path) -> Path:
    (folder / "nemo_rl").mkdir(parents=True)
    (folder / "nemo_rl" / "__init__.py").write_text(STAND_IN)
    return folder


def test_a_source_that_is_its_own_repository_is_recorded_with_its_commit(tmp_path):
    source = _source(tmp_path / "nemo-rl")
    _git(source, "init", "-q")
    _git(source, "add", "-A")
    _git(source, "commit", "-qm", "nemo rl")
    libraries = _recorded(source)
    assert libraries["nemo_rl"] == f"0.6.0+{_git(source, 'rev-parse', '--short', 'HEAD')}"
    assert libraries["nemo_rl_commit"] == _git(source, "rev-parse", "HEAD")


def test_a_source_unpacked_inside_another_checkout_gets_neither_its_sha_nor_its_commit(tmp_path):
    checkout = tmp_path / "project"
    source = _source(checkout / ".nemo-rl" / "nemo-rl")
    (checkout / "README").write_text("another project\n")
    _git(checkout, "init", "-q")
    _git(checkout, "add", "README")
    _git(checkout, "commit", "-qm", "project")
    libraries = _recorded(source)
    assert libraries["nemo_rl"] == "0.6.0" and "nemo_rl_commit" not in libraries
