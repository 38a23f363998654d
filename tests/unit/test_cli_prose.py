"""`cdc --help` reads as prose: docstring line breaks joined, paragraphs and list items kept."""

from typer.testing import CliRunner

from cdc.cli.app import app
from cdc.cli.prose import prose


def test_prose_joins_lines_but_keeps_paragraphs_and_items():
    doc = """Compare each sink
    table with its source.

    Exit codes:
    * 0: equal
      and done
    * 1: a difference
    """
    wanted = "Compare each sink table with its source.\n\nExit codes:\n* 0: equal and done\n* 1: a difference"
    assert prose(doc) == wanted
    assert prose(None) is None


def test_the_commands_help_has_no_sentence_cut_by_the_source_files_line_breaks():
    out = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    assert "snapshot while a live workload runs" in out  # the demo's docstring broke after "snapshot"
    assert "without locking the source" in out
