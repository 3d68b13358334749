"""Execution backends: where the runs of a batch execute.

A backend maps the runs of a batch over workers and yields results as they finish. Callers (``agentpost run``,
``agentpost book``) only see :class:`Backend`, made by :func:`make_backend` from the command line's options.

* ``local``: processes on this machine, at most ``--jobs`` at a time, one fresh process per run (so peak memory is
  measured per run); each reports its executed cells to ``progress``.
* ``ray``: one Ray task per (chapter, seed) on a Ray cluster (``--address``; none starts one on this machine), with
  the profile's ``resources`` (``num_cpus``, ``num_gpus``, fractions below one GPU allowed) and ``max_retries``.
* ``slurm``: a Slurm job array of (chapter, seed) through submitit (``executor.map_array``), with ``--partition``,
  ``--time`` and the profile's resources; submitit's files and each job's logs are in ``book/runs/.slurm-logs/``.

Identical evidence, whatever the backend. A worker only *produces* a run (:func:`agentpost.run.execute.produce`:
papermill in a scratch folder of its own machine, then the sealed receipt) and returns its notebook and receipt
text; the driver *commits* it (:func:`agentpost.run.execute.commit`: both files into ``.tmp-<name>`` under the
runs root, then one rename), exactly as a local run's process commits its own. So a Ray node needs no access to the driver's
runs folder, a run is never half-written by a worker that dies, and the run key, folder and every receipt field
but ``backend`` (and what the run measured about its machine: device, timing, memory) are the local run's. A remote
worker re-hashes its own notebook, code and data first and refuses to run on a checkout that differs from the
planned one (:class:`agentpost.run.execute.InputsDiffer`), so a receipt never names inputs its worker did not use.

Retries. A run whose process died (a killed or lost Ray worker, a Slurm job that failed or ran out of time, a
notebook kernel that died) is started again, up to the profile's ``max_retries``: by Ray itself
(``max_retries``, ``retry_exceptions``), and for Slurm by resubmitting the job. A cell that raises is not retried:
the seed makes it fail again, and the failed run, with its receipt, is the result.

Progress. ``progress(spec, cells_done, cells_total)`` is called as the cells of a running run execute; the local
backend reports every cell, Ray and Slurm workers run elsewhere and report nothing until their run is done.

Ctrl-C (``KeyboardInterrupt`` in the caller). A backend stops scheduling at once, ends its running runs and their
kernels (local processes are sent SIGTERM; Ray tasks are cancelled by force; Slurm jobs are cancelled) and
re-raises; the caller removes the temporary folders and reports what finished
(:class:`agentpost.run.batch.BatchInterrupted`).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Callable, Generator, Protocol

from agentpost.errors import UsageError
from agentpost.run.params import RunSpec

#: ``progress(spec, cells_done, cells_total)``: called as the cells of a running run execute.
Progress = Callable[[RunSpec, int, int], None]
#: Seconds a run may take to end its kernel after it was asked to stop, before its process is killed.
STOP_GRACE_S = 10.0
SLURM_LOGS = ".slurm-logs"  # under the runs root (git-ignored)
#: Put first on the PYTHONPATH of the processes a local Ray cluster spawns; see :func:`init_ray`.
RAY_SITE = Path(__file__).with_name("ray_site")
DEFAULT_SLURM_MINUTES = 60


class Backend(Protocol):
    name: str

    def submit(self, specs: list[RunSpec], *, jobs: int, progress: Progress | None = None) -> Generator:
        """Execute every spec, yielding each :class:`~agentpost.run.execute.RunResult` as soon as it is known
        (order not guaranteed); on ``KeyboardInterrupt`` end the running runs and re-raise."""


def _interrupt(signum, frame):
    """The parent's stop: kill this run's kernel first (it is in its own session, so no terminal signal reaches
    it, and a polite shutdown mid-cell makes ipykernel print tracebacks), then unwind the run."""
    import psutil

    for descendant in psutil.Process().children(recursive=True):
        try:
            descendant.kill()
        except psutil.NoSuchProcess:
            pass
    raise KeyboardInterrupt


def _stop_with_parent() -> None:
    """Have the kernel send this process SIGTERM when its parent dies (a ``kill -9`` of the batch), so a run never
    outlives its batch and commits later (Linux ``prctl(PR_SET_PDEATHSIG)``; elsewhere nothing)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker with SIGHUP ignored (it ignores SIGINT and SIGTERM itself): a
    closed terminal's SIGHUP reaches the whole process group, and a tracker that died of it was relaunched and
    printed a KeyError traceback for every semaphore the batch then released."""
    from multiprocessing import resource_tracker

    try:
        previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # inherited by the tracker it spawns
    except ValueError:  # not the main thread: the tracker starts as it would
        resource_tracker.ensure_running()
        return
    try:
        resource_tracker.ensure_running()
    finally:
        signal.signal(signal.SIGHUP, previous)


def _child(index: int, spec: RunSpec, messages) -> None:
    """One run in its own process; every outcome goes back through ``messages`` as ``(kind, index, payload)``.

    The terminal's Ctrl-C reaches the whole process group: the child ignores it and lets the parent decide; the
    parent's SIGTERM ends the run (papermill's kernel with it) and removes its temporary folder."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a closed terminal: the parent decides, as for Ctrl-C
    signal.signal(signal.SIGTERM, _interrupt)
    _stop_with_parent()
    try:
        from agentpost.project import skip_slow_optional_imports

        skip_slow_optional_imports()
        from agentpost.run.execute import execute

        result = execute(spec, progress=lambda done, total: messages.put(("cells", index, (done, total))))
        messages.put(("result", index, result))
    except KeyboardInterrupt:
        # the cell's task dies with the kernel; asyncio would print its DeadKernelError when it is collected
        logging.getLogger("asyncio").setLevel(logging.CRITICAL + 1)
        messages.put(("stopped", index, None))
    except Exception as err:  # noqa: BLE001 - reported as this run's failure, the batch goes on
        messages.put(("crashed", index, f"{type(err).__name__}: {err}"))


