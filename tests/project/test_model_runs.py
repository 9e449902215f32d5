"""The places that run the model: every pass of the model goes through one call
(`engine/layer_calls.forward`), and this test counts the functions that make such a pass
(call `forward`, call a Keras model directly, or train it with `fit`).

Issue 39 asks for at most three. There are 3, and the test holds that number:

- the engine's one forward pass (`capture.forward_pass`): the measured run, one step per batch
  over any stream (`data_step.Step.compute`; the probe batch is a stream of one batch;
  `check`'s dead units over the data and the weight gradients of `scan --wrt weights` are
  among its measures), and the replay of one batch that keeps whole arrays for a diagnosis,
  the Jacobian measures and the inference pass of `check`'s layer rules (`trace.replay`);
- `data/id_trace`'s id check (a trace of the model's graph, nothing run);
- `fit`, and `fix`'s side-by-side training with its predictions (one function).
"""

from __future__ import annotations

import ast
from pathlib import Path

import layergrad

PACKAGE = Path(layergrad.__file__).parent
LIMIT = 3
LIGHT = ("cli/", "render/", "files/", "model/")  # stages that never import TensorFlow


def _runs(node: ast.Call) -> bool:
    """A call that runs the model: `forward(...)`, `model(...)`, `<anything>.fit(...)`."""
    func = node.func
    if isinstance(func, ast.Name):
        return func.id in ("forward", "model")
    return isinstance(func, ast.Attribute) and func.attr == "fit"


def _places() -> set[str]:
    """`module:function` of each outermost function with a call that runs the model (the one
    call itself, `layer_calls.forward`, left out)."""
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).with_suffix("").as_posix()
        if module.startswith(LIGHT):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for top in ast.walk(tree):
            if not isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if module == "engine/layer_calls" and top.name == "forward":
                continue
            for body in top.body:
                if isinstance(body, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    continue  # counted as its own place
                if any(isinstance(n, ast.Call) and _runs(n) for n in ast.walk(body)):
                    found.add(f"{module}:{top.name}")
                    break
    return found


def test_the_model_runs_in_at_most_limit_places():
    places = _places()
    assert len(places) <= LIMIT, sorted(places)


def test_every_pass_goes_through_the_one_call():
    """No module but `layer_calls` calls a model by hand inside the engine: a tape or a
    compiled step there always reaches the model through `forward`."""
    engine = {p for p in _places() if p.startswith("engine/")}
    direct = set()
    for path in (PACKAGE / "engine").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            called = isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            if called and node.func.id == "model" and path.stem != "layer_calls":
                direct.add(path.stem)
    assert not direct, direct
    assert engine, "the engine runs the model somewhere"
