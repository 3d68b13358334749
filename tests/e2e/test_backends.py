"""The scale-out backends run the protocol chapter and leave the evidence a local run leaves.

* Ray: a real local Ray cluster (``init_ray(num_cpus=2)``: ``ray.init`` whose processes skip a slow import, so it
  starts on a loaded machine) runs seeds 42 and 43 of the tiny profile; the worker running seed 43 is killed mid-run
  (SIGKILL, from outside: no test hook in the library), and Ray starts it again. Ctrl-C during seed 45 cancels it.
* Slurm: submitit's local executor runs seed 44 as a one-task job array (``map_array``), logs in the runs root.

Each run validates, records its backend, and has the local run's key, input hashes, parameters and metrics (the
local runs are the session's ``tiny_runs``).
"""

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import yaml

from agentpost.errors import UsageError
from agentpost.evidence import receipt as rc
from agentpost.evidence import run_store
from agentpost.evidence.validate import check_run
from agentpost.project import config, project_root
from agentpost.run.backends import SLURM_LOGS, RayBackend, SlurmBackend, init_ray, make_backend
from agentpost.run.batch import BatchInterrupted, run_batch
from agentpost.run.params import plan_runs
from tests.e2e.conftest import DATA, make_project, run_folders

#: Fields a run measures about its machine and moment, which differ between any two executions.
MACHINE_FIELDS = {"backend", "timing", "peak_memory", "receipt_sha256", "hashes"}


def _clear_caches() -> None:
    for cached in (project_root, config, rc.source_notebook, rc.code_tree_hash):
        cached.cache_clear()


@contextlib.contextmanager
def inside(project: Path):
    """Point this process (and the workers it starts) at a throwaway project."""
    saved = {k: os.environ.get(k) for k in ("AGENTPOST_ROOT", "AGENTPOST_DATA")}
    os.environ.update(AGENTPOST_ROOT=str(project), AGENTPOST_DATA=str(DATA))
    _clear_caches()
    try:
        yield
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
        _clear_caches()


