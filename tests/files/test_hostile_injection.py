"""Names built to act: in `fix`'s code lines, in markdown for a pull request, on stderr.

An attacker who controls a model file chooses its layer names, its output keys and its input
names. Each test here saves a real model whose names carry the payload, runs the command, and
reads what it wrote the way its reader would:

- every code line `fix` suggests (text, JSON, the markdown bullets and suggestion blocks) is
  parsed by Python's own tokenizer and `ast`: the only calls are the Keras ones the repair
  names, and each hostile name is one string constant, equal to the name;
- markdown never lets a name mention an account or link a site outside a code span (where
  GitHub does neither);
- a file name on stderr is shown escaped, as on stdout: no escape sequence reaches the terminal.
"""

from __future__ import annotations

import ast
import io
import itertools
import json
import re
import tokenize
import unicodedata
from collections.abc import Callable
from pathlib import Path

import hostile as H
import numpy as np
import pytest
from click.testing import CliRunner
from helpers import keras

from layergrad import cli
from layergrad.commands.fix.plan import loss_code
from layergrad.commands.fix.repair import FixOptions, fix_model
from layergrad.core.fix_results import FixReport
from layergrad.render import render
from layergrad.render.common import md_text

layers = keras.layers

# Each closes the string it is pasted into and calls os.system: a layer name, one that also
# breaks the line, an output's dict key (pasted into `loss={KEY: ...}`), an input name.
LAYER = 'h"), __import__("os").system("id"), ("'
LINES = 'n\n__import__("os").system("id")\n#'
KEY = 'p": "mse"}, run_eagerly=__import__("os").system("id"), z={"q'
INPUT = "i')(x); __import__('os').system('id'); ('"
MARK = "system"  # in every payload, in no word of a code line

# Every identifier a code line of `fix` may hold: Keras's classes and calls, the keywords of
# the options, the variables of the user's code, the words around the code.
KERAS = {"Dense", "Activation", "Dropout", "ReLU", "Softmax", "Rescaling", "Normalization",
         "keras", "losses", "ops", "zeros", "where", "abs", "model", "get_layer", "bias", "assign",
         "SparseCategoricalCrossentropy", "CategoricalCrossentropy", "BinaryCrossentropy"}  # fmt: skip
OPTIONS = {"activation", "kernel_initializer", "from_logits", "label_smoothing", "True", "loss",
           "optimizer", "learning_rate", "x", "inputs", "norm"}  # fmt: skip
WORDS = KERAS | OPTIONS | {"at", "of", "up", "to", "removed", "adapt", "x_train"}


def _save(model: keras.Model, path: Path, loss: object) -> Path:
    model.compile(optimizer="adam", loss=loss)
    model.save(path)
    return path


