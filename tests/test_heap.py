"""Freed memory handed back to the system: glibc's malloc_trim(0) where there is one."""

import sys

import pytest

from d2lhelpers.core import heap


def test_the_c_librarys_trim_is_asked_to_keep_nothing(monkeypatch):
    calls = []
    monkeypatch.setattr(heap, "_malloc_trim", lambda: calls.append)
    assert heap.return_freed_memory() is True and calls == [0]  # pad 0: keep nothing spare


def test_without_a_trim_nothing_is_done(monkeypatch):
    monkeypatch.setattr(heap, "_malloc_trim", lambda: None)
    assert heap.return_freed_memory() is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim: Linux")
def test_glibc_has_one():
    assert heap._malloc_trim() is not None and heap.return_freed_memory() is True