class LocalBackend:
    """Processes on this machine, at most ``jobs`` at a time; one fresh process per run so peak memory is
    measured per run."""

    name = "local"

    def submit(self, specs: list[RunSpec], *, jobs: int, progress: Progress | None = None) -> Generator:
        from agentpost.run.execute import clear_interrupted

        context = multiprocessing.get_context("spawn")
        _start_resource_tracker()
        messages = context.Queue()
        waiting = list(enumerate(specs))
        running: dict[int, multiprocessing.process.BaseProcess] = {}
        try:
            while waiting or running:
                while waiting and len(running) < jobs:
                    index, spec = waiting.pop(0)
                    running[index] = context.Process(target=_child, args=(index, spec, messages), daemon=False)
                    running[index].start()
                try:
                    kind, index, payload = messages.get(timeout=1.0)
                except queue.Empty:
                    for index, process in list(running.items()):  # a process that died without a word
                        if not process.is_alive() and messages.empty():
                            running.pop(index).join()
                            clear_interrupted([specs[index]])
                            yield _lost(specs[index], f"the run's process ended with exit code {process.exitcode}")
                    continue
                if kind == "cells":
                    if progress:
                        progress(specs[index], *payload)
                    continue
                running.pop(index).join()
                if kind == "result":
                    yield payload
                else:
                    yield _lost(specs[index], payload or "stopped")
        finally:
            self._stop(running)

    @staticmethod
    def _stop(running: dict) -> None:
        """End the runs still running (each ends its kernel and removes its temporary folder), then reap them."""
        stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        previous = {s: signal.signal(s, signal.SIG_IGN) for s in stops}  # a second stop must not cut the clean-up short
        try:
            for process in running.values():
                if process.is_alive():
                    process.terminate()
            for process in running.values():
                process.join(STOP_GRACE_S)
                if process.is_alive():
                    process.kill()
                    process.join()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


def _lost(spec: RunSpec, why: str):
    """A run that produced nothing (its process died, its retries spent, or it was stopped): failed, no folder."""
    from agentpost.run.execute import RunResult

    return RunResult(spec, "failed", "", 0.0, why)


def _import(module: str, extra: str):
    try:
        return __import__(module)
    except ImportError:
        raise UsageError(f"--backend {extra} needs {module}: pip install -e '.[{extra}]'") from None


def _agentpost_environment() -> dict[str, str]:
    """The AGENTPOST_* variables of the driver, which point a worker at the same checkout and data."""
    return {k: v for k, v in os.environ.items() if k.startswith("AGENTPOST_")}


def _produce_remote(spec: RunSpec, backend: str):
    """A run on a worker of another backend; the worker checks its inputs first (see the module docstring)."""
    from agentpost.project import skip_slow_optional_imports

    skip_slow_optional_imports()
    from agentpost.run.execute import produce

    return produce(spec, backend, check_inputs=True)


