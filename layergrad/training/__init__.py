"""Watching the gradient while a model trains: the `GradientMonitor` callback and its rules.

May import render, diagnose, engine, data, model, files and core; called by commands (`fit`)
and by users through `layergrad.GradientMonitor`."""
