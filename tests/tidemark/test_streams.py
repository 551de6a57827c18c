"""Stream settings are validated with precise messages."""

import pytest
from pydantic import ValidationError

from tidemark.streams import StreamConfig, parse_duration


@pytest.mark.parametrize("raw, seconds", [("7d", 604800), ("12h", 43200), ("30m", 1800),
                                          ("45s", 45), (90, 90), ("250ms", 0.25), ("2w", 1209600)])
def test_durations(raw, seconds):
    assert parse_duration(raw) == seconds


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"max_window": "7x"}, "is not a duration"),
        ({"max_window": -5}, "must be positive"),
        ({"max_window": "1h", "epsilon": 1}, "less than 1"),
        ({"max_window": "1h", "delta": 0}, "greater than 0"),
        ({"max_window": "1h", "value_min": 5, "value_max": 5}, "value_min must be less than value_max"),
        ({"max_window": "1h", "value_min": 5}, "must be given together"),
        ({"max_window": "1h", "decays": [{"kind": "polynomial"}]}, "needs 'alpha'"),
        ({"max_window": "1h", "decays": [{"kind": "cosine"}]}, "kind"),
        ({"max_window": "1h", "colour": 1}, "Extra inputs are not permitted"),
    ],
)
def test_bad_settings_say_why(settings, message):
    with pytest.raises(ValidationError, match=message):
        StreamConfig.model_validate(settings)


def test_window_in_ticks_follows_the_resolution():
    assert StreamConfig(max_window="1h").window_ticks == 3600
    assert StreamConfig(max_window="1h", resolution="250ms").window_ticks == 14400