def _stack(path: Path, tail: list[keras.layers.Layer], loss: object) -> Path:
    """x(6) -> Dense(8, relu) named by the payload -> `tail`."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6,), name="x")
    h = layers.Dense(8, activation="relu", name=LAYER + "0")(inputs)
    for layer in tail:
        h = layer(h)
    return _save(keras.Model(inputs, h), path, loss)


def _relu_head(path: Path) -> Path:  # the head's activation changes
    return _stack(path, [layers.Dense(1, activation="relu", name=LAYER)], "binary_crossentropy")


def _relu_before_softmax(path: Path) -> Path:  # the ReLU is removed
    tail = [layers.Dense(3, name=LAYER + "l"), layers.ReLU(name=LINES),
            layers.Softmax(name=LAYER + "s")]  # fmt: skip
    return _stack(path, tail, "sparse_categorical_crossentropy")


def _dropout_on_logits(path: Path) -> Path:  # the Dropout moves before the Dense
    tail = [layers.Dense(3, name=LAYER + "l"), layers.Dropout(0.5, name=LINES),
            layers.Softmax(name=LAYER + "s")]  # fmt: skip
    return _stack(path, tail, "sparse_categorical_crossentropy")


def _all_linear(path: Path) -> Path:  # activation="relu" on the hidden layer
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6,), name="x")
    h = layers.Dense(8, name=LAYER)(inputs)
    model = keras.Model(inputs, layers.Dense(3, activation="softmax", name=LINES)(h))
    return _save(model, path, "sparse_categorical_crossentropy")


def _saturated_bias(path: Path) -> Path:  # model.get_layer(NAME).bias.assign(...)
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6,), name="x")
    head = layers.Dense(1, activation="sigmoid", name=LINES)
    model = keras.Model(inputs, head(layers.Dense(8, activation="relu", name="d")(inputs)))
    kernel, bias = head.get_weights()
    head.set_weights([kernel, bias + 1000.0])
    return _save(model, path, "binary_crossentropy")


def _large_kernels(path: Path) -> Path:  # kernel_initializer on each layer
    keras.utils.set_random_seed(0)
    inputs = h = keras.Input((6,), name="x")
    for i in range(12):
        h = layers.Dense(32, activation="tanh", name=f"{LAYER}{i}",
                         kernel_initializer=keras.initializers.RandomNormal(stddev=2.0))(h)  # fmt: skip
    return _save(keras.Model(inputs, layers.Dense(1, name=LINES)(h)), path, "mse")


def _dict_outputs(path: Path) -> Path:  # loss={KEY: ...} and a head's activation
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6,), name="x")
    trunk = layers.Dense(8, activation="relu", name="trunk")(inputs)
    yes = layers.Dense(1, activation="softmax", name=LAYER + "y")(trunk)
    kind = layers.Dense(3, activation="softmax", name=LAYER + "k")(trunk)
    model = keras.Model(inputs, {"yes": yes, KEY: kind})
    return _save(model, path, {"yes": "binary_crossentropy", KEY: "mse"})


MODELS: dict[str, Callable[[Path], Path]] = {
    "relu_head": _relu_head,
    "relu_before_softmax": _relu_before_softmax,
    "dropout_on_logits": _dropout_on_logits,
    "all_linear": _all_linear,
    "saturated_bias": _saturated_bias,
    "large_kernels": _large_kernels,
    "dict_outputs": _dict_outputs,
}


def _names(path: Path) -> set[str]:
    """Every name the model file gives: layers, inputs, output keys."""
    model = keras.saving.load_model(path, compile=False)
    names = {layer.name for layer in model.layers} | {str(t.name) for t in model.inputs}
    if isinstance(model.output, dict):
        names |= set(model.output)
    return names


def _code_lines(report: FixReport) -> dict[str, list[str]]:
    """The code lines in each format, as its reader sees them."""
    lines: dict[str, list[str]] = {}
    doc = json.loads(render("fix", "json", report))
    lines["json"] = [line for r in doc["repairs"] for line in r["code"].split("\n")]
    assert len(lines["json"]) == sum(len(r.code) for r in report.repairs)  # no line injected
    table = render("fix", "table", report, width=10_000)
    changes = table.split("changes:\n", 1)[1].split("verdicts:", 1)[0]
    lines["table"] = [ln[4:] for ln in changes.splitlines() if ln.startswith("    ")]
    markdown = render("fix", "markdown", report)
    lines["markdown"] = [m[2] for m in re.finditer(r"^- (`+) ?(.*?) ?\1$", markdown, re.M)]
    lines["suggestion"] = [
        line
        for block in re.findall(r"^(`{3,})suggestion\n(.*?)\n\1$", markdown, re.M | re.S)
        for line in block[1].split("\n")
    ]
    for fmt, found in lines.items():
        assert len(found) == len(lines["json"]), (fmt, found)
    return lines


def _tokens(line: str) -> list[tokenize.TokenInfo]:
    skip = (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.COMMENT)
    return [t for t in tokenize.generate_tokens(io.StringIO(line).readline) if t.type not in skip]


def _check_words(line: str, names: set[str]) -> set[str]:
    """Every identifier of `line` is a word of `fix`'s code, every string a literal; a string
    that holds the payload is one of the model's names, exactly. The names found."""
    found = set()
    for token in _tokens(line):
        if token.type == tokenize.NAME:
            assert token.string in WORDS, (token.string, line)
        elif token.type == tokenize.STRING:
            value = ast.literal_eval(token.string)
            if MARK in value:
                assert value in names, (value, line)
                found.add(value)
        else:
            assert MARK not in token.string, (token, line)
    return found


