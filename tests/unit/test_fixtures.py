"""The provider data kept in the repository stays complete and accounted for.

The trimmed API descriptions hold every operation extract.py lists and every component those
reach (trimming them again changes nothing), and every bundled payload has its line, with
source and license, in the corpora's SOURCES.md.
"""

from __future__ import annotations

import json
import re

from adapters.emulators.corpus import BUNDLED_ROOT
from tests.fixtures import GITHUB_OPENAPI, SLACK_OPENAPI
from tests.fixtures.extract import PAYLOAD_FOLDERS, trim_github, trim_slack


def test_trimmed_github_description_is_closed_when_trimmed_again() -> None:
    description = json.loads(GITHUB_OPENAPI.read_text())

    assert trim_github(description) == description


def test_trimmed_slack_description_is_closed_when_trimmed_again() -> None:
    description = json.loads(SLACK_OPENAPI.read_text())

    assert trim_slack(description) == description


def test_every_bundled_payload_is_listed_with_its_source_and_license() -> None:
    sources = (BUNDLED_ROOT / "SOURCES.md").read_text()
    # The "Every file" table: | `file` | owner/repository | commit | original path | license |
    row = r"^\| `([^`]+\.json)` \| ([\w.-]+/[\w.-]+) \|.*\| (MIT|Apache-2\.0) \|$"
    rows = re.findall(row, sources, re.MULTILINE)
    bundled = {
        path.relative_to(BUNDLED_ROOT).as_posix()
        for folder in PAYLOAD_FOLDERS
        for path in (BUNDLED_ROOT / folder).rglob("*.json")
    }

    assert {file for file, _, _ in rows} == bundled
    for _, repository, _ in rows:  # each upstream's license text travels with its files
        assert (BUNDLED_ROOT / "LICENSES" / f"{repository.replace('/', '-')}.txt").is_file()
