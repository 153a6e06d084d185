"""Kernel-side hook of the book build (`make book`): panels as their default run, figures described.

The build starts each notebook's kernel with this file (`--IPKernelApp.exec_files`), so the
committed notebooks and `d2lhelpers` stay as they are. In a static page a slider cannot move, so:

- displaying a `d2lhelpers.ui.panel.Panel` shows what its sliders are set to, a line saying that
  the sliders and Run work in JupyterLab (`make lab`), and then runs it once at those default
  values with its output printed into the cell (verdict, figure, table) instead of into the
  panel's ipywidgets Output area, which a static page cannot show. A panel that already shows
  the run of the cells above at those values (`Panel.show_run`) prints that run instead. A
  later `panel.run()` with the same slider values returns that run's result without running
  again (in JupyterLab its output lands in the panel, above); with other values it runs and
  prints where it is called.
- a matplotlib figure's plain-text form is a description of it (titles, axis labels, legend),
  which the build uses as the image's alt text (matplotlib is imported here to attach it; it
  sets no TensorFlow state, so `import d2lhelpers` still comes first for TensorFlow).

Everything is defined inside one function, so the notebook's namespace gains no name.
"""


def _d2l_book_install():
    import html
    import re

    from IPython import get_ipython
    from IPython.display import HTML, display, publish_display_data

    shell = get_ipython()
    note = (
        "In this page the panel is a picture of one run: its sliders and its Run button work "
        "when the notebook is opened in JupyterLab (<code>make lab</code>; their design, which "
        "the browser test checks: this page cannot show it)."
    )

    def title_of(panel) -> str:
        title = getattr(panel, "title", None)
        if not title:
            children = getattr(getattr(panel, "widget", None), "children", ())
            title = getattr(children[0], "value", "") if children else ""
        return re.sub(r"<[^>]+>", "", str(title)).strip() or type(panel).__name__

    def slider_text(name, widget) -> str:
        label = str(getattr(widget, "description", "") or name).rstrip(": ")
        value = getattr(widget, "value", "?")
        low, high = getattr(widget, "min", None), getattr(widget, "max", None)
        scope = f" (slider from {low} to {high})" if low is not None and high is not None else ""
        return f"{label} = {value}{scope}"

    def publish(panel):
        """The panel's verdict, image and table, from its Output widget (which a static page
        cannot show) into the cell itself."""
        for entry in getattr(panel.output, "outputs", ()):
            if entry.get("output_type") == "stream":
                print(entry.get("text", ""), end="")
            else:
                publish_display_data(entry.get("data", {}), entry.get("metadata", {}))

    def show_panel(panel):
        sliders = getattr(panel, "sliders", {}) or {}
        settings = "; ".join(slider_text(n, w) for n, w in sliders.items()) or "no sliders"
        values = panel.values() if callable(getattr(panel, "values", None)) else None
        # A panel already showing the run of the cells above at these values (`show_run`):
        # that is its default run, printed as it is, not run twice.
        shown = values is not None and getattr(panel, "shown_values", None) == values
        shown = shown and getattr(panel, "result", None) is not None
        which = ", the run of the cells above at these values (not run again)," if shown else ""
        display(
            HTML(
                '<div class="d2l-static-panel">'
                f"<p><strong>{html.escape(title_of(panel))}</strong>: its run at the default "
                f"settings ({html.escape(settings)}){which} follows.</p>"
                f'<p class="d2l-static-note">{note}</p></div>'
            )
        )
        if not callable(getattr(panel, "run", None)) or not hasattr(panel, "output"):
            print("(this panel has no run() or output area the book knows: no default run)")
            return
        run = panel.run
        result = panel.result if shown else run()
        if getattr(panel, "error", None) is not None:
            raise RuntimeError(f"the panel's default run failed: {panel.error!r}")
        publish(panel)

        def run_again():
            if panel.values() == values:
                return result
            again = run()
            publish(panel)
            return again

        panel.run = run_again

    def describe_figure(figure, printer, cycle):
        from d2lhelpers.ui.panel import figure_text  # the notebook imported d2lhelpers by now

        printer.text(figure_text(figure))

    shell.display_formatter.ipython_display_formatter.for_type_by_name(
        "d2lhelpers.ui.panel", "Panel", show_panel
    )
    # Not a text/plain formatter: IPython drops those for Figure when the inline backend starts.
    from matplotlib.figure import Figure

    Figure._repr_pretty_ = lambda figure, printer, cycle: describe_figure(figure, printer, cycle)


_d2l_book_install()
del _d2l_book_install
