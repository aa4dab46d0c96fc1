"""Scripted seeks (mmrl.data.seek_script): exact seconds or a window of whole seconds covering the evidence."""
import json

import pytest

from mmrl.data.seek_script import seek_arguments, seek_call


def test_exact_and_whole_second_arguments():
    assert seek_arguments(13.25, 13.75) == {"start": 13.25, "end": 13.75, "nframes": 4}
    assert seek_arguments(13.25, 13.75, "whole") == {"start": 13, "end": 15}
    assert seek_arguments(13.75, 14.25, "whole") == {"start": 13, "end": 15}  # crosses a second: still covered
    assert seek_arguments(13.0, 13.5, "whole", width=1) == {"start": 13, "end": 14}
    assert seek_arguments(3.5, 7.25, "whole") == {"start": 3, "end": 8}  # a longer segment: up to ceil(t1)
    for t0 in (0.0, 0.25, 9.5, 30.75):  # any evidence of <= 1 s lies inside its 2 s window
        a = seek_arguments(t0, t0 + 1.0, "whole")
        assert a["start"] <= t0 and t0 + 1.0 <= a["end"] and isinstance(a["start"], int)
    text = seek_call(13.25, 13.75, "whole")
    assert text == '<tool_call>{"name": "video_seek", "arguments": {"start": 13, "end": 15}}</tool_call>'
    assert json.loads(seek_call(1.0, 1.5, nframes=2)[len("<tool_call>"):-len("</tool_call>")])["arguments"]["nframes"] == 2


def test_bad_style_or_width_is_refused():
    with pytest.raises(ValueError, match="seek style"):
        seek_arguments(1.0, 2.0, "rounded")
    with pytest.raises(ValueError, match="wide"):
        seek_arguments(1.0, 2.0, "whole", width=0)
