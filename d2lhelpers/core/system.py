"""Which operating system this is, and the one check in front of the Linux-only lessons.

The single-process lessons (notebooks 01, 03, 04, 05, 07) use only portable pieces: host memory
through psutil, the cache's folder and lock through platformdirs and filelock. Worker processes
(notebooks 02 and 06) need what only Linux is tested with here: process groups (`setsid`,
`killpg`) that end a worker's children too, `/proc` and `resource` for their memory. They call
`require_linux` before starting anything, so a Mac or Windows learner reads one sentence naming
their system instead of a traceback from deep inside the worker code.
"""

from __future__ import annotations

import sys

NAMES = {"linux": "Linux", "darwin": "macOS", "win32": "Windows", "cygwin": "Windows (Cygwin)"}


def system_name(platform: str | None = None) -> str:
    """This system's name as a learner knows it (`macOS`, not `darwin`)."""
    platform = sys.platform if platform is None else platform
    return next((name for key, name in NAMES.items() if platform.startswith(key)), platform)


def is_linux(platform: str | None = None) -> bool:
    return (sys.platform if platform is None else platform).startswith("linux")


def require_linux(what: str, platform: str | None = None) -> None:
    """Refuse `what` on any system but Linux, with a sentence that names this one."""
    if not is_linux(platform):
        raise RuntimeError(
            f"{what} needs Linux (process groups, /proc), and this is {system_name(platform)}: "
            f"the single-process notebooks (01, 03, 04, 05, 07) run here; notebooks 02 and 06 "
            f"need a Linux machine (a Linux VM, WSL 2 or a course server)."
        )
