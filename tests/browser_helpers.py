"""JupyterLab in headless Chromium for the browser test: a throw-away server, a learner's clicks.

The server runs on a copy of the notebooks with its own config, settings and workspaces, so no
first-run dialog, news prompt or remembered layout gets in the way, and nothing of the user's
JupyterLab set-up is read or written. Everything here waits with a deadline: a hung page fails the
test within its time bound instead of hanging `make test`.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from PIL import Image

from d2lhelpers.core.units import usable_cores

CHROMIUM = Path("/usr/bin/chromium")  # Debian's package; Playwright must never download one
# Without the network flags Chromium keeps dialling Google, and this machine refuses each call.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# Settings a learner could set in JupyterLab's settings editor; here they keep the page quiet
# (no news or update toasts) and put every cell in the DOM (the default windowing mode leaves
# off-screen cells unrendered, and a screenshot or a search of the page would miss them).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
}
WIDGET_REPR = re.compile(r"^(interactive|VBox|HBox|Box|Output|IntSlider|FloatSlider|Button)\(")
PROCESS_NAMES = re.compile(r"jupyter|ipykernel|chrom|playwright")


MAX_STRETCH = 4.0  # a machine this busy or busier: the waits stop growing, a hang still fails


def busy_factor() -> float:
    """How many runnable threads share each usable core (the 1-minute load average over the
    usable cores), at least 1: on a machine that busy, every step takes about that much longer."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average: take the machine as quiet
        return 1.0
    return min(max(1.0, load / usable_cores()), MAX_STRETCH)


class Deadline:
    """Seconds left of a budget; each wait gets what is left, capped by its own limit. Both
    stretch by the busiest `load()` seen so far (`busy_factor`): a test beside a `make book`
    gets the time that load costs it, while a stuck run still fails."""

    def __init__(self, seconds: float, clock=time.monotonic, load=busy_factor):
        self.clock, self.start, self.base, self.load = clock, clock(), seconds, load
        self.stretch = 1.0

    @property
    def seconds(self) -> float:
        return self.base * self.stretch

    def elapsed(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        self.stretch = max(self.stretch, self.load())
        return self.seconds - self.elapsed()

    def ms(self, cap_s: float) -> float:
        """A Playwright timeout (ms): `cap_s` (stretched), or less when the budget ends sooner;
        raises once the budget is spent."""
        left = self.left()
        if left <= 0:
            raise TimeoutError(
                f"the browser test's {self.seconds:.0f} s budget is spent ({self.base:.0f} s "
                f"stretched x{self.stretch:.1f} for the machine's load)"
            )
        return 1000 * min(cap_s * self.stretch, left)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid: int) -> dict[int, str]:
    """Every live descendant of `pid` with its command line, read from /proc."""
    children: dict[int, list[int]] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (entry / "stat").read_text()
            parent = int(stat.rsplit(")", 1)[1].split()[1])  # the name may hold spaces and ')'
            children.setdefault(parent, []).append(int(entry.name))
            commands[int(entry.name)] = _command(entry)
    found, todo = {}, list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found[child] = commands.get(child, "?")
        todo.extend(children.get(child, []))
    return found


def _command(proc: Path) -> str:
    return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()


def alive(pids) -> dict[int, str]:
    """Those of `pids` still running (zombies are dead: only their parent's wait is missing)."""
    living = {}
    for pid in pids:
        with contextlib.suppress(OSError, IndexError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] != "Z":
                living[pid] = (
                    Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                )
    return living


