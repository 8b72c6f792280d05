"""What the detectors share (diag.analyze.detectors.common)."""

from __future__ import annotations

import pytest

from diag.analyze.detectors.common import _is_user_code


@pytest.mark.parametrize("filename", ["/site/diag/runtime/collectives.py",
                                      "/src/ddiag/diag/runtime/instrument.py",
                                      r"C:\src\diag\runtime\metrics.py"])
def test_ddiags_own_runtime_frames_are_not_user_code(filename):
    assert not _is_user_code({"filename": filename})


def test_the_users_training_script_is_user_code():
    assert _is_user_code({"filename": "/home/u/train.py"})
