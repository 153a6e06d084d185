"""What notebook 05's measured runs share: checked measure options, steps reported as progress."""

from __future__ import annotations

from d2lhelpers.core.checks import require_count
from d2lhelpers.devices import select_devices, setup_devices

# A ring of logical CPUs reduces at about 1 GB/s of message (0.9-1.35 GB/s probed on 2 cores):
# a cautious rate for estimates made before anything is measured.
ESTIMATE_RATE_BYTES_PER_S = 0.5e9
ESTIMATE_CALL_S = 2e-3  # a call's start-up on a loaded machine (about 1 ms probed)


def allreduce_devices(n_devices, what: str) -> list:
    """The first `n_devices` set-up devices (None: all), refused if one: it would move nothing."""
    count = len(setup_devices())
    n = count if n_devices is None else require_count("n_devices", n_devices, 1)
    if n == 1:
        fix = (
            f"choose n_devices from 2 to {count}"
            if count > 1
            else "only 1 device is set up: run d2l.setup_devices(2) first, in a new kernel"
        )
        raise ValueError(f"an all-reduce on one device moves nothing, so {what}: {fix}")
    return select_devices(n)
