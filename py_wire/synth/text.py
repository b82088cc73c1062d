"""Text-only GRPO batches (schema ``text_grpo``)."""

from __future__ import annotations

import torch

from py_wire.synth._common import text_tokens, training_fields


def text_grpo_batch(
    num_samples: int = 64,
    *,
    seed: int = 0,
    min_tokens: int = 64,
    max_tokens: int = 4096,
    group_size: int = 4,
) -> dict[str, object]:
    """GRPO samples of ``min_tokens..max_tokens`` tokens, ``group_size`` responses per prompt."""
    gen = torch.Generator().manual_seed(seed)
    ids, prompt_lengths = [], []
    prompt: torch.Tensor | None = None
    for i in range(num_samples):
        if i % group_size == 0:
            prompt_len = int(torch.randint(1, max(2, min_tokens), (1,), generator=gen))
            prompt = text_tokens(gen, prompt_len)
        assert prompt is not None
        total = int(torch.randint(min_tokens, max_tokens + 1, (1,), generator=gen))
        response = text_tokens(gen, max(0, total - len(prompt)))
        ids.append(torch.cat([prompt, response]))
        prompt_lengths.append(len(prompt))
    lengths = [len(t) for t in ids]
    return {"input_ids": ids, **training_fields(gen, prompt_lengths, lengths, group_size)}
