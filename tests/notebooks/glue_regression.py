"""nbval plugin: every glued value a notebook records is compared with the committed one, within a measured spread.

nbval (``--nbval-lax``) compares the text of cells marked ``# NBVAL_CHECK_OUTPUT``; those cells show only values that
are the same on every CPU. Results of training and sampling are not: between torch kernel paths (AVX-512, AVX2,
the scalar ``default`` path) and thread counts the low bits differ, and training amplifies them. This plugin
checks those values too, in every executed cell, against the committed notebook's glued data, by the rule that
``agentpost recertify`` also applies (:func:`agentpost.evidence.spread.check_value`):

* numbers: ``|executed - committed| <= max(SPREAD_FACTOR * spread, RTOL * |committed|, ATOL)``, where ``spread`` is
  the value's range over the kernel paths measured by ``benchmarks/kernel_path_spread.py`` (``book/spread/<chapter>.json``:
  the committed notebook and three runs of it with ``ATEN_CPU_CAPABILITY=default``, ``=avx2`` and
  ``OMP_NUM_THREADS=1``; the items of a list share their largest range). Four runs underestimate the full range over machines, hence the factor. A value
  without a measurement must match to ``RTOL`` relative or ``ATOL`` absolute.
* strings (verdicts, selected arms): equal to the committed one, or to one of the values seen across kernel paths.
* what a value is comes from the kind it was glued with (``agentpost.record.recording.KINDS``, read from the
  executed output's metadata, never from its name): ``deterministic`` values must match to ``RTOL``/``ATOL`` whatever
  the measured spread; ``timing`` and ``machine`` values (wall-clock measurements, ``show_device``'s
  ``run_environment``), which no other machine reproduces, are not compared, and only they may be recorded by
  the run but absent from the committed notebook (a committed notebook older than its ``show_device()`` call).

After a notebook's last cell, one more item (``agentpost checks``) applies ``agentpost validate``'s checks of the
notebook alone (:func:`agentpost.evidence.validate.notebook_problems`: the parameters cell papermill injects after,
every glued text renders its data, every unconditional glue has its output, the device is recorded; and no error
output) to the executed notebook, so a chapter whose fresh run would not validate fails the tests.

Enable with ``-p tests.notebooks.glue_regression`` (the Makefile's nbval step does).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from agentpost.evidence.spread import NOT_COMPARED, check_value, glued_with_kind
from agentpost.evidence.validate import error_cells, notebook_problems


class GlueRegression(AssertionError):
    """A glued value moved further than its measured kernel-path spread allows."""


def cell_problems(chapter: str, committed_outputs, executed_outputs) -> list[str]:
    """Why one executed cell's glued values are not the committed cell's (kinds read from the executed outputs)."""
    committed = glued_with_kind(committed_outputs)
    executed = glued_with_kind(executed_outputs)
    problems = [
        f"{name}: recorded in the committed notebook, not by this run"
        for name in _scraps(n for n, (_, kind) in committed.items() if n not in executed and kind not in NOT_COMPARED)
    ]
    problems += [
        f"{name}: recorded by this run, not in the committed notebook (refresh it)"
        for name in _scraps(n for n, (_, kind) in executed.items() if n not in committed and kind not in NOT_COMPARED)
    ]
    problems += [
        p
        for name, (value, kind) in executed.items()
        if name in committed
        for p in [check_value(chapter, name, committed[name][0], value, kind)]
        if p
    ]
    return problems


def _scraps(flat_names) -> list[str]:
    """The glued names (one per scrap, in order) that flattened names come from."""
    return list(dict.fromkeys(re.split(r"[.\[]", name, maxsplit=1)[0] for name in flat_names))


def _is_cell(item) -> bool:
    return type(item).__name__ == "IPyNbCell" and hasattr(item, "cell_num")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    if _is_cell(item) and getattr(item, "test_outputs", None) is not None:
        chapter = Path(str(item.fspath)).stem
        problems = cell_problems(chapter, item.cell.get("outputs"), item.test_outputs)
        if problems:
            raise GlueRegression(
                f"{chapter} cell {item.cell_num}: glued values differ from the committed notebook:\n  "
                + "\n  ".join(problems)
            )
    return result


def executed_notebook(committed_nb, cells) -> dict | None:
    """The committed notebook with each code cell's outputs replaced by the ones this session's run produced
    (a cell nbval skips keeps its committed outputs); None when some other cell did not run."""
    nb = copy.deepcopy(committed_nb)
    by_num = {item.cell_num: item for item in cells}
    code = [c for c in nb.cells if c.cell_type == "code"]
    for num, cell in enumerate(code):
        item = by_num.get(num)
        if item is None or (item.test_outputs is None and not item.options["skip"]):
            return None
        if item.test_outputs is not None:
            cell["outputs"] = item.test_outputs
    return nb


class NotebookChecks(pytest.Item):
    """``agentpost validate``'s checks of the notebook alone, on the notebook this session executed."""

    def __init__(self, *, cells, **kwargs):
        super().__init__(**kwargs)
        self.cells = cells

    def runtest(self):
        nb = executed_notebook(self.parent.nb, self.cells)
        if nb is None:
            pytest.skip("not every cell of the notebook ran in this session")
        name = Path(str(self.fspath)).name
        problems = [str(p) for p in notebook_problems(nb, name)]
        problems += [f"{name}: status: cell {i} raised an error" for i in error_cells(nb)]
        if problems:
            raise NotebookInvalid(
                f"{name}: a fresh run of this notebook would not validate:\n  " + "\n  ".join(problems)
            )

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, NotebookInvalid):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.fspath, None, f"{Path(str(self.fspath)).name}::agentpost checks"


class NotebookInvalid(AssertionError):
    """The executed notebook fails a check of ``agentpost validate``."""


def pytest_collection_modifyitems(session, config, items):
    """Put a :class:`NotebookChecks` item after the last cell of every notebook nbval collected."""
    out, cells = [], []
    for index, item in enumerate(items):
        out.append(item)
        if _is_cell(item):
            cells.append(item)
            following = items[index + 1] if index + 1 < len(items) else None
            if following is None or following.parent is not item.parent:
                out.append(NotebookChecks.from_parent(item.parent, name="agentpost checks", cells=cells))
                cells = []
    items[:] = out
