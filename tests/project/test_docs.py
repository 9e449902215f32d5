"""Every command has help with examples and a README section that documents each of its
options; the README's facts hold."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from helpers import ROOT

from layergrad import cli

README = (ROOT / "README.md").read_text(encoding="utf-8")


def section(command: str) -> str:
    """The README section headed `## \\`layergrad COMMAND\\`...`, up to the next `## `."""
    match = re.search(rf"^## `layergrad {command}`.*?(?=^## )", README, flags=re.S | re.M)
    assert match, f"README.md has no section headed ## `layergrad {command}`"
    return match.group(0)


@pytest.mark.parametrize("name", sorted(cli.main.commands))
def test_command_has_help_with_examples_and_a_readme_section(name):
    result = CliRunner().invoke(cli.main, [name, "--help"])
    assert result.exit_code == 0
    assert "Example" in result.output
    assert section(name)


@pytest.mark.parametrize(
    ("name", "option"),
    [
        (name, opt)
        for name, command in sorted(cli.main.commands.items())
        for param in command.params
        for opt in getattr(param, "opts", [])
        if opt.startswith("--") and opt != "--help"
    ],
)
def test_every_option_is_documented_in_its_commands_section(name, option):
    assert f"`{option}" in section(name), f"{name} {option} is not in its README section"


def test_readme_opens_with_the_two_setup_commands():
    blocks = re.findall(r"```bash\n(.*?)\n```", README, flags=re.S)
    assert (
        blocks[0]
        == "pip install . && layergrad inspect sample_models/seed.keras --from dense --to dense_1"
    )
    assert blocks[1] == 'pip install ".[test]" && pytest'


def test_every_cause_code_is_explained_in_the_readme():
    from layergrad.core.vocab import CauseCode

    for code in CauseCode:
        assert f"| `{code}` |" in README


@pytest.mark.parametrize("vocabulary", ["Flag", "Finding", "Status"])
def test_every_word_of_each_vocabulary_is_in_the_readme(vocabulary):
    from layergrad.core import vocab

    for word in getattr(vocab, vocabulary):
        assert f"`{word}`" in README, f"{vocabulary} {word!r} is not documented"


def _run_in_root(monkeypatch, args: list[str]) -> str:
    monkeypatch.chdir(ROOT)  # the README shows paths relative to the repository
    result = CliRunner().invoke(cli.main, args)
    assert result.exit_code == 0, result.output
    return result.output


def _stripped(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip().splitlines()]


def test_the_first_output_in_the_readme_is_what_the_tool_prints(monkeypatch):
    shown = re.search(r"The first command prints:\n\n```\n(.*?)```", README, flags=re.S)
    assert shown, "README.md lost its first output example"
    args = ["inspect", "sample_models/seed.keras", "--from", "dense", "--to", "dense_1"]
    assert _stripped(shown.group(1)) == _stripped(_run_in_root(monkeypatch, args))


def _close(shown, actual) -> bool:
    """Equal, numbers to the 4 digits the README rounds them to."""
    if isinstance(shown, float) or isinstance(actual, float):
        return shown == pytest.approx(actual, rel=1e-3, abs=1e-12)
    if isinstance(shown, dict):
        return shown.keys() == actual.keys() and all(_close(shown[k], actual[k]) for k in shown)
    if isinstance(shown, list):
        return len(shown) == len(actual) and all(map(_close, shown, actual))
    return shown == actual


@pytest.mark.parametrize(
    ("command", "schema"),
    [
        ("layergrad inspect sample_models/seed.keras --from dense --to dense_1 --json", "inspect"),
        ("layergrad scan sample_models/residual.keras --layers stem --json", "scan"),
    ],
)
def test_json_examples_in_the_readme_are_what_the_tool_prints(monkeypatch, command, schema):
    import json

    assert f"That is `{command}`" in README
    blocks = re.findall(r"```json\n(.*?)```", README, flags=re.S)
    (shown,) = [
        json.loads(b) for b in blocks if f'"layergrad.{schema}/1"' in b and '"wrt"' not in b
    ]
    actual = json.loads(_run_in_root(monkeypatch, command.split()[1:]))
    assert _close(shown, actual), json.dumps(actual, indent=1)


def test_the_weights_json_example_is_what_the_tool_prints(monkeypatch):
    import json

    command = "layergrad scan sample_models/train_classifier.keras --wrt weights --json"
    assert command in " ".join(README.split())
    blocks = re.findall(r"```json\n(.*?)```", README, flags=re.S)
    (shown,) = [json.loads(b) for b in blocks if '"wrt": "weights"' in b]
    actual = json.loads(_run_in_root(monkeypatch, command.split()[1:]))
    actual["variables"] = actual["variables"][:1]  # the README shows the first of four
    assert _close(shown, actual), json.dumps(actual, indent=1)


def _block_after(marker: str) -> str:
    shown = re.search(re.escape(marker) + r"\n\n```\n(.*?)```", README, flags=re.S)
    assert shown, f"README.md lost the example after {marker!r}"
    return shown.group(1)


def test_the_diff_example_runs_as_written_on_bundled_models(monkeypatch):
    section_text = section("diff")
    command = re.search(r"```\n(layergrad diff [^\n]*)\n```\n\nprints:", section_text)
    assert command, "the diff section lost its example command"
    args = command.group(1).split()[1:]
    for path in args[1:]:
        assert (ROOT / path).is_file(), f"the diff example names {path}, which is not bundled"
    monkeypatch.chdir(ROOT)
    result = CliRunner(env={"COLUMNS": None}).invoke(cli.main, args)
    assert result.exit_code == 1, result.output  # the example shows regressions
    shown = re.search(r"\nprints:\n\n```\n(.*?)```", section_text, flags=re.S)
    assert shown
    assert _stripped(shown.group(1)) == _stripped(result.stdout)


def test_the_diff_json_example_is_what_the_tool_prints(monkeypatch):
    import json

    command = (
        "layergrad diff sample_models/fixed_relu_stack.keras sample_models/bug_sigmoid_stack.keras "
        "--json"
    )
    assert command in " ".join(section("diff").split())
    blocks = re.findall(r"```json\n(.*?)```", README, flags=re.S)
    (shown,) = [json.loads(b) for b in blocks if '"layergrad.diff/1"' in b]
    monkeypatch.chdir(ROOT)
    actual = json.loads(CliRunner().invoke(cli.main, command.split()[1:]).stdout)
    actual["layers"] = actual["layers"][:1]  # the README shows the first row
    assert _close(shown, actual), json.dumps(actual, indent=1)


def test_a_scan_json_side_of_diff_is_named_by_its_file(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    scan = CliRunner().invoke(cli.main, ["scan", "sample_models/seed.keras", "--json"])
    baseline = tmp_path / "seed.gradients.json"
    baseline.write_text(scan.stdout)
    args = ["diff", str(baseline), "sample_models/seed.keras"]
    table = CliRunner(env={"COLUMNS": "300"}).invoke(cli.main, args).stdout
    assert table.splitlines()[0].startswith(f"base: {baseline}  Sequential 'sequential'")
    assert table.splitlines()[1].startswith("new:  sample_models/seed.keras")
    md = CliRunner().invoke(cli.main, [*args, "--format", "markdown"]).stdout
    assert md.startswith(f"**layergrad diff** `{baseline}` → `sample_models/seed.keras`")
    doc = json.loads(CliRunner().invoke(cli.main, [*args, "--json"]).stdout)
    assert doc["base"]["path"] == str(baseline) and doc["new"]["path"] == "sample_models/seed.keras"
    assert "base: model.gradients.json" in " ".join(section("diff").split())


def test_the_developer_page_maps_every_module():
    """docs/developer.md is the one map of modules: each is listed under its stage."""
    page = (ROOT / "docs" / "developer.md").read_text(encoding="utf-8")
    sections = re.split(r"^### `layergrad/([a-z_]+)/`", page, flags=re.M)
    listed = {sections[i]: sections[i + 1] for i in range(1, len(sections), 2)}
    package = ROOT / "layergrad"
    stages = sorted(p.name for p in package.iterdir() if (p / "__init__.py").exists())
    assert sorted(listed) == stages
    for stage in stages:
        for module in (package / stage).glob("*.py"):
            if module.name != "__init__.py":
                assert f"| `{module.name}` |" in listed[stage], f"{stage}/{module.name}"
