#!/usr/bin/env bash
# NeMo RL's own Python code for the CPU test tier (tests/nemo_tier/, docs/nemo_rl.md section 6).
# NeMo RL is not on PyPI: its source at the pinned commit comes from the archive in
# ../shared/vendor (NEMO_RL_ARCHIVE), unpacked into .nemo-rl/ (ignored; never committed), and
# .venv-nemo gets NeMo RL's dependencies at the exact versions of requirements/nemo-py3.11.txt
# (NeMo RL's uv.lock where it has a wheel for Python 3.11), NeMo RL on its path, and this package
# (editable). NeMo RL asks for Python >= 3.13.14; on 3.11 one typing shim (below) is all it
# needs (../shared/vendor/README.md). Idempotent: a re-run with nothing to do is instant.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv_lib.sh
ARCHIVE=${NEMO_RL_ARCHIVE:-../shared/vendor/nemo-rl-7ea279ab.tar.gz}
if [ ! -f "$ARCHIVE" ]; then
  echo "setup_nemo: NeMo RL source archive $ARCHIVE not found (set NEMO_RL_ARCHIVE); the tests/nemo_tier tier will be skipped" >&2
  exit 0
fi
PYTHON=${NEMO_PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
"$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || {
  echo "setup_nemo: needs Python 3.11 (requirements/nemo-py3.11.txt); set NEMO_PYTHON" >&2; exit 1; }

archive_sum=$(sha256sum "$ARCHIVE" | cut -d' ' -f1)
if [ "$(cat .nemo-rl/.archive-sha256 2>/dev/null)" != "$archive_sum" ]; then
  echo "setup_nemo: unpacking $ARCHIVE into .nemo-rl/"
  rm -rf .nemo-rl && mkdir -p .nemo-rl
  tar -xzf "$ARCHIVE" -C .nemo-rl
  [ -f .nemo-rl/nemo-rl/nemo_rl/__init__.py ] || { echo "setup_nemo: $ARCHIVE holds no nemo-rl/nemo_rl/" >&2; exit 1; }
  echo "$archive_sum" > .nemo-rl/.archive-sha256
fi

# NeMo RL's v0.7.0 release (what its release containers hold), for tests/nemo_release: its
# source only, beside the pin's; it runs in .venv-nemo (the same dependency pins fit it) with
# its folder first on PYTHONPATH.
RELEASE_ARCHIVE=${NEMO_RL_RELEASE_ARCHIVE:-../shared/vendor/nemo-rl-v0.7.0.tar.gz}
if [ -f "$RELEASE_ARCHIVE" ]; then
  release_sum=$(sha256sum "$RELEASE_ARCHIVE" | cut -d' ' -f1)
  if [ "$(cat .nemo-rl-release/.archive-sha256 2>/dev/null)" != "$release_sum" ]; then
    echo "setup_nemo: unpacking $RELEASE_ARCHIVE into .nemo-rl-release/"
    rm -rf .nemo-rl-release && mkdir -p .nemo-rl-release
    tar -xzf "$RELEASE_ARCHIVE" -C .nemo-rl-release
    found=$(ls -d .nemo-rl-release/*/nemo_rl 2>/dev/null | head -1)
    [ -n "$found" ] || { echo "setup_nemo: $RELEASE_ARCHIVE holds no <folder>/nemo_rl/" >&2; exit 1; }
    ln -sfn "$(basename "$(dirname "$found")")" .nemo-rl-release/source
    echo "$release_sum" > .nemo-rl-release/.archive-sha256
  fi
else
  echo "setup_nemo: NeMo RL release archive $RELEASE_ARCHIVE not found (set NEMO_RL_RELEASE_ARCHIVE); tests/nemo_release will be skipped" >&2
fi

make_venv setup_nemo "$PYTHON" .venv-nemo
lock=requirements/nemo-py3.11.txt
nodeps=requirements/nemo-nodeps-py3.11.txt
want=$( (cat "$lock" "$nodeps" pyproject.toml; echo "$archive_sum"; sed -n '/^# shim:/,$p' "$0") | sha256sum | cut -d' ' -f1)
if needs_install .venv-nemo "$want"; then
  echo "setup_nemo: installing the pinned versions of $lock"
  .venv-nemo/bin/pip install -q -r "$lock"
  # Packages whose declared pins do not fit (nemo_automodel for the v2 worker, the embedded model): see the file.
  .venv-nemo/bin/pip install -q --no-deps -r "$nodeps"
  .venv-nemo/bin/pip install -q --no-deps -e .
  site=$(.venv-nemo/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  # NeMo RL's checkout on the path, as `uv run` in a checkout has it (examples/ beside nemo_rl/).
  echo "$PWD/.nemo-rl/nemo-rl" > "$site/nemo_rl_checkout.pth"
  # shim: pydantic refuses typing.TypedDict (NeMo RL's MasterConfig) before Python 3.12.
  cat > "$site/sitecustomize.py" <<'EOF'
"""Written by gdpo_nemo's scripts/setup_nemo.sh: NeMo RL (Python >= 3.13) on Python 3.11.

pydantic validates TypedDict fields only when they come from typing_extensions on
Python < 3.12, and NeMo RL's config classes use typing.TypedDict; making the one the other
before anything imports NeMo RL is all that 3.11 needs.
"""
import sys

if sys.version_info < (3, 12):
    import typing

    import typing_extensions

    typing.TypedDict = typing_extensions.TypedDict
EOF
  mark_installed .venv-nemo "$want"
fi
# Bytecode for NeMo RL's source trees, which no pip install compiled: where Python does not
# write bytecode (PYTHONDONTWRITEBYTECODE=1, as on this project's CI machines) every process
# that imports NeMo RL (each run's driver, policy worker and environment actors) would compile
# its ~300 modules again. compileall skips what is up to date (a re-run costs ~1 s).
trees=(.nemo-rl/nemo-rl/nemo_rl)
[ -d .nemo-rl-release/source/nemo_rl ] && trees+=(.nemo-rl-release/source/nemo_rl)
.venv-nemo/bin/python -m compileall -q -j 0 "${trees[@]}" >/dev/null
echo "setup_nemo: NeMo RL source of $(basename "$ARCHIVE") in .nemo-rl/, .venv-nemo ready"
