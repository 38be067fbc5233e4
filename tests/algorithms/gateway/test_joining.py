"""join_calls on hand-written calls: rows, masks, log-probs, spans, joins and breaks."""

from __future__ import annotations

from algorithms.gateway.joining import join_calls, prompt_extends
from algorithms.gateway.records import CallRecord


def call(prompt, completion, logprobs=None):
    if logprobs is None:
        logprobs = tuple(-0.5 - i for i in range(len(completion)))
    return CallRecord(prompt_ids=tuple(prompt), completion_ids=tuple(completion),
                      logprobs=tuple(logprobs), messages=[], tools=None,
                      response={"role": "assistant", "content": ""}, finish_reason="stop",
                      anchor="a")


def test_no_calls_no_rows():
    joined = join_calls([])
    assert joined.rows == [] and joined.joins == 0 and joined.breaks == 0


def test_a_call_that_extends_continues_the_row_with_the_tokens_between_masked():
    first = call([1, 2, 3], [4, 5], [-0.1, -0.2])
    second = call([1, 2, 3, 4, 5, 6, 7], [8], [-0.3])
    joined = join_calls([first, second])
    assert joined.joins == 1 and joined.breaks == 0
    (row,) = joined.rows
    assert row.ids == (1, 2, 3, 4, 5, 6, 7, 8)
    assert row.loss_mask == (0, 0, 0, 1, 1, 0, 0, 1)
    assert row.logprobs == (0.0, 0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.3)
    assert row.call_indices == (0, 1)
    assert row.completion_spans == ((3, 5), (7, 8))


def test_a_call_that_does_not_extend_starts_a_new_row():
    first = call([1, 2], [3], [-1.0])
    rewritten = call([1, 2, 9, 6], [7], [-2.0])  # 9 where the sampled 3 stood
    third = call([1, 2, 9, 6, 7, 5], [4, 2], [-3.0, -4.0])
    joined = join_calls([first, rewritten, third])
    assert joined.joins == 1 and joined.breaks == 1
    a, b = joined.rows
    assert a.ids == (1, 2, 3) and a.loss_mask == (0, 0, 1) and a.call_indices == (0,)
    assert b.ids == (1, 2, 9, 6, 7, 5, 4, 2)
    assert b.loss_mask == (0, 0, 0, 0, 1, 0, 1, 1)
    assert b.logprobs == (0.0, 0.0, 0.0, 0.0, -2.0, 0.0, -3.0, -4.0)
    assert b.call_indices == (1, 2) and b.completion_spans == ((4, 5), (6, 8))


def test_a_prompt_equal_to_the_row_joins_with_nothing_between():
    joined = join_calls([call([1], [2]), call([1, 2], [3])])
    (row,) = joined.rows
    assert row.ids == (1, 2, 3) and row.loss_mask == (0, 1, 1)
    assert row.completion_spans == ((1, 2), (2, 3))


def test_a_shorter_prompt_breaks_and_only_the_last_row_is_extended():
    calls = [call([1, 2], [3]), call([1], [5]), call([1, 2, 3, 4], [6])]
    joined = join_calls(calls)
    # the third extends the first row, not the last one: a break
    assert joined.breaks == 2 and joined.joins == 0 and len(joined.rows) == 3


def test_a_call_without_logprobs_leaves_its_row_without():
    joined = join_calls([call([1], [2], [-1.0]), call([1, 2, 3], [4], ())])
    assert joined.rows[0].logprobs is None and joined.rows[0].loss_mask == (0, 1, 0, 1)


def test_prompt_extends():
    first = call([1, 2], [3])
    assert prompt_extends(first, [1, 2, 3]) and prompt_extends(first, [1, 2, 3, 4])
    assert not prompt_extends(first, [1, 2]) and not prompt_extends(first, [1, 2, 4])
    assert not prompt_extends(None, [1])