def _descendants(root: int) -> dict[int, str]:
    """pid -> command line of every live process below ``root`` (read from /proc)."""
    parents, commands = {}, {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                commands[int(entry.name)] = (
                    (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found = {}
    for pid in parents:
        up = pid
        while up in parents and up != root:
            up = parents[up]
        if up == root and pid != root:
            found[pid] = commands[pid]
    return found


def _ray_worker(title: str) -> int | None:
    """The Ray worker process (of this test's cluster) running the task named ``title``, if any."""
    return next((pid for pid, cmd in _descendants(os.getpid()).items() if cmd.startswith(f"ray::{title}")), None)


def _runs_a_kernel(pid: int) -> bool:
    return any("ipykernel" in c for c in _descendants(pid).values())


class WorkerKiller(threading.Thread):
    """Kills the Ray worker running ``title`` once its notebook kernel runs, then records the worker of the retry."""

    def __init__(self, title: str):
        super().__init__(daemon=True)
        self.title, self.killed, self.retried, self.stop = title, None, None, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            pid = _ray_worker(self.title)
            if pid and self.killed is None and _runs_a_kernel(pid):
                os.kill(pid, signal.SIGKILL)  # mid-run: its kernel is executing the notebook
                self.killed = pid
            elif pid and self.killed is not None and pid != self.killed:
                self.retried = pid
                return
            time.sleep(0.2)


@pytest.fixture(scope="module")
def remote_project(tmp_path_factory):
    return make_project(tmp_path_factory.mktemp("remote-project"))


def test_an_address_without_a_cluster_is_named(remote_project):
    """(Before the module's cluster starts: with one running, the backend uses it.)"""
    with inside(remote_project):
        specs = plan_runs(["paired-protocol"], "tiny", seeds="42")
        with pytest.raises(UsageError, match="--address auto: cannot connect to a Ray cluster"):
            list(RayBackend("auto").submit(specs, jobs=1))


@pytest.fixture(scope="module")
def ray_cluster(remote_project):
    """A local two-CPU Ray cluster, its workers pointed at the throwaway project."""
    import ray

    with inside(remote_project):
        init_ray(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            yield remote_project
        finally:
            ray.shutdown()


@pytest.fixture(scope="module")
def ray_runs(ray_cluster):
    """Seeds 42 and 43 through the Ray cluster; seed 43's worker is killed mid-run."""
    killer = WorkerKiller("agentpost:paired-protocol:seed-43")
    killer.start()
    try:
        specs = plan_runs(["paired-protocol"], "tiny", seeds="42,43")
        results = run_batch(specs, backend=RayBackend())
    finally:
        killer.stop.set()
    reports = {r.spec.seed: check_run(ray_cluster / r.run_dir) for r in results if r.run_dir}
    return results, reports, killer


def test_a_run_no_node_can_hold_is_refused_before_it_waits_for_ever(ray_cluster):
    profile = yaml.safe_load((ray_cluster / "params" / "paired-protocol" / "tiny.yaml").read_text())
    (ray_cluster / "params" / "paired-protocol" / "gpu.yaml").write_text(
        yaml.safe_dump({**profile, "resources": {"num_gpus": 1}})
    )
    specs = plan_runs(["paired-protocol"], "gpu", seeds="42")
    with pytest.raises(
        UsageError,
        match=r"params/paired-protocol/gpu.yaml: a run asks for 1 CPU\(s\) and 1 GPU\(s\), "
        r"but the largest node of the Ray cluster has 2 CPU\(s\) and 0 GPU\(s\)",
    ):
        list(RayBackend().submit(specs, jobs=1))
    assert not (ray_cluster / rc.RUNS_DIR / "paired-protocol" / "gpu").exists()


def test_ctrl_c_cancels_the_ray_tasks_and_writes_nothing(ray_cluster):
    """Ctrl-C (SIGINT to the driver) while a Ray task executes its notebook: the task's worker is ended,
    ``run_batch`` raises :class:`BatchInterrupted` with nothing finished, and no run folder or ``.tmp-`` is left."""
    title = "agentpost:paired-protocol:seed-45"

    def interrupt_once_running() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            worker = _ray_worker(title)
            if worker and _runs_a_kernel(worker):
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.2)

    specs = plan_runs(["paired-protocol"], "tiny", seeds="45")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, even from a background job
    try:
        threading.Thread(target=interrupt_once_running, daemon=True).start()
        with pytest.raises(BatchInterrupted) as stop:
            run_batch(specs, backend=RayBackend())
    finally:
        signal.signal(signal.SIGINT, previous)
    assert stop.value.finished == []
    deadline = time.monotonic() + 60
    while _ray_worker(title) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _ray_worker(title) is None, "the cancelled task's worker is still running"
    runs = ray_cluster / rc.RUNS_DIR / "paired-protocol" / "tiny"
    assert not list(runs.glob("seed-45-*")) and not list(runs.glob(".tmp-*"))


def _local(tiny_runs, seed: int) -> dict:
    project, result = tiny_runs
    assert result.returncode == 0, result.stdout + result.stderr
    run = next(r for r in run_folders(project) if r.parent.name == "tiny" and r.name.startswith(f"seed-{seed}-"))
    return run_store.read_receipt(run)  # its outcomes read back, as check_run gives the remote run's


def _same_evidence(remote: dict, local: dict, backend: str) -> None:
    assert remote["backend"] == backend and local["backend"] == "local"
    assert remote["run_key"] == local["run_key"]
    assert rc.input_hashes_of(remote) == rc.input_hashes_of(local)
    assert set(remote) == set(local)
    for name in set(remote) - MACHINE_FIELDS:
        assert remote[name] == local[name], name


def test_ray_runs_validate_with_the_local_runs_keys(ray_runs, tiny_runs):
    results, reports, _ = ray_runs
    assert [r.status for r in results] == ["ok", "ok"], [r.error for r in results]
    for seed, report in reports.items():
        assert report.problems == [], report.problems
        _same_evidence(report.receipt, _local(tiny_runs, seed), "ray")


def test_a_killed_ray_worker_is_retried(ray_runs):
    results, reports, killer = ray_runs
    assert killer.killed is not None, "the worker of seed 43 was never seen running its kernel"
    assert killer.retried not in (None, killer.killed), "no second worker ran seed 43 after the first was killed"
    assert reports[43].problems == [] and reports[43].receipt["status"] == "ok"


def test_submitit_job_array_runs_validate_with_the_local_key(remote_project, tiny_runs):
    with inside(remote_project):
        specs = plan_runs(["paired-protocol"], "tiny", seeds="44")
        (result,) = run_batch(specs, backend=SlurmBackend(cluster="local"))
        report = check_run(remote_project / result.run_dir)
    assert result.status == "ok", result.error
    assert report.problems == [], report.problems
    _same_evidence(report.receipt, _local(tiny_runs, 44), "submitit-local")
    logs = list((remote_project / rc.RUNS_DIR / SLURM_LOGS).rglob("*_log.out"))
    assert logs, "submitit wrote no job log under the runs root"


def test_an_unknown_backend_name_from_the_library_is_named():
    """(The command line's backend options are rows of tests/e2e/test_bad_input.py.)"""
    with pytest.raises(UsageError, match=r"^unknown backend 'cloud'; available: local, ray, slurm$"):
        run_batch([], backend="cloud")


def test_a_missing_engine_names_the_extra_to_install(monkeypatch):
    import builtins

    real_import = builtins.__import__
    monkeypatch.setattr(
        builtins,
        "__import__",
        lambda name, *a, **k: (
            (_ for _ in ()).throw(ImportError(name)) if name in ("ray", "submitit") else real_import(name, *a, **k)
        ),
    )
    with pytest.raises(UsageError, match=r"pip install -e '\.\[ray\]'"):
        make_backend("ray")
    with pytest.raises(UsageError, match=r"pip install -e '\.\[slurm\]'"):
        make_backend("slurm")
