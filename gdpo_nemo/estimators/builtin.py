"""The built-in estimators' entries in the registry: names, labels, NeMo RL's equivalents,
collapse kinds, plot styles and dense forms, declared here without torch.

Their functions are in gdpo_nemo.estimators.general (which imports torch); each entry's
function imports it on its first call. So a config, a sweep plan or `gdpo-nemo config show`
names and checks an estimator without importing torch (about 2 s of CPU a process), and the
first advantage computed imports it as before.
"""

from __future__ import annotations

from gdpo_nemo.estimators.options import SCALE_REWARDS
from gdpo_nemo.estimators.registry import DenseForm, NemoRLEstimator, PlotStyle, register_estimator

__all__ = ["GeneralPath"]


class GeneralPath:
    """The estimator function `name` of gdpo_nemo.estimators.general, imported when first called."""

    def __init__(self, name: str):
        self.__name__ = self.name = name
        self._fn = None

    def __call__(self, rewards, valid, groups, weights, options, token_mask):
        if self._fn is None:
            from gdpo_nemo.estimators import general

            self._fn = getattr(general, self.name)
        return self._fn(rewards, valid, groups, weights, options, token_mask)

    def __repr__(self) -> str:
        return f"gdpo_nemo.estimators.general.{self.name}"


register_estimator("grpo", label="GRPO", nemo_rl=NemoRLEstimator("grpo", normalize_rewards=True),
                   collapse_key="normalized_sum", style=PlotStyle("tab:blue", "o", "-"), in_fig3=True,
                   dense=DenseForm(divide_by_group_std=True), scale_rewards=SCALE_REWARDS)(GeneralPath("grpo"))
register_estimator("grpo_no_std", label="GRPO w/o std", nemo_rl=NemoRLEstimator("grpo", normalize_rewards=False),
                   collapse_key="centred_sum", style=PlotStyle("tab:orange", "s", "--"), in_fig3=True,
                   dense=DenseForm(divide_by_group_std=False))(GeneralPath("grpo_no_std"))
# NeMo RL has no GDPO without batch norm (nemo_rl=None): gdpo_nemo's hook runs it there.
register_estimator("gdpo_no_bn", label="GDPO w/o BN", multi_component=True, nemo_rl=None,
                   collapse_key="normalized_components", style=PlotStyle("tab:purple", "D", "--"),
                   dense=DenseForm(divide_by_group_std=True))(GeneralPath("gdpo_no_bn"))
register_estimator("gdpo", label="GDPO", multi_component=True, nemo_rl=NemoRLEstimator("gdpo", normalize_rewards=True),
                   collapse_key="normalized_components", style=PlotStyle("tab:green", "^", "-"), in_fig3=True,
                   dense=DenseForm(divide_by_group_std=True, batch_norm=True), token_batch_norm=True)(GeneralPath("gdpo"))
