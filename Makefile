# Every target bootstraps .venv once; the stamp file makes a second run install nothing.
# constraints.txt pins every package to the versions CI and the image use (`make constraints`
# writes it from .venv); pyproject.toml keeps the ranges a library user installs within.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.keel-installed

.PHONY: demo test serve bench soak lint typecheck clean constraints

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/keel demo

serve: $(STAMP)
	$(BIN)/keel serve --config app.yaml

lint: $(STAMP)
	$(BIN)/ruff check runtime routing adapters tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

# Two pytest workers per core of the CI machine: most of a test's time is spent waiting (on
# subprocesses, servers and sandboxes; two workers kept the two cores under half busy), so a
# second pair fills it. worksteal hands the long recovery tests' neighbours to an idle worker
# instead of queueing them behind one. The kill-point matrices run a sample here (one point of
# each kind) and whole in `make soak`.
TEST_WORKERS ?= 4

test: lint typecheck
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist worksteal

bench: $(STAMP)
	$(BIN)/python bench/run.py

# The long crash soak and every kill point of the recovery matrices, on SQLite and on the local
# PostgreSQL (override KEEL_TEST_DATABASE_URL).
soak: $(STAMP)
	KEEL_SOAK=1 KEEL_TEST_DATABASE_URL=$${KEEL_TEST_DATABASE_URL:-postgresql+psycopg://postgres@127.0.0.1:5432/test} \
		$(BIN)/python -m pytest -q -s -p no:cacheprovider tests/recovery tests/integration/test_races.py

# After upgrading a package in .venv or adding a dependency: rewrite the pins, then commit them.
constraints: $(STAMP)
	$(BIN)/python .ci/freeze-constraints > constraints.txt.new && mv constraints.txt.new constraints.txt

clean:
	rm -rf $(VENV) .keel keel.db
