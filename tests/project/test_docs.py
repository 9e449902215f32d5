"""Every command has help with examples and a README section that documents each of its
options; the facts of the README and of the pages under docs/ hold, and their links resolve."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from helpers import ROOT

from layergrad import cli

README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = {path: path.read_text(encoding="utf-8") for path in [ROOT / "README.md", *DOCS]}
"""The README and every page under docs/: reference material lives in docs/, so the checks of
examples read wherever the text is now."""


def _normalized(text: str) -> str:
    return " ".join(text.split())


def json_examples() -> list[tuple[dict, str]]:
    """Every ```json block of every page that is one JSON document, with the paragraph after it
    (which names the command that printed it)."""
    import json

    found = []
    for text in PAGES.values():
        for match in re.finditer(r"```json\n(.*?)```\n\n(.*?)(?:\n\n|\Z)", text, flags=re.S):
            try:
                shown = json.loads(match.group(1))
            except json.JSONDecodeError:
                continue  # a fragment ("jacobian": {...}), not a whole report
            found.append((shown, _normalized(match.group(2))))
    return found


def json_example(command: str) -> dict:
    """The one JSON document whose following paragraph names `command`."""
    (shown,) = [doc for doc, after in json_examples() if f"`{command}`" in after]
    return shown


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
    from layergrad.core.vocab import CAUSE_CODES

    for code in CAUSE_CODES:
        assert f"| `{code}` |" in README


@pytest.mark.parametrize("vocabulary", ["SCAN_FLAGS", "CHECK_FINDINGS", "Status"])
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
def test_json_examples_in_the_docs_are_what_the_tool_prints(monkeypatch, command, schema):
    import json

    assert any(f"That is `{command}`" in _normalized(text) for text in PAGES.values())
    shown = json_example(command)
    assert shown["schema"] == f"layergrad.{schema}/1"
    actual = json.loads(_run_in_root(monkeypatch, command.split()[1:]))
    assert _close(shown, actual), json.dumps(actual, indent=1)


def test_the_weights_json_example_is_what_the_tool_prints(monkeypatch):
    import json

    command = "layergrad scan sample_models/train_classifier.keras --wrt weights --json"
    shown = json_example(command)
    assert shown["wrt"] == "weights"
    actual = json.loads(_run_in_root(monkeypatch, command.split()[1:]))
    actual["variables"] = actual["variables"][:1]  # the page shows the first of four
    assert _close(shown, actual), json.dumps(actual, indent=1)


def test_every_schema_has_a_json_example_in_the_json_page():
    """docs/json.md shows a document of each schema a command prints (fit's is in training.md)."""
    page = (ROOT / "docs" / "json.md").read_text(encoding="utf-8")
    shown = {
        doc["schema"] for doc, _ in json_examples() if isinstance(doc, dict) and "schema" in doc
    }
    for schema in ("inspect", "layers", "scan", "check", "diff"):
        assert f"## `layergrad.{schema}/1`" in page
        assert f"layergrad.{schema}/1" in shown, schema


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
    shown = json_example(command)  # in docs/json.md, beside the other schemas
    assert shown["schema"] == "layergrad.diff/1"
    monkeypatch.chdir(ROOT)
    actual = json.loads(CliRunner().invoke(cli.main, command.split()[1:]).stdout)
    actual["layers"] = actual["layers"][:1]  # the page shows the first row
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
        for module in (package / stage).rglob("*.py"):
            if module.name != "__init__.py":
                name = module.relative_to(
                    package / stage
                ).as_posix()  # `check/gate.py` in a package
                assert f"| `{name}` |" in listed[stage], f"{stage}/{name}"


def _outside_code(text: str) -> str:
    """The text without fenced code blocks, and with inline code spans reduced to `code`."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]+`", "code", text)


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor in a markdown page (repeats get -1, -2, ... as on GitHub)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} (.+?)\s*$", text, flags=re.M):
        slug = anchor(heading)
        found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return found


