"""Every recipe on the pages runs, read from the page by the test: each ```python block of
README.md and docs/*.md is executed as written, in a namespace holding exactly what the page
says the reader has (a NeMo-RL batch, sample ids, a DataProto, frames, ...), built here from
py_wire's synthetic batches, and what it computes is checked against ``py_wire.decode`` of the
whole batch (or the page's own comment). Each ```toml block that is a schema file (a top-level
``name``) loads as one; a block of tables alone loads over a bundled schema. A block that is a
fragment by design is marked on its page with a ``<!-- not a recipe: why -->`` line just above
it; every other block needs a test here (``test_every_recipe_has_a_test``). Recipes that need
TransferQueue or Ray run on a local Ray (marked slow, as tests/interop/test_transfer_queue.py)."""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import re
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

import py_wire
from py_wire.interop import nemo_rl, verl
from py_wire.synth.registry import generate
from tests.interop.test_nemo_rl import nemo_batch, with_nemo_rl  # noqa: F401 (a fixture)
from tests.interop.test_verl import assert_same_dataproto, verl_batch
from tests.interop.test_verl_agent_loop import agent_loop_batch
from tests.interop.test_verl_agent_loop import assert_same as assert_same_verl
from tests.streaming.conftest import ray_session  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
HEADING = re.compile(r"^#+ +(.+?)\s*$", re.M)
NOT_A_RECIPE = re.compile(r"<!--\s*not a recipe:.*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    heading: str  # the nearest heading above the block
    lang: str
    code: str
    marked: bool  # "<!-- not a recipe: ... -->" right above it

    @property
    def name(self) -> str:
        return f"{self.page} § {self.heading}"


def page_blocks(lang: str) -> list[Block]:
    out = []
    for path in PAGES:
        text = path.read_text()
        fences = list(FENCE.finditer(text))
        # headings outside fenced blocks (a bash block's "# comment" is none)
        prose = FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
        for m in fences:
            if m.group(1) != lang:
                continue
            before = text[: m.start()]
            headings = HEADING.findall(prose[: m.start()])
            above = before.rstrip("\n").rsplit("\n", 1)[-1]
            out.append(
                Block(
                    page=str(path.relative_to(ROOT)),
                    heading=headings[-1] if headings else "",
                    lang=lang,
                    code=m.group(2),
                    marked=bool(NOT_A_RECIPE.search(above)),
                )
            )
    return out


def recipe_names(lang: str) -> list[str]:
    """Each block as ``page § heading``, ``#2``, ``#3`` after it for more under one heading."""
    seen: dict[str, int] = {}
    names = []
    for block in page_blocks(lang):
        seen[block.name] = seen.get(block.name, 0) + 1
        n = seen[block.name]
        names.append(block.name if n == 1 else f"{block.name} #{n}")
    return names


def recipe(name: str, lang: str = "python") -> str:
    """The code of the block called ``name`` (see :func:`recipe_names`), as the page has it."""
    found = dict(zip(recipe_names(lang), page_blocks(lang), strict=True))
    assert name in found, f"no {lang} block {name!r} on the pages; there are {sorted(found)}"
    assert not found[name].marked, f"{name} is marked 'not a recipe' but has a test"
    return found[name].code


#: The python blocks the tests below run, filled in by :func:`runs`.
TESTED: set[str] = set()


def runs(name: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    TESTED.add(name)
    return lambda test: test


def run(name: str, **given: Any) -> dict[str, Any]:
    """Execute the block ``name`` with ``given`` as the reader's variables (and ``py_wire``
    imported, as every page assumes); returns its namespace."""
    namespace: dict[str, Any] = {"__name__": "recipe", "py_wire": py_wire, **given}
    exec(compile(recipe(name), f"<{name}>", "exec"), namespace)
    return namespace


def printed(name: str, **given: Any) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run(name, **given)
    return out.getvalue()


def comment_of(name: str, call: str) -> str:
    """The comment after ``call`` on its line of the block: what the page says it gives."""
    (line,) = [line for line in recipe(name).splitlines() if call in line]
    return line.split("#", 1)[1].strip()


def assert_same(want: Any, got: Any, what: str = "") -> None:
    """Decoded batches (or DataProto-free dicts of tensors) equal field by field, bit for bit."""
    assert set(got) == set(want), (what, sorted(got), sorted(want))
    for key, a in want.items():
        b = got[key]
        if isinstance(a, py_wire.PackedTensor) or hasattr(a, "logical_rows"):
            ra = a.rows() if isinstance(a, py_wire.PackedTensor) else a.logical_rows()
            rb = b.rows() if isinstance(b, py_wire.PackedTensor) else b.logical_rows()
            assert len(ra) == len(rb), (what, key)
            for i, (x, y) in enumerate(zip(ra, rb, strict=True)):
                assert len(x or []) == len(y or []), (what, key, i)
                for s, t in zip(x or [], y or [], strict=True):
                    assert s.dtype == t.dtype and torch.equal(s, t), (what, key, i)
        elif isinstance(a, list):
            assert a == b, (what, key)
        elif a.is_nested:
            assert torch.equal(a.offsets(), b.offsets()), (what, key)
            assert a.dtype == b.dtype and torch.equal(a.values(), b.values()), (what, key)
        else:
            assert a.dtype == b.dtype and torch.equal(a, b), (what, key)


def test_every_recipe_has_a_test() -> None:
    """A python block on a page is run below, or marked on the page as not a recipe (why)."""
    blocks = dict(zip(recipe_names("python"), page_blocks("python"), strict=True))
    assert len(blocks) >= 10, sorted(blocks)  # the parser finds the pages' blocks
    untested = {n for n, b in blocks.items() if not b.marked} - TESTED
    assert not untested, f"recipes on the pages with no test here: {sorted(untested)}"
    assert not TESTED - set(blocks), f"tests of blocks no page has: {sorted(TESTED - set(blocks))}"


# -- TOML: schema files ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [n for n, b in zip(recipe_names("toml"), page_blocks("toml"), strict=True) if not b.marked],
)
def test_schema_files_on_the_pages_load(name: str, tmp_path: Path) -> None:
    code = recipe(name, "toml")
    table = tomllib.loads(code)
    if "name" not in table:  # tables alone: what a file adds over a bundled schema
        code = 'extends = "qwen2_5_vl"\nname = "doc_fragment"\n' + code
    path = tmp_path / "page.toml"
    path.write_text(code)
    schema = py_wire.load_schema(path)
    assert schema.name == table.get("name", "doc_fragment")
    for field, keys in table.get("fields", {}).items():
        for key, value in keys.items():
            if key in ("tier", "dtype", "wire_dtype", "pad_value", "column", "required"):
                assert getattr(schema.fields[field], key) == value, (field, key)


# -- README ------------------------------------------------------------------------------------


@runs("README.md § Example")
def test_readme_example() -> None:
    ns = run("README.md § Example")
    out, batch = ns["out"], ns["batch"]
    assert_same(py_wire.decode(py_wire.encode(batch, ns["schema"])), out)
    shape = out["pixel_values"].as_tensor().shape
    assert str(shape) == comment_of("README.md § Example", ".as_tensor().shape").split(";")[0]
    assert out["pixel_values"][1] is None
    assert out["input_ids"].offsets().tolist() == [0, 5, 7]


@runs("README.md § Your own schema")
def test_readme_own_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # The file the page says to write: its TOML block, as it stands.
    (tmp_path / "my_grpo.toml").write_text(recipe("README.md § Your own schema", "toml"))
    said = comment_of("README.md § Your own schema", "print(")
    assert printed("README.md § Your own schema").strip() == said


# -- docs/compact-frames.md --------------------------------------------------------------------


@runs("docs/compact-frames.md § Compact frames")
def test_compact_frames() -> None:
    batch = generate("text_grpo", 4, seed=3)
    whole = py_wire.encode(batch, "text_grpo")
    data = bytes(py_wire.encode(batch, "text_grpo", compact=True))  # what the reader received
    ns = run(
        "docs/compact-frames.md § Compact frames",
        batch=batch,
        data=data,
        my_schema=py_wire.load_schema("text_grpo"),
    )
    assert ns["frame"].compact and len(ns["frame"]) < len(whole)
    assert_same(py_wire.decode(whole), ns["batch"])
    assert_same(py_wire.decode(whole), py_wire.decode(ns["frame"]))


# -- docs/streaming.md (without Ray) -----------------------------------------------------------


@runs("docs/streaming.md § Versions travel with the rows")
def test_concat_keeps_each_rows_version() -> None:
    versions = [2, 3]
    frames = [
        py_wire.encode(
            generate("text_grpo", 2, seed=v), "text_grpo", metadata={"policy_version": str(v)}
        )
        for v in versions
    ]
    ns = run("docs/streaming.md § Versions travel with the rows", frames=frames)
    got = py_wire.decode(ns["batch"])["policy_version"]
    said = comment_of("docs/streaming.md § Versions travel with the rows", "py_wire.decode(batch)")
    assert said.startswith(f"tensor({got.tolist()}"[:-1])  # "tensor([2, 2, 3, 3, ...])"
    assert got.tolist() == [2, 2, 3, 3]


# -- docs/interop.md (without TransferQueue) ---------------------------------------------------


@runs("docs/interop.md § NeMo-RL")
@pytest.mark.usefixtures("with_nemo_rl")  # NeMo-RL's PackedTensor importable, as in a NeMo-RL job
def test_nemo_rl_round_trip() -> None:
    train_data = nemo_batch("nemo_rl/qwen2_5_vl", 8, dedup=True)
    ns = run("docs/interop.md § NeMo-RL", train_data=dict(train_data))
    assert type(ns["train_data"]["pixel_values"]) is type(train_data["pixel_values"])
    assert_same(train_data, ns["train_data"])  # at the source's [B, L] width, bit for bit


@runs("docs/interop.md § verl")
def test_verl_round_trip() -> None:
    data, rollout = verl_batch(vl=True), verl_batch(vl=True, rollout=True)
    ns = run("docs/interop.md § verl", data=data, rollout=rollout)
    assert_same_dataproto(ns["data"], data, model_keys=True)
    # the recipe's last frame is the rollout's (no model outputs yet), as verl sent it
    assert_same_dataproto(verl.from_frame(ns["frame"]), rollout, model_keys=False)


@runs("docs/interop.md § verl #2")
def test_verl_reward_extras(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # The file the page shows, saved under the name its call reads.
    (tmp_path / "my_task_verl.toml").write_text(recipe("docs/interop.md § verl", "toml"))
    data = agent_loop_batch(vl=True)
    want = copy.deepcopy(data)
    assert {"acc", "pred", "ok"} <= set(data.non_tensor_batch)  # the reward function's keys
    ns = run("docs/interop.md § verl #2", data=data)
    want.batch["attention_mask"] = want.batch["attention_mask"].long()  # as verl's builders
    assert_same_verl(ns["data"], want)


# -- Ray and TransferQueue ---------------------------------------------------------------------


@pytest.fixture(scope="class")
def one_tq(request: pytest.FixtureRequest) -> Iterator[Any]:
    """TransferQueue as ``transfer_queue.init()`` starts it (SimpleStorage), on a Ray of 4 CPUs
    (TQ's controller and each storage unit take one; fewer hangs ``transfer_queue.init()``)."""
    import transfer_queue as tq

    request.getfixturevalue("ray_session")
    logging.getLogger("transfer_queue").setLevel(logging.CRITICAL)  # RayStore bootstrap noise
    tq.init()
    try:
        yield tq
    finally:
        tq.close()


@pytest.fixture
def tq_started(one_tq: Any) -> Iterator[Any]:
    """The class's TransferQueue, every key a test left in it cleared after the test."""
    yield one_tq
    for partition, keys in one_tq.kv_list().items():
        if keys:
            one_tq.kv_clear(list(keys), partition)


def nemo_rollout(n: int, *later: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """NeMo-RL's batch (padded, its PackedTensor) without the fields ``later`` (what the
    logprob workers and the driver add), and the whole train batch it becomes."""
    full = nemo_batch("nemo_rl/qwen2_5_vl", n, dedup=True)
    return {k: v for k, v in full.items() if k not in later}, full


def whole(full: dict[str, Any], rows: list[int] | None = None) -> py_wire.Frame:
    frame = nemo_rl.to_frame(full, "nemo_rl/qwen2_5_vl")
    return frame if rows is None else py_wire.take_rows(frame, rows)


PER_SAMPLE = "docs/interop.md § Per-sample keys through TQ's sampler"


def assert_stored_once_a_group(partition: str, sample_ids: list[str], n: int) -> None:
    """Each sample names its group's first key as the holder of its images, and only those
    keys hold a media column: a prompt's images are stored once, not once per sample."""
    import transfer_queue as tq

    from py_wire.interop import transfer_queue as ptq

    listed = tq.kv_list(partition)[partition]
    for i, key in enumerate(sample_ids):
        assert listed[key][ptq.MEDIA_HOLDER] == sample_ids[i - i % n]
    meta = tq.get_client().kv_retrieve_meta(keys=sample_ids, partition_id=partition)
    holders = [k for i, k in enumerate(sample_ids) if i % n == 0]
    held = tq.get_client().kv_retrieve_meta(keys=holders, partition_id=partition)
    assert ptq.MEDIA in held.field_names and ptq.MEDIA not in meta.field_names


README_TQ = re.compile(r"^\| NeMo-RL over TransferQueue \| `(py_wire[^`]*put\([^`]*\))`", re.M)


class TestOnOneTransferQueue:
    """The recipes on one TransferQueue (its start costs seconds a test), cleared between."""

    @runs("docs/interop.md § NeMo-RL over TransferQueue: one line per side")
    @pytest.mark.slow
    @pytest.mark.timeout(400)
    def test_nemo_rl_over_tq_one_line_per_side(self, tq_started: Any) -> None:
        from types import SimpleNamespace

        rollout, full = nemo_rollout(8, "prev_logprobs", "reference_policy_logprobs")
        sample_ids = [f"side{i}" for i in range(8)]
        width = int(full["input_lengths"].max()) + 4
        # NeMo-RL's KVBatchMeta of one DP rank: its samples, in the order its sampler gave them
        mine = [5, 0, 3, 6]
        meta = SimpleNamespace(sample_ids=[sample_ids[i] for i in mine], partition_id="side")
        mask = torch.tensor([1.0, 0.0] * 4)
        ns = run(
            "docs/interop.md § NeMo-RL over TransferQueue: one line per side",
            batch=rollout,
            sample_ids=sample_ids,
            partition_id="side",
            n=4,  # generations per prompt: two groups of four samples, a key each
            tags=[{"step": 3}] * 8,
            meta=meta,
            pad_to_seqlen=width,
            logprobs=full["prev_logprobs"][mine],  # what the rank computed, [B, W] padded
            ids=sample_ids,
            mask=mask,
        )
        assert tq_started.kv_list("side")["side"]["side0"]["step"] == 3
        assert_same(
            nemo_rl.from_frame(whole(full, mine), stage="logprob", pad_to_seqlen=width), ns["data"]
        )
        # what the trainer reads: the rollout, the rank's write-back, the driver's sample_mask
        trained = {k: v for k, v in full.items() if k != "reference_policy_logprobs"}
        trained["sample_mask"] = mask
        want = nemo_rl.from_frame(whole(trained, mine), stage="train", pad_to_seqlen=width)
        assert_same(want, ns["train"])
        assert torch.equal(ns["train"]["sample_mask"], mask[mine])

    @runs("docs/interop.md § TransferQueue")
    @pytest.mark.slow
    @pytest.mark.timeout(400)
    @pytest.mark.usefixtures("tq_started")
    def test_the_step_nemo_rl_runs(self) -> None:
        from py_wire.interop import transfer_queue as ptq

        n, groups = 2, 4
        rollout, full = nemo_rollout(
            n * groups, "prev_logprobs", "reference_policy_logprobs", "advantages"
        )
        keys = [f"step{g}" for g in range(groups)]
        ref, lengths = full["reference_policy_logprobs"], full["input_lengths"].tolist()
        ns = run(
            "docs/interop.md § TransferQueue",
            rollout=rollout,
            keys=keys,
            n=n,
            logprobs=full["prev_logprobs"],  # [B, W] padded, as NeMo-RL's workers return them
            ref=[row[:length] for row, length in zip(ref, lengths, strict=True)],  # per row
            advantages=full["advantages"],
        )
        got = ns["got"]
        assert_same(py_wire.decode(whole(full), stage="logprob"), dict(got))
        order, _ = ptq.meta_keys(ns["meta"])
        assert sorted(order) == keys
        rows = [keys.index(k) * n + r for k in order for r in range(n)]
        assert_same(py_wire.decode(whole(full, rows), stage="train"), dict(ns["train"]))

    @runs(PER_SAMPLE)
    @pytest.mark.slow
    @pytest.mark.timeout(400)
    @pytest.mark.usefixtures("tq_started")
    def test_per_sample_keys_through_tqs_sampler(self) -> None:
        from py_wire.interop import transfer_queue as ptq

        n, groups = 4, 2
        later = ("prev_logprobs", "reference_policy_logprobs", "advantages")
        rollout, full = nemo_rollout(n * groups, *later)
        sample_ids = [f"ps{i}" for i in range(n * groups)]
        ns = run(
            PER_SAMPLE,
            rollout=rollout,
            sample_ids=sample_ids,
            n=n,
            logprobs=full["prev_logprobs"],
            ref=full["reference_policy_logprobs"],
            advantages=full["advantages"],
        )
        order, _ = ptq.meta_keys(ns["meta"])
        assert len(order) == len(sample_ids) // 2  # get_meta handed out samples: it did not wait
        rows = [sample_ids.index(k) for k in order]
        width = ns["train"]["input_ids"].shape[1]  # materialize's: the longest row fetched
        assert width == int(full["input_lengths"][rows].max())
        want = nemo_rl.from_frame(whole(full, rows), stage="train", pad_to_seqlen=width)
        assert_same(want, ns["train"])
        assert_stored_once_a_group("step", sample_ids, n)

    @pytest.mark.slow
    @pytest.mark.timeout(400)
    @pytest.mark.usefixtures("tq_started")
    def test_readme_tq_line_stores_images_once_a_group(self) -> None:
        (call,) = README_TQ.findall((ROOT / "README.md").read_text())
        n = 4
        rollout, _ = nemo_rollout(2 * n, "reference_policy_logprobs")
        sample_ids = [f"readme{i}" for i in range(2 * n)]
        given = {"batch": rollout, "sample_ids": sample_ids, "partition_id": "readme", "n": n}
        eval(compile(call, "<README.md>", "eval"), {"py_wire": py_wire, **given})
        assert_stored_once_a_group("readme", sample_ids, n)
        got = nemo_rl.get(sample_ids, "readme")
        width = got["input_ids"].shape[1]
        assert_same(nemo_rl.from_frame(whole(rollout), pad_to_seqlen=width), got)


def sections(name: str) -> dict[str, str]:
    """The block's code cut at its ``# producer`` / ``# trainer`` comment lines: what runs
    once, in each producer, in the trainer (a page's one block for several processes)."""
    parts = {"setup": ""}
    current = "setup"
    for line in recipe(name).splitlines(keepends=True):
        for role in ("producer", "trainer"):
            if line.startswith(f"# {role}"):
                current = role
                parts[role] = ""
        parts[current] += line
    return parts


def rows_of(frame: py_wire.Frame) -> list[tuple[int, ...]]:
    return [tuple(r.tolist()) for r in py_wire.decode(frame, layout="list")["input_ids"]]


def without_versions(frame: py_wire.Frame) -> dict[str, Any]:
    out = dict(py_wire.decode(frame))
    out.pop("policy_version", None)
    return out


RAY_BUFFER = "docs/streaming.md § One contract, either backend"
SAMPLES = "docs/streaming.md § Samples that arrive apart: a prompt's images stored once"
TQ_STREAM = "docs/streaming.md § TransferQueue: `StalenessSampler`, `TQStream` and `TQBuffer` (TQ)"


@runs(RAY_BUFFER)
@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.usefixtures("ray_session")
def test_ray_buffer_step() -> None:
    parts = sections(RAY_BUFFER)
    assert set(parts) == {"setup", "producer", "trainer"}
    schema = py_wire.load_schema("text_grpo")
    groups = [generate("text_grpo", 2, seed=g) for g in range(8)]  # batch_groups on the page
    ns: dict[str, Any] = {"__name__": "recipe", "py_wire": py_wire, "schema": schema}
    exec(parts["setup"], ns)
    for group in groups:
        ns["group"] = group
        exec(parts["producer"], ns)
    ns.update(dp_size=2, t=0)
    exec(parts["trainer"], ns)
    step, buffer = ns["step"], ns["stream"]
    assert len(step.frames) == 2 and sum(len(ids) for ids in step.group_ids) == 8
    taken = sorted(row for frame in step.frames for row in rows_of(frame))
    sent = sorted(row for g in groups for row in rows_of(py_wire.encode(g, schema)))
    assert taken == sent  # every group once, across the two ranks
    for frame in step.frames:  # each row trained with the version it was generated with
        assert py_wire.decode(frame)["policy_version"].tolist() == [0] * frame.num_rows
    stats = buffer.stats()
    assert stats["acked"] == 8 and stats["trainer_version"] == 1


@runs(SAMPLES)
@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.usefixtures("ray_session")
def test_samples_put_apart() -> None:
    from py_wire.streaming import RayBuffer, StreamConfig

    schema = py_wire.load_schema("qwen2_5_vl")
    group = py_wire.encode(generate("qwen2_5_vl", 4, seed=1), schema)  # rows share their images
    samples = [py_wire.decode(py_wire.take_rows(group, [i]), layout="list") for i in range(4)]
    buffer = RayBuffer(StreamConfig(max_staleness=1, batch_groups=1))
    run(SAMPLES, buffer=buffer, n=4, samples=samples, schema=schema)
    step = buffer.take()
    (frame,) = step.frames
    assert frame is not None
    assert_same(without_versions(group), without_versions(frame))
    assert py_wire.decode(frame)["policy_version"].tolist() == [0] * 4
    buffer.ack(step)


@runs(TQ_STREAM)
@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.usefixtures("ray_session")
def test_tq_stream_step() -> None:
    import transfer_queue as tq

    from py_wire.streaming import StreamConfig
    from py_wire.streaming.tq import versions_of

    sent = py_wire.encode(
        generate("text_grpo", 2, seed=4), "text_grpo", metadata={"policy_version": "0"}
    )
    logging.getLogger("transfer_queue").setLevel(logging.CRITICAL)
    try:
        ns = run(
            TQ_STREAM,
            config=StreamConfig(max_staleness=1, batch_groups=1),
            key="g0",
            version=0,
            frame=sent,
            trainer_version=0,
            step=0,
            dp_rank=0,
            dp_size=1,
        )
        assert versions_of(ns["meta"]) == [0]
        assert_same(without_versions(sent), without_versions(ns["frame"]))
    finally:
        tq.close()


VERL_CLIENT = "docs/streaming.md § verl's fully-async trainer on the stream (Ray or TQ)"


@runs(VERL_CLIENT)
@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.usefixtures("ray_session")
def test_verl_queue_client() -> None:
    """The page's client, as verl's rollouter and trainer use it: a sample in, the same
    RolloutSample out (its DataProto equal on every cell and value)."""
    import ray
    from omegaconf import OmegaConf

    from tests.streaming.test_verl import assert_same as same_batch
    from tests.streaming.test_verl import generated, prompt

    config = OmegaConf.create(
        {
            "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 1}},
            "async_training": {"require_batches": 1, "trigger_parameter_sync_step": 1},
        }
    )
    sent = prompt(0)
    sent.full_batch = generated(0, 0)
    ns = run(VERL_CLIENT, config=config, rollout_sample=sent, ray=ray)
    trained, queued = ns["trained"], ns["queued"]
    assert (trained.sample_id, trained.epoch, trained.rollout_status, queued) == (
        sent.sample_id,
        sent.epoch,
        sent.rollout_status,
        0,
    )
    same_batch(trained.full_batch, sent.full_batch)
    assert trained.full_batch.meta_info == sent.full_batch.meta_info
    ns["client"].stream.close()
