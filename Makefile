# Self-attention course. Quickstart: `make demo`, then `make test`.
# The Python that creates .venv/: python3.11 where it runs, else the newest of 3.13, 3.12, 3.10 that runs (the range
# scripts/check_pythons.sh checks), or yours: make demo PYTHON=/path/to/python3.
PYTHON ?= $(shell for p in python3.11 python3.13 python3.12 python3.10; do $$p -c "" >/dev/null 2>&1 && { echo $$p; break; }; done)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# What `make demo` runs once the environment exists (one place to change it).
DEMO = $(PY) -m autograder demo

.PHONY: venv demo test lint lab grade formgrader release check mutation messages messages-visible

venv: $(STAMP)

# The virtual environment, reused while requirements.txt is unchanged.
$(STAMP): requirements.txt
	@test -x $(PY) || test -n "$(PYTHON)" || { echo "make: no Python 3.10 to 3.13 found (python3.11, python3.13, python3.12, python3.10): install one, or name it: make demo PYTHON=/path/to/python3" >&2; exit 1; }
	@test -x $(PY) || echo "make: creating $(VENV)/ with $(PYTHON) ($$($(PYTHON) --version 2>&1))"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -r requirements.txt
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (ipykernel)"
	$(PY) -c "import matplotlib.pyplot"  # build matplotlib's font cache once, quietly
	touch $(STAMP)

demo: $(STAMP)
	$(DEMO)

# The whole suite on every core (pytest-xdist): each file on one worker, the longest files handed out first
# (tests/conftest.py), what several files build made once per run (tests/runcache.py); the ten slowest
# tests listed at the end. Serially, one file after another: .venv/bin/python -m pytest -q
test: $(STAMP)
	$(PY) -m pytest -q -n auto --dist loadfile --no-loadscope-reorder --durations=10

# Mutation testing of the hidden checks: every small edit of the four solutions/*.py graded by warm graders and run
# through its notebook's visible checks; fails if a mutant not reviewed as equivalent keeps full marks, or if a killed
# one passes every visible check without its reason in tests/mutation/hidden_only.toml (tests/mutation/). One notebook,
# visible checks only: .venv/bin/python -m tests.mutation --visible-only --notebook generation/03_cross_attention
mutation: $(STAMP)
	$(PY) -m tests.mutation --quiet

# ruff, configured in pyproject.toml (.ci/run runs it before the tests).
lint: $(STAMP)
	$(VENV)/bin/ruff check .

# The student's working copy of the release, one folder per assignment (ignored by git; see course/lab.py).
WORKSPACE = workspace

# JupyterLab for a student: copies the release into $(WORKSPACE) on first use (never overwriting
# saved work) and opens it with the student's tools only. Extra options: make lab LAB_ARGS="--port 9000".
lab: $(STAMP)
	$(PY) -m course.lab student --workspace $(WORKSPACE) $(LAB_ARGS)

# The hidden autograder on the folders of the student's workspace that hold their work (a solution cell changed
# from the release), one summary table each (then compare with solutions/notebooks/). One folder, changed or
# not: make grade ASSIGNMENT=generation; the whole report, one row per check: make grade FULL=1.
grade: $(STAMP)
	@$(PY) -m autograder grade-workspace $(WORKSPACE) $(if $(ASSIGNMENT),--assignment $(ASSIGNMENT)) $(if $(FULL),--full)

# JupyterLab for instructors at the course root, with nbgrader's formgrader and Create Assignment.
formgrader: $(STAMP)
	$(PY) -m course.lab instructor $(LAB_ARGS)

# Regenerate source/, assignments/ and solutions/notebooks/ from course/ (commit the result).
release: $(STAMP)
	$(PY) -m course.build

# Fail if the committed notebooks drifted from course/.
check: $(STAMP)
	$(PY) -m course.build --check

# The autograder's message catalog (autograder/foundation/i18n.py): extract every _("...") of autograder/ into the
# template, then merge it into each language's .po (new or changed messages come in empty or fuzzy:
# translate them; tests/test_i18n.py fails until every one is). The .po is compiled when the grader loads it.
AUTOGRADER_POT = autograder/locale/autograder.pot
PYBABEL_STABLE = --no-wrap --omit-header
messages: $(STAMP)
	PYTHONPATH=. $(VENV)/bin/pybabel extract -F babel-autograder.cfg -k _ -k Refused --no-default-keywords --sort-output --no-location \
	  $(PYBABEL_STABLE) -o $(AUTOGRADER_POT) autograder
	$(VENV)/bin/pybabel update -i $(AUTOGRADER_POT) -d autograder/locale -D autograder -l zh_CN --ignore-obsolete \
	  $(PYBABEL_STABLE)

# The visible checks' message catalog (gettext domain visible_checks, map course/babel.cfg): extract the
# messages of course/visible_checks*.py and course/graded_cells.py into the template, then merge it into each
# translation (course/locale/<locale>/LC_MESSAGES/visible_checks.po). Translate the new or fuzzy entries,
# then `make release` compiles the .mo into the Chinese edition's folders; tests/test_visible_catalog.py checks it all.
VISIBLE_POT = course/locale/visible_checks.pot
messages-visible: $(STAMP)
	$(VENV)/bin/pybabel extract -F course/babel.cfg --no-wrap --sort-by-file --project "self-attention course" \
	  --copyright-holder "the course's authors" -o $(VISIBLE_POT) course
	$(VENV)/bin/pybabel update -i $(VISIBLE_POT) -d course/locale -D visible_checks --no-wrap --ignore-obsolete --ignore-pot-creation-date
