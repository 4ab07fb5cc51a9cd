"""Which commands count as a test run, whatever the ecosystem."""

from __future__ import annotations

import pytest

from runtime.testreport import looks_like_test_command


@pytest.mark.parametrize(
    ("command", "is_test"),
    [
        ("npm test", True),
        ("npm run test -- --watch=false", True),
        ("yarn test", True),
        ("go test ./...", True),
        ("cargo test --all", True),
        ("make test", True),
        ("npx jest", True),
        ("bundle exec rspec", True),
        ("npm install", False),
        ("go build ./...", False),
        ("make", False),
        ("cat testdata.txt", False),
    ],
)
def test_test_commands_are_recognised_across_ecosystems(command: str, is_test: bool) -> None:
    assert looks_like_test_command(command) is is_test
