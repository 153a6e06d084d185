"""One panel per experiment: sliders, Run and Stop, a progress bar, a status line, an output area.

Moving a slider runs nothing (it updates the time estimate); Run calls a plain Python function with
the slider values, so tests drive the same code without a browser
(`panel.sliders['size'].value = 256; panel.run()`).

How a run draws (why plots are always whole): the experiment finishes first; then its figure is
built and rendered ONCE to PNG bytes (`render_png`), closed at once, and the panel's output is
replaced by one assignment holding the verdict, the image and the table. Nothing is drawn from
half-finished data, no figure is left in pyplot's registry for the inline backend's
`flush_figures` to render, and no `with output:` capture or `clear_output(wait=True)` is involved.
A Run click runs the experiment in a background thread (so Stop can be clicked) and draws on the
kernel's main thread, between cells, where all other matplotlib drawing happens; `panel.run()`
(tests, nbval, a notebook cell) stays synchronous and draws in the calling thread.

Why (issue 16, observed in the browser test's websocket traffic): the old panel printed, then
displayed the figure through the inline backend inside `with output:` in the click's handler.
In JupyterLab 4.6 with ipykernel 7.4 the Output widget's own state sync, sent by the page when
the printed text arrived, was handled by the kernel before the click's handler had finished; the
figure was then sent twice, a whole PNG under the sync message and, under the click (the one the
Output widget kept), a PNG of the right size with nothing but the background.
"""

from __future__ import annotations

import contextlib
import html
import threading
import time
from collections.abc import Callable

import ipywidgets as widgets
from IPython import get_ipython
from IPython.display import display

from d2lhelpers.core.progress import HEARTBEAT_S
from d2lhelpers.core.report import WARNING_ATTRIBUTES
from d2lhelpers.devices import check_fits
from d2lhelpers.ui.output import (  # noqa: F401  (render_png, DPI: part of the panel's API)
    DPI,
    about,
    figure_text,
    render_png,
    result_outputs,
    text_output,
)

LONG_RUN_S = 30  # an estimate above this is shown as a warning before the run
GREY = "d2l-previous"  # CSS class of a previous run's output while a new one runs
STYLE = f"<style>.{GREY} {{opacity: 0.35}}</style>"


class Stopped(Exception):
    """Raised inside the experiment by `progress(...)` once the learner has pressed Stop."""


def slider(description: str, value: int, low: int, high: int, step: int = 1) -> widgets.IntSlider:
    return widgets.IntSlider(
        value=value,
        min=low,
        max=high,
        step=step,
        description=description,
        continuous_update=False,
        style={"description_width": "initial"},
        layout=widgets.Layout(width="420px"),
    )


def _main_thread_loop():
    """The kernel's event loop (the main thread, between cells), or None outside a kernel."""
    shell = get_ipython()
    kernel = getattr(shell, "kernel", None)
    return getattr(kernel, "io_loop", None)


