"""TensorFlow's first import: oneDNN off, and no start-up noise on stderr (a red box in Jupyter)."""

from d2lhelpers import _tf_settings
from tests.conftest import run_python

NOISE = (
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    "I0000 00:00:1796121619.081753   19120 cudart_stub.cc:31] Could not find cuda drivers on "
    "your machine, GPU will not be used.\n"
)


def test_the_known_noise_is_dropped_and_anything_else_kept():
    other = "E0000 00:00:1.0 1 cuda_dnn.cc:8] Unable to register cuDNN factory\n"
    assert _tf_settings.without_noise(NOISE) == ""
    assert _tf_settings.without_noise(NOISE + other + NOISE) == other


def test_importing_d2lhelpers_writes_nothing_to_stderr_and_turns_onednn_off():
    done = run_python(
        """
        import os
        import d2lhelpers
        import tensorflow as tf
        tf.constant(1.0)  # the runtime starts: no late noise either
        print(os.environ["TF_ENABLE_ONEDNN_OPTS"], os.environ["TF_CPP_MIN_LOG_LEVEL"])
        """,
        unset=("TF_ENABLE_ONEDNN_OPTS", "TF_CPP_MIN_LOG_LEVEL"),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "3"]
    assert done.stderr == ""


def test_what_tensorflow_says_at_import_besides_the_noise_still_reaches_stderr():
    done = run_python(
        """
        import os, sys
        from d2lhelpers._tf_settings import _QuietStderr
        with _QuietStderr():
            os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called"
                        b" are written to STDERR\\nsomething that matters\\n")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "something that matters\n"
