"""Attached files in the workspace: saved under ``.keel/files/`` so the agent can read them
with its tools, never committed: the folder carries its own ``.gitignore`` (``*``), which
keeps working whatever the workspace's ``.git/info/exclude`` says.

The workspace is not Keel's: a command or the repository itself may have made ``.keel`` or
``.keel/files`` a symlink, so each file is written with the no-follow helpers and a write
they refuse becomes a note saying why, not an error that loses the brief.

Names come from other people's messages, so only a safe form of each is used, prefixed by
the provider's file id, which keeps two files of one name apart.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from runtime.brief.model import Download
from runtime.brief.render import FileNote
from runtime.models.base import ImagePart
from runtime.workspace.paths import PathRefused, write_inside_atomic

FILES = PurePosixPath(".keel") / "files"
IGNORE_ALL = b"*\n"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


def safe_name(file_id: str, name: str) -> str:
    stem = _UNSAFE.sub("_", name).strip("._") or "file"
    return f"{_UNSAFE.sub('_', file_id)}-{stem[:100]}"


def save(workspace: Path | None, downloads: Sequence[Download]) -> dict[str, FileNote]:
    """Write each downloaded file into the workspace; the note says where, or why not."""
    notes: dict[str, FileNote] = {}
    for download in downloads:
        file_id = download.file.file_id
        if download.content is None:
            notes[file_id] = FileNote(note=download.note or "not downloaded")
        elif workspace is None:
            notes[file_id] = FileNote(note="not saved: this task has no workspace")
        else:
            notes[file_id] = _write(workspace, file_id, download.file.name, download.content)
    return notes


def _write(workspace: Path, file_id: str, name: str, content: bytes) -> FileNote:
    relative = (FILES / safe_name(file_id, name)).as_posix()
    try:
        write_inside_atomic(workspace, (FILES / ".gitignore").as_posix(), IGNORE_ALL)
        write_inside_atomic(workspace, relative, content)
    except PathRefused as e:
        return FileNote(note=f"not saved: {e}")
    except OSError as e:
        return FileNote(note=f"not saved: {e.strerror or e}")
    return FileNote(saved_as=relative)


def images(
    downloads: Sequence[Download], *, max_images: int, max_bytes: int
) -> dict[str, ImagePart]:
    """The pictures (by file id) a model that reads images is shown, within the bounds."""
    shown: dict[str, ImagePart] = {}
    for download in downloads:
        file = download.file
        content = download.content
        if content is None or file.media_type not in _IMAGE_TYPES or len(content) > max_bytes:
            continue
        if len(shown) == max_images:
            break
        data = base64.b64encode(content).decode("ascii")
        shown[file.file_id] = ImagePart(file.media_type, data, file.name)
    return shown