def _callee(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    assert isinstance(node, ast.Call), ast.dump(node)  # Rescaling(1/255)(inputs)
    return _callee(node.func)


def _check_python(code: str) -> None:
    """`code` is Python whose only calls are Keras's."""
    tree = ast.parse(code)
    calls = [_callee(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert set(calls) <= KERAS, (calls, code)


def _new_code(line: str) -> str:
    """The Python a line proposes: after the arrow, up to `at "NAME"` (found by tokens, so a
    name cannot move them)."""
    tokens = _tokens(line)
    arrows = [t for t in tokens if t.type == tokenize.OP and t.string == "->"]
    start = arrows[0].end[1] if arrows else 0
    end = len(line)
    for this, after in itertools.pairwise(tokens):
        if this.string == "at" and after.type == tokenize.STRING and this.start[1] > start:
            end = this.start[1]
            break
    return line[start:end].strip()


def _check_report(report: FixReport, names: set[str]) -> set[str]:
    assert report.repairs and all(r.code for r in report.repairs)
    found: set[str] = set()
    for fmt, lines in _code_lines(report).items():
        for line in lines:
            found |= _check_words(line, names)
            _check_python(line if fmt == "suggestion" else _new_code(line))
    return found


@pytest.mark.parametrize("build", MODELS.values(), ids=MODELS.keys())
def test_every_code_line_of_fix_calls_keras_only_and_names_are_strings(
    root: Path, build: Callable[[Path], Path]
) -> None:
    path = build(root / f"{build.__name__}.keras")
    names = _names(path)
    report = fix_model(path, options=FixOptions(output=str(root / "copy.keras"), force=True))
    found = _check_report(report, names)
    assert found, "the names survive, as string constants"


def test_an_input_name_reaches_the_rescaling_line_as_a_string(root: Path) -> None:
    """Raw pixels into an input named by the payload: `Rescaling(1/255)` is written on the
    input's variable (`inputs`, as the name is no Python name) at the name, quoted."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((12,), name=INPUT)
    h = layers.Dense(16, activation="tanh", name="squash")(inputs)
    model = keras.Model(inputs, layers.Dense(3, activation="softmax", name="head")(h))
    path = _save(model, root / "pixels.keras", "sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, size=(96, 12)).astype("float32")
    data = root / "pixels.npz"
    np.savez(data, **{INPUT: pixels, "y": (pixels[:, 0] // 86).astype("int64")})
    options = FixOptions(output=str(root / "copy.keras"), force=True, steps=3)
    report = fix_model(path, data, options)
    (repair,) = [r for r in report.repairs if r.finding == "input_range"]
    assert repair.code == (
        """x = inputs -> x = Rescaling(1/255)(inputs) at "i')(x); __import__('os').system('id'); ('\"""",
    )
    assert _check_report(report, _names(path)) == {INPUT}


CUSTOM = """
import keras


@keras.saving.register_keras_serializable(package="hostile_injection", name="Wide")
class Wide(keras.layers.Dense):
    pass
"""


def test_a_class_that_is_no_python_name_is_not_written(root: Path) -> None:
    """A registered class loads whatever `class_name` the file gives it (Keras finds it by
    its registered name): the kernels' repair would have to name it, so it is not offered and
    the finding keeps check's hint; a loss is written by its name instead (`compile` takes
    it)."""
    import importlib.util

    module = root / "wide_layers.py"
    module.write_text(CUSTOM)
    spec = importlib.util.spec_from_file_location("wide_layers", module)
    assert spec is not None and spec.loader is not None
    wide = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wide)
    keras.utils.set_random_seed(0)
    inputs = h = keras.Input((6,), name="x")
    for i in range(12):
        h = wide.Wide(32, activation="tanh", name=f"w{i}",
                      kernel_initializer=keras.initializers.RandomNormal(stddev=2.0))(h)  # fmt: skip
    saved = _save(keras.Model(inputs, layers.Dense(1, name="head")(h)), root / "wide.keras", "mse")
    evil = 'X(); __import__("os").system("id"); Y'

    def rename(config: dict) -> None:
        for layer in config["config"]["layers"]:
            if layer["class_name"] == "Wide":
                layer["class_name"] = evil

    path = H.with_config(saved, root / "evil_class.keras", rename)
    options = FixOptions(output=str(root / "copy.keras"), force=True)
    report = fix_model(path, options=options, imports=[str(module)])
    assert "exploding" in report.before  # the kernels 11x Glorot's scale
    assert not any(MARK in line for r in report.repairs for line in r.code)
    assert "exploding" in {u.code for u in report.unrepaired}
    code = loss_code({"class_name": evil, "config": {}}, "out")
    assert code == 'loss={"out": "X(); __import__(\\"os\\").system(\\"id\\"); Y"}'
    function = loss_code({"class_name": "function", "config": evil})
    assert ast.literal_eval(function.removeprefix("loss=")) == evil


# markdown: no mention, no link ------------------------------------------------------------------

MENTIONS = ["@octocat", "www.evil.example", "user@evil.example"]  # a layer name holds no "/"


def _prose(markdown: str) -> str:
    """The markdown outside code blocks and code spans (where GitHub links and mentions)."""
    markdown = re.sub(r"^(`{3,}).*?^\1$", "", markdown, flags=re.M | re.S)
    return re.sub(r"(?<!`)(`+)(?!`).*?(?<!`)\1(?!`)", "", markdown)


def test_mentions_and_links_in_names_stay_text_in_markdown(root: Path) -> None:
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6,), name="x")
    h = layers.Dense(8, activation="relu", name=MENTIONS[0])(inputs)
    h = layers.Dense(3, name=MENTIONS[1])(h)
    h = layers.Dropout(0.5, name=MENTIONS[2])(h)
    model = keras.Model(inputs, layers.Softmax(name="head")(h))
    path = _save(model, root / "@octocat www.evil.example.keras", "sparse_categorical_crossentropy")
    runner = CliRunner()
    out = root / "mention.fixed.keras"
    fix = runner.invoke(cli.main, ["fix", str(path), "--output", str(out), "--format", "markdown"])
    check = runner.invoke(cli.main, ["check", str(path), "--format", "markdown"])
    assert fix.exit_code == 1 and check.exit_code == 1, (fix.output, check.output)
    for name in MENTIONS:
        assert name in fix.stdout + check.stdout  # shown whole, in code
    for markdown in (fix.stdout, check.stdout):
        prose = _prose(markdown)
        assert not re.search(r"@\w|www\.|://|#\d", prose, re.I), prose
    said = md_text("see https://evil.example/x and HTTP://X.Y, then ftp://z, #12")
    assert said == "see `https://evil.example/x` and `HTTP://X.Y,` then `ftp://z,` `#12`"


