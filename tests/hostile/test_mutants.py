"""Hostile frames, mutated structurally and bit by bit, through every public entry point.

Each mutant (tests/hostile/mutate.py) goes through ``Frame.from_buffer`` and its ``schema`` /
``metadata``, ``decode`` in every layout and stage and with the schema's name,
``check_contracts``, ``select`` / ``split`` / ``shard`` / ``concat`` (with itself and with its
seed) and ``py-wire inspect``, in a child process with an address-space limit and a per-mutant
time bound (tests/hostile/runner.py, tests/hostile/harness.py). Every outcome must be a correct
result or a ``WireError`` subclass: another exception type, a crash, a hang, a peak-memory jump
out of proportion to the input, or a result that disagrees with the rows it was made from fails.

CI runs a fixed sample; ``PY_WIRE_HOSTILE_MUTANTS=50000`` runs a long campaign (also
``python -m tests.hostile.harness START STOP --workers N``). A failure prints each distinct
finding with its mutation, entry points and a one-line reproducer.
"""

from __future__ import annotations

import os

import pytest

from tests.hostile import harness

pytestmark = pytest.mark.slow  # spawned processes (see pyproject's markers)

CI_MUTANTS = 300
MUTANTS = int(os.environ.get("PY_WIRE_HOSTILE_MUTANTS", CI_MUTANTS))
WORKERS = int(os.environ.get("PY_WIRE_HOSTILE_WORKERS", "1" if MUTANTS <= CI_MUTANTS else "2"))


@pytest.fixture(scope="module")
def seeds():
    return harness.seeds_file()


def test_seed_frames_pass_every_entry_point(seeds):
    """Unmutated seeds: accepted everywhere (the oracle itself is sound)."""
    import pickle
    import tempfile

    from tests.hostile import runner

    for seed in pickle.loads(seeds.read_bytes()):
        findings, outcome = runner.run_mutant(
            seed.data, seed, runner._reference(seed), tempfile.mkdtemp()
        )
        assert not findings, (seed.name, findings)
        assert outcome in ("accepted everywhere", "decodes; some entry points reject"), (
            seed.name,
            outcome,
        )


def test_mutants_never_escape_crash_or_hang(seeds):
    report = harness.run_range(0, MUTANTS, workers=WORKERS, seeds=seeds)
    print(report.render())
    assert report.mutants == MUTANTS
    assert not report.findings, "\n" + report.render()


def test_cli_inspect_on_mutants_exits_cleanly(seeds):
    """The real ``py-wire inspect`` command (a subprocess each) on a few mutants, including
    the kinds that reached the schema parser: exit 0, or 1 with one line, never a traceback."""
    picks = [0, 1, 81, 225, 239]
    bad = harness.run_cli_sample(picks)
    assert not bad, "\n\n".join(bad)
