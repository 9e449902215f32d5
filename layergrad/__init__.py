"""layergrad: how much does one Keras layer's output move when an earlier one moves?"""

__version__ = "0.1.0"
