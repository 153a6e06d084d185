"""Functions sent as source: what they use travels with them, the rest is refused by name."""

import json
import linecache
import math

import pytest
import tensorflow as tf

from d2lhelpers.processes import compute_copy
from d2lhelpers.processes.function_source import function_source, load_functions

SCALE = 3


def helper(x):
    return x * SCALE


def uses_helper(x):
    return math.floor(helper(x))


def factory(n):
    @tf.function
    def inner(x):
        return helper(x) + n

    return inner


def uses_an_object(x):
    return x + linecache.cache.__len__() + UNSENDABLE[0]


UNSENDABLE = [1]


def test_a_function_travels_with_the_helpers_modules_and_values_it_uses():
    sent = function_source(f=uses_helper)
    assert json.loads(json.dumps(sent)) == sent
    assert "def helper(x)" in sent["code"] and "import math as math" in sent["code"]
    assert "SCALE = 3" in sent["code"]
    loaded = load_functions(sent)
    assert loaded["f"](2.5) == 7
    assert loaded["f"] is not uses_helper and loaded["f"].__name__ == "uses_helper"


def test_a_nested_tf_function_is_sent_whole_and_autograph_reads_it():
    sent = function_source(make=factory)
    assert "def helper(x)" in sent["code"] and "import tensorflow as tf" in sent["code"]
    inner = load_functions(sent)["make"](1)
    assert float(inner(tf.constant(2.0))) == 7.0


def test_the_saved_notebook_functions_are_sent_with_their_chain(devices):
    sent = function_source(
        chain_on=compute_copy.chain_on,
        copy_to=compute_copy.copy_to,
        run_and_copy=compute_copy.run_and_copy,
    )
    assert sent["code"].count("def chain(") == 1
    loaded = load_functions(sent)
    x = tf.eye(4) * 2
    (y,) = loaded["run_and_copy"](devices[0].name, devices[1].name, 1, False)(x)
    assert float(tf.reduce_sum(y)) == 16.0


def test_a_function_defined_in_a_notebook_cell_is_read_as_ipython_keeps_it():
    cell = "def from_a_cell(x):\n    return helper(x) - 1\n"
    filename = "<ipython-input-7-test>"
    linecache.cache[filename] = (len(cell), None, cell.splitlines(True), filename)
    namespace = {"helper": helper, "SCALE": SCALE}
    exec(compile(cell, filename, "exec"), namespace)
    sent = function_source(f=namespace["from_a_cell"])
    assert load_functions(sent)["f"](2) == 5


def test_what_cannot_be_sent_is_refused_by_name():
    with pytest.raises(TypeError, match="'UNSENDABLE', a list"):
        function_source(f=uses_an_object)
    with pytest.raises(TypeError, match="define it with `def`"):
        function_source(f=lambda x: x)
    with pytest.raises(TypeError, match="define it with `def`"):
        function_source(f=factory(1).python_function)
    with pytest.raises(TypeError, match="not a Python function"):
        function_source(f=print)


def test_two_different_functions_of_one_name_are_refused():
    namespace = {}
    exec("def helper(x):\n    return x\n", namespace)

    def calls_both(x):
        return x

    with pytest.raises(TypeError, match="two different functions are both called 'helper'"):
        function_source(a=helper, b=namespace["helper"])
    with pytest.raises(TypeError, match="define it with `def`"):
        function_source(a=calls_both)
