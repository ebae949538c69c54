"""The obs seam: the recorder contract and its no-op default."""

from __future__ import annotations

import inspect

from schedd.obs import MetricsRecorder, NoopRecorder


def test_the_noop_recorder_implements_every_method_and_does_nothing() -> None:
    recorder: MetricsRecorder = NoopRecorder()  # mypy checks the structure
    contract = {n for n in vars(MetricsRecorder) if not n.startswith("_")}
    assert contract == {n for n in vars(NoopRecorder) if not n.startswith("_")}
    for name in contract:
        method = getattr(recorder, name)
        args = [0] * (len(inspect.signature(method).parameters))
        if name == "histogram":  # the one read: it keeps nothing
            assert method(*args) == []
        else:
            assert method(*args) is None
