"""Environment settings TensorFlow reads once, when it is first imported.

oneDNN runs its own thread pool inside every matmul, so two "devices" that should each own one
core would fight over all of them (two concurrent chains took 1.83x one chain with it on, 1.02x
with it off). The log level keeps TensorFlow's start-up chatter out of notebook outputs.
"""

import os
import sys
import warnings

SETTINGS = {"TF_ENABLE_ONEDNN_OPTS": "0", "TF_CPP_MIN_LOG_LEVEL": "3"}

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