class JupyterLab:
    """`python -m jupyter lab` on 127.0.0.1, a free port and a token, serving `root`.

    Config, runtime, data, settings and workspaces all live under `state`, a new folder: the
    user's own kernels and settings are not seen, so the kernel is this venv's Python.
    """

    def __init__(self, root: Path, state: Path):
        self.root, self.state = root, state
        self.port, self.token = free_port(), secrets.token_hex(16)
        self.log_path = state / "server.log"
        self.process: subprocess.Popen | None = None
        self.seen: dict[int, str] = {}  # every process the server started, for the clean-up

    def start(self, timeout: float = 60):
        settings = self.state / "settings"
        for plugin, values in LAB_SETTINGS.items():
            path = settings / f"{plugin}.jupyterlab-settings"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        env = {k: v for k, v in os.environ.items() if k not in ("JUPYTER_PATH", "JUPYTER_PORT")}
        for name in ("config", "runtime", "data"):
            env[f"JUPYTER_{name.upper()}_DIR"] = str(self.state / name)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        command = [
            sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root",
            "--ip=127.0.0.1", f"--port={self.port}", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
            f"--LabApp.user_settings_dir={settings}",
            f"--LabApp.workspaces_dir={self.state / 'workspaces'}",
            # window.jupyterapp: the test asks the notebook's own kernel for reference renders.
            "--LabApp.expose_app_in_browser=True",
            # A safety net should pytest itself be killed: idle kernels are culled, then the
            # idle server stops. The test's own budget is shorter than either.
            "--MappingKernelManager.cull_idle_timeout=900",
            "--ServerApp.shutdown_no_activity_timeout=900",
        ]  # fmt: skip
        with open(self.log_path, "wb") as log:
            # Its own process group: the clean-up can signal the server and all it started.
            self.process = subprocess.Popen(
                command, cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.process.poll() is not None:
                raise RuntimeError(f"JupyterLab exited at start:\n{self.log_tail()}")
            with contextlib.suppress(OSError):
                self.api("GET", "api/status")
                return self
            time.sleep(0.3)
        raise TimeoutError(f"JupyterLab did not answer in {timeout} s:\n{self.log_tail()}")

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}?token={self.token}"

    def api(self, method: str, path: str):
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/{path}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            body = answer.read()
        return json.loads(body) if body else None

    def kernel_state(self, notebook: str) -> str | None:
        """The execution state of the kernel of `notebook`'s session; None while it has none."""
        for session in self.api("GET", "api/sessions"):
            if session["path"] == notebook and session.get("kernel"):
                return session["kernel"]["execution_state"]
        return None

    def shut_down_kernel(self, notebook: str):
        """Free the kernel's memory before the next notebook starts one."""
        with contextlib.suppress(OSError):  # a dead server has no kernels: stop() checks that
            for session in self.api("GET", "api/sessions"):
                if session["path"] == notebook:
                    self.api("DELETE", f"api/sessions/{session['id']}")

    def watch(self):
        """Remember the server's processes now (kernels leave its process group)."""
        if self.process:
            self.seen.update(descendants(self.process.pid))

    def stop(self) -> dict[int, str]:
        """Shut the server and its kernels down, killing what will not go; return survivors."""
        if self.process is None:
            return {}
        self.watch()
        with contextlib.suppress(OSError):
            self.api("POST", "api/shutdown")  # the polite way: kernels are shut down too
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=15)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(timeout=10)
        # Kernels run in sessions of their own: end any that outlived the server, by pid.
        for pid in alive(self.seen):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
        return alive(self.seen)

    def log_tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""


# --- A learner's actions on the page ------------------------------------------------------

NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden)"
# Waits look at the page this often: polling on every frame would take CPU from the kernel, and
# the notebooks time things.
POLL_MS = 250
RUN_FINISHED_JS = """selector => {
    const notebook = document.querySelector(selector);
    const prompts = [...notebook.querySelectorAll('.jp-InputPrompt')].map(e => e.textContent);
    const status = notebook.querySelector('.jp-Notebook-ExecutionIndicator');
    return !prompts.some(p => p.includes('*')) && status && status.dataset.status === 'idle';
}"""


def open_notebook(page, lab: JupyterLab, name: str, deadline: Deadline, workspace: str):
    """Open `name` in a fresh workspace and wait until its kernel is up and idle.

    A dialog (say, "Select Kernel" for a notebook without kernelspec) is a failure: a learner
    would be stopped by it too.
    """
    page.goto(lab.url(f"lab/workspaces/{workspace}/tree/{name}"), timeout=deadline.ms(60))
    page.locator(f"{NOTEBOOK} .jp-Cell").first.wait_for(timeout=deadline.ms(60))
    end = time.monotonic() + deadline.ms(90) / 1000
    while time.monotonic() < end:
        dialog = page.locator(".jp-Dialog")
        if dialog.count():
            raise AssertionError(f"{name}: a dialog opened: {dialog.first.inner_text()!r}")
        if lab.kernel_state(name) == "idle":
            break
        page.wait_for_timeout(300)
    else:
        raise TimeoutError(f"{name}: its kernel was not idle in time\n{lab.log_tail()}")
    lab.watch()
    page.wait_for_function(RUN_FINISHED_JS, arg=NOTEBOOK, polling=POLL_MS, timeout=deadline.ms(30))
    # The file browser would take a third of every screenshot.
    page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current").click()


