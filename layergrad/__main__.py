"""`python -m layergrad` runs the command line."""

from layergrad.cli import main

main(prog_name="layergrad")