# stderr: names are escaped ----------------------------------------------------------------------

TERMINAL = "t\x1b]0;owned\x07\x1b[2J\x1b[1A\rerror: forged"  # a title, a cleared screen, a line


def _raw_controls(text: str) -> list[str]:
    return [c for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf")]


def test_file_names_on_stderr_are_escaped_as_on_stdout(root: Path) -> None:
    path = _relu_head(root / "plain.keras")
    runner = CliRunner()
    written = {
        "fix": ["fix", str(path), "--output", str(root / f"{TERMINAL}.keras")],
        "junit": ["check", str(path), "--junit", str(root / f"{TERMINAL}.xml")],
        "gradient": ["inspect", str(path), "--from", LAYER + "0", "--to", LAYER,
                     "--save-gradient", str(root / f"{TERMINAL}.npy")],
        "plot": ["scan", str(path), "--plot", str(root / f"{TERMINAL}.svg")],
    }  # fmt: skip
    for what, args in written.items():
        result = runner.invoke(cli.main, args)
        assert result.exit_code in (0, 1), (what, result.output)
        assert not _raw_controls(result.stderr), (what, result.stderr)
        assert "t\\x1b]0;owned\\x07\\x1b[2J\\x1b[1A\\rerror: forged" in result.stderr, what
        assert result.stderr.count("\n") == 1, (what, result.stderr)


def test_a_hint_that_gives_a_command_line_quotes_the_names_for_the_shell() -> None:
    import shlex

    from layergrad.diagnose.causes import cause

    source, target = "a; touch owned", "b $(id) `id`"
    hint = cause("reversed_order", target, source=source).hint
    command = hint.removeprefix("swap them: ")
    assert shlex.split(command) == ["--from", target, "--to", source]
