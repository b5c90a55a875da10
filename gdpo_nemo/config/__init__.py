"""The run config: typed settings of the gdpo block, composition, files and overrides,
validation, experiments, and NeMo RL's key tree."""
