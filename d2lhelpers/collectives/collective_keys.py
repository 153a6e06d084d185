"""What TensorFlow's collective ops need besides the tensors: keys and a communication hint.

Every rank of one all-reduce passes the same group key (which devices take part) and the same
instance key (which all-reduce this is); a key per rank, or one key reused for another
all-reduce of the same group, leaves the ranks waiting for each other. The keys live here, not
in notebook 05's saved cells, so that a cell run again in a kernel never hands out a key twice.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from d2lhelpers.devices import Device

# Far above the keys tf.distribute hands out (from 1 up), so a strategy in the same kernel never
# reuses one of ours for another set of devices.
GROUP_KEY_BASE = 1 << 20
_group_keys: dict[tuple[str, ...], int] = {}
_instance_keys = itertools.count(1)


def collective_keys(names: Sequence[str]) -> tuple[int, int]:
    """(group key, instance key) for a new collective over the devices `names`, in rank order:
    the group's key is the same every time, the instance key new."""
    group = _group_keys.setdefault(tuple(names), GROUP_KEY_BASE + len(_group_keys))
    return group, next(_instance_keys)


def communication_hint(devices: Sequence[Device | str]) -> str:
    """'ring' on logical CPUs and virtual GPUs (NCCL refuses two ranks on one chip); else 'auto'
    (real GPUs: NCCL)."""
    kinds = {d.kind for d in devices if isinstance(d, Device)}
    return "auto" if kinds == {"GPU"} else "ring"
