"""A configuration whose only agent is not named ``default``: a request routed by Keel as an
operator starts it runs as that agent, with that agent's approvals."""

from __future__ import annotations

from pathlib import Path

import yaml

from adapters.assembly import Keel
from adapters.config import build_config
from runtime.store import executions
from runtime.store.records import Task
from tests.factories import make_signal
from tests.harness import until


def coder_keel(folder: Path, db_url: str) -> Keel:
    push = {"name": "git_push", "args": {"branch": "fix/safari"}}
    script = {"scripts": [{"turns": [{"tool_calls": [push]}, {"say": "pushed"}]}]}
    (folder / "script.yaml").write_text(yaml.safe_dump(script))
    tree = {
        "database": {"url": db_url},
        "model": {"provider": "scripted", "script": str(folder / "script.yaml")},
        "workspace": {"root": str(folder / "ws"), "sandbox": "none"},
        "worker": {"concurrency": 1, "poll_interval_s": 0.05},
        "agents": {"coder": {"require_approval": ["git_push"], "limits": {"max_turns": 5}}},
    }
    return Keel(build_config(tree, env={}))


async def test_push_waits_for_approval_when_the_only_agent_is_coder(
    db_url: str, tmp_path: Path
) -> None:
    keel = coder_keel(tmp_path, db_url)
    keel.migrate()
    await keel.connect()
    await keel.start()
    try:
        signal = make_signal(addresses_bot=True, kind="app_mention", text="<@U0KEEL> push the fix")
        routed = await keel.router.ingest(
            signal, provider="slack", delivery_id="Ev1", raw_kind="app_mention"
        )
        assert routed.task_id is not None
        task_id = routed.task_id

        async def parked() -> bool:
            run = await keel.db.read(lambda s: executions.load_run(s, task_id))
            return run is not None and run.phase == "await_approval"

        await until(parked, timeout=20)
        task = await keel.scheduler.get(task_id)
    finally:
        await keel.stop()
    assert isinstance(task, Task) and task.agent == "coder"
