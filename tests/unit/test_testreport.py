"""Which commands count as a test run, whatever the ecosystem."""

from __future__ import annotations

import pytest

from runtime.testreport import looks_like_test_command, parse_test_output


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


@pytest.mark.parametrize(
    ("output", "counts"),
    [
        ("test_a ... ok\n\n" + "-" * 70 + "\nRan 2 tests in 0.001s\n\nOK\n", (2, 0, 0, 0)),
        ("Ran 3 tests in 0.010s\n\nOK (skipped=1)\n", (2, 0, 0, 1)),
        ("Ran 4 tests in 0.2s\n\nFAILED (failures=1, errors=2)\n", (1, 1, 2, 0)),
        ("Ran 2 tests in 0.0s\n\nFAILED (failures=1, expected failures=1)", (0, 1, 0, 1)),
        # Only the last summary counts (a runner that ran the suite twice).
        ("Ran 9 tests in 1s\n\nOK\nRan 1 test in 0.1s\n\nFAILED (errors=1)", (0, 0, 1, 0)),
    ],
)
def test_unittest_summaries_are_counted(output: str, counts: tuple[int, ...]) -> None:
    found = parse_test_output(output)
    assert found is not None and found.source == "unittest"
    assert (found.passed, found.failed, found.errors, found.skipped) == counts


@pytest.mark.parametrize(
    "output",
    ["Ran 2 tests in 0.1s\n\nsomething else\n", "We ran 2 tests in 0.1s\n\nOK", "OK\n"],
)
def test_text_that_only_resembles_a_unittest_summary_is_not_counted(output: str) -> None:
    assert parse_test_output(output) is None


def test_python_m_unittest_is_a_test_command() -> None:
    assert looks_like_test_command("/opt/py/bin/python -m unittest -v")
