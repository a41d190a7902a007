# Self-attention course. Quickstart: `make demo`, then `make test`.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# What `make demo` runs once the environment exists (one place to change it).
DEMO = $(PY) -m autograder demo

.PHONY: venv demo test lint lab release check

venv: $(STAMP)

# The virtual environment, reused while requirements.txt is unchanged.
$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -r requirements.txt
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (ipykernel)"
	$(PY) -c "import matplotlib.pyplot"  # build matplotlib's font cache once, quietly
	touch $(STAMP)

demo: $(STAMP)
	$(DEMO)

test: $(STAMP)
	$(PY) -m pytest -q

# ruff, configured in pyproject.toml (.ci/run runs it before the tests).
lint: $(STAMP)
	$(VENV)/bin/ruff check .

# JupyterLab (with nbgrader's extensions, installed by requirements.txt) on the student release.
lab: $(STAMP)
	$(VENV)/bin/jupyter lab --ServerApp.root_dir=assignments/self_attention

# Regenerate source/, assignments/ and solutions/notebooks/ from course/ (commit the result).
release: $(STAMP)
	$(PY) -m course.build

# Fail if the committed notebooks drifted from course/.
check: $(STAMP)
	$(PY) -m course.build --check
