"""Environment probe and BLAS selection.

What fusebench records about the machine a benchmark ran on, which BLAS mlx is really using, and how
worker processes get an optimized BLAS preloaded. Nothing here knows about models or timing of them.

Why BLAS matters: the mlx-cpu wheel bundles the reference (netlib) BLAS in ``mlx_cpu.libs``. libmlx
only imports ``cblas_sgemm/dgemm/cgemm``, so an optimized BLAS put in front with ``LD_PRELOAD``
takes over every fp32 matmul, about 30x faster.
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import site
import socket
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ...core.errors import UserError
from ...core.fingerprint import fingerprint
from ...core.header import Env
from ...core.typed import from_mapping, to_mapping
from . import blas_shim

T = TypeVar("T")
# Every BLAS reads its own variable; set them all, so whichever the workers load obeys.
THREAD_VARIABLES = (
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OMP_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)
BLAS_KINDS = ("openblas", "mkl", "reference", "accelerate", "gpu", "unknown")
BLAS_CHOICES = "auto, reference, or a path to a BLAS .so"
DEBIAN_OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"

# Order matters: Debian's OpenBLAS ships a ``libblas.so.3`` shim inside ``openblas-pthread/``, so
# the specific names must be tried before the generic ``libblas`` that marks the reference
# implementation.
# The lookbehind keeps "blis"/"atlas" from matching inside ordinary words ("publish").
_BLAS_PATTERNS = (
    ("mkl", re.compile(r"mkl")),
    ("openblas", re.compile(r"openblas")),
    ("blis", re.compile(r"(?<![a-z])(lib)?blis")),
    ("atlas", re.compile(r"(?<![a-z])(lib)?atlas")),
    ("accelerate", re.compile(r"accelerate|veclib")),
    ("reference", re.compile(r"libblas|refblas|netlib|reference")),
)
# numpy/scipy wheels bundle an OpenBLAS whose symbols are renamed (scipy_cblas_sgemm64_...), so it
# can never serve libmlx's cblas_sgemm even when mapped into the same process.
_NOT_FOR_MLX = re.compile(r"scipy_openblas|numpy\.libs|scipy\.libs")
_MLX_BUNDLE = re.compile(r"/mlx(_\w+)?(\.libs)?/")  # mlx_cpu.libs/ (wheel) or mlx/lib/
_SUBPROCESS_TIMEOUT_S = 5


class BlasChoiceError(UserError):
    """A --blas choice that is neither auto, reference, nor an existing file."""


class MissingBackendError(UserError):
    """mlx cannot load a backend (on Linux, `pip install mlx` alone brings none): nothing can be
    measured."""


def own_root() -> Path:
    """The folder this build's `fusebench` package is imported from: a checkout's root, or
    site-packages."""
    return Path(__file__).parents[3]


def child_command(
    module: str, interpreter: str | None = None, root: Path | None = None
) -> list[str]:
    """The command that runs `module` of a build in a child process (a worker, a probe, a
    sampler): this build's launcher (measure/launch.py) imports the tree at `root` (default: this
    build's, own_root) alone, and `-P` keeps the folder the user runs from off its sys.path, so a
    child started from inside another fusebench checkout never imports that checkout."""
    launcher = Path(__file__).parents[1] / "launch.py"
    return [interpreter or sys.executable, "-P", str(launcher), str(root or own_root()), module]


def backend_problem() -> str | None:
    """None when mlx loads; else one line naming what to install."""
    try:
        import mlx.core  # noqa: F401
    except ImportError as err:
        cause = str(err).splitlines()[0] if str(err) else type(err).__name__
        if sys.platform == "darwin":
            return f"mlx cannot load ({cause}); reinstall it: pip install --force-reinstall mlx"
        return (
            f"mlx has no backend here ({cause}); install one: pip install 'fusebench[cpu]' (CPU), "
            "'fusebench[cuda13]' or 'fusebench[cuda12]' (NVIDIA GPU); in a checkout ./setup.sh "
            "does it"
        )
    return None


def require_backend() -> None:
    """Raise MissingBackendError, one line naming the extra to install, unless mlx loads."""
    if (problem := backend_problem()) is not None:
        raise MissingBackendError(problem)


def cache_dir() -> Path:
    """This user's fusebench cache: measured peaks and thread choices, MLX's compiled kernels."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fusebench"


def weights_cache_dir() -> Path:
    """Where presets' seeded weights are kept between runs
    (fusebench.models.loading.WeightsCache): `fusebench cache` shows and clears it."""
    return cache_dir() / "weights"


