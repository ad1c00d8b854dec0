"""docs/cli.md and docs/deploy.md show what the commands print: every command of cli.md has
its output pasted under it, and the commands, run again now, print the same but for what
varies between runs (times, ages, ids, tokens, ports, the width of table columns)."""

from __future__ import annotations

import pytest

from tests.worker import cli_transcript as transcript

pytestmark = pytest.mark.slow  # every command of docs/cli.md run again


def test_every_command_has_an_output_block() -> None:
    for page in transcript.PAGES:
        commands = {line.split(" #")[0].strip() for block in transcript.command_blocks(page)
                    for line in block.splitlines()
                    if line.startswith(("ztq ", "curl "))}  # fmt: skip
        shown = {b.command for b in transcript.blocks(page)}
        assert shown <= commands, f"docs/{page}: output blocks of commands not shown above them"
        if page == "cli.md":
            assert commands - shown == set(), f"docs/{page}: commands without output"
    assert len(transcript.blocks("cli.md")) >= 27 and len(transcript.blocks("deploy.md")) >= 8


def test_what_varies_is_normalised_and_what_a_command_prints_is_not() -> None:
    shown = "Queues\nQUEUE  OLDEST WAITING  THREADS\nmail           3m 21s        3\n"
    assert transcript.normalise(shown) == transcript.normalise(
        "Queues\nQUEUE  OLDEST WAITING  THREADS\nmail           987 ms        3\n"
    )
    assert transcript.normalise(shown) != transcript.normalise(
        "Queues\nQUEUE  OLDEST WAIT  THREADS\nmail           3m 21s        3\n"
    )
    assert transcript.normalise(shown) != transcript.normalise(shown.replace(" 3\n", " 4\n"))
    token = "ztq: token 0123456789ab (prometheus, viewer) until 2027-02-22 10:55 UTC"
    assert transcript.normalise(token) == ["ztq: token <id> (prometheus, viewer) until <time>"]
    assert transcript.normalise('  "head_age_ms": 40849,\n  "paused": false') == [
        '"head_age_ms": <varies>,',
        '"paused": false',
    ]
    throughput = '      "throughput": [\n        [29925271, 4, 0],\n        [29925272, 0, 1],'
    assert transcript.normalise(throughput) == [
        '"throughput": [',
        "[<minute>, <done>, <failed>],",
        "[<minute>, <done>, <failed>],",
    ]


def test_the_docs_show_what_the_commands_print_now() -> None:
    """About 15 s: 35 commands, a worker and a console, side by side (each run has a
    30 s timeout)."""
    found = transcript.differences(transcript.fresh_outputs())
    if found:
        pytest.fail("\n\n".join([*found, transcript.WRITE_HINT]), pytrace=False)
