"""Names used by something vulture cannot see: counted as used by tools/dead_code.py."""

# ruff: noqa
# Called by frameworks, not by our code.
_ipython_display_  # IPython displays a Panel
_repr_html_  # JupyterLab renders a result as a table
_repr_pretty_  # IPython's plain text (a console, nbval) shows a result's tables
disabled  # ipywidgets trait
bar_style  # ipywidgets trait
# Worker targets, started by name ("module:function") in a fresh process.
drive_compute_copy
tf_server
TARGETS  # mwms's list of its worker targets, resolved by tests/test_worker_main.py
# Dataclass fields read through `dataclasses.asdict` and by the tables.
per_token_ms
efficiency
# WorkerGroup's inspection API: how tests watch processes start, retry and die.
attempts
pids
ready_info
latest_progress
wait_for_progress
kill_worker
# The one home of run-time estimates (timing/estimate.py), being adopted by every panel.
PROCESS_START_S
call_seconds
# The stopping record's reset: each test starts from a quiet machine's (tests/conftest.py).
forget