def read_cached(path: Path, kind: type[T]) -> T | None:
    """What was measured on this machine before and cached at `path` (the thread choice, the
    schedule choice, the peaks), or None when there is none or it cannot be read: then it is
    measured again."""
    try:
        return from_mapping(kind, json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_cached(path: Path, measured: object) -> None:
    """`measured` (a dataclass) cached at `path`, written whole or not at all: a run stopped
    mid-write, or two at once, never leave half a file for the next to read."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        spare = path.with_name(f"{path.name}.{os.getpid()}.partial")
        spare.write_text(json.dumps(to_mapping(measured)))
        os.replace(spare, path)
    except OSError:
        pass  # an unwritable cache only means measuring again next time


def machine_key(env: Env) -> str:
    """A cache key for this machine: the fingerprint's slug and a hash of what sets the CPU's speed.
    Two VMs of one CPU family can differ by 3x (AVX-512 or not) under the same name, so a figure
    measured on one must not be read back on the other."""
    try:
        info = Path("/proc/cpuinfo").read_text()
        cpu = "\n".join(
            sorted({line for line in info.splitlines() if line.startswith(("model name", "flags"))})
        )
    except OSError:
        cpu = platform.processor()
    digest = hashlib.sha256(f"{cpu}|{os.cpu_count()}".encode()).hexdigest()[:10]
    return f"{fingerprint(env).slug}-{digest}"


def own_compile_dir() -> Path | None:
    """Point TMPDIR, for this process and every worker it starts, at a folder this user owns.

    MLX's CPU backend writes the C++ of each mx.compile kernel, and the library it builds from it,
    under $TMPDIR/mlx/<version>/cpu. In the system temp folder that folder belongs to whoever ran
    mlx first: after root (or another user) has, every new kernel of this user's fails to compile
    (cc1plus: No such file or directory). The folder is the user's cache (~/.cache/fusebench/tmp),
    so kernels compiled once are found again. None (and TMPDIR left as it is) where the cache cannot
    be created."""
    folder = cache_dir() / "tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    os.environ["TMPDIR"] = str(folder)
    return folder


COMPILE_FAILURE = re.compile(
    r"Compile::eval_cpu|cc1plus: fatal error|Failed to compile|filesystem error: .*mlx/"
)


def compile_failure(lines: list[str]) -> str | None:
    """One line for a worker that died because mx.compile could not build a CPU kernel, naming the
    cause."""
    found = [line for line in lines if COMPILE_FAILURE.search(line)]
    if not found:
        return None
    fatal = next((line for line in found if "fatal error" in line), found[-1])
    return (
        f"mx.compile could not build a CPU kernel ({fatal.strip()[:200]}): MLX compiles into "
        f"$TMPDIR/mlx/<version>/cpu (TMPDIR here: {os.environ.get('TMPDIR', 'unset')}), "
        "which must be writable by this user, with a C++ compiler on the path"
    )


# ---------------------------------------------------------------- small helpers


def _safe(fn: Callable[[], Any], default: Any = None) -> Any:
    """Run one probe; env collection must never fail because one fact is unobtainable."""
    try:
        return fn()
    except Exception:
        return default


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    """stdout of a command, stripped; None if it is missing, fails or hangs."""
    try:
        done = subprocess.run(
            cmd, cwd=cwd, capture_output=True, text=True, timeout=_SUBPROCESS_TIMEOUT_S, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def _mlx() -> Any:
    """mlx.core, or None if it cannot be imported (a broken install should still print an env
    table)."""
    try:
        import mlx.core as mx
    except Exception:
        return None
    return mx


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _proc_field(path: str, key: str) -> str | None:
    """Value of ``key: value`` in a /proc text file such as cpuinfo or meminfo."""
    with open(path) as f:
        for line in f:
            name, _, value = line.partition(":")
            if name.strip() == key:
                return value.strip()
    return None


# ---------------------------------------------------------------- backend, device, machine


def detect_backend() -> str:
    """The backend mlx will use by default here: "metal", "cuda" or "cpu"."""
    mx = _mlx()
    if mx is None:
        return "cpu"
    if _safe(mx.metal.is_available, False):
        return "metal"
    cuda = getattr(mx, "cuda", None)  # only mlx builds with the CUDA backend have a useful mx.cuda
    if cuda is not None and _safe(cuda.is_available, False):
        return "cuda"
    return "cpu"


def _mlx_device_name() -> str | None:
    mx = _mlx()
    # mx.device_info() superseded mx.metal.device_info(); older mlx only has the latter.
    info_fn = getattr(mx, "device_info", None) or mx.metal.device_info
    return info_fn().get("device_name") or None


def _nvidia_smi_name() -> str | None:
    out = _run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
    return out.splitlines()[0].strip() if out else None


def _cpu_model() -> str:
    if sys.platform == "darwin":
        name = _run(["sysctl", "-n", "machdep.cpu.brand_string"])
    else:
        name = _safe(lambda: cpuinfo_name(Path("/proc/cpuinfo").read_text()))
    return (
        name or platform.processor() or _safe(_mlx_device_name) or platform.machine() or "unknown"
    )


def cpuinfo_name(cpuinfo: str) -> str | None:
    """The first processor's model name in /proc/cpuinfo and, where it gives them (x86), its family,
    model and widest vector extension: "AMD EPYC (family 25, model 17, AVX-512)". A cloud VM's bare
    "AMD EPYC" names several generations, with AVX-512 and without, whose speeds differ by up to 3x;
    a run records which it was, and core.fingerprint never pools one's throughput with another's."""
    fields: dict[str, str] = {}
    for line in cpuinfo.split("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name")
    if not name or "cpu family" not in fields or "model" not in fields:
        return name
    flags = set(fields.get("flags", "").split())
    widest = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else None
    detail = [f"family {fields['cpu family']}", f"model {fields['model']}", *filter(None, [widest])]
    return f"{name} ({', '.join(detail)})"


def _device_name(backend: str) -> str:
    if backend == "cpu":
        return _cpu_model()
    name = _safe(_mlx_device_name)
    if not name and backend == "cuda":
        name = _nvidia_smi_name()
    return name or backend


def _ram_bytes() -> int | None:
    meminfo = _safe(lambda: _proc_field("/proc/meminfo", "MemTotal"))
    if meminfo:
        return int(meminfo.split()[0]) * 1024  # reported in kB
    memsize = _run(["sysctl", "-n", "hw.memsize"]) if sys.platform == "darwin" else None
    if memsize and memsize.isdigit():
        return int(memsize)
    return _safe(lambda: os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _git_info() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the checkout fusebench runs from; (None, None) if it is not one."""
    # bench/measure/machine/env.py -> the folder holding bench/
    root = Path(__file__).resolve().parents[3]
    top = _run(["git", "rev-parse", "--show-toplevel"], cwd=root)
    # Only a source checkout has the package at the repo root; an installed copy that merely sits
    # inside some other repository (a venv within a project) would otherwise report that project's
    # commit.
    if not top or Path(top).resolve() != root:
        return None, None
    commit = _run(["git", "rev-parse", "HEAD"], cwd=root) or None
    # Untracked files are ignored, like `git describe --dirty`: scratch files do not change the
    # code.
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root)
    return commit, (None if status is None else bool(status))


