"""Alertmanager's matcher and silence semantics, as nodefence judges them (``engine.matchers``,
``engine.silences``): what Alertmanager would silence, nodefence holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodefence.engine.matchers import Matcher, MatcherError, parse
from nodefence.engine.silences import Silence, alert_labels, could_hold, holding

NOW = datetime(2026, 12, 6, 3, 0, tzinfo=UTC)
NAMES = ["KubeNodeNotReady", "KubeNodeUnreachable"]
LABELS = ["node", "instance"]


def silence(*matchers: Matcher, ends: timedelta = timedelta(hours=1), **kw: object) -> Silence:
    return Silence(
        id="s1",
        matchers=matchers,
        starts_at=NOW - timedelta(minutes=5),
        ends_at=NOW + ends,
        created_by="on-call",
        comment="repair",
        **kw,  # type: ignore[arg-type]
    )


def holds(s: Silence, node: str = "compute02", cluster: dict[str, str] | None = None) -> bool:
    labelsets = alert_labels(node, NAMES, LABELS, cluster or {})
    return holding([s], labelsets, NOW) is not None


@pytest.mark.parametrize(
    ("matchers", "held"),
    [
        ([Matcher("node", "compute02")], True),
        ([Matcher("node", "compute01")], False),
        ([Matcher("instance", "compute02")], True),
        ([Matcher("node", "compute0.", "=~")], True),
        # Anchored at both ends, as Alertmanager anchors them.
        ([Matcher("node", "compute0", "=~")], False),
        ([Matcher("node", "ompute02", "=~")], False),
        ([Matcher("node", "compute01", "!=")], True),
        ([Matcher("node", "compute0[13]", "!~")], True),
        ([Matcher("node", "compute02"), Matcher("alertname", "KubeNodeUnreachable")], True),
        ([Matcher("node", "compute02"), Matcher("alertname", "Watchdog")], False),
        # A label the alert would not carry is empty: this silence was for other alerts.
        ([Matcher("node", "compute02"), Matcher("severity", "warning")], False),
        ([Matcher("node", "compute02"), Matcher("severity", "", "=")], True),
        # A regular expression Python cannot read holds: the safe side.
        ([Matcher("node", "compute02"), Matcher("job", "(unclosed", "=~")], True),
    ],
)
def test_alertmanager_semantics(matchers: list[Matcher], held: bool) -> None:
    assert holds(silence(*matchers)) is held


def test_only_silences_in_force_hold() -> None:
    ended = silence(Matcher("node", "compute02"), ends=timedelta(seconds=-1))
    assert not holds(ended)
    pending = Silence(
        "s2", (Matcher("node", "compute02"),), NOW + timedelta(minutes=1), NOW + timedelta(hours=1)
    )
    assert not holds(pending)
    # Alertmanager said it is in force: its clock may be ahead of the API server's.
    assert holds(Silence("s3", pending.matchers, pending.starts_at, pending.ends_at, in_force=True))


def test_cluster_labels_are_part_of_the_alert() -> None:
    theirs = silence(Matcher("cluster", "prod-b"), Matcher("node", "compute02"))
    ours = silence(Matcher("cluster", "prod-a"), Matcher("node", "compute02"))
    every_cluster = silence(Matcher("node", "compute02"))
    cluster = {"cluster": "prod-a"}
    assert not holds(theirs, cluster=cluster)
    assert holds(ours, cluster=cluster)
    assert holds(every_cluster, cluster=cluster)
    assert not could_hold(theirs, NAMES, LABELS, cluster)
    assert could_hold(ours, NAMES, LABELS, cluster)
    assert could_hold(every_cluster, NAMES, LABELS, cluster)


def test_the_silence_that_holds_longest_is_named() -> None:
    short = silence(Matcher("node", "compute02"), ends=timedelta(minutes=10))
    long = Silence("s-long", short.matchers, short.starts_at, NOW + timedelta(days=1))
    found = holding([short, long], alert_labels("compute02", NAMES, LABELS, {}), NOW)
    assert found is long
    assert found.words().startswith("Alertmanager silence s-long")


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ('cluster="prod-a"', (Matcher("cluster", "prod-a"),)),
        (
            '{cluster="prod-a", region=~"eu-.*"}',
            (Matcher("cluster", "prod-a"), Matcher("region", "eu-.*", "=~")),
        ),
        ('env!="test",zone!~"b|c"', (Matcher("env", "test", "!="), Matcher("zone", "b|c", "!~"))),
        ('name="a \\"quoted\\" value"', (Matcher("name", 'a "quoted" value'),)),
        ("", ()),
    ],
)
def test_matchers_are_read_as_alertmanager_writes_them(
    text: str, parsed: tuple[Matcher, ...]
) -> None:
    assert parse(text) == parsed


@pytest.mark.parametrize(
    "text",
    ["cluster=prod-a", 'cluster="prod-a" env="x"', 'cluster="prod-a",', 'c=~"(a"', '="x"', 'c="x'],
)
def test_unreadable_matchers_are_refused(text: str) -> None:
    with pytest.raises(MatcherError):
        parse(text)


names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True)
values = st.text(max_size=20)
operators = st.sampled_from(["=", "!="])


@given(st.lists(st.tuples(names, operators, values), min_size=1, max_size=5))
def test_a_matcher_list_reads_back_as_written(triples: list[tuple[str, str, str]]) -> None:
    written = tuple(Matcher(n, v, op) for n, op, v in triples)  # type: ignore[arg-type]
    assert parse(", ".join(str(m) for m in written)) == written


@given(names, values, st.dictionaries(names, values, max_size=4))
def test_equal_and_not_equal_are_opposites(name: str, value: str, labels: dict[str, str]) -> None:
    assert Matcher(name, value, "=").matches(labels) != Matcher(name, value, "!=").matches(labels)
