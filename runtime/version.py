"""Keel's version: the one place it is written.

``pyproject.toml`` reads it from here (``dynamic = ["version"]``), and ``keel --version``, the
OpenAPI document and CHANGELOG.md's newest section say the same. Read from this module, not
from the installed distribution's metadata: an editable install (``pip install -e .``) keeps
the metadata of the day it was installed, so it would name an older version after a pull.
"""

from __future__ import annotations

VERSION = "0.2.0"
