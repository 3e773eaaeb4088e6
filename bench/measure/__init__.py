"""Measuring, in rooms:

- `machine/`: this machine: its environment and BLAS (env, probe), the thread count (threads),
  what else runs beside a run (load), the memory guard (memory), the roofline's peaks and work
  (roofline, peaks), two cores for a duet and pinning (cores), PyPI's OpenBLAS shim (blas_shim);
- `run/`: the run loop: the runner, a cell's run (cellrun, with what it hands work to: warmups,
  fixing, freshpairs, cellshares; cellcontext) and when it stops (cellstop), a run's jobs (jobs),
  the plan of its rounds (planning), threads and schedule weighed on past runs (weighing), the
  order of trials (schedules/: sequential, duet), `schedule: auto`'s pilot (pilot), worker
  sessions (session), what the workers found (findings), the run's time and budget (ledger),
  resuming (resume);
- `builds/`: other builds and environments: a reference tree (builds), other Python environments
  (venvs), bisecting commits (bisect);
- `ops/`: ops on their own: microbenchmarks (opbench), kernel facts (kernels), op shares of a step
  (shares), variants against the reference (verify, opcheck).

At the top, what crosses rooms and trees: the worker process and its protocol (worker, job), which
another tree's runner looks for at these paths (`run --against` a commit from before the rooms),
the children's launcher (launch), plugins, and models found on the Hugging Face hub (hub).
"""
