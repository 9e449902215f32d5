"""`python -m layergrad` runs the command line."""

from layergrad.cli.app import main

main(prog_name="layergrad")
