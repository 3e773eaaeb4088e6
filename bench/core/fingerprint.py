"""Which machine measured a run. Throughput from two machines is never pooled, and only compared
when asked to."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .fileformat import ResultsError
from .header import Env


@dataclass(frozen=True)
class Fingerprint:
    """What makes two throughput figures comparable. The hostname is left out: CI runners get a new
    one each time."""

    backend: str
    device: str
    blas: str
    cpu: str

    def __str__(self) -> str:
        return f"{self.backend} · {self.device} · {self.blas} · {self.cpu}"

    @property
    def slug(self) -> str:
        """A file-name-safe label, e.g. `cpu-openblas-intel-r-xeon-r-processor-2-80ghz`."""
        # on CPU, device == cpu
        parts = dict.fromkeys([self.backend, self.blas, self.device, self.cpu])
        return re.sub(r"[^a-z0-9]+", "-", " ".join(parts).lower()).strip("-")


class MachineMismatchError(ResultsError):
    """Two files measured on different machines; comparing their throughput would measure the
    machines."""


def fingerprint(env: Env) -> Fingerprint:
    """The fingerprint of a run header's `env`."""
    return Fingerprint(
        backend=str(env.backend), device=str(env.device), blas=env.blas_family, cpu=str(env.cpu)
    )
