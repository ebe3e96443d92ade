"""The original code's recipe: per-model training overrides in one study file
(ResNet18 with its step schedule beside cosine attention models) and the input
normalisation constants."""

import pytest
import torch
import yaml

from study.data import CIFAR_MEAN, CIFAR_STD, DeviceData
from study.spec.studyfile import SpecError, load_spec
from tests.helpers import REPO_ROOT

SPACES = REPO_ROOT / "search_spaces"
BASE = {
    "data": "synthetic",
    "epochs": 2,
    "model": {"hidden": 16, "layers": 1},
    "schedule": {"type": "cosine", "warmup": 0.1},
    "optimizer": {"lr": 0.1},
}


def spec_of(tmp_path, doc):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(doc))
    return load_spec(p)


def error_path(tmp_path, doc) -> str:
    with pytest.raises(SpecError) as e:
        spec_of(tmp_path, doc)
    assert "\n" not in str(e.value)
    return e.value.path


def test_each_model_gets_its_own_recipe(tmp_path):
    doc = {
        **BASE,
        "seeds": [0, 1],
        "models": [
            {
                "arch": "resnet18",
                "training": {
                    "schedule": {"type": "step"},
                    "epochs": 3,
                    "optimizer": {"lr": 0.05},
                    "head_stats": False,
                },
            },
            {"encoding": "quadratic"},
        ],
    }
    spec = spec_of(tmp_path, doc)
    configs = [spec.train_config(c) for c in spec.cells]
    assert len(configs) == 4
    for cfg in configs:
        if cfg.model.arch == "resnet18":
            assert (cfg.schedule, cfg.epochs, cfg.lr, cfg.head_stats) == ("step", 3, 0.05, False)
        else:  # the top-level recipe, untouched by the other model's override
            assert (cfg.schedule, cfg.epochs, cfg.lr, cfg.head_stats, cfg.warmup) == (
                "cosine",
                2,
                0.1,
                True,
                0.1,
            )
        assert cfg.momentum == 0.9
    assert "training" not in spec.cells[0].model


def test_same_model_twice_with_two_recipes(tmp_path):
    doc = {
        **BASE,
        "models": [{"arch": "resnet18", "training": {"schedule": {"type": "step"}}}, {"arch": "resnet18"}],
    }
    spec = spec_of(tmp_path, doc)
    assert [spec.train_config(c).schedule for c in spec.cells] == ["step", "cosine"]


def test_grid_axes_combine_with_model_recipes(tmp_path):
    doc = {
        **BASE,
        "grid": {"weight_decay": [0.0, 1.0e-4]},
        "models": [{"arch": "resnet18", "training": {"schedule": {"type": "step"}}}, {"encoding": "learned"}],
    }
    spec = spec_of(tmp_path, doc)
    got = sorted(
        (spec.train_config(c).model.arch, spec.train_config(c).schedule, spec.train_config(c).weight_decay)
        for c in spec.cells
    )
    assert got == [
        ("resnet18", "step", 0.0),
        ("resnet18", "step", 1e-4),
        ("sa", "cosine", 0.0),
        ("sa", "cosine", 1e-4),
    ]


def test_paper_fig2_trains_resnet18_with_the_step_schedule():
    spec = load_spec(SPACES / "paper_fig2.yaml")
    recipes = {
        spec.train_config(c).model.arch + "/" + str(spec.train_config(c).model.encoding): spec.train_config(
            c
        ).schedule
        for c in spec.cells
    }
    assert recipes == {
        "resnet18/None": "step",
        "sa/quadratic": "cosine",
        "sa/learned": "cosine",
        "sa/learned_content": "cosine",
    }


@pytest.mark.parametrize(
    "training,path",
    [
        ({"shedule": {"type": "step"}}, "models.0.training.shedule"),
        ({"schedule": {"type": "linear"}}, "models.0.training.schedule.type"),
        ({"schedule": {"kind": "step"}}, "models.0.training.schedule.kind"),
        ({"schedule": "step"}, "models.0.training.schedule"),
        ({"optimizer": {"lr": -1.0}}, "models.0.training.optimizer.lr"),
        ({"optimizer": {"lr": "high"}}, "models.0.training.optimizer.lr"),
        ({"epochs": 0}, "models.0.training.epochs"),
        ({"amp": "yes"}, "models.0.training.amp"),
        ("step", "models.0.training"),
    ],
)
def test_bad_model_recipe_names_its_path(tmp_path, training, path):
    doc = {**BASE, "models": [{"arch": "resnet18", "training": training}, {"encoding": "quadratic"}]}
    assert error_path(tmp_path, doc) == path


def test_axis_also_in_a_model_recipe_is_refused(tmp_path):
    doc = {
        **BASE,
        "grid": {"lr": [0.1, 0.2]},
        "models": [{"arch": "resnet18", "training": {"optimizer": {"lr": 0.05}}}],
    }
    assert error_path(tmp_path, doc) == "grid.lr"


def test_normalisation_constants_are_the_originals():
    assert CIFAR_MEAN == (0.4914, 0.4822, 0.4465)
    assert CIFAR_STD == (0.2023, 0.1994, 0.2010)
    # and they are what the data pipeline applies
    img = torch.full((1, 3, 2, 2), 200, dtype=torch.uint8)
    x = DeviceData(img, torch.zeros(1, dtype=torch.int64)).normalise(img)
    want = [(200 / 255 - m) / s for m, s in zip(CIFAR_MEAN, CIFAR_STD)]
    torch.testing.assert_close(x[0, :, 0, 0], torch.tensor(want), rtol=1e-6, atol=1e-6)


def test_cpu_reproduction_study_covers_the_paper_variants():
    """repro_cpu.yaml: N_h = 9 (3x3 lattice), both quadratic variants, learned and the
    paper's learned + content model, one torch thread per trial, no GPU."""
    spec = load_spec(SPACES / "repro_cpu.yaml", data="synthetic:5000")
    configs = [spec.train_config(c) for c in spec.cells]
    models = [c.model for c in configs if c.model.arch == "sa"]
    assert {m.num_heads for m in models} == {9}
    assert {(m.encoding, m.isotropic, m.positional_score) for m in models} == {
        ("quadratic", True, None),
        ("quadratic", False, None),
        ("learned", None, "head"),
        ("learned_content", None, "query"),
    }
    assert [c.schedule for c in configs if c.model.arch == "resnet18"] == ["step"]
    assert (spec.study.resources.cpus_per_trial, spec.study.resources.gpus_per_trial) == (1, 0)
    assert models[0].encoding == "learned_content"  # the longest trial starts first
