"""The length reward of the paper's math and coding experiments (docs/rewards.md, "Math with length").

`length` = 1 if the response has at most `length_limit` tokens, else 0 (paper: l = 4000).
The conditioned variant (paper Table 4, and the coding experiments) pays 1 only when the
response is short AND correct. The token count comes from the caller's tokenizer
(`num_tokens`); without one we fall back to a character estimate of 4 characters per
token (the usual rule of thumb for English BPE vocabularies), rounded up, and say so in
the docs of every command that scores without token counts.
"""

from __future__ import annotations

import math

from gdpo_nemo.errors import UserError

CHARS_PER_TOKEN_FALLBACK = 4


def response_length(completion: object, num_tokens: object = None) -> int:
    """Tokens in a response: `num_tokens` when it is a usable count, else ceil(chars / 4).

    Never raises: a non-string completion counts as length 0 only if it is None, otherwise
    its `str()` is measured.
    """
    if isinstance(num_tokens, (int, float)) and not isinstance(num_tokens, bool):
        if math.isfinite(num_tokens) and num_tokens >= 0:
            return int(num_tokens)
    if completion is None:
        return 0
    text = completion if isinstance(completion, str) else str(completion)
    return math.ceil(len(text) / CHARS_PER_TOKEN_FALLBACK)


def length_reward(
    completion: object,
    length_limit: object,
    num_tokens: object = None,
    correct: object = None,
) -> float:
    """1.0 if the response is within `length_limit` tokens (and, when `correct` is given,
    the answer is correct: the conditioned length reward), else 0.0. Range {0, 1}.

    A missing or invalid `length_limit` is a configuration error, raised as ValueError
    naming it; everything about the model output is scored, never raised on.
    """
    if isinstance(length_limit, bool) or not isinstance(length_limit, (int, float)) or not (
        math.isfinite(length_limit) and length_limit > 0
    ):
        raise UserError(f"length_limit must be a positive number of tokens, got {length_limit!r}")
    short = response_length(completion, num_tokens) <= length_limit
    if correct is None:
        return 1.0 if short else 0.0
    return 1.0 if (short and bool(correct) and correct == correct) else 0.0
