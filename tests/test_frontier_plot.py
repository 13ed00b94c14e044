"""The protect frontier's chart keeps what it was drawn from inside the PNG: a rerun with the same points, budget and
plotting code keeps the file without drawing (no matplotlib), and anything else draws it again; the text chunk is
one Pillow reads, in an image it decodes."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from PIL import Image

import tasks.report.plots_protect as plots_protect
from flows.cli.protect import DRAWN_FROM, _write_frontier_plot
from tasks.report.png_text import png_text, png_with_text


def _frontier(value: float = 0.4) -> pd.DataFrame:
    return pd.DataFrame({"floor": [0.9, 0.7], "chosen": [False, True], "met": [False, False],
                         "figure": ["reidentification"] * 2, "value": [value, 0.2], "ci_low": [0.3, 0.1],
                         "ci_high": [0.5, 0.3], "meaning": [0.95, 0.8], "meaning_ci_low": [0.94, 0.78],
                         "meaning_ci_high": [0.96, 0.82]})


def test_the_chart_is_drawn_once_per_frontier_and_budget(tmp_path, monkeypatch):
    path = tmp_path / "P.frontier.png"
    _write_frontier_plot(_frontier(), "reidentification<=0.1", path)
    first = path.read_bytes()
    image = Image.open(io.BytesIO(first))
    image.load()  # every chunk's CRC checked
    assert image.size == (800, 450) and image.text == png_text(path) and DRAWN_FROM in image.text

    def no_drawing(*_args, **_kwargs):
        raise AssertionError("drawn again")

    monkeypatch.setattr(plots_protect, "protect_frontier_chart", no_drawing)
    _write_frontier_plot(_frontier(), "reidentification<=0.1", path)  # same points and budget: kept as it is
    assert path.read_bytes() == first
    monkeypatch.undo()
    _write_frontier_plot(_frontier(), "reidentification<=0.2", path)  # another budget line
    second = png_text(path)[DRAWN_FROM]
    _write_frontier_plot(_frontier(0.45), "reidentification<=0.2", path)  # another point
    assert len({png_text(path)[DRAWN_FROM], second, image.text[DRAWN_FROM]}) == 3


def test_text_chunks_round_trip_and_other_files_have_none(tmp_path):
    buffer = io.BytesIO()
    Image.new("RGB", (3, 2), "white").save(buffer, format="PNG")
    path = tmp_path / "a.png"
    path.write_bytes(png_with_text(buffer.getvalue(), "k", "v 1"))
    assert png_text(path) == {"k": "v 1"} == Image.open(path).text
    (tmp_path / "b.png").write_bytes(b"not a picture")
    assert png_text(tmp_path / "b.png") == {} == png_text(tmp_path / "missing.png")
    with pytest.raises(ValueError, match="not a PNG"):
        png_with_text(b"GIF89a", "k", "v")
