"""`fusebench fusions`: a model's steps traced (trace), recomputed from the trace (replay), what
mx.compile fuses here (probe), the chains timed (search), the top ones measured end to end
(confirm), one job's models and records (session)."""
