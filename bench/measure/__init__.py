"""Measuring: the runner and its worker processes, the environment probe, the op harness, the
roofline work model."""
