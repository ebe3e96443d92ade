"""study.models.dropout.probability_dropout: nn.Dropout's distribution (keep with
probability 1 − p, scale 1/(1 − p), gradient through the same mask) from a cheaper
mask; the identity when not training."""

import math

import pytest
import torch
import torch.nn.functional as F

from study.models.dropout import probability_dropout


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_keeps_one_minus_p_and_scales_the_kept(p):
    torch.manual_seed(0)
    probs = torch.rand(64, 9, 32, 32) + 0.1  # no zeros of its own
    out = probability_dropout(probs, p, training=True)
    kept = out != 0
    n = probs.numel()
    rate = kept.float().mean().item()
    assert abs(rate - (1 - p)) < 5 * math.sqrt(p * (1 - p) / n), rate
    torch.testing.assert_close(out[kept], probs[kept] / (1 - p))
    # same distribution as nn.Dropout: its keep rate on the same tensor agrees
    ref_rate = (F.dropout(probs, p, training=True) != 0).float().mean().item()
    assert abs(rate - ref_rate) < 10 * math.sqrt(p * (1 - p) / n)


def test_gradient_is_the_mask():
    torch.manual_seed(1)
    probs = (torch.rand(4, 3, 16, 16) + 0.1).requires_grad_()
    out = probability_dropout(probs, 0.25, training=True)
    g = torch.randn_like(out)
    out.backward(g)
    mask = (out != 0).float() / 0.75
    torch.testing.assert_close(probs.grad, g * mask)


def test_identity_when_not_training_or_p_zero_and_zeros_at_p_one():
    probs = torch.rand(2, 3, 4, 4)
    assert probability_dropout(probs, 0.5, training=False) is probs
    assert probability_dropout(probs, 0.0, training=True) is probs
    assert torch.count_nonzero(probability_dropout(probs, 1.0, training=True)) == 0


def test_a_seed_reproduces_the_mask_and_masks_differ_between_draws():
    probs = torch.rand(2, 3, 8, 8) + 0.1
    torch.manual_seed(5)
    a = probability_dropout(probs, 0.5, training=True)
    b = probability_dropout(probs, 0.5, training=True)
    torch.manual_seed(5)
    assert torch.equal(a, probability_dropout(probs, 0.5, training=True))
    assert not torch.equal(a, b)