def _retryable() -> tuple[type[BaseException], ...]:
    """Exceptions that mean the run's process or kernel died, not that the notebook failed."""
    from nbclient.exceptions import DeadKernelError

    return (DeadKernelError,)


def init_ray(**options) -> None:
    """``ray.init(**options)``, the processes it spawns skipping a slow optional import.

    Started without an address, Ray launches its raylet, which gives its dashboard agent a fixed 15 s to come up
    (``include_dashboard=False`` does not stop the agent); the agent imports jsonschema, which imports rfc3987-syntax
    and compiles a grammar (seconds of CPU), so on a loaded machine ``ray.init`` timed out. Those processes inherit
    this process's environment: with :data:`RAY_SITE` first on their PYTHONPATH, the import fails at once and
    jsonschema skips the one format checker it was for. Connecting to a running cluster spawns nothing and is not
    affected."""
    import ray

    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(RAY_SITE), *([saved] if saved else [])])
    try:
        ray.init(**options)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


class RayBackend:
    """One Ray task per run, placed by the profile's ``resources`` and retried ``max_retries`` times by Ray."""

    name = "ray"

    def __init__(self, address: str | None = None):
        self.ray = _import("ray", "ray")
        self.address = address

    def _connect(self) -> bool:
        """Connect to the cluster (or start one here without ``--address``); True when this call connected."""
        if self.ray.is_initialized():
            return False
        try:
            init_ray(
                address=self.address,
                runtime_env={"env_vars": _agentpost_environment()},
                include_dashboard=False,
                log_to_driver=False,
                logging_level="ERROR",
            )
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise UsageError(f"--address {self.address}: cannot connect to a Ray cluster: {err}") from None
        return True

    def _check_feasible(self, specs: list[RunSpec]) -> None:
        """Every run fits on some node of the cluster (Ray would otherwise wait for one for ever)."""
        nodes = [n["Resources"] for n in self.ray.nodes() if n.get("Alive")]
        for spec in specs:
            cpus, gpus = spec.resources["num_cpus"], spec.resources["num_gpus"]
            if not any(n.get("CPU", 0) >= cpus and n.get("GPU", 0) >= gpus for n in nodes):
                largest = max(((n.get("CPU", 0), n.get("GPU", 0)) for n in nodes), default=(0, 0))
                raise UsageError(
                    f"params/{spec.chapter}/{spec.profile}.yaml: a run asks for {cpus} CPU(s) and {gpus} "
                    f"GPU(s), but the largest node of the Ray cluster has {largest[0]:g} CPU(s) and "
                    f"{largest[1]:g} GPU(s)"
                )

    def submit(self, specs: list[RunSpec], *, jobs: int, progress: Progress | None = None) -> Generator:
        if not specs:
            return
        from agentpost.run.execute import commit

        ray = self.ray
        connected_here = self._connect()
        pending = {}
        try:
            self._check_feasible(specs)
            task = ray.remote(max_calls=1)(_produce_remote)  # a fresh worker process per run, as locally
            for spec in specs:
                ref = task.options(
                    name=f"agentpost:{spec.chapter}:seed-{spec.seed}",
                    num_cpus=spec.resources["num_cpus"],
                    num_gpus=spec.resources["num_gpus"],
                    max_retries=spec.max_retries,
                    retry_exceptions=list(_retryable()),
                ).remote(spec, self.name)
                pending[ref] = spec
            while pending:
                (ref,), _ = ray.wait(list(pending), num_returns=1)
                spec = pending.pop(ref)
                try:
                    output = ray.get(ref)
                except ray.exceptions.RayError as err:
                    yield _lost(
                        spec,
                        f"no result after {spec.max_retries} retr{'y' if spec.max_retries == 1 else 'ies'}: "
                        f"{_describe_ray_error(err)}",
                    )
                else:
                    yield commit(output)
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
            if connected_here:
                ray.shutdown()


def _describe_ray_error(err: BaseException) -> str:
    cause = getattr(err, "cause", None) or err
    lines = [line for line in str(cause).strip().splitlines() if line.strip()]
    return f"{type(cause).__name__}: {lines[-1] if lines else ''}"[:300]


