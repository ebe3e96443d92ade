"""``study run``'s checks before a start (study/driver.py): what they read, read once."""

from __future__ import annotations

from study.commands.plan import source_sizes
from study.data import sources
from study.driver import check_data, load_checked
from study.tuning.runner import launch_plan
from tests.data_helpers import make_tree
from tests.helpers import write_spec


def _listings(monkeypatch) -> list[str]:
    """The folder listings made from now on (each one walks the source and reads every file)."""
    made: list[str] = []
    listing = sources.ImageFolderSource.listing

    def counted(self, *args, **kwargs):
        made.append(str(self))
        return listing(self, *args, **kwargs)

    monkeypatch.setattr(sources.ImageFolderSource, "listing", counted)
    return made


def test_a_folder_is_listed_once_for_its_check_and_its_sizes_and_the_launch_plan_uses_them(
    tmp_path, monkeypatch
):
    tree = tmp_path / "data"
    make_tree(tree, n_train=5, n_test=2)  # three classes
    spec = load_checked(
        str(write_spec(tmp_path, "f", data=str(tree), batch_size=5, epochs=1, grid={"num_heads": [1, 2]}))
    )
    made = _listings(monkeypatch)
    assert source_sizes(spec) == {str(tree): (15, 6)}  # `study plan`: the check lists, and counts
    assert len(made) == 1, made

    made.clear()
    sizes = check_data(spec, quiet=True)  # `study run`: the check before the start gives the sizes too
    assert sizes == {str(tree): (15, 6)}
    checks = len(made)
    plan = launch_plan(spec, sizes=sizes)
    assert len(made) == checks, "the launch plan listed the folder again"
    assert [t.images.train for t in plan] == [15, 15] and [t.images.test for t in plan] == [6, 6]
    assert all(t.flops is not None for t in plan)  # costed with the images, as `study plan` costs them
