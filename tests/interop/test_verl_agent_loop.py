"""The batch verl 0.9.1's agent loop really produces, built by its own
``AgentLoopWorker._postprocess`` (nothing of it re-implemented here): ``turn_scores``,
``tool_rewards``, ``min_global_steps``, ``max_global_steps``, ``extras``,
``reward_extra_info`` and the reward function's own keys (``acc``, ``pred``) beside the
tensors, through ``verl/qwen2_5_vl`` and ``verl/text`` and back, equal on every cell and value.
The reward function's keys are declared once, by pattern (``gather``)."""

from __future__ import annotations

import json
import types
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from verl import DataProto

with warnings.catch_warnings():  # verl imports ray.experimental.state (deprecated by Ray)
    warnings.simplefilter("ignore", DeprecationWarning)
    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopMetrics,
        AgentLoopWorker,
        _InternalAgentLoopOutput,
    )
from verl.utils.model import compute_position_id_with_mask
from verl.utils.torch_functional import pad_sequence_to_length

import py_wire
from py_wire.interop import verl as pw_verl
from tests.interop.test_verl import IMAGE_PAD, PAD, VISION_END, VISION_START, media, positions

P, R = 40, 16


def _row(i: int, vl: bool, g: torch.Generator, extra: dict[str, Any]) -> _InternalAgentLoopOutput:
    """One finished trajectory as the agent loop pads it (_agent_loop_postprocess)."""
    grids = [(1, 4, 4)] if vl and i % 3 != 2 else []
    prompt = torch.randint(0, 150000, (4 + i % 5,), generator=g).tolist()
    for t, h, w in grids:
        prompt += [VISION_START] + [IMAGE_PAD] * (t * h * w // 4) + [VISION_END]
    response = torch.randint(0, 150000, (3 + (7 * i) % 11,), generator=g).tolist()
    p = pad_sequence_to_length(torch.tensor([prompt]), P, PAD, left_pad=True)
    pm = pad_sequence_to_length(torch.ones(1, len(prompt), dtype=torch.long), P, 0, left_pad=True)
    r = pad_sequence_to_length(torch.tensor([response]), R, PAD)
    rm = pad_sequence_to_length(torch.ones(1, len(response), dtype=torch.long), R, 0)
    input_ids, mask = torch.cat([p, r], 1), torch.cat([pm, rm], 1)
    mmi = media(grids, g) if grids else None
    pos = positions(input_ids[0], mask[0], mmi)[None] if vl else compute_position_id_with_mask(mask)
    return _InternalAgentLoopOutput(
        prompt_ids=p,
        response_ids=r,
        input_ids=input_ids,
        position_ids=pos,
        response_mask=rm,
        attention_mask=mask,
        response_logprobs=pad_sequence_to_length(-torch.rand(1, len(response), generator=g), R, 0),
        multi_modal_inputs=mmi,
        reward_score=float(i % 2),
        num_turns=2 + i % 3,
        metrics=AgentLoopMetrics(generate_sequences=0.1 * i),
        extra_fields=extra,
    )


def agent_loop_batch(vl: bool, n: int = 6, seed: int = 0) -> DataProto:
    """verl's own _postprocess over single-turn and tool-agent rows: the reward loop's
    reward_extra_info (acc, pred, a float32 and a bool key), turn scores, tool rewards, global
    steps and extras set by some rows and None in others, and the dataset's keys."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        extra: dict[str, Any] = {
            "turn_scores": [] if i % 2 else [0.5, 1.0 * i],
            "tool_rewards": [] if i % 2 else [0.25],
            "reward_extra_info": {"acc": float(i % 2), "pred": f"#### {i}", "ok": i % 3 == 0},
        }
        if i % 2 == 0:  # the tool agent loop's partial-rollout bookkeeping
            extra |= {"min_global_steps": 3, "max_global_steps": 4, "extras": {"tool": "calc"}}
        rows.append(_row(i, vl, g, extra))
    dataset = {
        "data_source": np.array(["geo3k"] * n, dtype=object),
        "uid": np.array([f"u{i // 2}" for i in range(n)], dtype=object),
        "reward_model": np.array([{"ground_truth": str(i)} for i in range(n)], dtype=object),
    }
    worker = types.SimpleNamespace(reward_loop_worker_handles=None)
    out: DataProto = AgentLoopWorker._postprocess(worker, rows, input_non_tensor_batch=dataset)
    return out


def reward_schema(tmp_path: Path, base: str, gather: list[str]) -> py_wire.Schema:
    """What a user writes once for their reward function's keys: two lines over the bundle."""
    path = tmp_path / "reward.toml"
    path.write_text(
        f'extends = "{base}"\nname = "my_reward/{base}"\n'
        f"[fields.reward_extras]\ngather = {json.dumps(gather)}\n"
    )
    return py_wire.load_schema(path)


def with_record(frame: py_wire.Frame, schema: py_wire.Schema, key: str, value: str) -> Any:
    """The frame's rows encoded again with one ``verl.*`` metadata entry replaced."""
    rows = py_wire.decode(frame, layout="list")
    meta = {k: v for k, v in frame.metadata.items() if k.startswith("verl.")} | {key: value}
    return py_wire.encode(rows, schema, stage="logprob", metadata=meta)


def assert_same(got: DataProto, want: DataProto) -> None:
    assert sorted(got.batch.keys()) == sorted(want.batch.keys())
    for k in want.batch.keys():  # noqa: SIM118 (iterating a TensorDict walks its rows)
        a, b = got.batch[k], want.batch[k]
        assert a.dtype == b.dtype and torch.equal(a, b), k
    assert sorted(got.non_tensor_batch) == sorted(want.non_tensor_batch)
    for k, b in want.non_tensor_batch.items():
        a = got.non_tensor_batch[k]
        assert a.dtype == b.dtype and a.shape == b.shape, (k, a.dtype, b.dtype)
        if k == "multi_modal_inputs":
            for d, e in zip(a, b, strict=True):
                assert sorted(d or {}) == sorted(e or {})
                for key, t in (e or {}).items():
                    assert torch.equal(d[key], t), key
        else:
            assert a.tolist() == b.tolist(), k
    assert got.meta_info == want.meta_info


@pytest.mark.parametrize("vl", [True, False], ids=["qwen2_5_vl", "text"])
def test_the_agent_loops_batch_round_trips(vl: bool, tmp_path: Path) -> None:
    dp = agent_loop_batch(vl)
    # What the agent loop writes beside the tensors: all of it travels.
    for key in ("turn_scores", "tool_rewards", "min_global_steps", "max_global_steps", "extras"):
        assert key in dp.non_tensor_batch
    assert {"acc", "pred", "ok", "reward_extra_info"} <= set(dp.non_tensor_batch)
    schema = reward_schema(tmp_path, "verl/qwen2_5_vl" if vl else "verl/text", ["*"])
    frame = pw_verl.to_frame(dp, schema, stage="logprob")
    assert json.loads(frame.metadata["verl.gathered"]) == {
        "acc": ["<f8", []],
        "pred": [dp.non_tensor_batch["pred"].dtype.str, []],
        "ok": ["|b1", []],
    }
    back = pw_verl.from_frame(py_wire.Frame.from_buffer(bytearray(memoryview(frame))))
    dp.batch["attention_mask"] = dp.batch["attention_mask"].long()
    assert_same(back, dp)


def test_the_bundled_schema_takes_every_key_but_the_reward_functions() -> None:
    """With no pattern declared, the reward function's keys are refused by name (never
    dropped); everything else the agent loop writes is the bundled schema's."""
    dp = agent_loop_batch(True)
    with pytest.raises(py_wire.BatchError, match="gather") as e:
        pw_verl.to_frame(dp, "verl/qwen2_5_vl", stage="logprob")
    assert e.value.field in ("non_tensor_batch['acc']", "non_tensor_batch['pred']")
    for key in ("acc", "pred", "ok"):
        del dp.non_tensor_batch[key]
    assert pw_verl.from_frame(
        pw_verl.to_frame(dp, "verl/qwen2_5_vl", stage="logprob")
    ).non_tensor_batch.keys()


def test_patterns_take_only_the_keys_they_match(tmp_path: Path) -> None:
    dp = agent_loop_batch(False)
    schema = reward_schema(tmp_path, "verl/text", ["acc", "pr*"])
    with pytest.raises(py_wire.BatchError, match="'ok'"):
        pw_verl.to_frame(dp, schema, stage="logprob")
    del dp.non_tensor_batch["ok"]
    frame = pw_verl.to_frame(dp, schema, stage="logprob")
    assert sorted(json.loads(frame.metadata["verl.gathered"])) == ["acc", "pred"]


@pytest.mark.parametrize(
    ("column", "match"),
    [
        (np.array([b"x"] * 6), "dtype"),
        (np.array([float("nan")] * 6), "JSON"),
        (np.fromiter([(1, 2)] * 6, dtype=object, count=6), "come back equal"),
        (np.array([(1, 2)] * 6, dtype=object), "one value per row"),
    ],
)
def test_gathered_values_json_cannot_carry_are_refused(
    column: np.ndarray, match: str, tmp_path: Path
) -> None:
    dp = agent_loop_batch(False)
    dp.non_tensor_batch["acc"] = column
    with pytest.raises(py_wire.BatchError, match=match):
        pw_verl.to_frame(dp, reward_schema(tmp_path, "verl/text", ["*"]), stage="logprob")


@pytest.mark.parametrize(
    "record",
    ['{"acc": ["<V8", []]}', '{"acc": "<f8"}', '{"acc": ["<f8", [-1]]}', "[1]"],
)
def test_a_gathered_record_to_frame_did_not_write_is_a_frame_error(
    record: str, tmp_path: Path
) -> None:
    schema = reward_schema(tmp_path, "verl/text", ["*"])
    damaged = with_record(
        pw_verl.to_frame(agent_loop_batch(False), schema, stage="logprob"),
        schema,
        "verl.gathered",
        record,
    )
    with pytest.raises(py_wire.FrameError, match=r"verl\.gathered"):
        pw_verl.from_frame(damaged)


def test_a_gathered_key_missing_from_a_row_names_field_row_and_key(tmp_path: Path) -> None:
    schema = reward_schema(tmp_path, "verl/text", ["*"])
    frame = pw_verl.to_frame(agent_loop_batch(False), schema, stage="logprob")
    record = json.loads(frame.metadata["verl.gathered"]) | {"score": ["<f8", []]}
    damaged = with_record(frame, schema, "verl.gathered", json.dumps(record))
    with pytest.raises(py_wire.BatchError, match=r"row 0.*'score'") as e:
        pw_verl.from_frame(damaged)
    assert e.value.field == "reward_extras"


def test_gather_is_a_json_field_and_only_one_field_gathers(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        'extends = "verl/text"\nname = "bad"\n[fields.uid]\ngather = ["*"]\n'  # utf8, not json
    )
    with pytest.raises(py_wire.SchemaError, match="gather needs encoding"):
        py_wire.load_schema(path)
    path.write_text('extends = "verl/text"\nname = "bad"\n[fields.extras]\ngather = ["*"]\n')
    with pytest.raises(py_wire.SchemaError, match="one field gathers"):
        py_wire.load_schema(path)