class Panel:
    """Sliders + Run: `experiment(progress=..., **values)` returns a result; `show` draws it.

    The protocol every lesson's panel follows:
    - `experiment(progress, **values)` runs and returns a result object; it prints nothing.
      It calls `progress(done, total, status)` at least every few seconds ("measuring 3 of 4
      devices, repeat 7"); after Stop, that call raises `Stopped`, which ends the run.
    - `show(result)` returns a matplotlib Figure (or None).
    - The panel shows, in order: the result's `verdict` (one computed sentence, if it has one),
      the figure, then the result itself (its HTML table; each part's, for a tuple).
    - `estimate(**values)`, if given, returns the expected seconds for those values; the panel
      shows it whenever a slider moves, as a warning above `LONG_RUN_S`.
    Run and the sliders are disabled while running; an error is one line in the output area
    (no traceback), the progress bar resets and the panel stays usable.
    """

    def __init__(
        self,
        title: str,
        sliders: dict,
        experiment: Callable,
        show: Callable,
        estimate: Callable[..., float] | None = None,
    ):
        self.title, self.sliders, self.experiment, self.show = title, sliders, experiment, show
        self.estimate = estimate
        self.button = widgets.Button(description="Run", button_style="primary", icon="play")
        self.stop_button = widgets.Button(description="Stop", icon="stop", disabled=True)
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="progress")
        self.status = widgets.HTML()  # what the experiment says it is doing
        self.clock = widgets.HTML()  # seconds since Run, beside the estimate
        self.note = widgets.HTML()  # the estimate for the sliders' values, or its warning
        self.caption = widgets.HTML()  # which values the output below belongs to
        self.output = widgets.Output()
        self.result = self.error = None
        self.stopped = False
        self.shown_values: dict | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()  # widget updates come from several threads
        self._thread: threading.Thread | None = None
        self._runner: threading.Thread | None = None  # the thread whose progress() may stop
        self._started = self._last_report = 0.0
        self._last_estimate: float | None = None
        self.button.on_click(lambda _: self.start())
        self.stop_button.on_click(lambda _: self.stop())
        for s in sliders.values():
            s.observe(lambda _: self._show_estimate(), names="value")
        self.widget = widgets.VBox(
            [
                widgets.HTML(f"{STYLE}<b>{html.escape(title)}</b>"),
                *sliders.values(),
                widgets.HBox([self.button, self.stop_button, self.progress, self.clock]),
                self.status,
                self.note,
                self.caption,
                self.output,
            ]
        )
        self._show_estimate()

    # --- what the learner sees -------------------------------------------------------------

    def values(self) -> dict:
        return {name: s.value for name, s in self.sliders.items()}

    @contextlib.contextmanager
    def values_set(self, **values):
        """The sliders at `values` inside the `with`, back where they were after it: a Try-it
        cell runs its case and leaves the panel as the learner set it."""
        unknown = sorted(set(values) - set(self.sliders))
        if unknown:
            raise KeyError(f"{self.title!r} has no slider {unknown}: it has {sorted(self.sliders)}")
        before = self.values()
        try:
            for name, value in values.items():
                self.sliders[name].value = value
            yield self
        finally:
            for name, value in before.items():
                self.sliders[name].value = value

    def describe(self, values: dict) -> str:
        """`matrix size 512, devices 4`: the values as the sliders label them."""
        return ", ".join(
            f"{self.sliders[name].description} {value}" for name, value in values.items()
        )

    def _show_estimate(self):
        self._last_estimate = None
        if self.estimate is None:
            return
        try:
            seconds = float(self.estimate(**self.values()))
        except (ValueError, TypeError) as error:  # the run would be refused: say why now
            self.note.value = f"These values will be refused: {html.escape(str(error))}"
            return
        self._last_estimate = seconds
        if seconds > LONG_RUN_S:
            self.note.value = (
                f"<b {WARNING_ATTRIBUTES}>&#9888; expected to take {about(seconds)}"
                f"</b> (over {LONG_RUN_S} s): smaller values are faster; Stop ends a run."
            )
        else:
            self.note.value = f"expected to take {about(seconds)}"

    def _set_running(self, running: bool, threaded: bool):
        self.button.disabled = running
        self.stop_button.disabled = not (running and threaded)
        for s in self.sliders.values():
            s.disabled = running

    def _begin(self, values: dict):
        self._stop.clear()
        self.result = self.error = None
        self.stopped = False
        self._started = self._last_report = time.monotonic()
        with self._lock:
            self.progress.bar_style = ""
            self.progress.max, self.progress.value = 1, 0
            self.status.value = "starting"
            self.clock.value = ""
        if self.shown_values is not None:
            self.output.add_class(GREY)
            self.caption.value = (
                f"<i>previous run (values: {html.escape(self.describe(self.shown_values))}); "
                f"now running {html.escape(self.describe(values))}</i>"
            )

    def _finish(self, values: dict, outputs: list[dict], status: str):
        """Replace the output in one assignment: the frontend gets the whole new content at once."""
        with self._lock:
            self.output.outputs = tuple(outputs)
            self.output.remove_class(GREY)
            self.status.value = status
            self.clock.value = ""
            if self.error is not None or self.stopped:
                self.progress.value = 0  # reset: nothing was completed
            else:
                self.progress.value = self.progress.max
        self.shown_values = None if self.error is not None else values
        self.caption.value = f"values: {html.escape(self.describe(values))}"

    def show_run(self, result, values: dict | None) -> bool:
        """Show `result`, a run the cells above made at `values` (the sliders' names), as this
        panel's output, so that the same experiment does not run twice; the book shows it as
        the panel's default run. Only at the sliders' own values: otherwise (or with `values`
        None: a run the sliders cannot make) the status line says so and Run measures anew."""
        if values is None or values != self.values():
            made = "other settings" if values is None else self.describe(values)
            self.status.value = html.escape(
                f"the run above was made at {made}, not at these values: press Run to measure them"
            )
            return False
        self._started = time.monotonic()
        self._draw(values, result)
        if self.error is None:
            self.status.value = "the run of the cells above, at these values (not run again)"
        return self.error is None

    # --- running ---------------------------------------------------------------------------

    def run(self):
        """Run with the current slider values, synchronously, and redraw; return the result.

        What a notebook cell, nbval and the tests call. A kernel interrupt ends it: the bar
        resets, the previous output comes back, and the interrupt goes on to the cell.
        """
        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError(
                f"{self.title!r} is still running from its Run button: wait, or press Stop"
            )
        values = self.values()
        self._set_running(True, threaded=False)
        self._begin(values)
        self._runner = threading.current_thread()
        try:
            result = self._experiment(values)
            self._draw(values, result)
        except KeyboardInterrupt:
            self.stopped = True
            self._show_stopped(values, "interrupted")
            raise
        finally:
            self._set_running(False, threaded=False)
        return self.result

    def start(self) -> threading.Thread | None:
        """What Run does: the experiment in a background thread, so Stop stays clickable.

        The figure is then drawn on the kernel's main thread (between cells), or in this
        thread outside a kernel. Returns the thread (None if a run is already going).
        """
        if self._thread is not None and self._thread.is_alive():
            return None
        values = self.values()
        self._set_running(True, threaded=True)
        self._begin(values)
        loop = _main_thread_loop()
        heartbeat = threading.Event()

        def work():
            self._runner = threading.current_thread()
            try:
                result = self._experiment(values)
            except BaseException as error:  # _experiment shows Exceptions; this, the rest
                self.error, result = error, None
                self._finish(values, [text_output(f"Error: {type(error).__name__}")], "error")
            heartbeat.set()
            if self.error is not None or self.stopped or loop is None:
                self._draw_and_release(values, result)
            else:
                with self._lock:
                    self.status.value = "drawing"
                loop.add_callback(self._draw_and_release, values, result)

        def tick():
            while not heartbeat.wait(HEARTBEAT_S):
                self._show_clock()

        self._thread = threading.Thread(target=work, name=f"panel: {self.title}", daemon=True)
        threading.Thread(target=tick, name="panel clock", daemon=True).start()
        self._thread.start()
        return self._thread

    def stop(self):
        """What Stop does: the experiment's next `progress(...)` call raises `Stopped`."""
        if self._thread is not None and self._thread.is_alive():
            self._stop.set()
            with self._lock:
                self.status.value = "stopping at the experiment's next progress report"
            self.stop_button.disabled = True

    def wait(self, timeout: float | None = None):
        """Block until a started run has finished (tests; a notebook cell after Run)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def _experiment(self, values: dict):
        """Run the experiment; errors and Stop are shown, not raised. Returns the result or None."""
        try:
            return self.experiment(progress=self._progress, **values)
        except Stopped:
            self.stopped = True
            self._show_stopped(values, "stopped")
        except Exception as error:  # one clear line in the panel, no traceback
            self.error = error
            message = " ".join(str(error).split())
            self._finish(
                values, [text_output(f"Error: {type(error).__name__}: {message}")], "error"
            )
        return None

    def _draw(self, values: dict, result):
        if self.error is not None or self.stopped:
            return
        try:
            figure = self.show(result)
            words = None if figure is None else figure_text(figure)
            png = None if figure is None else render_png(figure)
            outputs = result_outputs(result, png, words)
        except Exception as error:
            self.error = error
            message = " ".join(str(error).split())
            line = f"Error: drawing the result failed: {type(error).__name__}: {message}"
            self._finish(values, [text_output(line)], "error")
            return
        self.result = result
        self._finish(values, outputs, f"done in {self._elapsed():.1f} s")

    def _draw_and_release(self, values: dict, result):
        try:
            self._draw(values, result)
        finally:
            self._set_running(False, threaded=True)

    def _show_stopped(self, values: dict, how: str):
        with self._lock:
            self.output.remove_class(GREY)
            self.progress.value = 0
            self.clock.value = ""
            self.status.value = f"{how} after {self._elapsed():.1f} s; nothing new drawn"
        if self.shown_values is not None:
            self.caption.value = (
                f"<i>{how}: still showing the previous run "
                f"(values: {html.escape(self.describe(self.shown_values))})</i>"
            )
        else:
            self.caption.value = f"<i>{how} ({html.escape(self.describe(values))})</i>"

    def _elapsed(self) -> float:
        return time.monotonic() - self._started

    def _show_clock(self):
        since = time.monotonic() - self._last_report
        text = f"{self._elapsed():.0f} s"
        if self._last_estimate is not None:
            text += f" (expected: {about(self._last_estimate)})"
        if since > 2 * HEARTBEAT_S:
            text += f" (last report {since:.0f} s ago)"
        with self._lock:
            self.clock.value = text

    def _progress(self, done: int, total: int, status: str | None = None):  # progress protocol
        if self._stop.is_set() and threading.current_thread() is self._runner:
            raise Stopped()
        self._last_report = time.monotonic()
        total = max(int(total), 1)
        with self._lock:
            self.progress.max, self.progress.value = total, max(0, min(int(done), total))
            self.status.value = status if status else f"{done} of {total} done"

    def _ipython_display_(self):
        display(self.widget)


def largest_size_that_fits(bytes_for_size: Callable[[int], int], devices, cap: int) -> int:
    """The largest matrix size up to `cap`, halving, that `check_fits` accepts on `devices`."""
    size = cap
    while size > 64:
        try:
            check_fits(bytes_for_size(size), devices)
            break
        except ValueError:
            size //= 2
    return size
