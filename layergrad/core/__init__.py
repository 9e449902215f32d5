"""The shared vocabulary of every stage: errors, words, result dataclasses, limits, options.

Imports nothing else of layergrad; TensorFlow only through keras_backend, lazily."""
