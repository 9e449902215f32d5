"""Import TensorFlow and Keras once, quietly.

TensorFlow's native start-up lines ("oneDNN custom operations are on", "Could not find cuda
drivers") are written to file descriptor 2 before any log level applies, so the import runs
with descriptor 2 pointed at a temporary file, which is replayed only if the import fails.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from types import ModuleType

from layergrad.core.errors import LayergradError


@contextlib.contextmanager
def _native_stderr_captured() -> Iterator[None]:
    """Send fd 2 to a temp file for the block; print what it caught if the block raises."""
    try:
        saved = os.dup(2)
    except OSError:  # no real stderr (embedded interpreters): nothing to silence
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            sink.seek(0)
            sys.stderr.write(sink.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def quiet_import() -> tuple[ModuleType, ModuleType]:
    """Return `(tensorflow, keras)`, importing them without start-up noise on stderr.

    layergrad differentiates with `tf.GradientTape`, which sees only what Keras runs on the
    TensorFlow backend, so Keras is made to use TensorFlow whatever `KERAS_BACKEND` or
    `~/.keras/keras.json` say. A Keras already imported on another backend is an error.
    """
    if "tensorflow" in sys.modules and "keras" in sys.modules:
        _require_tensorflow_backend(sys.modules["keras"])
        return sys.modules["tensorflow"], sys.modules["keras"]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if "keras" not in sys.modules:
        os.environ["KERAS_BACKEND"] = "tensorflow"
    with _native_stderr_captured(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import keras
        import tensorflow as tf
    _require_tensorflow_backend(keras)
    tf.get_logger().setLevel(logging.ERROR)
    logging.getLogger("absl").setLevel(logging.ERROR)
    return tf, keras


def _require_tensorflow_backend(keras: ModuleType) -> None:
    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise LayergradError(
            f"Keras was imported with the {backend!r} backend before layergrad; layergrad "
            "needs the TensorFlow backend: set KERAS_BACKEND=tensorflow before importing keras"
        )
