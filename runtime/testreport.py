"""Reading test results out of a command's output: pytest and unittest summaries, JUnit reports.

Only counts that a runner printed (or wrote as JUnit XML) are reported; when nothing
recognisable is present the answer is ``None``, never a guess.
"""

from __future__ import annotations

import re
import shlex
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Literal

ReportSource = Literal["pytest", "unittest", "junit_xml", "junit_text"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PYTEST_SUMMARY = re.compile(
    r"^=*\s*(?P<body>(?:\d+ [a-z]+(?:, )?)+|no tests ran)"
    r" in [\d.]+s\b.*$"
)
_PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)")
_PYTEST_WORDS = {
    "passed",
    "failed",
    "error",
    "errors",
    "skipped",
    "xfailed",
    "xpassed",
    "warning",
    "warnings",
    "deselected",
    "rerun",
}
_JUNIT_TEXT = re.compile(
    r"Tests run: (\d+), Failures: (\d+), Errors: (\d+), Skipped: (\d+)(?!.*\bin\b)"
)
# unittest ends with "Ran 3 tests in 0.002s", a blank line, then "OK" or "FAILED (failures=1)",
# either with counts in parentheses ("OK (skipped=1)", "FAILED (failures=1, errors=2)").
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in [\d.]+s$")
_UNITTEST_VERDICT = re.compile(r"^(?:OK|FAILED)(?: \((?P<counts>[a-z =\d,]+)\))?$")
_UNITTEST_COUNT = re.compile(r"([a-z ]+)=(\d+)")
_TEST_COMMAND = re.compile(
    r"\b(pytest|py\.test|unittest|tox|nox|mvn|gradlew?|junit|jest|vitest|mocha|rspec)\b"
    r"|\b(npm|yarn|pnpm|bun)\s+(run\s+)?test\b"
    r"|\b(go|cargo|make|dotnet|mix|deno)\s+test\b"
)


@dataclass(frozen=True, slots=True)
class TestCounts:
    passed: int
    failed: int
    errors: int
    skipped: int
    source: ReportSource


def looks_like_test_command(command: str) -> bool:
    return _TEST_COMMAND.search(command) is not None


def parse_test_output(output: str) -> TestCounts | None:
    """Counts from the last runner summary in ``output`` (pytest, unittest, then JUnit text)."""
    text = _ANSI.sub("", output)
    return parse_pytest(text) or parse_unittest(text) or parse_junit_text(text)


def parse_pytest(output: str) -> TestCounts | None:
    for line in reversed(output.splitlines()):
        match = _PYTEST_SUMMARY.match(line.strip())
        if match is None or not _only_pytest_words(match["body"]):
            continue
        counts = {word: int(n) for n, word in _PYTEST_COUNT.findall(match["body"])}
        return TestCounts(
            passed=counts.get("passed", 0) + counts.get("xpassed", 0),
            failed=counts.get("failed", 0),
            errors=counts.get("errors", 0) + counts.get("error", 0),
            skipped=counts.get("skipped", 0) + counts.get("xfailed", 0),
            source="pytest",
        )
    return None


def _only_pytest_words(body: str) -> bool:
    if body == "no tests ran":
        return True
    return all(part.split(" ", 1)[1] in _PYTEST_WORDS for part in body.split(", ") if part)


def parse_unittest(output: str) -> TestCounts | None:
    """The last ``Ran N tests`` summary of ``python -m unittest`` with the verdict after it."""
    lines = [line.strip() for line in output.splitlines()]
    for i in range(len(lines) - 1, -1, -1):
        ran = _UNITTEST_RAN.match(lines[i])
        if ran is None:
            continue
        verdict = next((line for line in lines[i + 1 :] if line), "")
        match = _UNITTEST_VERDICT.match(verdict)
        if match is None:
            return None
        counts = {k.strip(): int(n) for k, n in _UNITTEST_COUNT.findall(match["counts"] or "")}
        failed = counts.get("failures", 0) + counts.get("unexpected successes", 0)
        errors = counts.get("errors", 0)
        skipped = counts.get("skipped", 0) + counts.get("expected failures", 0)
        passed = int(ran[1]) - failed - errors - skipped
        return TestCounts(max(passed, 0), failed, errors, skipped, source="unittest")
    return None


def parse_junit_text(output: str) -> TestCounts | None:
    """The last Maven/Gradle-style ``Tests run: N, Failures: ...`` total."""
    totals = _JUNIT_TEXT.findall(output)
    if not totals:
        return None
    run, failures, errors, skipped = (int(n) for n in totals[-1])
    passed = run - failures - errors - skipped
    return TestCounts(passed, failures, errors, skipped, source="junit_text")


def parse_junit_xml(xml_text: str) -> TestCounts | None:
    """Totals over every ``<testsuite>`` of a JUnit XML report."""
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError:
        return None
    suites = [root] if root.tag == "testsuite" else root.findall(".//testsuite")
    if not suites:
        return None
    total = {key: 0 for key in ("tests", "failures", "errors", "skipped")}
    for suite in suites:
        for key in total:
            total[key] += int(suite.get(key, "0") or 0)
    passed = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    return TestCounts(passed, total["failures"], total["errors"], total["skipped"], "junit_xml")


def junit_xml_path(command: str) -> str | None:
    """The report path of a ``--junitxml=PATH`` / ``--junit-xml PATH`` option, if any."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for i, word in enumerate(words):
        for flag in ("--junitxml", "--junit-xml"):
            if word.startswith(flag + "="):
                return word.split("=", 1)[1]
            if word == flag and i + 1 < len(words):
                return words[i + 1]
    return None
