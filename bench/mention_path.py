"""The path of one Slack mention through Keel's own code, from the signed webhook to 👀.

Not a timing: an architecture figure (issue #40). Keel is served on loopback against the Slack
emulator (as ``tests/integration/keel_live.py`` does, no workers), a profiler hook records
every call into ``runtime``, ``routing`` and ``adapters`` (the emulators excluded: they stand
for Slack) from the moment the delivery is sent until the emulator shows the ack reaction.
Printed, one ``FIGURE`` line each:

- ``modules``: distinct Keel modules that ran on the way;
- ``climbs``: distinct pairs (caller, callee) where a lower layer calls into a higher one
  (runtime < routing < adapters): callbacks that make a reader jump back up;
- then the modules in the order first entered.

Run: ``.venv/bin/python bench/mention_path.py`` (a few seconds).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from runtime.store.engine import make_engine  # noqa: E402
from runtime.store.migrate import upgrade  # noqa: E402
from tests.integration.keel_live import live_keel  # noqa: E402

LAYERS = {"runtime": 0, "routing": 1, "adapters": 2}
PACKAGES = tuple(str(ROOT / name) + "/" for name in LAYERS)
EMULATORS = str(ROOT / "adapters" / "emulators") + "/"


def _module(filename: str) -> str | None:
    if not filename.startswith(PACKAGES) or filename.startswith(EMULATORS):
        return None
    relative = Path(filename).relative_to(ROOT).with_suffix("")
    return ".".join(relative.parts).removesuffix(".__init__")


class Tracer:
    """Calls into Keel's modules, in the order first entered, in every thread."""

    def __init__(self) -> None:
        self.on = False
        self.first_seen: list[str] = []
        self.climbs: set[tuple[str, str]] = set()
        self._names: dict[str, str | None] = {}

    def _name(self, filename: str) -> str | None:
        if filename not in self._names:
            self._names[filename] = _module(filename)
        return self._names[filename]

    def __call__(self, frame: FrameType, event: str, _: Any) -> None:
        if not self.on or event != "call":
            return
        module = self._name(frame.f_code.co_filename)
        if module is None:
            return
        if module not in self.first_seen:
            self.first_seen.append(module)
        caller = frame.f_back
        while caller is not None and self._name(caller.f_code.co_filename) is None:
            caller = caller.f_back
        if caller is not None:
            above = self._name(caller.f_code.co_filename)
            assert above is not None
            if LAYERS[module.split(".")[0]] > LAYERS[above.split(".")[0]]:
                self.climbs.add((above, module))


async def _measure(folder: Path) -> Tracer:
    url = f"sqlite:///{folder / 'keel.db'}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    tracer = Tracer()
    # The hook is set before the servers' threads start (a thread takes it when it starts);
    # it records only while ``on``.
    sys.setprofile(tracer)
    threading.setprofile(tracer)
    try:
        with live_keel(folder / "work", url) as live:
            # One mention first, unrecorded: imports and pools warm, as in a running Keel.
            await _mention_and_ack(live)
            tracer.on = True
            await _mention_and_ack(live)
            tracer.on = False
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return tracer


async def _mention_and_ack(live: Any) -> None:
    event = live.mention("what does the checkout test check?")
    await live.send_slack(event)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        message = next(m for m in live.slack.messages if m.ts == event["ts"])
        if message.reactions.get("eyes"):
            return
        await asyncio.sleep(0.01)
    raise SystemExit("no 👀 within 30 s")


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        tracer = asyncio.run(_measure(Path(folder)))
    print(f"FIGURE mention_modules value={len(tracer.first_seen)}")
    print(f"FIGURE mention_climbs value={len(tracer.climbs)}")
    for above, below in sorted(tracer.climbs):
        print(f"  climb {above} -> {below}")
    print("  path: " + " > ".join(tracer.first_seen))


if __name__ == "__main__":
    main()
