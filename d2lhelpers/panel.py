"""One panel per experiment: sliders, a Run button, a progress bar and an output area.

Moving a slider runs nothing; Run calls a plain Python function with the slider values, so tests
drive the same code without a browser (`panel.sliders['size'].value = 256; panel.run()`).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable

import ipywidgets as widgets
import matplotlib.pyplot as plt
from IPython.display import display

from d2lhelpers.devices import check_fits


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


class Panel:
    """Sliders + Run: `experiment(progress=..., **values)` returns a result; `show` draws it.

    The protocol every lesson's panel follows:
    - `experiment(progress, **values)` runs and returns a result object; it prints nothing.
      It calls `progress(done, total, status)` at least every few seconds ("measuring 3 of 4
      devices, repeat 7").
    - `show(result)` returns a matplotlib Figure (or None).
    - The panel shows, in order: the result's `verdict` (one computed sentence, if it has one),
      the figure, then the result itself (its HTML table).
    - `estimate(**values)`, if given, returns the expected seconds for those values, so the
      panel can warn before a long run.
    The Run button is disabled while running; an error is shown in the panel's own output area
    and the panel stays usable.
    """

    def __init__(
        self,
        title: str,
        sliders: dict,
        experiment: Callable,
        show: Callable,
        estimate: Callable[..., float] | None = None,
    ):
        self.sliders, self.experiment, self.show = sliders, experiment, show
        self.estimate = estimate
        self.button = widgets.Button(description="Run", button_style="primary", icon="play")
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="progress")
        self.status = widgets.HTML()  # e.g. one line per worker process
        self.output = widgets.Output()
        self.result = self.error = None
        self.button.on_click(lambda _: self.run())
        self.widget = widgets.VBox(
            [
                widgets.HTML(f"<b>{title}</b>"),
                *sliders.values(),
                widgets.HBox([self.button, self.progress, self.status]),
                self.output,
            ]
        )

    def values(self) -> dict:
        return {name: s.value for name, s in self.sliders.items()}

    def run(self):
        """Run the experiment with the current slider values and redraw the output."""
        self.button.disabled = True
        self.progress.value, self.result, self.error = 0, None, None
        self.status.value = ""
        self.output.clear_output(wait=True)
        try:
            with self.output:
                try:
                    self.result = self.experiment(progress=self._progress, **self.values())
                    verdict = getattr(self.result, "verdict", None)
                    if verdict:
                        print(verdict)
                    figure = self.show(self.result)
                    if figure is not None:
                        display(figure)
                        plt.close(figure)
                    if hasattr(self.result, "_repr_html_"):
                        display(self.result)
                except Exception as error:  # caught inside: in a kernel Output.__exit__ eats it
                    self.error = error
                    print(f"Error: {type(error).__name__}: {error}")
                    print("".join(traceback.format_exception(error)[-3:]).rstrip())
        finally:
            self.button.disabled = False
        return self.result

    def _progress(self, done: int, total: int, status: str | None = None):  # progress protocol
        self.progress.max, self.progress.value = total, done
        if status is not None:
            self.status.value = status

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
