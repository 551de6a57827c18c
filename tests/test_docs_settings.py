"""Every setting Tidemark reads from the environment is listed in docs/operations.md.

The configuration table there is written by hand; a setting added to
``tidemark.settings.Settings`` without a row would be one nobody can find.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices

from tidemark.settings import Settings

OPERATIONS = Path(__file__).resolve().parents[1] / "docs" / "operations.md"


def env_names(name: str, field) -> list[str]:
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        return [str(a) for a in alias.choices]
    return [alias] if isinstance(alias, str) else [f"TIDEMARK_{name.upper()}"]


def test_every_setting_has_a_row_in_the_configuration_table():
    text = OPERATIONS.read_text()
    table = text[text.index("## Configuration"):text.index("## The run directory")]
    missing = []
    for name, field in Settings.model_fields.items():
        names = env_names(name, field)
        if not any(f"`{n}`" in table for n in names):
            missing.append(names[0])
    assert not missing, f"settings missing from docs/operations.md's Configuration: {missing}"
