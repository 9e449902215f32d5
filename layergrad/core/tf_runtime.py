"""TensorFlow and Keras for the modules that run them: `from layergrad.core.tf_runtime import
keras, tf` at a module's top. Importing this module imports TensorFlow (quietly, on the
TensorFlow backend: `keras_backend.quiet_import`), so only the heavy stages import it; the
CLI, the file readers, the model config readers and the renderers never do (the import
contract in `pyproject.toml` checks it)."""

from __future__ import annotations

from layergrad.core.keras_backend import quiet_import

tf, keras = quiet_import()
