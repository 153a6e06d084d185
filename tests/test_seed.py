"""The seed's own TensorFlow code runs on a CPU-only machine with two lines changed."""

import re
from pathlib import Path

from tests.conftest import run_python

SEED = Path(__file__).parent / "seeds" / "000_automatic_parallelism.py"
CHANGES = {
    "from d2l import tensorflow as d2l": "import d2lhelpers as d2l",
    "devices = tf.config.list_logical_devices('GPU')": "devices = d2l.try_all_gpus()",
}


def test_seed_code_runs_with_two_lines_changed():
    original = SEED.read_text()
    code = original
    for old, new in CHANGES.items():
        assert code.count(old) == 1
        code = code.replace(old, new)
    changed = [a for a, b in zip(original.splitlines(), code.splitlines(), strict=True) if a != b]
    assert len(changed) == 2
    out = run_python(code + "\nprint('devices:', [d.kind for d in devices])", timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    labels = re.findall(r"^(.+): \d+\.\d{4} sec$", out.stdout, flags=re.M)
    assert labels == [
        "GPU1 time",
        "GPU2 time",
        "GPU1 & GPU2",
        "Run on GPU1",
        "Copy to CPU",
        "Run on GPU1 and copy to CPU",
    ]
    assert "devices: ['logical CPU', 'logical CPU', 'logical CPU', 'logical CPU']" in out.stdout
