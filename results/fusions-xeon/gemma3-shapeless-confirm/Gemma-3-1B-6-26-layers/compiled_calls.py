"""Made by `fusebench fusions --confirm`: each class's call as mlx-lm wrote it (`eager`)
or under mx.compile (`compiled`, `shapeless`), one op each."""

from fusebench.models.ops import compile_call_op

compile_call_op("gemma3_text_mlp", "mlx_lm.models.gemma3_text", "MLP")
compile_call_op("gemma3_text_rmsnorm", "mlx_lm.models.gemma3_text", "RMSNorm")
