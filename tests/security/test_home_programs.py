"""Programs a command leaves in its home are found by the next command in the sandbox (what a
setup step installs there is on PATH), and never by anything Keel runs on the host: the
wrapper that starts a command, Keel's git, the egress proxy."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from runtime.workspace.egress import Egress, EgressMode
from tests.host import require_bwrap
from tests.security.kit import make_origin, new_workspace, run

# Names the host side runs by PATH lookup, or could: the wrapper's, git's, the proxy's.
HOST_PROGRAMS = ("date", "mv", "ln", "rm", "bash", "setsid", "git", "python3", "env", "sleep")


@pytest.mark.parametrize("egress", ["off", "allowlist"])
async def test_programs_in_the_home_reach_later_commands_and_never_the_host(
    tmp_path: Path, egress: EgressMode
) -> None:
    require_bwrap()
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin))
    sandbox = replace(workspaces.sandbox, egress=Egress(egress, ("pypi.org",)))
    marker = tmp_path / "ran-on-the-host"
    plant = "; ".join(
        f"printf '#!/bin/sh\\ntouch {marker}\\nexit 0\\n' > ~/.local/bin/{name}; "
        f"chmod +x ~/.local/bin/{name}"
        for name in HOST_PROGRAMS
    )
    planted = await run(sandbox, ws, f"mkdir -p ~/.local/bin && {plant}; echo planted")
    assert "planted" in planted.output
    tool = (
        "printf '#!/bin/sh\\necho from-home\\n' > ~/.local/bin/keel-tool; "
        "chmod +x ~/.local/bin/keel-tool"
    )
    await run(sandbox, ws, tool)
    later = await run(sandbox, ws, "keel-tool; echo done")
    assert "from-home" in later.output, "a later command finds what was installed in the home"
    assert not marker.exists(), "a program planted in the home ran on the host"
