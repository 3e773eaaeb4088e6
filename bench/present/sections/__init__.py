"""The report's sections, one module each; every section turns a Study into document blocks."""
