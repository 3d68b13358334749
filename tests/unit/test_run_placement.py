"""Profile keys that place a run on a Ray or Slurm worker (``resources``, ``max_retries``), and the receipt's
``backend`` field with the schema version that added it."""

import pytest

from agentpost.errors import UsageError
from agentpost.evidence import receipt as rc
from agentpost.catalogue.params import DEFAULT_MAX_RETRIES, RESOURCE_DEFAULTS, placement
from tests.unit.test_evidence_integrity import FIELDS


def test_defaults_and_fractional_gpus():
    assert placement({}, "p.yaml") == (RESOURCE_DEFAULTS, DEFAULT_MAX_RETRIES)
    assert placement({"resources": {"num_gpus": 0.5}, "max_retries": 3}, "p.yaml") == (
        {"num_cpus": 1, "num_gpus": 0.5},
        3,
    )
    assert placement({"resources": {"num_cpus": 4, "num_gpus": 2}}, "p.yaml")[0] == {"num_cpus": 4, "num_gpus": 2}


@pytest.mark.parametrize(
    "raw, culprit",
    [
        ({"resources": [1, 2]}, "resources must be a mapping"),
        ({"resources": {"gpus": 1}}, "unknown resources ['gpus']"),
        ({"resources": {"num_cpus": 0}}, "resources.num_cpus must be a number > 0, got 0"),
        ({"resources": {"num_cpus": "two"}}, "resources.num_cpus must be a number > 0, got 'two'"),
        ({"resources": {"num_gpus": -1}}, "resources.num_gpus must be a whole number >= 0 or a fraction below 1"),
        ({"resources": {"num_gpus": 1.5}}, "resources.num_gpus must be a whole number >= 0 or a fraction below 1"),
        ({"resources": {"num_gpus": True}}, "resources.num_gpus must be"),
        ({"max_retries": -1}, "max_retries must be an integer from 0 to 10, got -1"),
        ({"max_retries": 1.0}, "max_retries must be an integer from 0 to 10, got 1.0"),
        ({"max_retries": "twice"}, "max_retries must be an integer"),
    ],
)
def test_bad_placement_is_named(raw, culprit):
    with pytest.raises(UsageError, match="^p.yaml: ") as err:
        placement(raw, "p.yaml")
    assert culprit in str(err.value)


def test_receipts_name_their_backend_and_version_2_still_reads():
    r = rc.build(**FIELDS, backend="ray").as_dict()
    assert r["schema_version"] == rc.SCHEMA_VERSION and r["backend"] == "ray"
    assert rc.json_schema()["properties"]["backend"]["enum"] == list(rc.BACKEND_NAMES)
    with pytest.raises(ValueError, match="backend"):
        rc.build(**FIELDS)  # a current receipt must say where it ran
    with pytest.raises(ValueError, match="backend"):
        rc.build(**FIELDS, backend="cloud")
    v4 = {k: v for k, v in r.items() if k not in ("notebook_code", "outcomes_sha256")} | {"schema_version": 4}
    rc.MODELS[4].model_validate(v4)  # a version-4 receipt (imported files by their bytes) reads as before
    v3 = {k: v for k, v in v4.items() if k != "imported_code"} | {"schema_version": 3}
    rc.MODELS[3].model_validate(v3)  # a version-3 receipt (no imported code) reads as before
    old = {k: v for k, v in v3.items() if k != "backend"} | {"schema_version": 2}
    rc.MODELS[2].model_validate(old)  # a version-2 receipt (no backend) reads as before
    with pytest.raises(ValueError, match="backend"):
        rc.MODELS[2].model_validate(v3 | {"schema_version": 2})  # ...and cannot carry a field it did not have
    with pytest.raises(ValueError, match="imported_code"):
        rc.MODELS[3].model_validate(r | {"schema_version": 3})
    assert rc.run_key_of(r) == rc.run_key_of(old)  # the backend is not part of the run key
