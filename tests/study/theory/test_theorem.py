"""Theorem 1 (Lemma 1 + 2): a K×K conv equals its MHSA construction."""

import pytest
import torch
from torch import nn

from study.theory.theorem import conv_as_attention, mhsa_from_conv


@pytest.mark.parametrize("kernel", [1, 3, 5])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-9), (torch.float32, 1e-4)])
def test_conv_equals_attention(kernel, dtype, tol):
    gen = torch.Generator().manual_seed(kernel)
    d_in, d_out = (int(v) for v in torch.randint(1, 9, (2,), generator=gen))
    conv = nn.Conv2d(d_in, d_out, kernel, padding=kernel // 2).to(dtype)
    x = torch.randn(2, d_in, 9, 11, dtype=dtype, generator=gen)
    layer = mhsa_from_conv(conv)
    assert layer.num_heads == kernel**2
    with torch.no_grad():
        err = (conv(x) - conv_as_attention(layer, x, padding=kernel // 2)).abs().max().item()
    assert err <= tol


def test_conv_without_bias():
    conv = nn.Conv2d(3, 4, 3, padding=1, bias=False).double()
    x = torch.randn(1, 3, 6, 6, dtype=torch.float64)
    with torch.no_grad():
        y = conv_as_attention(mhsa_from_conv(conv), x, padding=1)
    torch.testing.assert_close(y, conv(x), rtol=0, atol=1e-9)


def test_interior_is_exact_without_padding():
    conv = nn.Conv2d(2, 3, 3, padding=1).double()
    x = torch.randn(1, 2, 8, 8, dtype=torch.float64)
    layer = mhsa_from_conv(conv)
    with torch.no_grad():
        y = layer(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        ref = conv(x)
    torch.testing.assert_close(y[..., 1:-1, 1:-1], ref[..., 1:-1, 1:-1], rtol=0, atol=1e-9)
    # at the border the softmax renormalises over existing keys: not the conv
    assert (y[..., 0, :] - ref[..., 0, :]).abs().max() > 1e-3


@pytest.mark.parametrize(
    "conv,match",
    [
        (nn.Conv2d(2, 2, 2, padding=1), "square and odd"),
        (nn.Conv2d(2, 2, 3, padding=1, stride=2), "stride 1"),
        (nn.Conv2d(2, 2, 3, padding=0), "padding"),
    ],
)
def test_rejects_convs_that_are_not_attention_layers(conv, match):
    with pytest.raises(ValueError, match=match):
        mhsa_from_conv(conv)
