"""Every command has help with examples and a README section; the README's facts hold."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner
from conftest import ROOT

from layergrad import cli

README = (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(cli.main.commands))
def test_command_has_help_with_examples_and_is_documented(name):
    result = CliRunner().invoke(cli.main, [name, "--help"])
    assert result.exit_code == 0
    assert "Example" in result.output
    assert f"## `layergrad {name}`" in README or f"layergrad {name} " in README


@pytest.mark.parametrize("name", sorted(cli.main.commands))
def test_every_option_is_in_the_readme(name):
    command = cli.main.commands[name]
    for param in command.params:
        for opt in getattr(param, "opts", []):
            if opt.startswith("--") and opt != "--help":
                assert f"`{opt}" in README, f"{name} {opt} is not documented in README.md"


def test_readme_opens_with_the_two_setup_commands():
    blocks = re.findall(r"```bash\n(.*?)\n```", README, flags=re.S)
    assert (
        blocks[0]
        == "pip install . && layergrad inspect sample_models/seed.keras --from dense --to dense_1"
    )
    assert blocks[1] == 'pip install ".[test]" && python -m pytest'


def test_every_cause_code_is_explained_in_the_readme():
    from layergrad.vocab import CauseCode

    for code in CauseCode:
        assert f"| `{code}` |" in README
