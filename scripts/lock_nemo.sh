#!/usr/bin/env bash
# Write requirements/nemo-py3.11.txt, the exact versions scripts/setup_nemo.sh installs into
# .venv-nemo (the NeMo RL test tier, docs/nemo_rl.md section 6).
#
# What goes in: the packages NeMo RL's GRPO path imports on a CPU (nemo_rl.algorithms.grpo,
# examples/run_grpo.py, environments, data, logger; not vLLM, Megatron, NIXL or CUDA
# packages), this package's own runtime dependencies, and pytest. Their versions: NeMo RL's
# uv.lock at the pinned commit (read from the source archive) wherever that version exists for
# Python 3.11; the departures are listed in NEMO_LOCK_DEPARTURES below and in the lock's
# header, with the reason. Resolved in a throwaway venv, then frozen.
#
#   usage: bash scripts/lock_nemo.sh            (needs python3.11 and the archive)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/versions.sh
ARCHIVE=${NEMO_RL_ARCHIVE:-../shared/vendor/nemo-rl-7ea279ab.tar.gz}
PYTHON=${NEMO_PYTHON:-python3.11}

# NeMo RL's direct dependencies that its CPU import path needs (pyproject.toml at the pin),
# plus what they leave out but import (the vendor README's list), plus ours and pytest.
NEMO_PACKAGES=(
  "ray[default]" wandb numpy datasets rich math-verify accelerate tensorboard omegaconf torchdata
  nvidia-ml-py hydra-core tiktoken sentencepiece blobfile matplotlib plotly sympy pillow
  transformers num2words mlflow-skinny swanlab pyzmq pybase64 zstandard tensordict colored
  pydantic fastapi uvicorn prometheus-client debugpy nvtx soundfile scipy
)
OUR_PACKAGES=(pyyaml pandas pyarrow tqdm gguf safetensors tokenizers numba pytest pytest-timeout)
# Where the lock leaves NeMo RL's uv.lock, and why (one "name==version  # reason" a line).
NEMO_LOCK_DEPARTURES=(
  "torch==$TORCH_VERSION  # uv.lock: 2.11.0+cu130; PyPI's 2.11.0 is the CUDA build (GBs of nvidia-* wheels), so the dev/CI CPU wheel"
  "numpy==2.4.6  # uv.lock: 2.5.1, which has no Python 3.11 release"
  "scipy==1.17.1  # uv.lock: 1.18.0, which has no Python 3.11 release"
)

scratch=$(mktemp -d /tmp/gdpo-lock-nemo.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
tar -xzf "$ARCHIVE" -C "$scratch" nemo-rl/uv.lock
# uv.lock's single-version packages as constraints (CUDA-only families left out: no CPU use).
"$PYTHON" - "$scratch/nemo-rl/uv.lock" > "$scratch/constraints.txt" <<'EOF'
import re, sys, tomllib
lock = tomllib.load(open(sys.argv[1], "rb"))
versions = {}
for package in lock["package"]:
    versions.setdefault(package["name"], set()).add(package.get("version"))
# several versions (per NeMo RL extra): take the one its vllm extra resolves to
chosen = {"transformers": "5.8.1", "hydra-core": "1.3.4", "fastapi": "0.139.2", "tzdata": "2026.3"}
skip = re.compile(r"^(torch|torchvision|torchaudio|triton|nvidia-(?!ml-py)|cuda-|nccl|vllm|flash|deep|transformer-engine|megatron|nixl|mooncake|tilelang|xformers|nemo-|transferqueue|cupy|apex|causal-conv|mamba|nv-|tensorrt|sglang|torchao|torch-)", re.I)
for name, found in sorted(versions.items()):
    found.discard(None)
    if skip.match(name):
        continue
    if name in chosen:
        print(f"{name}=={chosen[name]}")
    elif len(found) == 1:
        print(f"{name}=={next(iter(found))}")
EOF
# The departures replace uv.lock's pins.
while read -r pin; do
  sed -i "/^${pin%%==*}==/d" "$scratch/constraints.txt"
  echo "$pin" >> "$scratch/constraints.txt"
done < <(printf '%s\n' "${NEMO_LOCK_DEPARTURES[@]%%  #*}")
"$PYTHON" -m venv "$scratch/venv"
"$scratch/venv/bin/pip" install -q "torch==$TORCH_VERSION"
"$scratch/venv/bin/pip" install -q -c "$scratch/constraints.txt" "${NEMO_PACKAGES[@]}" "${OUR_PACKAGES[@]}"
{
  echo "# .venv-nemo for Python 3.11 (NeMo RL tier): written by scripts/lock_nemo.sh on $(date -u +%Y-%m-%d)."
  echo "# Versions: NeMo RL's uv.lock at 7ea279ab where it has them for Python 3.11, except:"
  printf '#   %s\n' "${NEMO_LOCK_DEPARTURES[@]}"
  echo "# scripts/setup_nemo.sh installs it. Do not edit by hand."
  "$scratch/venv/bin/pip" freeze --exclude-editable | sed -E 's/^(torch==[^+]+)\+.*/\1/'
} > requirements/nemo-py3.11.txt
echo "lock_nemo: wrote requirements/nemo-py3.11.txt ($(grep -vc '^#' requirements/nemo-py3.11.txt) packages)"
