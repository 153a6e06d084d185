"""The seed's Go program, ported: against the Go program's own output, byte for byte."""

from pathlib import Path

import pytest

from d2lhelpers.collectives.seed_port import go_format_float, seed_allreduce, seed_program_output

GO_OUTPUT = (Path(__file__).parent / "seeds" / "004_allreduce_go_output.txt").read_text()


def test_seed_program_prints_the_go_output_byte_for_byte():
    assert GO_OUTPUT.startswith("every GPU now holds [1111 2222] after 6 hops\n\nGPUs")
    assert seed_program_output().encode() == GO_OUTPUT.encode()


def test_seed_allreduce_mutates_like_go():
    gpus = [[1.0, 2.0], [10.0, 20.0], [100.0, 200.0], [1000.0, 2000.0]]
    row = gpus[2]
    assert seed_allreduce(gpus) == 6
    assert gpus == [[1111.0, 2222.0]] * 4 and gpus[2] is row  # filled in place
    assert seed_allreduce([[5]]) == 0
    three = [[1], [2], [4]]
    assert seed_allreduce(three) == 4 and three == [[7]] * 3


@pytest.mark.parametrize("vectors", [[], [[1], []], [[1, 2], [3]]])
def test_seed_allreduce_refuses_what_go_would_panic_on(vectors):
    with pytest.raises(ValueError):
        seed_allreduce(vectors)


@pytest.mark.parametrize(
    "value, printed",  # as go1.19.8's fmt.Println prints them
    [
        (1111.0, "1111"),
        (1.0, "1"),
        (120000.0, "120000"),
        (1.2e6, "1.2e+06"),
        (0.5, "0.5"),
        (-2.25, "-2.25"),
        (999999.0, "999999"),
        (1e6, "1e+06"),
        (1234567.0, "1.234567e+06"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (608863452348.1149, "6.088634523481149e+11"),
        (0.1 + 0.2, "0.30000000000000004"),
        (120.5, "120.5"),
        (0.0, "0"),
        (-0.0, "-0"),
        (float("inf"), "+Inf"),
        (float("-inf"), "-Inf"),
        (float("nan"), "NaN"),
    ],
)
def test_go_format_float(value, printed):
    assert go_format_float(value) == printed
