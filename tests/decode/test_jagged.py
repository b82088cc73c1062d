"""py_wire._jagged: jagged nested tensors built straight from (values, offsets) are the tensors
torch's public constructor builds: same rows, shapes, offsets, pickling and ops."""

from __future__ import annotations

import io
import pickle

import pytest
import torch

from py_wire._jagged import jagged, jagged_values


def _pair(dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(dim)
    values = torch.randn(10, *([3] * dim), generator=gen)
    return values, torch.tensor([0, 2, 2, 7, 10])


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_jagged_is_what_torch_builds(dim: int) -> None:
    values, offsets = _pair(dim)
    ours = jagged(values, offsets)
    theirs = torch.nested.nested_tensor_from_jagged(values, offsets)
    assert type(ours) is type(theirs)
    assert ours.is_nested and ours.layout == torch.jagged
    assert ours.dim() == theirs.dim() and ours.shape[0] == theirs.shape[0] == 4
    assert ours.dtype == theirs.dtype and ours.device == theirs.device
    assert ours.values() is not None and torch.equal(ours.values(), values)
    assert torch.equal(ours.offsets(), offsets)
    assert jagged_values(ours) is values  # the tensor itself, no dispatch
    assert torch.equal(jagged_values(theirs), values)
    for a, b in zip(ours.unbind(), theirs.unbind(), strict=True):
        assert torch.equal(a, b)
    # Ops dispatch as on torch's own: elementwise, to_padded_tensor.
    assert torch.equal((ours * 2).values(), values * 2)
    pad = torch.nested.to_padded_tensor(ours, -1.0)
    assert torch.equal(pad, torch.nested.to_padded_tensor(theirs, -1.0))


def test_fields_sharing_offsets_share_the_ragged_dim() -> None:
    values, offsets = _pair(0)
    a, b = jagged(values, offsets), jagged(values * 3, offsets)
    assert a.shape == b.shape  # one nested int: the same ragged dim
    assert torch.equal((a + b).values(), values * 4)


def test_pickle_and_save_round_trip() -> None:
    values, offsets = _pair(1)
    nt = jagged(values, offsets)
    back = pickle.loads(pickle.dumps(nt))
    assert torch.equal(back.values(), values) and torch.equal(back.offsets(), offsets)
    buf = io.BytesIO()
    torch.save(nt, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert torch.equal(loaded.values(), values)


def test_values_that_require_grad_keep_their_history() -> None:
    values, offsets = _pair(0)
    values.requires_grad_(True)
    nt = jagged(values, offsets)
    (nt.values() * 2).sum().backward()
    assert values.grad is not None and torch.equal(values.grad, torch.full_like(values, 2.0))
