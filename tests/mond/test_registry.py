"""The built-in collectors and core's table of their default intervals: one source."""

from __future__ import annotations

from herder.core import model
from herder.mond import registry


def test_every_builtin_collector_has_its_default_interval_in_cores_table_only() -> None:
    collectors = registry.builtin_collectors()
    assert set(collectors) == set(model.DEFAULT_COLLECTOR_INTERVALS)
    for name, cls in collectors.items():
        assert cls.default_interval is None, f"{name} sets its own default interval"
        assert cls.interval_default() == model.DEFAULT_COLLECTOR_INTERVALS[name]


def test_a_new_cluster_gets_the_same_defaults_and_ganetis_collectors_ganetis() -> None:
    settings = model.default_data_collectors()
    assert {name: s.interval for name, s in settings.items()} == \
        model.DEFAULT_COLLECTOR_INTERVALS
    # the collectors Ganeti 3.0 has too start at its MOND_TIME_INTERVAL (5 s), as there
    for name in ("cpu-avg-load", "diskstats", "drbd", "lv"):
        assert settings[name].interval == model.MOND_TIME_INTERVAL == 5.0
