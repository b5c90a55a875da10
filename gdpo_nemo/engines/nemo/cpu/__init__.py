"""NeMo RL's own training loop (``grpo_train``) on a CPU: the command users run before a GPU
queue (``gdpo-nemo nemo-smoke``) and the NeMo RL tier's end-to-end tests.

One module per concern (docs/nemo_rl.md, section 7):

- `cluster`: a private local Ray (``RAY_ADDRESS`` pinned to it) and NeMo RL's
  ``RayVirtualCluster`` without GPUs;
- `worker`: NeMo RL's v2 DTensor policy worker with HF generation (imported only in the
  worker's Ray process);
- `generation`: NeMo RL's ``GenerationInterface`` over the policy, and a weight
  synchronizer with nothing to move;
- `device`: CUDA mapped to the CPU inside the worker, with every NeMo RL call site it covers;
- `smoke`: a composed run config cut down for the CPU, every change listed;
- `train`: what ``grpo.setup()`` builds, built here, then ``grpo_train``;
- `report`: each step's estimator, rewards and advantages, recorded and printed;
- `models`: builtin:tiny and the embedded SmolLM2 as Hugging Face folders.

`generation` and `worker` import NeMo RL when they are imported; `cluster`, `device`,
`train` and `report` only when called; `smoke` and `models` never. Importing this package
needs neither NeMo RL nor a GPU.
"""