def menu(page, top: str, item: str | re.Pattern, deadline: Deadline):
    page.get_by_role("menuitem", name=top, exact=True).click(timeout=deadline.ms(30))
    exact = isinstance(item, str) or None
    page.get_by_role("menuitem", name=item, exact=exact).click(timeout=deadline.ms(30))


def run_all_cells(page, deadline: Deadline, cap_s: float):
    """Run > Run All Cells, then wait until no cell is queued or running and the kernel idles."""
    first_prompt = page.locator(f"{NOTEBOOK} .jp-CodeCell .jp-InputPrompt").first
    menu(page, "Run", "Run All Cells", deadline)
    page.wait_for_function(
        "e => e.textContent.trim() !== '[ ]:'",
        arg=first_prompt.element_handle(),
        timeout=deadline.ms(30),
    )
    finished = deadline.ms(cap_s)
    page.wait_for_function(RUN_FINISHED_JS, arg=NOTEBOOK, polling=POLL_MS, timeout=finished)


def save_notebook(page, deadline: Deadline):
    """File > Save Notebook, and wait for the tab to lose its unsaved mark."""
    menu(page, "File", re.compile(r"^Save Notebook(?! As)"), deadline)
    page.locator(".lm-TabBar-tab.jp-mod-current.jp-mod-dirty").wait_for(
        state="detached", timeout=deadline.ms(30)
    )


def widget_reprs_shown_as_text(page) -> list[str]:
    """Widgets not rendered: their repr shown as plain text (no widget manager), or the
    manager's own placeholder or complaint (a model it never received)."""
    texts = page.locator(
        f"{NOTEBOOK} .jp-OutputArea-output[data-mime-type='text/plain']"
    ).all_inner_texts()
    shown = [t[:80] for t in texts if WIDGET_REPR.match(t.strip())]
    page_text = page.locator(NOTEBOOK).inner_text()
    return shown + [m for m in ("Error displaying widget", "Loading widget") if m in page_text]


# A cell's own outputs, not those shown inside an ipywidgets Output area.
CELL_OUTPUT = f"{NOTEBOOK} .jp-Cell-outputArea > .jp-OutputArea-child > .jp-OutputArea-output"


def rendered_widgets(page):
    """Widget views that are a cell's outputs (each a box, slider, button... of ipywidgets)."""
    return page.locator(f"{CELL_OUTPUT} > .jupyter-widgets")


def slider_panels(page):
    """Widget boxes holding sliders and an output area: the experiments' panels."""
    return (
        page.locator(f"{CELL_OUTPUT} > .widget-vbox")
        .filter(has=page.locator(".widget-slider"))
        .filter(has=page.locator(".widget-output"))
    )


def slider_state(slider) -> dict:
    """A slider's label, range and value, as noUiSlider announces them to screen readers."""
    handle = slider.locator(".noUi-handle")
    number = lambda attribute: float(handle.get_attribute(attribute))  # noqa: E731
    return {
        "label": slider.locator(".widget-label").inner_text(),
        "min": number("aria-valuemin"),
        "max": number("aria-valuemax"),
        "value": number("aria-valuenow"),
    }


def set_slider(slider, value: float, deadline: Deadline):
    """Type `value` into the slider's readout and press Enter, as a learner can."""
    readout = slider.locator(".widget-readout")
    readout.click(timeout=deadline.ms(10))
    readout.press("Control+A")
    readout.press_sequentially(str(int(value)) if value == int(value) else str(value))
    readout.press("Enter")
    handle = slider.locator(".noUi-handle")
    handle.page.wait_for_function(
        "([e, v]) => Number(e.getAttribute('aria-valuenow')) === v",
        arg=[handle.element_handle(), value],
        timeout=deadline.ms(10),
    )


def plot_source(panel) -> str | None:
    """The `src` of the last image in the panel's output area (None when it shows none)."""
    images = panel.locator(".widget-output img")
    return images.last.get_attribute("src") if images.count() else None


def panel_text(panel) -> str:
    return panel.locator(".widget-output").inner_text()


def panel_error(text: str) -> bool:
    """An error in a panel's output: a traceback, or a panel's own `Error: ...` line."""
    return "Traceback" in text or re.search(r"^Error:", text, re.MULTILINE) is not None


