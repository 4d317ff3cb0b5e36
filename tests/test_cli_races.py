"""Two operators at once: two `eagle3 set` both land."""

from __future__ import annotations

import threading

import console.core.config.saved as saving
from console.cli import main
from console.core.config.overlay import read_saved
from tests.test_cli_saved_overrides import cfg  # noqa: F401 - the fixture: a config with two vars

WAIT_S = 5.0  # how long the first set waits, after its read, for the second to read too


def test_two_sets_at_once_keep_both_values(cfg, monkeypatch):  # noqa: F811 - cfg: the imported fixture
    """The first `set` reads the overlay, then lingers; a second `set` starts meanwhile. Each
    must see the other's value: the second waits for the first, or the first's is lost."""
    real = saving.read_saved
    first_read, second_read = threading.Event(), threading.Event()

    def lingering_read(path):  # type: ignore[no-untyped-def]
        value = real(path)
        if threading.current_thread().name == "first":
            first_read.set()
            second_read.wait(WAIT_S)  # wait-ok: the second set reads here unless a lock holds it off
        else:
            second_read.set()
        return value

    monkeypatch.setattr(saving, "read_saved", lingering_read)
    codes: dict[str, int] = {}
    first = threading.Thread(name="first", target=lambda: codes.update(first=main(["set", str(cfg), "steps=40"])))
    second = threading.Thread(name="second",
                              target=lambda: codes.update(second=main(["set", str(cfg), "work=./work"])))
    first.start()
    assert first_read.wait(60)
    second.start()
    first.join(120)
    second.join(120)
    assert codes == {"first": 0, "second": 0}
    assert dict(read_saved(cfg)) == {"steps": "40", "work": "./work"}

