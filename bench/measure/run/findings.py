"""What a run's workers found, written to the results file as it arrives: each record with its
cell's fields, a trial with its roofline (the work its cell does, what it achieved, and that
against this machine's peak), the worker process that ran it and, in a duet, the arm beside it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ...core.cell import (
    CellFields,
    ErrorRecord,
    Measured,
    ShareRecord,
    ShareTime,
    SkipRecord,
    StopRecord,
    Trial,
    TrialRecord,
    cell_record,
)
from ...core.experiment import Cell
from ...core.header import Peak
from ...core.placement import WorkerRecord
from ...core.results import ResultsWriter
from ..job import Result
from ..machine.load import LoadSampler
from ..machine.memory import model_config
from ..machine.roofline import CellWork, PeakPercents, Rates, achieved, cell_work, percent_of_peak
from .session import WorkerSession


@dataclass(frozen=True)
class DuetSide:
    """What a duet trial's record adds: the arm that ran beside it ("build/variant") and the core
    it ran on."""

    beside: str
    core: int


class Roofline:
    """Each cell's work, and each trial's achieved rates against the peak; it keeps the highest
    rates any trial achieved and the metrics that went above the peak (the cached peak is raised
    after the run)."""

    def __init__(self, peak: Peak | None, cells: Mapping[str, Cell]) -> None:
        self.peak, self.cells = peak, cells
        self.works: dict[str, CellWork] = {}
        self.above_peak: set[str] = set()
        # the highest prefill TFLOP/s and gen GB/s any trial achieved
        self.best = Rates(prefill_tflops=0.0, gen_gbps=None)

    def work(self, cell_key: str) -> CellWork:
        if cell_key not in self.works:
            m, w = self.cells[cell_key].model, self.cells[cell_key].workload
            self.works[cell_key] = cell_work(
                model_config(m),
                w.prompt_tokens,
                w.gen_tokens,
                w.batch,
                dtype=m.dtype,
                quantize=m.quantize,
            )
        return self.works[cell_key]

    def of(self, cell_key: str, measured: Measured) -> tuple[Rates, PeakPercents]:
        """Achieved TFLOP/s and GB/s of a trial, and each as a percent of this machine's peak."""
        work = self.work(cell_key)
        rates = achieved(measured.prefill_s, measured.gen_s, work, len(measured.step_s))
        of_peak = percent_of_peak(rates, self.peak, self.cells[cell_key].model.dtype)
        self.above_peak.update(of_peak.above_peak)
        self.best = self.best.highest(rates)
        return rates, of_peak


@dataclass(frozen=True)
class Findings:
    """The results file as a run's cells write to it."""

    writer: ResultsWriter
    meta: Mapping[str, CellFields]  # each cell's fields, by key
    roofline: Roofline
    load: LoadSampler  # what else the machine did, read between steps, never while one runs

    def write(self, record: StopRecord | SkipRecord | ErrorRecord) -> None:
        """A cell's record that needs nothing added (its stop, a skip, an error)."""
        self.writer.write(record)

    def reused_shares(self, cell_key: str, samples: Sequence[ShareTime], measured_at: str) -> None:
        """Op-share samples an earlier run timed here, written as that run's (`reused_from`)."""
        for sample in samples:
            self.writer.write(
                ShareRecord(cell=self.meta[cell_key], share=sample, reused_from=measured_at)
            )

    def workers_started(self, model_key: str, workers: Sequence[WorkerSession]) -> None:
        """A set of workers of one model, each with its build and placement (a `worker` record
        each), labelled as their trials will be: by the set's first worker's pid."""
        run_id = next(iter(self.meta.values())).run_id
        for worker in workers:
            self.writer.write(
                WorkerRecord(
                    run_id=run_id,
                    model_key=model_key,
                    build=worker.build.name,
                    process=workers[0].process.pid,
                    pid=worker.process.pid,
                    pair=worker.set,
                    started=worker.turn,
                    placement=worker.placement,
                )
            )

    def step_ended(self) -> None:
        """Every trial of a step has ended: the moment to read the machine's load."""
        self.load.read()

    def found(
        self,
        cell_key: str,
        build: str,
        result: Result,
        process: int,
        side: DuetSide | None,
        schedule: str | None = None,
    ) -> None:
        """What a build's worker found, with a trial's roofline, the worker process (pair) that
        ran it, in a duet the arm beside it and its core, and while the schedules are weighed the
        one its round followed."""
        if not isinstance(result, Trial):
            self.writer.write(cell_record(self.meta[cell_key], result, build))
            return
        rates, of_peak = self.roofline.of(cell_key, result.measured)
        trial = TrialRecord(
            cell=self.meta[cell_key],
            trial=result,
            build=build,
            rates=rates,
            of_peak=of_peak,
            process=process,
            beside=side.beside if side else None,
            core=side.core if side else None,
            schedule=schedule,
        )
        self.writer.write(trial)
