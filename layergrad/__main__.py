"""`python -m layergrad` runs the command line."""

from layergrad.cli import run

run()
