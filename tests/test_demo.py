"""The README's demo runs end to end (short): real data, DataLoader, GradManager, AdamW, xla_trace."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))


def test_digits_demo_trains(tmp_path):
    pytest.importorskip("sklearn")
    import digits
    acc = digits.main(["--epochs", "3", "--plot", str(tmp_path / "loss.png")])
    assert acc > 0.85
    assert (tmp_path / "loss.png").exists()
