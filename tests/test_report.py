"""Tables print as aligned text and render as escaped HTML, flags always beside their numbers."""

import pytest

from d2lhelpers.core.report import CELL, WARNING_ATTRIBUTES, Reported, Table


def table(**overrides):
    fields = dict(
        title="Two devices",
        columns=("devices", "time"),
        rows=[(1, 0.0123456), (2, 1.5)],
        verdicts=["2 devices are 1.9x faster than 1"],
        flags=["hidden fraction of 288%: impossible"],
    )
    return Table(**{**fields, **overrides})


def test_text_is_aligned_with_verdicts_then_flags():
    assert str(table()).splitlines() == [
        "Two devices",
        "devices  time",
        "-------  ------",
        "1        0.0123",
        "2        1.5",
        "2 devices are 1.9x faster than 1",
        "WARNING: hidden fraction of 288%: impossible",
    ]


def test_floats_show_three_significant_digits_and_other_cells_as_they_are():
    text = str(table(rows=[(12345.678, "12.3456"), (None, True)]))
    assert "1.23e+04" in text and "12.3456" in text and "None" in text and "True" in text


def test_a_row_of_the_wrong_length_is_refused_naming_the_table():
    with pytest.raises(ValueError, match="'Two devices': row \\(1,\\) has not 2 cells"):
        table(rows=[(1,)])


def test_a_table_without_rows_or_title_shows_only_its_sentences():
    assert str(Table("", ("a",), verdicts=["v"], flags=["f"])) == "v\nWARNING: f"
    assert str(Table("T", ("a",))) == "T"


def test_html_is_escaped_and_the_flag_stands_out():
    html = table(
        title="<b>x</b> & y",
        columns=("a<b", "c"),
        rows=[("<script>", 1.0)],
        verdicts=["1 < 2"],
        flags=["a & b"],
    )._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<p><b>&lt;b&gt;x&lt;/b&gt; &amp; y</b></p>" in html
    assert f"<th {CELL}>a&lt;b</th>\n<th {CELL}>c</th>" in html and f"<td {CELL}>1</td>" in html
    assert "<p>1 &lt; 2</p>" in html
    assert f"<p {WARNING_ATTRIBUTES}><b>WARNING:</b> a &amp; b</p>" in html
    assert html.index("<table>") < html.index("1 &lt; 2") < html.index("WARNING")


class Result(Reported):
    def __init__(self, tables):
        self._tables = tables

    def tables(self):
        return self._tables


def test_reported_joins_its_tables():
    result = Result([table(), Table("Second", ("x",), [(3,)])])
    assert str(result) == str(table()) + "\n\nSecond\nx\n-\n3"
    html = result._repr_html_()
    assert html.count("<table>") == 2 and html.index("Two devices") < html.index("Second")


def test_reported_without_tables_says_it_is_not_implemented():
    with pytest.raises(NotImplementedError):
        str(Reported())


def test_a_dataclass_result_shows_its_tables_not_its_fields_in_plain_text():
    import dataclasses

    from IPython.lib.pretty import pretty

    @dataclasses.dataclass
    class RunResult(Reported):
        seconds: float

        def tables(self):
            return [Table("a run", ["time"], [[self.seconds]])]

    result = RunResult(1.5)
    assert repr(result) == str(result) == pretty(result)
    assert "seconds=" not in pretty(result) and "a run" in pretty(result)
