"""Pieces shared by the generators: GRPO row scalars and per-token training fields."""

from __future__ import annotations

import torch

#: Token ids below this are ordinary text in every bundled family's vocabulary.
TEXT_VOCAB = 150_000


def text_tokens(gen: torch.Generator, n: int) -> torch.Tensor:
    return torch.randint(0, TEXT_VOCAB, (n,), generator=gen, dtype=torch.int64)


def training_fields(
    gen: torch.Generator, prompt_lengths: list[int], lengths: list[int], group_size: int
) -> dict[str, object]:
    """Advantages (one value per GRPO sample, on response tokens), generation logprobs, the
    response mask, and the per-sample scalars."""
    rewards = torch.rand(len(lengths), generator=gen)
    groups = rewards.view(-1, group_size) if len(lengths) % group_size == 0 else rewards[None]
    advantages = (groups - groups.mean(-1, keepdim=True)) / (
        groups.std(-1, keepdim=True, correction=min(1, groups.shape[-1] - 1)) + 1e-6
    )
    advantages = advantages.reshape(-1)
    adv_rows, logprob_rows, mask_rows = [], [], []
    for i, (p, n) in enumerate(zip(prompt_lengths, lengths, strict=True)):
        mask = torch.zeros(n, dtype=torch.bool)
        mask[p:] = True
        adv_rows.append(torch.where(mask, advantages[i], 0.0).to(torch.float32))
        lp = -torch.rand(n, generator=gen) * 4
        logprob_rows.append(torch.where(mask, lp, 0.0).to(torch.float32))
        mask_rows.append(mask)
    return {
        "advantages": adv_rows,
        "generation_logprobs": logprob_rows,
        "token_mask": mask_rows,
        "input_lengths": torch.tensor(lengths, dtype=torch.int64),
        "loss_multiplier": torch.ones(len(lengths), dtype=torch.float32),
        "reward": rewards.to(torch.float32),
    }
