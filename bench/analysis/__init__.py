"""Statistics and the data a report or a check is built from. numpy, pandas and scipy only: never
mlx, never a view."""