def collect_env() -> Env:
    """Facts about this machine and software; never raises."""
    backend = _safe(detect_backend, "cpu")
    commit, dirty = _safe(_git_info, (None, None))
    return Env(
        fusebench=_safe(lambda: _dist_version("fusebench")) or "0+unknown",
        mlx=_safe(lambda: _mlx().__version__),
        mlx_lm=_safe(lambda: _dist_version("mlx-lm")),
        python=platform.python_version(),
        backend=backend,
        device=_safe(lambda: _device_name(backend), backend),
        blas=_safe(loaded_blas, "unknown"),
        threads=_safe(lambda: int(os.environ["OPENBLAS_NUM_THREADS"])),
        cpu=_safe(_cpu_model, "unknown"),
        cores=os.cpu_count(),
        ram_bytes=_safe(_ram_bytes),
        os=_safe(platform.platform, sys.platform),
        hostname=_safe(socket.gethostname),
        git_commit=commit,
        git_dirty=dirty,
        compiles=_safe(compile_fuses),
    )


def compile_fuses() -> bool:
    """Whether mx.compile makes one kernel of `exp(x) * x` here: its graph holds a `Compiled...`
    node (nothing is evaluated; on a CPU without a C++ compiler the function is left as it was)."""
    import io

    import mlx.core as mx

    x = mx.zeros((4, 4))
    buffer = io.StringIO()
    mx.export_to_dot(buffer, mx.compile(lambda x: mx.exp(x) * x)(x))
    return 'label ="Compiled' in buffer.getvalue()


# ---------------------------------------------------------------- which BLAS is loaded


