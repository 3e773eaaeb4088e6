"""An optimized BLAS for mlx's CPU backend without root: PyPI's OpenBLAS behind a forwarding shim.

libmlx calls ``cblas_sgemm``, ``cblas_dgemm`` and ``cblas_cgemm`` (its only BLAS imports; the rest are LAPACK
routines no model uses). PyPI's OpenBLAS build, ``scipy-openblas32`` (32-bit integers, as libmlx passes), exports
them as ``scipy_cblas_*`` so that it never clashes with another BLAS in a process. A preloaded library of those
three names that forwards to the prefixed ones puts OpenBLAS behind every fp32 matmul, as Debian's
``libopenblas0-pthread`` does for root. ``setup.sh`` builds it into the virtual environment:

    python -m bench.measure.blas_shim build

and ``measure.env.find_optimized_blas`` finds it there. The folder's name says "openblas" so the loaded-BLAS
detection labels it correctly.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SHIM_PATH = Path(sys.prefix) / "lib" / "fusebench-openblas" / "libblas.so.3"

_SOURCE = """
typedef int E;  /* CBLAS enums are ints in the C ABI */
#define FORWARD(T, S)                                                                                  \\
  void scipy_cblas_##S##gemm(E, E, E, int, int, int, T, const void *, int, const void *, int, T, void *, int); \\
  void cblas_##S##gemm(E o, E ta, E tb, int m, int n, int k, T al, const void *a, int lda, const void *b,      \\
                       int ldb, T be, void *c, int ldc) {                                                      \\
    scipy_cblas_##S##gemm(o, ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc);                               \\
  }
FORWARD(float, s)
FORWARD(double, d)
FORWARD(const void *, c)
"""


def build(target: Path = SHIM_PATH) -> Path:
    """Compile the shim against the installed scipy-openblas32 and return its path."""
    import scipy_openblas32  # installed by setup.sh only where no system OpenBLAS exists

    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        raise SystemExit("blas_shim: no C compiler (cc, gcc or clang) on the path")
    lib_dir = scipy_openblas32.get_lib_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "shim.c"
        source.write_text(_SOURCE)
        subprocess.run(
            [compiler, "-O2", "-shared", "-fPIC", "-o", str(target), str(source), f"-L{lib_dir}",
             f"-l{scipy_openblas32.get_library()}", f"-Wl,-rpath,{lib_dir}"],
            check=True,
        )
    return target


if __name__ == "__main__":
    if sys.argv[1:] != ["build"]:
        raise SystemExit("usage: python -m bench.measure.blas_shim build")
    print(build())