def test_anchor_is_what_github_makes_of_a_heading():
    # anchors GitHub made of these headings, used by links before the docs moved
    assert anchor("Reports to open: `--format html` and `--plot`") == (
        "reports-to-open---format-html-and---plot"
    )
    assert (
        anchor("`layergrad merge`: one report from shards")
        == "layergrad-merge-one-report-from-shards"
    )
    assert anchor("Why is my gradient None, zero or NaN?") == "why-is-my-gradient-none-zero-or-nan"
    assert anchors("# A\n```\n# not a heading\n```\n## A\n") == {"a", "a-1"}


def relative_links(text: str) -> list[str]:
    """The targets of the markdown links and images of a page that are not web addresses."""
    targets = re.findall(r"\]\(([^)\s]+)\)", _outside_code(text))
    return [t for t in targets if not re.match(r"[a-z]+:", t)]


def test_every_relative_link_in_the_readme_and_docs_resolves():
    checked = 0
    for path, text in PAGES.items():
        for target in relative_links(text):
            file, _, fragment = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            where = f"{path.relative_to(ROOT)}: link {target}"
            assert linked.exists(), f"{where}: no such file"
            assert ROOT in linked.parents or linked == ROOT, f"{where}: outside the repository"
            if fragment:
                assert linked.suffix == ".md", (
                    f"{where}: an anchor into a file that is not markdown"
                )
                headings = anchors(linked.read_text(encoding="utf-8"))
                assert fragment in headings, f"{where}: no such heading in {linked.name}"
            checked += 1
    assert checked > 50  # the pages do link to each other; a parser that finds none is broken


def test_every_page_under_docs_is_linked_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in relative_links(README)}
    for page in DOCS:
        assert page.resolve() in linked, f"README.md does not link to docs/{page.name}"


def test_the_readme_is_a_page_for_users():
    """About 500 lines (a little slack for a new option): reference material goes under docs/."""
    assert len(README.splitlines()) <= 550


def test_the_readme_python_imports_only_from_layergrad():
    """Users import from `layergrad`; the modules underneath may move."""
    blocks = re.findall(r"^```python\n(.*?)^```", README, flags=re.S | re.M)
    imports = [
        line.strip()
        for block in blocks
        for line in block.splitlines()
        if re.match(r"\s*(from|import) layergrad\b", line)
    ]
    assert imports, "the README shows no Python import of layergrad"
    for line in imports:
        assert re.fullmatch(r"from layergrad import [\w, ]+|import layergrad", line), line
    import layergrad

    for line in imports:
        if line.startswith("from"):
            for name in line.split(" import ")[1].split(","):
                assert name.strip() in layergrad.__all__, name


def test_the_fix_example_runs_as_written_on_a_bundled_model(monkeypatch, tmp_path):
    """The README's `fix` example, run in an empty folder that sees the bundled samples."""
    section_text = section("fix")
    command = re.search(r"```\n(layergrad fix [^\n]*)\n```\n\nprints", section_text)
    assert command, "the fix section lost its example command"
    args = command.group(1).split()[1:]
    (tmp_path / "sample_models").symlink_to(ROOT / "sample_models")
    monkeypatch.chdir(tmp_path)
    result = CliRunner(env={"COLUMNS": "100"}).invoke(cli.main, args)
    assert result.exit_code == 1, result.output  # repaired, not verified without --data
    shown = re.search(r"\):\n\n```\n(.*?)```", section_text, flags=re.S)
    assert shown
    assert _stripped(shown.group(1)) == _stripped(result.stdout)
    assert (tmp_path / "bug_relu_before_softmax.fixed.keras").is_file()


def test_the_rule_tables_in_the_docs_are_made_from_the_rule_table():
    import sys

    from layergrad.render.rule_tables import with_tables

    sys.path.insert(0, str(ROOT / "docs"))
    from make_tables import ALL  # the tables of the head, label, training rules and causes

    made = {name: 0 for name in ALL}
    for path, text in PAGES.items():
        for name in re.findall(r"<!-- rules: (\w+) -->", text):
            made[name] += 1
        assert with_tables(text, ALL) == text, f"{path.name}: run python docs/make_tables.py"
    assert all(made.values()), made  # every table is shown somewhere
