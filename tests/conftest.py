import pytest
import torch

from study.models import ENCODINGS

# (encoding, isotropic) pairs: every attention variant of the paper
VARIANTS = [("quadratic", True), ("quadratic", False), ("learned", None), ("learned_content", None)]
VARIANT_IDS = ["quadratic-iso", "quadratic-noniso", "learned", "learned_content"]

assert {e for e, _ in VARIANTS} == set(ENCODINGS)


@pytest.fixture(params=VARIANTS, ids=VARIANT_IDS)
def variant(request):
    return request.param


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
