# The two commands a new user needs (README, "Set-up"): `make lab` and `make test`.
# Both build .venv first; scripts/setup_env.sh returns at once when it is up to date.
VENV := .venv
# .venv/bin first for every recipe: nbgrader's formgrader shells out to `alembic`, and a
# terminal opened in JupyterLab then finds `nbgrader` and `python` of the course env.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
.PHONY: lab test env clean-env

lab: env
	$(VENV)/bin/jupyter lab $(LAB_ARGS)

# Test modules run side by side, a worker per core (PYTEST_ARGS=-n0: one after another).
test: env
	$(VENV)/bin/python -m pytest -n auto --dist loadfile $(PYTEST_ARGS)

env:
	bash scripts/setup_env.sh

clean-env:
	rm -rf $(VENV)
