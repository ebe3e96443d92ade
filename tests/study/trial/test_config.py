import pytest

from study.models.config import ConfigError
from study.trial.config import TrainConfig


def test_map_schedule_names_the_epochs_whose_maps_are_stored():
    auto = TrainConfig(epochs=300).maps_at
    assert auto[:10] == list(range(10)) and auto[-1] == 299 and len(auto) <= 21
    assert all(b > a for a, b in zip(auto, auto[1:]))
    assert TrainConfig(epochs=4).maps_at == [0, 1, 2, 3]
    assert TrainConfig(epochs=7, map_epochs="last").maps_at == [6]
    assert TrainConfig(epochs=5, map_epochs="none").maps_at == []
    assert TrainConfig(epochs=3, map_epochs="all").maps_at == [0, 1, 2]
    assert TrainConfig(epochs=5, map_epochs=(4, 0)).maps_at == [0, 4]


@pytest.mark.parametrize("text", ["٠", "1_0", "0,٣", "0, 1e0"])
def test_map_epochs_text_takes_ascii_integers_only(text):
    """As every integer flag does (``--num-heads ٣`` was refused while ``--map-epochs ٠`` ran as 0)."""
    with pytest.raises(ConfigError, match="must be auto, all, last, none or a list of epochs"):
        TrainConfig(epochs=20, map_epochs=text)


def test_map_epochs_text_is_epochs_in_order():
    assert TrainConfig(epochs=20, map_epochs=" 9,0 ,19").maps_at == [0, 9, 19]
