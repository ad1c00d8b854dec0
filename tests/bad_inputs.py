"""The table of common mistakes: what a user may get wrong at each edge, and what ztq says.

One row a mistake, in four kinds, each run for real against a private redis-server by
tests/test_bad_inputs.py on a Redis that already holds tasks (``seed``):

- ``python``: a statement run as written (the names of :data:`NAMESPACE` are in scope);
  it must raise the named ``ZtqError`` subclass with the message part given.
- ``cli``: a command line, optionally preceded by environment assignments
  (``ZTQ_LEASE=soon ztq worker --burst``), run in-process through ``ztq``'s ``main``; it
  must exit with the code given and write one line on stderr holding the message part.
- ``ini``: a worker ini file, run as ``ztq worker -c FILE --burst``; the same as ``cli``.
- ``console``: a request an operator's browser (or a forged form) sends; the status given,
  and the message part on the page it leads to.

After every row the test checks that nothing already queued was lost or changed. The same
table is docs/common-mistakes.md (``python -m tests.bad_inputs`` rewrites its table, and
the test fails when it is stale), so every example on that page runs in the suite.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "common-mistakes.md"
START = "<!-- mistakes:start -->"
END = "<!-- mistakes:end -->"
AREAS = {
    "python": "The Python API",
    "cli": "The `ztq` command and the environment",
    "ini": "Worker ini files",
    "console": "Console forms",
}


@dataclass(frozen=True)
class Mistake:
    kind: str  # python | cli | ini | console
    does: str  # the statement, command line, ini text or "METHOD PATH field=value ..."
    says: str  # a part of the message ztq gives
    then: str  # python: the exception class; cli/ini: the exit code; console: the status
    why: str = ""  # a word on the mistake, for the doc

    @property
    def id(self) -> str:
        return f"{self.kind}: {self.does.replace(chr(10), ' / ')[:80]}"


def _py(does: str, says: str, error: str, why: str = "") -> Mistake:
    return Mistake("python", does, says, error, why)


def _cli(does: str, says: str, code: int, why: str = "") -> Mistake:
    return Mistake("cli", does, says, str(code), why)


def _ini(text: str, says: str, why: str = "") -> Mistake:
    return Mistake("ini", text.strip("\n"), says, "2", why)


def _form(does: str, says: str, status: int, why: str = "") -> Mistake:
    return Mistake("console", does, says, str(status), why)


# the tasks the python rows call (tests/sample_tasks.py): add(a, b) on "default",
# send(to, body="") on "mail", urgent(n) with priority high
NAMESPACE_SOURCE = (
    "import ztq.core as ztq\nfrom ztq.core.client.batch import batch_status\n"
    "from tests.sample_tasks import add, send, urgent\n"
)

MISTAKES: tuple[Mistake, ...] = (
    # -- the Python API ---------------------------------------------------------------------
    _py(
        "send.delay()",
        "tests.sample_tasks.send(to, body=''): missing a required argument: 'to'",
        "WrongArguments",
        "arguments are bound to the function's signature at enqueue",
    ),
    _py(
        "add.delay(1)",
        "tests.sample_tasks.add(a, b): missing a required argument: 'b'",
        "WrongArguments",
    ),
    _py(
        "add.delay(1, 2, 3)",
        "tests.sample_tasks.add(a, b): too many positional arguments",
        "WrongArguments",
    ),
    _py(
        'send.enqueue(("z@example.org",), {"to": "y"})',
        "multiple values for argument 'to'",
        "WrongArguments",
    ),
    _py(
        'send.enqueue("z@example.org")',
        "args must be a tuple or list of arguments, not str 'z@example.org'",
        "InvalidOption",
        "a string is not split into letters",
    ),
    _py(
        'send.enqueue(("z@example.org",), ["body"])',
        "kwargs must be a dict of keyword arguments, not list",
        "InvalidOption",
    ),
    _py(
        'send.enqueue(("z@example.org",), frist=True)',
        "unknown option 'frist' for enqueue; did you mean 'first'?",
        "UnknownOption",
        "an option name is checked, with the nearest known one",
    ),
    _py(
        "add.enqueue((1, 2), retires=3)",
        "unknown option 'retires' for enqueue; did you mean 'retries'?",
        "UnknownOption",
    ),
    _py(
        'ztq.task(queue="mail", retires=3)(lambda: None)',
        "unknown option 'retires' for task; did you mean 'retries'?",
        "UnknownOption",
    ),
    _py(
        'ztq.task(queue="mail", rate_limit="20 a second")(lambda: None)',
        "rate_limit must be 'N/s', 'N/m' or 'N/h'",
        "InvalidOption",
        "refused when the module is imported, before any worker registers it",
    ),
    _py(
        'ztq.configure_queue("mail", max_pendng=5)',
        "unknown option 'max_pendng' for configure_queue; did you mean 'max_pending'?",
        "UnknownOption",
    ),
    _py(
        "add.prepare((1, 2, 3))",
        "tests.sample_tasks.add(a, b): too many positional arguments",
        "WrongArguments",
    ),
    _py(
        'send.enqueue(("z@example.org",), callback=add.prepare((1,)))',
        "tests.sample_tasks.add(a, b): missing a required argument: 'b'",
        "WrongArguments",
        "a callback's arguments are bound too, with what the worker adds",
    ),
    _py(
        "add.delay(1, object())",
        "arguments of tests.sample_tasks.add cannot be sent as JSON (ztq never pickles)",
        "SerializationError",
        "arguments travel as JSON",
    ),
    _py(
        'add.delay("x" * 5_000_000, 1)',
        "the payload of tests.sample_tasks.add is 4.8 MB (5000033 bytes), over max_payload "
        "(4.0 MB, 4194304 bytes); nothing was enqueued",
        "PayloadError",
        "a payload has a bound (max_payload, 4 MB by default); pass a reference to big data",
    ),
    _py(
        'add.delay(1, float("nan"))',
        "Out of range float values are not JSON compliant",
        "SerializationError",
    ),
    _py(
        'add.enqueue((1, 2), priority="urgent")',
        "priority must be one of high, normal, low, not 'urgent'",
        "InvalidOption",
    ),
    _py("add.enqueue((1, 2), delay=-5)", "delay must be >= 0, not -5", "InvalidOption"),
    _py(
        'add.enqueue((1, 2), delay="soon")',
        "delay must be a number of seconds, not 'soon'",
        "InvalidOption",
    ),
    _py("add.enqueue((1, 2), timeout=0)", "timeout must be > 0, not 0", "InvalidOption"),
    _py(
        "add.enqueue((1, 2), expires=0)",
        "expires must be > 0, not 0",
        "InvalidOption",
        "a task that expires at once could never run; None never expires",
    ),
    _py("add.enqueue((1, 2), expires=-30)", "expires must be > 0, not -30", "InvalidOption"),
    _py(
        'add.enqueue((1, 2), expires=float("nan"))',
        "expires must be a number of seconds, not nan",
        "InvalidOption",
    ),
    _py(
        "add.enqueue((1, 2), expires=True)",
        "expires must be a number of seconds, not True",
        "InvalidOption",
    ),
    _py(
        'add.enqueue((1, 2), expires="1h")',
        "expires must be a number of seconds, not '1h'",
        "InvalidOption",
        "seconds, or a datetime.timedelta",
    ),
    _py(
        "import datetime\nadd.enqueue((1, 2), expires=datetime.datetime(2030, 1, 1))",
        "expires takes seconds or a timedelta (how long the task stays useful), not a datetime",
        "InvalidOption",
        "an expiry is a length of time from the enqueue, not a moment",
    ),
    _py(
        "add.enqueue((1, 2), delay=600, expires=300)",
        "delay=600 is at or after expires=300: the task would expire before it is due",
        "InvalidOption",
        "a task due after its expiry could never run",
    ),
    _py(
        "import time\nadd.enqueue((1, 2), eta=time.time() + 7200, expires=3600)",
        "is at or after expires=3600: the task would expire before it is due",
        "InvalidOption",
    ),
    _py(
        "@ztq.task(expires=0)\ndef never(): pass",
        "expires must be > 0, not 0",
        "InvalidOption",
    ),
    _py(
        '@ztq.task(cron="0 3 * * *")\ndef nightly(day): pass',
        "nightly' (0 3 * * *) would fail on every tick: None.nightly(day): missing a "
        "required argument: 'day'",
        "WrongArguments",
        "a tick gives the entry's arguments only: refused when the module is imported",
    ),
    _py(
        'ztq.add_cron(add, "*/5 * * * *")',
        "cron entry 'tests.sample_tasks.add' (*/5 * * * *) would fail on every tick",
        "WrongArguments",
    ),
    _py(
        'add.enqueue((1, 2), eta="tomorrow")',
        "eta must be a number of seconds, not 'tomorrow'",
        "InvalidOption",
        "an eta is a timestamp or a datetime",
    ),
    _py(
        'add.enqueue((1, 2), queue="no spaces allowed")',
        "queue name 'no spaces allowed' is not allowed: use 1-64 letters, digits",
        "InvalidName",
    ),
    _py(
        "add.enqueue((1, 2), ztq_first=True)",
        "ztq_first is ZTQ's option: use first=True",
        "InvalidOption",
        "ZTQ's keyword options have ztq's own names",
    ),
    _py('add.delay(1, 2, ztq_queue="mail")', "ztq_queue is ZTQ's option", "InvalidOption"),
    _py(
        'ztq.connect("localhost:6379", name="x")',
        "redis_url must be a URL such as redis://host:6379/0, not 'localhost:6379'",
        "ConfigError",
        "a Redis URL has a scheme",
    ),
    _py(
        'ztq.connect("ftp://cache:21", name="x")',
        "Redis URL 'ftp://cache:21' is not valid",
        "ConfigError",
    ),
    _py(
        'ztq.connect("redis://127.0.0.1:6379/abc", name="x")',
        "redis_url names database 'abc' (in its path), not a whole number 0-1000000",
        "ConfigError",
        "was read as database 0, silently",
    ),
    _py(
        'ztq.get_storage("reports")',
        "no Redis connection named 'reports': call connect(url, name='reports')",
        "ConfigError",
        "a named connection is made with connect(url, name=...) first",
    ),
    _py(
        'full = ztq.get_storage().client.config_set\nfull("maxmemory", 1)\n'
        'try: add.delay(40, 2)\nfinally: full("maxmemory", 0)',
        "is full (maxmemory reached): free memory or raise maxmemory; nothing was enqueued",
        "RedisFull",
        "Redis at maxmemory (policy noeviction) refuses writes; here made full on purpose",
    ),
    _py(
        'ztq.connect("redis://127.0.0.1:1/0", name="gone")\n'
        'add.enqueue((40, 2), connection="gone")',
        "cannot be reached: check that it runs and the URL",
        "RedisUnreachable",
        "an enqueue that cannot reach Redis says so, after redis-py's retries",
    ),
    _py(
        'ztq.configure_queue("mail", max_pending=-1)',
        "max_pending must be an int >= 1 or None, not -1",
        "InvalidOption",
    ),
    _py(
        'ztq.configure_queue("mail", when_full="drop")',
        "when_full must be 'raise', 'block' or 'buffer', not 'drop'",
        "InvalidOption",
    ),
    _py(
        'ztq.batch(on_complete="zip_and_mail")',
        "on_complete must be a prepared task (fn.prepare(...))",
        "InvalidOption",
        "a batch's callbacks are prepared calls, with their own arguments and queue",
    ),
    _py("ztq.batch(ttl=0)", "ttl must be a number of seconds > 0", "InvalidOption"),
    _py(
        'ztq.Batch(batch_id="run\\t7")',
        "batch_id must be 1 to 200 characters without spaces, tabs or newlines, not "
        "'run\\t7' (it is part of keys and of tab-separated outbox entries)",
        "InvalidOption",
    ),
    _py(
        'with ztq.batch():\n    add.enqueue((1, 2), id="job-1")',
        "id='job-1' in a batch: a member's id is made from the batch's (a task that already "
        "has that id would not be a member); leave id= out",
        "InvalidOption",
    ),
    _py(
        "with ztq.batch():\n    with ztq.batch():\n        pass",
        "a batch inside a batch block: open the child batch inside a member task",
        "ConfigError",
    ),
    _py(
        "with ztq.batch() as b:\n    add.delay(70, 80)\n    b.status()",
        "is written when its block ends: call status() after the with block",
        "NotFound",
        'said "never made, or expired" inside the block',
    ),
    _py(
        "with ztq.transaction():\n    h = add.delay(70, 80)\n    ztq.ping(h)",
        "is written when the transaction or batch block ends: ping it after the with block",
        "NotFound",
    ),
    _py(
        'batch_status(ztq.get_storage(), "nope")',
        "no batch 'nope' (never made, or expired after it finished)",
        "NotFound",
    ),
    _py(
        'ztq.configure_queue("mail", rate_limit="5/s burst 1000000")',
        "a burst of 1000000 lets 1000000 tasks start at once, more than an hour of 5/s",
        "InvalidOption",
        "a burst past an hour's starts lifted the limit without a word",
    ),
    _py(
        'ztq.configure_queue("mail", rate_limit="20 per second")',
        "rate_limit must be 'N/s', 'N/m' or 'N/h' (N a whole number >= 1), optionally "
        "followed by ' burst B' (B >= 1), e.g. '20/s' or '100/m burst 10', or None to lift "
        "it; not '20 per second'",
        "InvalidOption",
        "a rate is a count per s, m or h",
    ),
    # -- the ztq command and the environment ------------------------------------------------
    _cli(
        "ztq enqueue tests.sample_tasks.add --args [1,2] --expires 0",
        "expires must be > 0, not 0",
        2,
    ),
    _cli("ztq nosuch", "invalid choice: 'nosuch'", 2),
    _cli(
        "ztq worker --queue mail:two --burst",
        "'two' is not a thread count",
        2,
        "a count after the colon, not a word",
    ),
    _cli("ztq worker --queue mail:2:proces --burst", "'proces' is not a pool", 2),
    _cli("ztq worker --queue mail:2:thread:x --burst", "NAME[:N[:POOL]][:shards=S]", 2),
    _cli(
        "ztq worker --queue mail:0 --burst",
        "0 threads serve nothing",
        2,
        "a worker given queues serves exactly those, never `default` instead",
    ),
    _cli("ztq worker --queue mail:2:shard=3 --burst", "shards=N", 2),
    _cli("ztq worker --queue mail:1..8:proces --burst", "proces", 2),
    _cli(
        "ztq worker --import no_such_module_xyz --burst",
        "cannot import task module 'no_such_module_xyz'",
        2,
    ),
    _cli(
        "ztq worker --import tests.raising_tasks --burst",
        "tests/raising_tasks.py:6: KeyError: 'ZTQ_TEST_NO_SUCH_SMTP_HOST'",
        2,
        "an error raised by the module's own code: one line with its file:line, no traceback",
    ),
    _cli("ztq worker --lease soon --burst", "argument --lease: invalid float value: 'soon'", 2),
    _cli(
        "ztq --log-config logging.yaml worker --burst",
        "--log-config logging.yaml: FileNotFoundError",
        2,
        "a .json file is a dictConfig, any other an .ini fileConfig (docs/worker.md); "
        "a file logging cannot use stops the command before it starts",
    ),
    _cli(
        "ZTQ_QUEUES='mail:2 pdf:two' ztq worker --burst",
        "environment variable ZTQ_QUEUES 'pdf:two': 'two' is not a thread count",
        2,
        "ZTQ_QUEUES is read by --queue's grammar",
    ),
    _cli(
        "ZTQ_LEASE=soon ztq worker --burst",
        "environment variable ZTQ_LEASE: lease",
        2,
        "environment variables are checked as flags are",
    ),
    _cli("ZTQ_PREFIX='a b' ztq info", "ZTQ_PREFIX", 2),
    _cli("ZTQ_REDIS_URL=localhost:6379 ztq info", "ZTQ_REDIS_URL", 2),
    _cli("ztq redo mail nosuchid", "nosuchid", 1, "exit 1: not found"),
    _cli("ztq redo nosuchqueue --all", "no queue nosuchqueue", 1),
    _cli(
        "ztq queue forget mail",
        "mail holds 3 ready tasks (normal): not forgotten",
        1,
        "`ztq queue forget NAME` removes a queue a mistake left (`[queues] default = abc` "
        "made a queue `abc` before that line was refused) once it holds nothing and no live "
        "worker serves it; never one that holds tasks",
    ),
    _cli("ztq redo mail", "ztq redo QUEUE ID... | ztq redo QUEUE --all", 2),
    _cli(
        "ztq workers threads w1 --queue mial --count 2",
        "no queue mial",
        1,
        "a queue Redis does not know is refused: the worker served the typo",
    ),
    _cli(
        "ztq workers stop nosuch --yes",
        "no worker nosuch",
        1,
        "--yes is taken (workers commands never ask), as purge and delete take it",
    ),
    _cli("ztq queue pause nosuchqueue", "no queue nosuchqueue", 1),
    _cli(
        "ztq queue limit mail --rate-limit 20/d",
        "rate_limit must be 'N/s', 'N/m' or 'N/h'",
        2,
        "a day is not a unit: 20/d is about 1/h burst 20",
    ),
    _cli("ztq task nosuchid", "no task nosuchid", 1),
    _cli(
        "ztq enqueue nosuch.task",
        "give --queue QUEUE to enqueue it by name",
        2,
        "a task is found by its registered name or module.function",
    ),
    _cli(
        "ZTQ_REDIS_URL=rediss://HOST:PORT/0 ztq info",
        "Redis at HOST:PORT does not speak TLS",
        2,
        "a TLS URL against a plain Redis: said within the connect timeout (it hung 41.8 s)",
    ),
    _cli(
        "ZTQ_REDIS_URL=redis://HOST:PORT/99 ztq info",
        "redis://HOST:PORT/99",
        2,
        "Redis refused the URL (database 99 does not exist)",
    ),
    _cli("ztq enqueue tests.sample_tasks.add --args '[1,'", "--args/--kwargs must be JSON", 2),
    _cli("ztq batch nope", "no batch 'nope'", 1, "unknown, or expired after it finished"),
    _cli("ztq batch --redo", "name the batch: ztq batch ID --redo", 2),
    # -- worker ini files -------------------------------------------------------------------
    _ini(
        "[server]\nlease = soon",
        "worker.ini:2: lease must be a number, not 'soon'",
        "each value is checked, and the message names the file and line",
    ),
    _ini("[server]\nprefix = a b", "worker.ini:2: prefix must be 1-32 of A-Z a-z 0-9 _ . -"),
    _ini("[server]\nheartbeat = 0", "worker.ini:2: heartbeat must be a number > 0"),
    _ini("[server]\nprefetch = 0", "worker.ini:2: prefetch must be a whole number between 1"),
    _ini("[server]\nmax_lost = 0", "worker.ini:2: max_lost must be a whole number between 1"),
    _ini("[server]\nresult_ttl = -1", "worker.ini:2: result_ttl must be a number >= 0"),
    _ini("[server]\nname = has space", "worker.ini:2: name must be 1-64 of"),
    _ini("[server]\nhealth = http", "worker.ini:2: health must be PORT or HOST:PORT"),
    _ini(
        "just some text",
        "worker.ini:1: 'just some text' stands before any [section]",
        "configparser's errors, in one line",
    ),
    _ini("[server]\nlease 15", "worker.ini:2: 'lease 15' is not 'key = value'"),
    _ini("[server]\nlease = 10\nlease = 20", "worker.ini:3: 'lease' is given twice in [server]"),
    _ini("[server]\nlease = 10\n[server]", "worker.ini:3: [server] is given twice"),
    _ini(
        "[server]\nleese = 15",
        "worker.ini:2: unknown option 'leese'",
        "a misspelt key is not ignored",
    ),
    _ini(
        "[server]\nmodules = no_such_module_xyz", "cannot import task module 'no_such_module_xyz'"
    ),
    _ini("[queues]\npdf = 1 proces", "worker.ini:2:", "every word of a queue entry is checked"),
    _ini("[queues]\nmail = 0", "0 threads serve nothing"),
    _ini("[queues]\nhot = 8 shard=3", "shards=N"),
    _ini("[queues]\nfast = urgent, 2, default", "worker.ini:2:"),
    _ini("[queues]\nbad name = 1", "worker.ini:2: queue name 'bad name' is not allowed"),
    _ini(
        "[sever]\nredis = redis://127.0.0.1:6390/0",
        "worker.ini:1: unknown section [sever]; did you mean [server]?",
        "a misspelt section is not dropped: its redis line would be lost and the worker "
        "would serve the default Redis",
    ),
    _ini("[queus]\nmail = 1", "worker.ini:1: unknown section [queus]; did you mean [queues]?"),
    _ini(
        "[queues]\ndefault = abc",
        "'default' is a queue: give it a thread count",
        "a list of queues names its thread; never a thread named default serving 'abc'; "
        "a queue 'abc' an older release made so is removed with `ztq queue forget abc`",
    ),
    _ini(
        "[server]\nmodules = tests.sample_tasks\n[queues]\nmail = abc",
        "queue entry mail = abc: 'mail' is the queue of imported tasks; give it a thread count",
        "checked at the start, against the queues of the tasks imported",
    ),
    _ini("[queues]\ndefault = -2", "'-2' is not a thread count"),
    _ini("[queues]\nmail = 2.5", "'2.5' is not a thread count"),
    _ini(
        "[app:main]\nztq.prefix = a\n[server]\nprefix = b",
        "prefix is set twice with different values",
        "a worker and a console reading one file must agree",
    ),
    # -- console forms (an operator signed in) -----------------------------------------------
    _form(
        "POST /queues/mail/state action=pause csrf_token=FORGED",
        "Form expired",
        400,
        "a form without this session's token is refused",
    ),
    _form("POST /queues/mail/state action=explode", "Unknown command.", 303),
    _form(
        "POST /queues/mail/state action=limit max_running=abc",
        "Running limit: a number from 1 to 10000, or empty for none.",
        303,
    ),
    _form(
        "POST /queues/mail/state action=limit max_running=0",
        "Running limit: a number from 1 to 10000, or empty for none.",
        303,
    ),
    _form(
        "POST /queues/mail/state action=pending max_pending=-3",
        "Pending limit: 1-100000000 or empty",
        303,
    ),
    _form(
        "POST /queues/mail/state action=rate rate_limit=fast",
        "Rate limit: rate_limit must be",
        303,
    ),
    _form("POST /queues/nosuch/state action=pause", "Not found", 404),
    _form("POST /workers worker=nosuch cmd=pause", "Not found", 404),
    _form("POST /bulk action=explode source=errors", "Unknown command.", 303),
    _form("POST /bulk action=redo source=errors queue=nosuch", "No queue named nosuch.", 303),
    _form("GET /errors group=nothex", "No error group nothex.", 404),
    _form("POST /trash/restore queue=mail batch=nosuch", "No batch nosuch.", 404),
    _form("POST /tasks action=delete", "Select tasks and an action first.", 303),
    _form(
        "POST /tasks action=delete task=garbage",
        "Select tasks and an action first.",
        303,
        "a task is named QUEUE:ID",
    ),
    _form("POST /cron/run name=nosuch", "No cron entry named nosuch.", 303),
    _form("POST /sessions/end session=forged", "No session was ended.", 303),
    _form("GET /tasks/nosuchid", "Not found", 404),
    _form("GET /queues/bad%20name", "Not found", 404),
)


def namespace() -> dict[str, object]:
    ns: dict[str, object] = {}
    exec(NAMESPACE_SOURCE, ns)  # noqa: S102 - the rows are this module's own text
    return ns


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


def render() -> str:
    """The doc's table, from :data:`MISTAKES`."""
    lines = [START, "<!-- generated by `python -m tests.bad_inputs`; do not edit by hand -->"]
    for kind, title in AREAS.items():
        rows = [m for m in MISTAKES if m.kind == kind]
        if not rows:
            continue
        then = {"python": "raises", "cli": "exit", "ini": "exit", "console": "status"}[kind]
        lines += ["", f"### {title} ({len(rows)})", "", f"| you wrote | ztq says | {then} |",
                  "|---|---|---|"]  # fmt: skip
        for m in rows:
            does = f"`{m.does}`" if "\n" not in m.does else "<pre>" + _cell(m.does) + "</pre>"
            says = f"…{m.says}…" + (f" ({m.why})" if m.why else "")
            lines.append(f"| {_cell(does) if '<pre>' not in does else does} | {_cell(says)} | "
                         f"{m.then} |")  # fmt: skip
    lines.append(END)
    return "\n".join(lines)


def current_block(text: str) -> str:
    return text[text.index(START) : text.index(END) + len(END)]


def main() -> None:
    text = DOC.read_text("utf-8")
    new = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: render(), text, flags=re.S)
    DOC.write_text(new, "utf-8")
    print(f"rewrote the table of docs/common-mistakes.md ({len(MISTAKES)} mistakes)")


if __name__ == "__main__":
    main()
