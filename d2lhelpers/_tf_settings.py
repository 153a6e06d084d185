"""Environment settings TensorFlow reads once, when it is first imported; a quiet first import.

oneDNN runs its own thread pool inside every matmul, so two "devices" that should each own one
core would fight over all of them (two concurrent chains took 1.83x one chain with it on, 1.02x
with it off). The log level keeps TensorFlow's start-up chatter out of notebook outputs.

TF_CPP_MIN_LOG_LEVEL cannot silence two lines the CPU wheel writes while it is imported: the
cudart stub logs "Could not find cuda drivers on your machine" through Abseil before anything has
called `absl::InitializeLog()`, and Abseil writes such early messages straight to file
descriptor 2, whatever any level says (there is no environment switch for it; abseil-cpp PR
#1957, still open, would make the threshold apply). In JupyterLab they showed as a red stderr box
in the first cell. So TensorFlow is imported here with descriptor 2 pointed at a temporary file,
and everything it wrote there except those known lines is written back to stderr.
"""

import importlib.util
import logging
import os
import re
import sys
import tempfile
import warnings

SETTINGS = {"TF_ENABLE_ONEDNN_OPTS": "0", "TF_CPP_MIN_LOG_LEVEL": "3"}
TESTED_TENSORFLOW = "2.21"  # pyproject.toml's extras cap it below 2.22 (tests/test_packaging.py)
INSTALL_HINT = "pip install 'd2lhelpers[cpu]' (or [cuda] on Linux with an NVIDIA GPU)"
# Lines Abseil writes before its log is initialised: harmless on a CPU-only machine.
NOISE = re.compile(
    r"All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine"
)


def without_noise(text: str) -> str:
    """`text` without the known start-up noise; whatever else TensorFlow said is kept."""
    kept = [line for line in text.splitlines() if line.strip() and not NOISE.search(line)]
    return "".join(f"{line}\n" for line in kept)


def untested_tensorflow(version: str) -> str:
    """Why this TensorFlow may not run the lessons as written ('' for the tested minor release)."""
    if ".".join(version.split(".")[:2]) == TESTED_TENSORFLOW:
        return ""
    return (
        f"TensorFlow {version} is installed, but these lessons are tested with TensorFlow "
        f"{TESTED_TENSORFLOW} only: a lesson may fail or measure something else. {INSTALL_HINT} "
        f"installs the tested one."
    )


class _QuietStderr:
    """Point file descriptor 2 at a temporary file; on exit, write back all but the noise."""

    def __enter__(self):
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        self.log = tempfile.TemporaryFile()
        self.saved = os.dup(2)
        os.dup2(self.log.fileno(), 2)
        return self

    def __exit__(self, *exc):
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.log.seek(0)
        text = without_noise(self.log.read().decode(errors="replace"))
        self.log.close()
        if text and sys.stderr is not None:
            sys.stderr.write(text)
        return False


if "tensorflow" in sys.modules:
    if any(os.environ.get(key) != value for key, value in SETTINGS.items()):
        warnings.warn(
            "TensorFlow was imported before d2lhelpers, so oneDNN's own matmul threads stay on: "
            "concurrent runs on logical CPU devices will contend for every core (two chains took "
            "about 1.8x one chain instead of 1.0x). Restart the kernel and import d2lhelpers "
            "before tensorflow for clean measurements.",
            stacklevel=3,
        )
else:
    for key, value in SETTINGS.items():
        os.environ.setdefault(key, value)
    if importlib.util.find_spec("tensorflow") is None:
        raise ImportError(f"d2lhelpers needs TensorFlow, not installed here: {INSTALL_HINT}")
    with _QuietStderr():
        import tensorflow  # noqa: F401, E402  (the first import, with the settings above)
if note := untested_tensorflow(sys.modules["tensorflow"].__version__):
    warnings.warn(note, stacklevel=3)

# The lessons build one tf.function per device set and chain length on purpose (a learner's edited
# cell builds new ones too): TensorFlow's advice about "excessive retracing" is not for them.
logging.getLogger("tensorflow").addFilter(
    lambda record: "triggered tf.function retracing" not in record.getMessage()
)