def _classify(text: str) -> str | None:
    """BLAS family named by a path or label, or None if it names no BLAS."""
    text = text.lower()
    return next((name for name, pattern in _BLAS_PATTERNS if pattern.search(text)), None)


def _is_blas_lib(path: str) -> bool:
    p = Path(path)
    # The directory counts too: Debian's OpenBLAS is ".../openblas-pthread/libblas.so.3".
    return (
        ".so" in p.name
        and "lapack" not in p.name
        and not _NOT_FOR_MLX.search(path)
        and _classify(f"{p.parent.name}/{p.name}") is not None
    )


def _mapped_blas_libs() -> set[str]:
    """BLAS shared objects mapped into this process, from /proc/self/maps."""
    with open("/proc/self/maps") as f:
        paths = {fields[5].strip() for line in f if len(fields := line.split(maxsplit=5)) == 6}
    return {p for p in paths if p.startswith("/") and _is_blas_lib(p)}


def _split_preload(value: str) -> list[str]:
    return [p for p in re.split(r"[:\s]+", value) if p]  # ld.so accepts colons and spaces


def _resolution_rank(path: str) -> tuple[bool, bool, str]:
    # With an optimized BLAS LD_PRELOADed, both it and the reference BLAS bundled in mlx_cpu.libs
    # are mapped, but the dynamic linker resolves libmlx's cblas_sgemm in the global scope (where
    # preloads come first) before libmlx's own dependencies, so the preloaded one wins. Failing
    # that, libmlx's own dependency (the bundled one) serves it, not some library another extension
    # loaded privately.
    preloaded = {os.path.realpath(p) for p in _split_preload(os.environ.get("LD_PRELOAD", ""))}
    bundled_with_mlx = _MLX_BUNDLE.search(path) is not None
    return (os.path.realpath(path) not in preloaded, not bundled_with_mlx, path)


def loaded_blas() -> str:
    """Label and path of the BLAS serving mlx's matmuls in this process, e.g. "openblas
    (/usr/...)"."""
    if sys.platform == "darwin":
        return "accelerate (Accelerate.framework)"  # mlx on macOS always links Apple's Accelerate
    _mlx()  # the BLAS is a dependency of libmlx, so it is only mapped once mlx.core is imported
    libs = _safe(_mapped_blas_libs, set())
    if not libs:
        return "unknown (no BLAS library mapped)"
    path = min(libs, key=_resolution_rank)
    return f"{_classify(Path(path).parent.name + '/' + Path(path).name)} ({path})"


def blas_kind(label: str, backend: str | None = None) -> str:
    """One of BLAS_KINDS for a loaded_blas() label; "gpu" when the backend does matmuls on a GPU."""
    if backend in ("metal", "cuda"):
        return "gpu"
    head = label.split("(", 1)[0].strip().lower()
    if head in BLAS_KINDS:
        return head
    kind = _classify(head) or _classify(label)
    # blis, atlas: optimized but not tracked by name
    return kind if kind in BLAS_KINDS else "unknown"


def blas_warning(env: Env) -> str | None:
    """A one-paragraph warning when matmuls run on the CPU with the reference BLAS, else None."""
    if env.backend != "cpu" or blas_kind(env.blas) != "reference":
        return None
    example = find_optimized_blas() or DEBIAN_OPENBLAS
    return (
        "mlx is using the reference BLAS bundled in the mlx-cpu wheel, with which fp32 matmul "
        "runs ~30x slower, so CPU numbers measure that BLAS rather than the model. Install an "
        "optimized one: `apt-get install libopenblas0-pthread` as root, or without root `pip "
        "install scipy-openblas32` (the cpu extra's; fusebench builds its shim on first use, "
        "which needs a C compiler); fusebench preloads either in its worker processes with "
        f"--blas auto. `LD_PRELOAD={example} fusebench env` shows it in use."
    )


# ---------------------------------------------------------------- choosing a BLAS for workers


