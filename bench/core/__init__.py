"""The bottom layer: records and their fields, the experiment spec, the results store, machine
fingerprints.

Nothing here imports mlx, rich or any other layer of bench, so reading a results file or an
experiment is cheap.
"""
