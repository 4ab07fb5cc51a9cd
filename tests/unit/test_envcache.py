"""The cached environments: stored once per key, restored by hard links into a fresh
workspace and home, refused when they hold a secret, discarded when changed in place,
evicted by age and size, and never written or read through a link in the way."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtime.workspace.envcache import CACHE_OWNER, EnvCache, cache_key, safe_relative


def populate(ws: Path, home: Path) -> None:
    (ws / ".venv" / "lib").mkdir(parents=True)
    (ws / ".venv" / "lib" / "pkg.py").write_text("VALUE = 1\n")
    (ws / ".venv" / "python").symlink_to("/usr/bin/python3")
    (ws / "node_modules").mkdir()
    (ws / "node_modules" / "x.js").write_text("x\n")
    home.mkdir(parents=True, exist_ok=True)
    (home / ".cache").mkdir()
    (home / ".cache" / "tool").write_text("t\n")


# Linked restores hand the files to another owner, which only root can do (CI runs as root).
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="hard-link restores need root")


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path, Path]:
    ws, home = tmp_path / "ws", tmp_path / "home"
    ws.mkdir()
    populate(ws, home)
    return ws, home, tmp_path / "cache"


@needs_root
async def test_restore_links_what_was_stored_into_a_fresh_workspace(
    dirs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    ws, home, root = dirs
    cache = EnvCache(root)
    entry = await cache.store("k1", "acme/api", ws, home, [".venv", "node_modules"])
    assert not isinstance(entry, str)
    assert entry.paths == (".venv", "node_modules") and entry.bytes > 0
    fresh, fresh_home = tmp_path / "fresh", tmp_path / "fresh-home"
    fresh.mkdir()
    fresh_home.mkdir()
    restored = await cache.restore("k1", fresh, fresh_home, tmp_path / "stage")
    assert restored is not None and restored.method == "hard links"
    assert not (tmp_path / "stage").exists()
    assert (fresh / ".venv" / "lib" / "pkg.py").read_text() == "VALUE = 1\n"
    assert os.readlink(fresh / ".venv" / "python") == "/usr/bin/python3"
    assert (fresh_home / ".cache" / "tool").read_text() == "t\n"
    stored = root / "k1" / "workspace" / ".venv" / "lib" / "pkg.py"
    assert os.stat(stored).st_ino == os.stat(fresh / ".venv" / "lib" / "pkg.py").st_ino
    assert os.stat(stored).st_uid == CACHE_OWNER, "linked files are not the sandbox user's"
    assert os.stat(stored).st_mode & 0o777 == 0o444, "read-only, readable by all"
    home_file = root / "k1" / "home" / ".cache" / "tool"
    assert os.stat(home_file).st_ino != os.stat(fresh_home / ".cache" / "tool").st_ino, (
        "the home is copied: tools write there in place"
    )


async def test_copy_mode_gives_each_workspace_its_own_files(
    dirs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    ws, home, root = dirs
    cache = EnvCache(root, restore="copy")
    await cache.store("k1", "acme/api", ws, home, [".venv"])
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (tmp_path / "h2").mkdir()
    restored = await cache.restore("k1", fresh, tmp_path / "h2", tmp_path / "stage")
    assert restored is not None and restored.method == "copy"
    stored = root / "k1" / "workspace" / ".venv" / "lib" / "pkg.py"
    assert os.stat(stored).st_ino != os.stat(fresh / ".venv" / "lib" / "pkg.py").st_ino


@needs_root
async def test_an_entry_not_as_stored_is_discarded_not_restored(
    dirs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """Only a process with more rights than a sandbox's (root here) can change an entry's
    file; should one, the entry is not restored again."""
    ws, home, root = dirs
    cache = EnvCache(root)
    await cache.store("k1", "acme/api", ws, home, [".venv"])
    stored = root / "k1" / "workspace" / ".venv" / "lib" / "pkg.py"
    os.chown(stored, 0, 0)
    os.chmod(stored, 0o644)
    stored.write_text("VALUE = 'evil'\n")
    other = tmp_path / "other"
    other.mkdir()
    (tmp_path / "h2").mkdir()
    assert await cache.restore("k1", other, tmp_path / "h2", tmp_path / "stage") is None
    assert cache.find("k1") is None and not (other / ".venv").exists()


async def test_an_interrupted_restore_resumes_and_never_counts_a_half_tree(
    dirs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    ws, home, root = dirs
    cache = EnvCache(root)
    await cache.store("k1", "acme/api", ws, home, [".venv", "node_modules"])
    fresh, fresh_home, stage = tmp_path / "fresh", tmp_path / "fh", tmp_path / "stage"
    fresh.mkdir()
    fresh_home.mkdir()
    # A crash left .venv half-made in the staging folder and node_modules not begun.
    (stage / ".venv" / "lib").mkdir(parents=True)
    (stage / ".venv" / "lib" / "partial").write_text("half\n")
    restored = await cache.restore("k1", fresh, fresh_home, stage)
    assert restored is not None
    assert sorted(p.name for p in (fresh / ".venv" / "lib").iterdir()) == ["pkg.py"]
    assert (fresh / "node_modules" / "x.js").exists() and not stage.exists()


async def test_an_environment_holding_a_secret_is_not_stored(
    dirs: tuple[Path, Path, Path],
) -> None:
    ws, home, root = dirs
    (home / ".npmrc").write_text("//registry/:_authToken=tok-ABCDEF\n")
    stored = await EnvCache(root).store("k1", "r", ws, home, [".venv"], ["tok-ABCDEF"])
    assert isinstance(stored, str) and "home/.npmrc" in stored
    assert not (root / "k1").exists()
    assert not any(b"tok-ABCDEF" in p.read_bytes() for p in root.rglob("*") if p.is_file())


async def test_paths_through_links_or_outside_are_never_copied(
    dirs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    ws, home, root = dirs
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "build").mkdir()
    (outside / "build" / "secret.txt").write_text("host file\n")
    (ws / "linked").symlink_to(outside)
    paths = ["linked/build", "../outside", "/etc", ".git/hooks", ".venv"]
    entry = await EnvCache(root).store("k1", "r", ws, home, paths)
    assert not isinstance(entry, str) and entry.paths == (".venv",)
    # Restoring into a workspace whose tracked folder is a link refuses to follow it.
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "node_modules_parent").symlink_to(outside)
    cache = EnvCache(tmp_path / "cache2")
    (ws / "node_modules_parent").mkdir()
    (ws / "node_modules_parent" / "mod").mkdir()
    stored = await cache.store("k2", "r", ws, home, ["node_modules_parent/mod"])
    assert not isinstance(stored, str)
    (tmp_path / "h").mkdir()
    assert await cache.restore("k2", fresh, tmp_path / "h", tmp_path / "stage") is None
    assert not (outside / "mod").exists()


def test_safe_relative_refuses_escapes() -> None:
    assert safe_relative(".venv") and safe_relative("a/b")
    for bad in ("", "/etc", "../x", "a/../../x", ".git/config", "a\x00b"):
        assert not safe_relative(bad), bad


def test_key_changes_with_repository_setup_and_lockfiles() -> None:
    base = cache_key("acme/api", "npm ci", None, {"package-lock.json": "100644:aa"})
    assert base == cache_key("acme/api", "npm ci", None, {"package-lock.json": "100644:aa"})
    assert base != cache_key("acme/web", "npm ci", None, {"package-lock.json": "100644:aa"})
    assert base != cache_key("acme/api", "npm install", None, {"package-lock.json": "100644:aa"})
    assert base != cache_key("acme/api", "npm ci", None, {"package-lock.json": "100644:bb"})
    assert base != cache_key("acme/api", "npm ci", "git pull", {"package-lock.json": "100644:aa"})


async def test_evicts_old_then_least_recently_used_beyond_the_size(
    dirs: tuple[Path, Path, Path],
) -> None:
    ws, home, root = dirs
    cache = EnvCache(root, max_bytes=10**9, max_age_s=100)
    for key in ("a1", "b2", "c3"):
        await cache.store(key, "r", ws, home, [".venv"])
    oldest, newest = cache.find("a1"), cache.find("c3")
    assert oldest is not None and newest is not None
    size, now = oldest.bytes, newest.last_used
    assert [e.key for e in cache.evict(now + 50)] == []
    cache.max_bytes = size * 2
    assert [e.key for e in cache.evict(now)] == ["a1"]
    assert [e.key for e in cache.evict(now + 1000)] == ["b2", "c3"]
    assert cache.entries() == []


async def test_a_link_in_place_of_a_cache_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "cache").symlink_to(tmp_path / "elsewhere")
    stored = await EnvCache(tmp_path / "cache").store("k", "r", tmp_path, tmp_path, [])
    assert isinstance(stored, str) and "not a directory Keel made" in stored
    assert list((tmp_path / "elsewhere").iterdir()) == []
