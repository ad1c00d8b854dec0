"""The autoscaler's policy with plain inputs (no Redis, no threads), and its config."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ztq.core.errors import ConfigError
from ztq.worker.autoscale import Autoscaler, Decision, Host, Limits, Load
from ztq.worker.config import ScaleSpec, ThreadSpec, load_config

CALM = Host(cpu=41, memory=50)


def mail(threads: int, **kw: object) -> Load:
    return replace(Load("mail", threads, kw.pop("low", 1), kw.pop("high", 8)), **kw)  # type: ignore[arg-type]


def run(scaler: Autoscaler, loads: list[Load], host: Host = CALM) -> dict[str, int]:
    """One beat; the targets of the queues that changed."""
    return {d.queue: d.after for d in scaler.decide(loads, host) if d.after != d.before}


def test_grows_at_once_where_tasks_wait_and_says_why() -> None:
    scaler = Autoscaler(Limits(heartbeat=3.0))
    [d] = scaler.decide([mail(2, ready=340, busy=2.0, runs=40, run_time=0.05)], CALM)
    # 2 busy threads with a quarter of headroom (3) + 340 x 50 ms drained within 2 beats
    # (6 s): 3 more
    assert (d.before, d.after, d.why) == (2, 6, "grow")
    assert d.message == "mail 2 → 6 threads: 340 waiting, CPU 41%"
    assert d.facts["waiting"] == "340" and d.facts["cpu"] == "41"


def test_never_past_max_nor_below_min() -> None:
    scaler = Autoscaler(Limits())
    assert run(scaler, [mail(2, ready=100_000, busy=2.0, runs=9, run_time=1.0)]) == {"mail": 8}
    scaler = Autoscaler(Limits(idle_beats=1))
    beats = [run(scaler, [mail(n, low=2)]) for n in (8, 5, 3, 2, 2)]
    assert beats == [{"mail": 5}, {"mail": 3}, {"mail": 2}, {}, {}]
    # outside its range (an operator's count, then unpinned): back within at once
    assert run(Autoscaler(Limits()), [mail(12)]) == {"mail": 8}
    assert run(Autoscaler(Limits()), [mail(0)]) == {"mail": 1}


def test_a_mild_need_must_hold_two_beats() -> None:
    scaler = Autoscaler(Limits(heartbeat=3.0))
    # 4 threads all busy, a few waiting that they drain within the horizon: not pressing
    busy = mail(4, ready=6, busy=4.0, runs=100, run_time=0.1)
    assert run(scaler, [busy]) == {}
    assert run(scaler, [busy]) == {"mail": 6}


def test_serves_on_demand_from_zero() -> None:
    scaler = Autoscaler(Limits())
    assert run(scaler, [mail(0, low=0, ready=1)]) == {"mail": 1}
    assert run(scaler, [mail(0, low=0)]) == {}  # nothing waits: nothing starts


def test_shrinks_after_idle_beats_by_half_the_excess() -> None:
    scaler = Autoscaler(Limits(idle_beats=3))
    idle = [mail(n, low=0) for n in (8, 8, 8, 4, 2, 1, 0)]
    assert [run(scaler, [ld]) for ld in idle] == [
        {}, {}, {"mail": 4}, {"mail": 2}, {"mail": 1}, {"mail": 0}, {}
    ]  # fmt: skip
    # threads still busy keep a quarter of headroom: 3.2 busy -> 4 threads
    scaler = Autoscaler(Limits(idle_beats=2))
    half = mail(8, busy=3.2, runs=50, run_time=0.1)
    assert [run(scaler, [half]) for _ in range(2)] == [{}, {"mail": 6}]


def test_no_flap_when_the_load_hovers() -> None:
    """Tasks waiting one beat, none the next, over and over: a mild need never holds two
    beats, idleness never holds three: the threads stay where they are."""
    scaler = Autoscaler(Limits(heartbeat=3.0, idle_beats=3))
    waiting = mail(4, ready=6, busy=4.0, runs=100, run_time=0.1)
    quiet = mail(4, busy=2.5, runs=60, run_time=0.1)
    assert [run(scaler, [ld]) for ld in [waiting, quiet] * 10] == [{}] * 20


def test_no_shrink_right_after_a_growth() -> None:
    """A burst that ends just after the growth does not take the threads away on the next
    beats: the cooldown is idle_beats since the last growth."""
    scaler = Autoscaler(Limits(heartbeat=1.0, idle_beats=3))
    assert run(scaler, [mail(1, ready=500, busy=1.0, runs=20, run_time=0.05)]) == {"mail": 8}
    n, changes = 8, []
    for _ in range(4):
        changes.append(run(scaler, [mail(n, busy=0.5, runs=10, run_time=0.05)]))
        n = changes[-1].get("mail", n)
    assert changes == [{}, {}, {"mail": 4}, {"mail": 2}]


def test_cpu_ceiling_holds_growth_and_logs_it_once() -> None:
    scaler = Autoscaler(Limits(cpu_max=85))
    hot = Host(cpu=91, memory=50)
    pressed = mail(2, ready=340, busy=2.0, runs=9, run_time=0.05)
    first = scaler.decide([pressed], hot)
    assert [(d.after, d.why) for d in first] == [(2, "hold_cpu")]
    assert first[0].message == "mail held at 2 threads: 340 waiting, CPU 91% ≥ 85%"
    assert scaler.decide([pressed], hot) == []  # still held: not logged again
    assert run(scaler, [pressed]) == {"mail": 6}  # under the ceiling again: grows


def test_memory_ceiling_sheds_one_thread_a_beat() -> None:
    scaler = Autoscaler(Limits(memory_max=90))
    full = Host(cpu=10, memory=95)
    loads = [mail(4, ready=50, busy=4.0, runs=9, run_time=0.5),
             Load("pdf", 3, 1, 4, busy=3.0, runs=3, run_time=1.0)]  # fmt: skip
    decisions = scaler.decide(loads, full)
    assert [(d.queue, d.before, d.after, d.why) for d in decisions] == [("mail", 4, 3, "memory")]


def test_threads_max_serves_the_pressed_queue_with_the_idle_threads() -> None:
    """6 threads in all: mail is flooded, pdf's 4 threads idle: pdf gives what it does not
    need at once (no idle streak), mail gets them."""
    scaler = Autoscaler(Limits(threads_max=6, heartbeat=1.0))
    loads = [mail(2, low=0, ready=1000, busy=2.0, runs=40, run_time=0.05),
             Load("pdf", 4, 0, 8, busy=0.7, runs=3, run_time=0.3)]  # fmt: skip
    decisions = scaler.decide(loads, CALM)
    assert [(d.queue, d.after, d.why) for d in decisions] == [
        ("pdf", 1, "reclaim"), ("mail", 5, "grow")
    ]  # fmt: skip
    assert decisions[0].message == "pdf 4 → 1 threads: needed by mail, 0.7 of 4 busy"
    # never over the cap when both want more
    scaler = Autoscaler(Limits(threads_max=6, heartbeat=1.0))
    both = [replace(ld, ready=1000, busy=float(ld.threads)) for ld in loads]
    after = {d.queue: d.after for d in scaler.decide(both, CALM)}
    assert sum({"mail": 2, "pdf": 4, **after}.values()) <= 6


def test_cpu_bound_thread_queue_stays_at_what_the_gil_runs() -> None:
    scaler = Autoscaler(Limits())
    crunch = mail(1, ready=5000, busy=1.0, runs=20, run_time=0.05, cpu_share=0.97)
    assert run(scaler, [crunch]) == {}
    assert run(scaler, [replace(crunch, pool="process")]) == {"mail": 8}


def test_pinned_queues_are_left_alone() -> None:
    scaler = Autoscaler(Limits())
    flooded = mail(2, ready=340, busy=2.0, runs=40, run_time=0.05)
    assert scaler.decide([replace(flooded, pinned=True)], CALM) == []
    assert isinstance(scaler.decide([flooded], CALM)[0], Decision)


# -- config ----------------------------------------------------------------------------------
def test_ranges_in_the_ini_and_flags(tmp_path: Path) -> None:
    from ztq.worker.cli.commands import build_parser, scale_flag

    path = tmp_path / "worker.ini"
    path.write_text("[server]\nautoscale_threads_max = 10\nautoscale_cpu_max = 70\n"
                    "[queues]\nmail = 1..8\npdf = 0..4 process\ncrawl = 10..200 async\n"
                    "default = 2\n")  # fmt: skip
    cfg = load_config(path)
    assert cfg.scaled == (ScaleSpec("mail", 1, 8), ScaleSpec("pdf", 0, 4, "process"),
                          ScaleSpec("crawl", 10, 200, "async"))  # fmt: skip
    assert cfg.threads[:2] == (ThreadSpec("mail-0", ("mail",)),
                               ThreadSpec("crawl-0", ("crawl",), "async", 10))  # fmt: skip
    assert cfg.queues == ["mail", "crawl", "default", "pdf"]
    assert (cfg.autoscale_threads_max, cfg.autoscale_cpu_max) == (10, 70.0)
    assert scale_flag("mail:0..4") == ScaleSpec("mail", 0, 4)
    assert scale_flag("pdf:1..3:process") == ScaleSpec("pdf", 1, 3, "process")
    assert scale_flag("mail:2") is None
    args = build_parser().parse_args(["worker", "--queue", "mail:0..4", "--autoscale-cpu-max", "5"])
    assert args.autoscale_cpu_max == 5.0
    only = load_config(None, scaled=(ScaleSpec("mail", 0, 4),))
    assert only.threads == () and only.queues == ["mail"]  # no "default" thread added


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("mail = 5..2", "0 <= MIN <= MAX"),
        ("mail = 0..0", "1 <= MAX <= 256"),
        ("mail = 1..300", "1 <= MAX <= 256"),
        ("mail = 1..4 fair", "one queue a line"),
        ("mail = 1..4, 2", "one queue a line"),
    ],
)
def test_bad_ranges(tmp_path: Path, entry: str, says: str) -> None:
    path = tmp_path / "worker.ini"
    path.write_text(f"[queues]\n{entry}\n")
    with pytest.raises(ConfigError, match=says) as caught:
        load_config(path)
    assert "worker.ini:2" in str(caught.value)


def test_a_range_and_a_count_for_one_queue_or_minima_over_the_cap(tmp_path: Path) -> None:
    from ztq.worker.cli.commands import _queue_flag, scale_flag

    threads = tuple(_queue_flag("mail:2"))
    with pytest.raises(ConfigError, match="also given a thread count"):
        load_config(None, threads=threads, scaled=(scale_flag("mail:1..4"),))
    path = tmp_path / "worker.ini"
    path.write_text("[server]\nautoscale_threads_max = 3\n[queues]\na = 2..8\nb = 2..8\n")
    with pytest.raises(ConfigError, match="minima add up to 4 threads"):
        load_config(path)


def test_a_ceiling_of_100_is_none() -> None:
    scaler = Autoscaler(Limits(cpu_max=100, memory_max=100))
    pressed = mail(2, ready=340, busy=2.0, runs=9, run_time=0.05)
    assert run(scaler, [pressed], Host(cpu=100, memory=100)) == {"mail": 6}


def test_before_any_run_here_the_queues_run_time_counts() -> None:
    """A burst on a queue this worker never ran: the mean run time every worker recorded
    (the queue's stats) sizes the first growth; without it the queue starts at one thread."""
    cold = mail(0, low=0, ready=2000)
    assert run(Autoscaler(Limits(heartbeat=1.0)), [cold]) == {"mail": 1}
    known = replace(cold, queue_run_time=0.0125)
    assert run(Autoscaler(Limits(heartbeat=1.0)), [known]) == {"mail": 8}


def test_a_drained_burst_gives_its_threads_to_the_next_burst_at_once() -> None:
    """8 threads in all: a's burst of the last beat drained (300 waiting then, none now: its
    runs were the backlog, not a flow) while b's burst came: b takes a's threads at once,
    a keeps one. Had a's backlog held (tasks still coming), a would keep its threads."""

    def beats(a_then: int) -> list[tuple[str, int, str]]:
        scaler = Autoscaler(Limits(threads_max=8, heartbeat=1.0))
        rest = [Load("c", 1, 1, 8, busy=0.2, runs=20, run_time=0.01),
                Load("d", 1, 1, 8, busy=1.0, runs=50, run_time=0.02, cpu_share=0.95)]  # fmt: skip
        a = Load("a", 5, 1, 8, ready=300, busy=5.0, runs=400, run_time=0.0125)
        b = Load("b", 1, 1, 8)
        assert scaler.decide([a, b, *rest], CALM) == []  # a drains within the horizon
        a = replace(a, ready=a_then, busy=3.75, runs=300)
        b = replace(b, ready=1100, busy=1.0, runs=80, run_time=0.0125)
        return [(d.queue, d.after, d.why) for d in scaler.decide([a, b, *rest], CALM)]

    assert beats(a_then=0) == [("a", 1, "reclaim"), ("b", 5, "grow")]
    assert beats(a_then=300) == []
