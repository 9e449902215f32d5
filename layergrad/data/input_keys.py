"""Which array of an `.npz` feeds which model input: one per input name, or `x` and `y`.

Several inputs are keyed by their names (`np.savez(FILE, a=..., b=...)`). A model with one
input also takes `x`, with the labels as `y`: the `model.fit(x, y)` convention. Labels are
`y` (one output) or `y:NAME` (one per output) either way. Both `--input` and `--data` follow
this rule, checked from the file's headers and the model's config before TensorFlow loads.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from layergrad.core.errors import InputError

FIT_INPUT = "x"  # the single input's array under the model.fit(x, y) convention


def input_keys(names: Collection[str], inputs: Sequence[str], where: str) -> dict[str, str]:
    """Input name -> the `.npz` key holding its array.

    Args:
        names: the arrays in the file.
        inputs: the model's input names, in order.
        where: how errors name the file (`--data x.npz`).

    Raises:
        InputError: an input has no array; the message lists both sides.

    Example:
        >>> input_keys(["x", "y"], ["input_layer"], "--data d.npz")
        {'input_layer': 'x'}
    """
    if all(name in names for name in inputs):
        return {name: name for name in inputs}
    if len(inputs) == 1 and FIT_INPUT in names:
        return {inputs[0]: FIT_INPUT}
    missing = [name for name in inputs if name not in names]
    single = f" (or as `{FIT_INPUT}`, with the labels as `y`)" if len(inputs) == 1 else ""
    raise InputError(
        f"{where} has arrays {sorted(names)} but the model's inputs are {list(inputs)}; "
        f"missing: {', '.join(missing)}. Save one array per input name{single} with "
        "np.savez(FILE, **{name: array})."
    )


def is_label(name: str) -> bool:
    """Whether an `.npz` key holds labels: `y`, or `y:NAME` for the output NAME."""
    return name == "y" or name.startswith("y:")


def array_keys(names: Sequence[str | None], inputs: Sequence[str], where: str) -> list[str | None]:
    """The key of each input's array among a file's arrays `names` (`[None]`: a `.npy`, whose
    one array feeds a model with one input)."""
    if list(names) == [None]:
        if len(inputs) != 1:
            raise InputError(
                f"{where} holds one array but the model has {len(inputs)} inputs "
                f"({', '.join(inputs)}); save them with np.savez(FILE, **{{name: array}}) and "
                "pass the .npz."
            )
        return [None]
    keys = input_keys([n for n in names if n is not None], inputs, where)
    return [keys[n] for n in inputs]
