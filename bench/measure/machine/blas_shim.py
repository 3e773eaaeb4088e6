"""An optimized BLAS for mlx's CPU backend from plain pip: PyPI's OpenBLAS behind a forwarding shim.

libmlx calls ``cblas_sgemm``, ``cblas_dgemm`` and ``cblas_cgemm`` (its only BLAS imports; the rest
are LAPACK routines no model uses). PyPI's OpenBLAS build, ``scipy-openblas32`` (32-bit integers, as
libmlx passes; the ``cpu`` extra installs it on Linux), exports them as ``scipy_cblas_*`` so that it
never clashes with another BLAS in a process. A preloaded library of those three names that forwards
to the prefixed ones puts OpenBLAS behind every fp32 matmul, as Debian's ``libopenblas0-pthread``
does for root. ``shim()`` builds it on first use into the user's cache (one per OpenBLAS build), so
``pip install 'fusebench[cpu]'`` into any venv, as any user, gives the workers the fast path;
``measure.machine.env.find_optimized_blas`` asks for it where no system OpenBLAS is installed. The
folder's name says "openblas" so the loaded-BLAS detection labels it correctly.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

_SOURCE = """
typedef int E;  /* CBLAS enums are ints in the C ABI */
#define FORWARD(T, S)                                                                              \
    \\
  void scipy_cblas_##S##gemm(E, E, E, int, int, int, T, const void *, int, const void *, int, T, \
void *, int); \\
  void cblas_##S##gemm(E o, E ta, E tb, int m, int n, int k, T al, const void *a, int lda, const \
void *b,      \\
                       int ldb, T be, void *c, int ldc) {                                          \
            \\
    scipy_cblas_##S##gemm(o, ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc);                     \
          \\
  }
FORWARD(float, s)
FORWARD(double, d)
FORWARD(const void *, c)
"""


class ShimUnavailable(Exception):
    """Why no shim can be had here: no scipy-openblas32, or no C compiler, or the compiler
    failed."""


def shim(cache: Path) -> Path:
    """The shim for the installed scipy-openblas32, under `cache`, built there the first time it is
    asked for. Raises ShimUnavailable with the reason when it cannot be had."""
    try:
        import scipy_openblas32
    except ImportError:
        raise ShimUnavailable(
            "scipy-openblas32 is not installed (the cpu extra brings it)"
        ) from None
    lib_dir = scipy_openblas32.get_lib_dir()
    build_id = hashlib.sha256(f"{scipy_openblas32.__version__} {lib_dir}".encode()).hexdigest()[:12]
    target = cache / "blas" / build_id / "fusebench-openblas" / "libblas.so.3"
    if not target.is_file():
        build(target, lib_dir, scipy_openblas32.get_library())
    return target


def build(target: Path, lib_dir: str, library: str) -> Path:
    """Compile the shim against OpenBLAS `library` in `lib_dir` into `target` (atomically: another
    process may be building the same one)."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        raise ShimUnavailable(
            "no C compiler (cc, gcc or clang) on the path to build the OpenBLAS shim"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        source, built = Path(tmp) / "shim.c", Path(tmp) / target.name
        source.write_text(_SOURCE)
        done = subprocess.run(
            [
                compiler,
                "-O2",
                "-shared",
                "-fPIC",
                "-o",
                str(built),
                str(source),
                f"-L{lib_dir}",
                f"-l{library}",
                f"-Wl,-rpath,{lib_dir}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            raise ShimUnavailable(f"{compiler} could not build the OpenBLAS shim: {last}")
        os.replace(built, target)
    return target