class SlurmBackend:
    """A Slurm job array of runs through submitit; ``cluster="local"`` is submitit's local executor (tests)."""

    def __init__(self, partition: str | None = None, minutes: int | None = None, *, cluster: str = "slurm"):
        self.submitit = _import("submitit", "slurm")
        if cluster == "slurm" and shutil.which("sbatch") is None:
            raise UsageError("--backend slurm: sbatch is not on PATH; run on a Slurm login node")
        self.partition, self.minutes, self.cluster = partition, minutes or DEFAULT_SLURM_MINUTES, cluster
        self.name = "slurm" if cluster == "slurm" else f"submitit-{cluster}"

    def _executor(self, resources: dict):
        from agentpost.evidence.receipt import runs_root

        executor = self.submitit.AutoExecutor(folder=runs_root() / SLURM_LOGS / "%j", cluster=self.cluster)
        options = {
            "name": "agentpost",
            "timeout_min": self.minutes,
            "cpus_per_task": int(resources["num_cpus"]),
            "gpus_per_node": int(resources["num_gpus"]),
            "tasks_per_node": 1,
            "nodes": 1,
        }
        if self.partition:
            options["slurm_partition"] = self.partition
        executor.update_parameters(**options)
        return executor

    def _check_whole(self, specs: list[RunSpec]) -> None:
        for spec in specs:
            for key, value in spec.resources.items():
                if value != int(value):
                    raise UsageError(
                        f"params/{spec.chapter}/{spec.profile}.yaml: resources.{key} is {value}; Slurm "
                        "allocates whole CPUs and GPUs (fractions are for --backend ray)"
                    )

    def submit(self, specs: list[RunSpec], *, jobs: int, progress: Progress | None = None) -> Generator:
        if not specs:
            return
        from agentpost.run.execute import commit

        self._check_whole(specs)
        groups: dict[tuple, list[RunSpec]] = {}
        for spec in specs:  # one array per distinct set of resources
            groups.setdefault(tuple(sorted(spec.resources.items())), []).append(spec)
        pending = {}  # job -> (spec, executor, attempt)
        try:
            for group in groups.values():
                executor = self._executor(group[0].resources)
                for spec, job in zip(group, executor.map_array(_produce_remote, group, [self.name] * len(group))):
                    pending[job] = (spec, executor, 0)
            while pending:
                finished = [job for job in pending if job.done()]
                if not finished:
                    time.sleep(1.0)
                for job in finished:
                    spec, executor, attempt = pending.pop(job)
                    error = job.exception()
                    if error is None:
                        yield commit(job.result())
                    elif self._died(error) and attempt < spec.max_retries:
                        print(
                            f"{spec.chapter} seed {spec.seed}: job {job.job_id} died ({type(error).__name__}); "
                            f"retry {attempt + 1} of {spec.max_retries}",
                            file=sys.stderr,
                        )
                        pending[executor.submit(_produce_remote, spec, self.name)] = (spec, executor, attempt + 1)
                    else:
                        lines = [line for line in str(error).strip().splitlines() if line.strip()]
                        yield _lost(
                            spec,
                            f"job {job.job_id} after {attempt} retr{'y' if attempt == 1 else 'ies'}: "
                            f"{type(error).__name__}: {lines[-1] if lines else ''}"[:300]
                            + f" (log: {job.paths.stderr})",
                        )
        finally:
            for job in pending:
                job.cancel(check=False)

    def _died(self, error: BaseException) -> bool:
        """The job's process died or ran out of time (submitit's errors), or its notebook kernel died."""
        core = self.submitit.core.utils
        return isinstance(error, (core.FailedJobError, core.UncompletedJobError, *_retryable()))


BACKENDS = ("local", "ray", "slurm")


def make_backend(
    name: str, *, address: str | None = None, partition: str | None = None, minutes: int | None = None
) -> Backend:
    """The backend the command line asked for, its options checked before any work (each culprit named)."""
    if name not in BACKENDS:
        raise UsageError(f"unknown backend {name!r}; available: {', '.join(BACKENDS)}")
    if address is not None and name != "ray":
        raise UsageError(f"--address is for --backend ray, not {name}")
    for option, value in (("--partition", partition), ("--time", minutes)):
        if value is not None and name != "slurm":
            raise UsageError(f"{option} is for --backend slurm, not {name}")
    if minutes is not None and minutes < 1:
        raise UsageError(f"--time must be at least 1 minute, got {minutes}")
    if name == "ray":
        if address is not None and not (address == "auto" or address.startswith("ray://") or ":" in address):
            raise UsageError(f"--address must be auto, ray://HOST:PORT or HOST:PORT, got {address!r}")
        return RayBackend(address)
    if name == "slurm":
        return SlurmBackend(partition, minutes)
    return LocalBackend()


def get_backend(backend: str | Backend) -> Backend:
    """A backend object as is, or the named backend with default options."""
    return make_backend(backend) if isinstance(backend, str) else backend
