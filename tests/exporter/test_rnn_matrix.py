"""PyTorch's recurrent export matrix (tests/exporter/rnn_matrix.py) with onnxsight: every case passes.

The full matrix (192 cases) is slow (`make test-zoo` runs it); a fast subset covers each axis of it:
each kind, three layers, bidirectional, an initial state, packed and packed batch-first, dropout.
"""

from __future__ import annotations

import pytest

from tests.exporter.rnn_matrix import CASES, Case, run_case

FAST = ("lstm_trilayer_bidirectional_with_initial_state_with_variable_length_sequences_with_dropout",
        "lstm_unilayer_forward_no_initial_state_with_batch_first_sequence_lengths_without_dropout",
        "gru_trilayer_bidirectional_no_initial_state_with_batch_first_sequence_lengths_with_dropout",
        "gru_unilayer_forward_with_initial_state_without_sequence_lengths_without_dropout",
        "elman_relu_unilayer_bidirectional_with_initial_state_with_variable_length_sequences_without_dropout",
        "elman_tanh_trilayer_forward_no_initial_state_with_batch_first_sequence_lengths_with_dropout")


def _check(case: Case) -> None:
    outcome = run_case(case, "onnxsight")
    assert outcome.status == "passed", f"{case.id}: {outcome.status}: {outcome.detail}"


@pytest.mark.parametrize("case", [c for c in CASES if c.id in FAST], ids=lambda c: c.id)
def test_rnn_matrix_fast_subset(case: Case) -> None:
    _check(case)


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in CASES if c.id not in FAST], ids=lambda c: c.id)
def test_rnn_matrix(case: Case) -> None:
    _check(case)


def test_the_matrix_is_pytorchs() -> None:
    assert len(CASES) == 192 and len({c.id for c in CASES}) == 192
    assert all(any(c.id == f for c in CASES) for f in FAST)