def _blas_search_patterns() -> list[str]:
    arch = sysconfig.get_config_var("MULTIARCH") or f"{platform.machine()}-linux-gnu"
    # pip puts MKL's libraries in <prefix>/lib, i.e. two levels above site-packages. That also
    # covers --user installs and Debian's pip, whose /usr/local prefix differs from sys.prefix.
    site_dirs = [*_safe(site.getsitepackages, []), _safe(site.getusersitepackages, "")]
    lib_dirs = dict.fromkeys(
        [f"{sys.prefix}/lib", *(str(Path(d).parent.parent) for d in site_dirs if d)]
    )
    return [
        # pthread flavour first: the OpenMP one can oversubscribe cores next to mlx's own threads.
        f"/usr/lib/{arch}/openblas-pthread/libblas.so.3",
        f"/usr/lib/{arch}/openblas-openmp/libblas.so.3",
        f"/usr/lib/{arch}/libopenblas.so.0",
        # Fedora/RHEL/Arch. Named explicitly: the libopenblas64* variants use 64-bit integers and
        # would corrupt libmlx's 32-bit-int cblas calls.
        "/usr/lib64/libopenblasp.so.0",
        "/usr/lib64/libopenblas.so.0",
        "/usr/lib/libopenblas.so.0",
        *(f"{d}/libmkl_rt.so*" for d in lib_dirs),
    ]


def find_optimized_blas() -> str | None:
    """Path of an optimized BLAS suitable for LD_PRELOAD, or None: a system OpenBLAS or MKL, else
    PyPI's OpenBLAS behind the shim (measure.machine.blas_shim), built into this user's cache on
    first use."""
    return _optimized_blas()[0]


def _optimized_blas() -> tuple[str | None, str]:
    """find_optimized_blas's answer, and why there is none."""
    for pattern in _blas_search_patterns():
        for path in sorted(glob.glob(pattern)):
            if _loads(path):
                return path, ""
    try:
        return str(blas_shim.shim(cache_dir())), ""
    except (blas_shim.ShimUnavailable, OSError) as why:
        return None, str(why)


def _loads(path: str) -> bool:
    """Whether a library file exists and the dynamic linker loads it: a dangling symlink (a removed
    package's /usr/lib/<arch>/libopenblas.so.0) would make the workers' ld.so skip the preload and
    run mlx's reference BLAS, ~30x slower, under the name of the one that was meant."""
    if not os.path.isfile(path):  # follows the link: False for a dangling one
        return False
    try:
        ctypes.CDLL(path)
    except OSError:
        return False
    return True


def _with_preload(env: dict[str, str], entries: list[str]) -> dict[str, str]:
    if entries:
        env["LD_PRELOAD"] = ":".join(entries)
    else:
        env.pop("LD_PRELOAD", None)
    return env


def _auto_preload(
    env: dict[str, str], others: list[str], blas: list[str]
) -> tuple[dict[str, str], str]:
    if blas:  # the user preloaded a BLAS themselves: that explicit choice beats our search
        return env, f"{_classify(blas[0])} already in LD_PRELOAD ({blas[0]})"
    if not sys.platform.startswith("linux"):
        return env, "no preload needed: mlx uses the platform BLAS"
    backend = detect_backend()
    if backend != "cpu":
        return env, f"no preload: the {backend} backend does not use BLAS for matmuls"
    path, why = _optimized_blas()
    if path is None:
        return (
            env,
            f"no optimized BLAS found ({why}): workers use the reference BLAS bundled with mlx",
        )
    return _with_preload(env, [path, *others]), f"{_classify(path)} preloaded ({path})"


def blas_preload_env(
    choice: str, base_env: Mapping[str, str] | None = None
) -> tuple[dict[str, str], str]:
    """Environment for a worker subprocess using the BLAS picked by ``choice``, and what was picked.

    choice: "auto" (an optimized BLAS if installed and the CPU backend is used), "reference" (the
    BLAS bundled with mlx: no BLAS in LD_PRELOAD) or a path to a BLAS shared library.
    """
    env = dict(os.environ if base_env is None else base_env)
    entries = _split_preload(env.get("LD_PRELOAD", ""))
    blas = [p for p in entries if _is_blas_lib(p)]
    others = [p for p in entries if p not in blas]  # e.g. jemalloc: not ours to drop
    if choice == "auto":
        return _auto_preload(env, others, blas)
    if choice == "reference":
        return _with_preload(env, others), "reference BLAS bundled with mlx (no BLAS preload)"
    path = os.path.expanduser(choice)
    if not os.path.isfile(path):
        raise BlasChoiceError(f"--blas {choice!r}: no such file; choose {BLAS_CHOICES}")
    return _with_preload(env, [path, *others]), f"{_classify(path) or 'unknown'} preloaded ({path})"


def thread_env(env: Mapping[str, str], threads: int) -> dict[str, str]:
    """`env` with every BLAS limited to `threads` threads."""
    return {**env, **dict.fromkeys(THREAD_VARIABLES, str(threads))}