def press_run(panel, deadline: Deadline, cap_s: float) -> bool:
    """Click the panel's Run button and wait for the run to end; say if Run was disabled meanwhile.

    A run has ended when Run, disabled by the click, is enabled again and the panel has drawn
    a new plot, printed an error or said it stopped (the same values can draw the same plot).
    """
    button = panel.locator("button.widget-button").filter(has_text="Run")
    output = panel.locator(".widget-output")
    old_plot, old_text = plot_source(panel), panel_text(panel)
    # A fast run disables and enables the button between two looks: record every change instead.
    button.evaluate(
        """b => {
            b.sawDisabled = false;
            new MutationObserver(() => { b.sawDisabled ||= b.disabled; })
                .observe(b, {attributes: true, attributeFilter: ['disabled']});
        }"""
    )
    button.click(timeout=deadline.ms(10))
    panel.page.wait_for_function(
        """([button, output, panel, oldPlot, oldText]) => {
            if (!button.sawDisabled || button.disabled) return false;
            const images = output.querySelectorAll('img');
            const plot = images.length ? images[images.length - 1].getAttribute('src') : null;
            const text = output.innerText;
            return (plot && plot !== oldPlot) || (text.includes('Error') && text !== oldText)
                || /done in|stopped|interrupted/.test(panel.innerText);
        }""",
        arg=[button.element_handle(), output.element_handle(), panel.element_handle(), old_plot,
             old_text],
        polling=POLL_MS,
        timeout=deadline.ms(cap_s),
    )  # fmt: skip
    return button.evaluate("b => b.sawDisabled")


# --- Whole plots: what the browser shows against a headless render in the same kernel ------

WHITE = 250  # a grey level at or above this counts as white paper


def png_of(src: str | None) -> bytes | None:
    """The PNG bytes of an `<img src="data:image/png;base64,...">`."""
    if not src or not src.startswith("data:image/png;base64,"):
        return None
    return base64.b64decode(src.split(",", 1)[1])


def ink(png: bytes) -> tuple[float, tuple[int, int]]:
    """The fraction of non-white pixels, and the size; raises on a truncated or broken PNG."""
    image = Image.open(io.BytesIO(png))
    image.load()
    grey = image.convert("L")
    dark = sum(count for level, count in enumerate(grey.histogram()) if level < WHITE)
    return dark / (grey.width * grey.height), grey.size


# Run in the notebook's kernel: each panel's last result drawn again, headless, as `ink` counts.
REFERENCE_CODE = """
import gc, html, io, json, re
from PIL import Image

from d2lhelpers.core.units import usable_cores
from d2lhelpers.ui import panel as module

def ink(png):
    grey = Image.open(io.BytesIO(png)).convert("L")
    dark = sum(c for level, c in enumerate(grey.histogram()) if level < WHITE)
    return [dark / (grey.width * grey.height), list(grey.size)]

def title(p):  # the panel's bold title, as the page shows it
    text = re.sub(r"<style>.*?</style>|<[^>]+>", "", p.widget.children[0].value)
    return html.unescape(text).strip()

def render(figure):
    if hasattr(module, "render_png"):
        return module.render_png(figure)
    buffer = io.BytesIO()  # before render_png: what the inline backend's display made
    figure.savefig(buffer, format="png", dpi=figure.dpi, bbox_inches="tight")
    return buffer.getvalue()

latest = {}
for p in gc.get_objects():
    if isinstance(p, module.Panel) and p.result is not None:
        t = title(p)
        if t not in latest or getattr(p, "_started", 0) >= getattr(latest[t], "_started", 0):
            latest[t] = p
figures = {t: p.show(p.result) for t, p in latest.items()}
print(json.dumps({t: ink(render(f)) for t, f in figures.items() if f is not None}))
""".replace("WHITE", str(WHITE))

EXECUTE_JS = """async ([code, timeoutMs]) => {
    const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
    const future = kernel.requestExecute({code: code, silent: false, store_history: false});
    let out = '';
    future.onIOPub = msg => {
        if (msg.header.msg_type === 'stream') out += msg.content.text;
        if (msg.header.msg_type === 'error') out += 'ERROR: ' + msg.content.ename + ': '
            + msg.content.evalue;
    };
    const timeout = new Promise((_, reject) =>
        setTimeout(() => reject(new Error('kernel did not answer')), timeoutMs));
    await Promise.race([future.done, timeout]);
    return out;
}"""


def kernel_output(page, code: str, deadline: Deadline, cap_s: float = 60) -> str:
    """What `code` prints when run in the open notebook's kernel (not shown in any cell)."""
    return page.evaluate(EXECUTE_JS, [f"exec({code!r}, {{}})", deadline.ms(cap_s)])


