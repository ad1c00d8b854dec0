"""The alert rule syntax: what it accepts, and errors that name the rule and the ini line."""

from __future__ import annotations

from pathlib import Path

import pytest

from ztq.core.alerts.alerter import from_app_settings, resolve_settings
from ztq.core.alerts.rules import Rule, parse_rule, parse_rules
from ztq.core.errors import ConfigError


def test_every_kind_parses() -> None:
    rules = parse_rules("""
        # comments and blank lines are skipped

        error_rate mail > 10 in 5m
        error_rate  *   >  20%  in 1h   for 2m
        oldest_wait pdf-* > 300s
        oldest_wait default > 1.5h
        no_worker *
        no_worker mail for 30
        worker_lost
        worker_lost box-? for 1m
    """)
    assert rules == (
        Rule("error_rate mail > 10 in 5m", "error_rate", "mail", 10, False, 5),
        Rule("error_rate * > 20% in 1h for 2m", "error_rate", "*", 20, True, 60, 120),
        Rule("oldest_wait pdf-* > 300s", "oldest_wait", "pdf-*", 300),
        Rule("oldest_wait default > 1.5h", "oldest_wait", "default", 5400),
        Rule("no_worker *", "no_worker", "*"),
        Rule("no_worker mail for 30", "no_worker", "mail", hold=30),
        Rule("worker_lost", "worker_lost", "*"),
        Rule("worker_lost box-? for 1m", "worker_lost", "box-?", hold=60),
    )
    assert parse_rules("no_worker a; worker_lost") == (
        Rule("no_worker a", "no_worker", "a"),
        Rule("worker_lost", "worker_lost", "*"),
    )
    assert parse_rules(["no_worker a", "worker_lost b"])[1].pattern == "b"  # --rule flags
    assert rules[2].matches("pdf-big") and not rules[2].matches("pdfs")


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("errors mail > 1 in 5m", "unknown rule 'errors'; known: error_rate, oldest_wait, "
                                  "no_worker, worker_lost"),
        ("error_rate", "expected a queue name or glob after error_rate, found nothing"),
        ("error_rate mail/x > 1 in 5m", "expected a queue name or glob after error_rate, "
                                        "found 'mail/x'"),
        ("error_rate mail 10 in 5m", "expected '> THRESHOLD' after the queue"),
        ("error_rate mail > 10", "expected '> N in WINDOW'"),
        ("error_rate mail > many in 5m", "the threshold must be a number, not 'many'"),
        ("error_rate mail > 100% in 5m", "the threshold '100%' is out of range"),
        ("error_rate mail > 1 in 90s", "the window must be whole minutes from 1m to 120m, "
                                       "not '90s'"),
        ("error_rate mail > 1 in 3h", "the window must be whole minutes"),
        ("error_rate mail > 1 in soon", "'soon' is not a duration such as 30s, 5m or 2h"),
        ("oldest_wait mail > 5m extra", "unexpected 'extra'"),
        ("oldest_wait mail", "expected '> THRESHOLD' after the queue"),
        ("no_worker mail > 3", "unexpected '> 3'"),
        ("worker_lost a b", "unexpected 'b'"),
        ("no_worker mail for ever", "'ever' is not a duration"),
    ],
)  # fmt: skip
def test_bad_rules_say_what_is_wrong(line: str, reason: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_rule(line)
    assert str(caught.value).startswith(reason), str(caught.value)


def test_errors_name_the_rule_and_where_it_was_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^rule 2 \('no_wurker \*'\): unknown rule 'no_wurker'"):
        parse_rules("no_worker *\n\n# note\nno_wurker *")
    with pytest.raises(ValueError, match=r"^rule 2 \('no_worker   \*'\) is listed twice"):
        parse_rules("no_worker *;no_worker   *")

    ini = tmp_path / "app.ini"
    ini.write_text("[app:main]\nuse = egg:ztq\n\nztq.alerts.rules =\n    no_worker *\n"
                   "    oldest_wait * > 5 minutes\n")  # fmt: skip
    settings = {"ztq.alerts.rules": "\nno_worker *\noldest_wait * > 5 minutes"}
    with pytest.raises(ConfigError) as caught:
        from_app_settings(settings, ini, environ={})
    assert str(caught.value) == (
        f"{ini}:4: ztq.alerts.rules rule 2 ('oldest_wait * > 5 minutes'): unexpected "
        "'minutes': write 'oldest_wait QUEUE > 300s [for 1m]'"
    )
    with pytest.raises(ConfigError) as caught:
        resolve_settings(environ={"ZTQ_ALERTS_RULES": "worker_lost;no_worker"})
    assert str(caught.value).startswith(
        "environment variable ZTQ_ALERTS_RULES: alerts.rules rule 2 ('no_worker'): expected a "
        "queue name or glob after no_worker, found nothing"
    )


def test_the_webhook_url_is_checked_and_never_echoed() -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_settings(environ={"ZTQ_ALERTS_WEBHOOK": "hooks.slack.com/services/T0/B0/SECRET"})
    assert "SECRET" not in str(caught.value)
    assert "must be an http:// or https:// URL" in str(caught.value)
    cfg = resolve_settings(environ={"ZTQ_ALERTS_WEBHOOK": "https://hooks.example/T0/B0/SECRET"})
    assert cfg.webhook_shown == "https://hooks.example/…" and "SECRET" not in repr(cfg)


def test_settings_take_flags_then_environment_then_ini() -> None:
    cfg = resolve_settings(
        {"alerts.every": 5.0},
        environ={"ZTQ_ALERTS_REPEAT_MINUTES": "60", "ZTQ_ALERTS_EVERY": "7"},
    )
    assert (cfg.every, cfg.repeat_minutes, cfg.timeout, cfg.attempts) == (5.0, 60.0, 5.0, 3)
    assert cfg.rules == () and cfg.webhook == "" and cfg.lost_after == 30.0
    with pytest.raises(ConfigError, match="alerts.attempts must be a whole number between 1"):
        resolve_settings(environ={"ZTQ_ALERTS_ATTEMPTS": "0"})
