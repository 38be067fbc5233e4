"""The step batch (algorithms.agent.step_batch): select() and concat_batches() carry every
per-row field, the text part included; anchors interned to dense ids."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("transformers")

from algorithms.agent.step_batch import StepLog, concat_batches, intern_anchors  # noqa: E402
from tests.algorithms.fakes import cut_rollout  # noqa: E402
from tests.algorithms.hand_batch import hand_batch  # noqa: E402
from tests.algorithms.tiny import make_tokenizer  # noqa: E402


def _tokens(ids: np.ndarray, mask: np.ndarray) -> list[int]:
    return ids[mask == 1].tolist()


def test_select_keeps_whole_trajectories_and_their_bootstrap_prompts():
    batch = cut_rollout(make_tokenizer(), max_steps=2)  # rows: 0 0 1 2 3 3
    scored = batch.with_scores(values=np.arange(len(batch), dtype=np.float32),
                               bootstrap_values=np.array([7.0, 8.0, 9.0], dtype=np.float32))
    part = scored.select(np.array([0, 1, 4, 5]))  # trajectories 0 and 3
    np.testing.assert_array_equal(part.traj_ids, [0, 0, 3, 3])
    np.testing.assert_array_equal(part.values, [0, 1, 4, 5])
    np.testing.assert_array_equal(part.last_step, [0, 1, 0, 1])
    assert part.log.actions == tuple(batch.log.actions[i] for i in (0, 1, 4, 5))
    # Trajectories 1 and 2 take their bootstrap prompts along; 3's now follows row 3.
    np.testing.assert_array_equal(part.bootstrap_rows, [3])
    np.testing.assert_array_equal(part.bootstrap_values, [9.0])
    assert _tokens(part.bootstrap_prompt_ids[0], part.bootstrap_prompt_mask[0]) == \
        _tokens(batch.bootstrap_prompt_ids[2], batch.bootstrap_prompt_mask[2])
    assert part.env_errors == batch.env_errors  # rollout-wide counts stay
    assert len(scored.select(np.zeros(0, dtype=np.int64))) == 0
    with pytest.raises(ValueError, match="whole trajectories"):
        scored.select(np.array([0, 2]))
    with pytest.raises(ValueError, match="ascending"):
        scored.select(np.array([2, 0, 1]))


@pytest.mark.parametrize("part", ["batch", "log"])
def test_every_field_with_one_entry_per_row_is_carried_by_select(part):
    """A field of N entries must be declared ``per_row`` (else select() and
    concat_batches() would silently drop it); a field declared so has N entries. The
    same holds for the batch's text part (``StepLog``)."""
    from dataclasses import fields

    from algorithms.agent.step_batch import StepLog

    def of(batch):
        return batch if part == "batch" else batch.log

    batch = cut_rollout(make_tokenizer(), max_steps=2)
    batch = batch.with_scores(values=np.zeros(len(batch), dtype=np.float32),
                              old_log_probs=np.zeros(batch.response_ids.shape, np.float32),
                              ref_log_probs=np.zeros(batch.response_ids.shape, np.float32))
    value = of(batch)
    declared = {f.name for f in fields(value) if f.metadata.get("per_row")}
    sized = {f.name for f in fields(value)
             if isinstance(getattr(value, f.name), (np.ndarray, tuple, StepLog))
             and len(getattr(value, f.name)) == len(batch)}
    assert len(batch) != batch.bootstrap_rows.size  # the sizes tell rows apart
    assert sized <= declared
    unused = {name for name in declared - sized
              if getattr(value, name) is None or getattr(value, name) == ()}
    assert declared - sized == unused  # only fields this rollout left empty
    selected = of(batch.select(np.array([0, 1])))
    for name in sized:
        assert len(getattr(selected, name)) == 2, name


def test_anchor_ids_are_dense_and_follow_anchor_equality():
    anchors = ("b", ("x", 1), "b", 7, ("x", 1), "c")
    np.testing.assert_array_equal(intern_anchors(anchors), [0, 1, 0, 2, 1, 3])
    assert intern_anchors(()).shape == (0,)
    with pytest.raises(TypeError):
        intern_anchors([["unhashable"]])


def test_concat_places_the_blocks_and_joins_their_text():
    """Block 1's ids move by its group offset (trajectories by offset x group size); the
    text part of every row comes along, in order."""
    first = hand_batch([(0, [1.0, 0.0], ["a", "b"], False), (0, [0.0], ["a"], False)])
    second = hand_batch([(0, [2.0], ["c"], False), (0, [1.0], ["a"], False)])
    second = replace(second, log=StepLog(task_ids=("u", "u"), task_types=("k", "k"),
                                         actions=("x", "y"), response_texts=("X", "Y")))
    joined = concat_batches([first, second], [0, 3], group_size=2, pad_id=0)
    np.testing.assert_array_equal(joined.traj_ids, [0, 0, 1, 6, 7])
    np.testing.assert_array_equal(joined.group_ids, [0, 0, 0, 3, 3])
    np.testing.assert_array_equal(joined.anchor_ids, [0, 1, 0, 2, 0])
    assert joined.log.actions == ("a", "a", "a", "x", "y")
    assert joined.log.task_ids == ("t", "t", "t", "u", "u")
    assert joined.log.response_texts == ("a", "a", "a", "X", "Y")
    assert len(joined.log) == len(joined) == 5
    part = joined.select(np.array([3, 4]))
    assert part.log.actions == ("x", "y") and part.log.observations == ()


def test_concat_keeps_every_blocks_bootstrap_prompts_left_padded():
    tokenizer = make_tokenizer()
    blocks = [cut_rollout(tokenizer, max_steps=2), cut_rollout(tokenizer, max_steps=3),
              cut_rollout(tokenizer, max_steps=2, fail_at=None)]
    widths = {b.bootstrap_prompt_ids.shape[1] for b in blocks}
    assert len(widths) > 1  # the blocks' bootstrap prompts differ in width
    joined = concat_batches(blocks, [0, 2, 4], group_size=2,
                            pad_id=int(tokenizer.pad_token_id))
    starts = np.cumsum([0] + [len(b) for b in blocks[:-1]])
    np.testing.assert_array_equal(joined.bootstrap_rows, np.concatenate(
        [b.bootstrap_rows + start for b, start in zip(blocks, starts, strict=True)]))
    mask = joined.bootstrap_prompt_mask
    assert np.all(np.diff(mask, axis=1) >= 0) and mask[:, -1].all()  # padding on the left
    kept = [_tokens(b.bootstrap_prompt_ids[k], b.bootstrap_prompt_mask[k])
            for b in blocks for k in range(len(b.bootstrap_rows))]
    assert [_tokens(joined.bootstrap_prompt_ids[k], mask[k]) for k in range(len(kept))] == kept


def test_a_single_block_is_still_placed_at_its_offset():
    batch = cut_rollout(make_tokenizer(), max_steps=2)
    placed = concat_batches([batch], [1], group_size=2, pad_id=0)
    np.testing.assert_array_equal(placed.traj_ids, batch.traj_ids + 2)
    np.testing.assert_array_equal(placed.group_ids, batch.group_ids + 1)
    assert concat_batches([batch], [0], group_size=2, pad_id=0) is batch