def reference_inks(page, deadline: Deadline) -> dict[str, tuple[float, tuple[int, int]]]:
    """Panel title -> (ink, size) of its last result rendered headless in its own kernel."""
    text = kernel_output(page, REFERENCE_CODE, deadline)
    if text.startswith("ERROR"):
        raise AssertionError(f"the headless render failed in the kernel: {text}")
    return {title: (value, tuple(size)) for title, (value, size) in json.loads(text).items()}


def panel_title(panel) -> str:
    return panel.locator(".widget-html").first.inner_text().strip()


def slider_values(panel) -> list[float]:
    sliders = panel.locator(".widget-slider")
    return [slider_state(sliders.nth(i))["value"] for i in range(sliders.count())]


def stderr_outputs(page) -> list[str]:
    """The text of every red stderr box in the notebook's cells."""
    return page.locator(
        f"{NOTEBOOK} .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
    ).all_inner_texts()


def screenshot_whole_notebook(page, path: Path):
    """A picture of every cell: the window is made as tall as the notebook, then shot."""
    size = page.viewport_size
    extra = page.evaluate(
        """(selector) => {
            const scroller = document.querySelector(selector + ' .jp-WindowedPanel-outer');
            scroller.scrollTop = 0;
            return scroller.scrollHeight - scroller.clientHeight;
        }""",
        NOTEBOOK,
    )
    page.set_viewport_size({"width": size["width"], "height": size["height"] + max(extra, 0)})
    try:
        page.wait_for_timeout(500)  # let the layout follow the new window size
        page.screenshot(path=str(path), full_page=True)
    finally:
        page.set_viewport_size(size)


# --- Words and contrast: alt text on every plot, warnings readable in the light and dark theme --

THEMES = ("JupyterLab Light", "JupyterLab Dark")
AA_CONTRAST = 4.5  # WCAG 2.x level AA, normal text (success criterion 1.4.3)


def plot_alt(panel) -> str | None:
    """The `alt` of the last image in the panel's output area (None when it shows none)."""
    images = panel.locator(".widget-output img")
    return images.last.get_attribute("alt") if images.count() else None


def set_theme(page, theme: str, deadline: Deadline):
    """Settings > Theme, through JupyterLab's own command; waits until the page has it."""
    light = "false" if "Dark" in theme else "true"
    page.evaluate(
        "theme => window.jupyterapp.commands.execute('apputils:change-theme', {theme})", theme
    )
    page.wait_for_function(
        "light => document.body.dataset.jpThemeLight === light", arg=light,
        timeout=deadline.ms(30),
    )  # fmt: skip
    page.wait_for_timeout(500)  # the theme's stylesheet applies after the attribute changes


# Each element's text colour, and the background behind it: its own and its ancestors'
# backgrounds laid over each other (transparent ones let the next show through) over white.
COLOURS_JS = """elements => elements.map(element => {
    const rgba = text => {
        const parts = text.match(/[\\d.]+/g).map(Number);
        return parts.length > 3 ? parts : [...parts, 1];
    };
    const layers = [];
    for (let e = element; e; e = e.parentElement) {
        const colour = rgba(getComputedStyle(e).backgroundColor);
        if (colour[3] > 0) layers.push(colour);
        if (colour[3] >= 1) break;
    }
    let background = [255, 255, 255];
    for (const [r, g, b, a] of layers.reverse()) {
        background = [r * a + background[0] * (1 - a), g * a + background[1] * (1 - a),
                      b * a + background[2] * (1 - a)];
    }
    return {text: element.innerText.slice(0, 60), colour: rgba(getComputedStyle(element).color),
            background: background};
})"""


def warning_colours(page) -> list[dict]:
    """Every warning in the open notebook styled by the package: text, colour and background."""
    return page.locator(f"{NOTEBOOK} .d2l-warning").evaluate_all(COLOURS_JS)


def relative_luminance(rgb) -> float:
    """WCAG 2.x relative luminance of an sRGB colour given as 0-255 channels."""

    def linear(channel: float) -> float:
        c = channel / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in rgb[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(foreground, background) -> float:
    """WCAG 2.x contrast ratio (1 to 21) of two opaque colours."""
    light, dark = sorted(map(relative_luminance, (foreground, background)), reverse=True)
    return (light + 0.05) / (dark + 0.05)
