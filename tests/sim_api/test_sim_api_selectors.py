"""The simulator's own label and field selector parsers against Kubernetes' documented examples
(the "Labels and Selectors" concept page and apimachinery's parser tests), and through the API
with real kubectl ``-l``/``--field-selector``: the fake must accept, refuse and match what the
API server does, independently of the rules engine's parser."""

from __future__ import annotations

import asyncio
import json
import os
import shutil

import aiohttp
import pytest

from nodefence_sim.field_selector import FieldSelectorError, FieldTerm, parse_field_terms
from nodefence_sim.label_selector import (
    LabelSelectorError,
    Operator,
    Requirement,
    parse_label_selector,
)
from nodefence_sim.resources import PODS
from nodefence_sim.testing import SimulatorHandle

# --------------------------------------------------------------------- the parser itself

# From apimachinery's labels/selector_test.go (TestSetSelectorParser): text -> requirements.
PARSED = [
    ("", ()),
    ("\rx", (("x", Operator.EXISTS, ()),)),
    ("a ", (("a", Operator.EXISTS, ()),)),
    ("!x", (("x", Operator.DOES_NOT_EXIST, ()),)),
    (
        "this-is-a-dns.domain.com/key-with-dash",
        (("this-is-a-dns.domain.com/key-with-dash", Operator.EXISTS, ()),),
    ),
    (
        "0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)",
        (("0.1.2.domain/99", Operator.NOT_IN, ("10.10.100.1", "tick.tack.clock")),),
    ),
    ("foo  in\t (abc)", (("foo", Operator.IN, ("abc",)),)),
    ("x notin\n (abc)", (("x", Operator.NOT_IN, ("abc",)),)),
    ("x in (abc,)", (("x", Operator.IN, ("", "abc")),)),
    ("x in ()", (("x", Operator.IN, ("",)),)),
    ("x notin ( )", (("x", Operator.NOT_IN, ("",)),)),
    ("x notin (, a)", (("x", Operator.NOT_IN, ("", "a")),)),
    (
        "x notin (abc,,def),bar,z in (),w",
        (
            ("bar", Operator.EXISTS, ()),
            ("w", Operator.EXISTS, ()),
            ("x", Operator.NOT_IN, ("", "abc", "def")),
            ("z", Operator.IN, ("",)),
        ),
    ),
    ("x=a,y!=b", (("x", Operator.EQUALS, ("a",)), ("y", Operator.NOT_EQUALS, ("b",)))),
    ("x==a", (("x", Operator.DOUBLE_EQUALS, ("a",)),)),
    ("x=", (("x", Operator.EQUALS, ("",)),)),
    ("x= ,z= ", (("x", Operator.EQUALS, ("",)), ("z", Operator.EQUALS, ("",)))),
    ("x>1", (("x", Operator.GREATER_THAN, ("1",)),)),
    ("x<7", (("x", Operator.LESS_THAN, ("7",)),)),
    # ``in`` and ``notin`` are words wherever a value may stand.
    (
        "a in (x,y,notin, z,in)",
        (("a", Operator.IN, ("in", "notin", "x", "y", "z")),),
    ),
    ("notin=in", (("notin", Operator.EQUALS, ("in",)),)),
    # The lexer reads a NUL as the end of the string where a token would start.
    ("a \x00b=c", (("a", Operator.EXISTS, ()),)),
]

# From the same tests (TestSelectorParse, TestSetSelectorParser), each with the server's words.
REFUSED = [
    # "||" is no operator: "a||y" is one value, and not a valid one.
    ("x=a||y=b", 'values[0][x]: Invalid value: "a||y"'),
    ("x==a==b", "found '==', expected: ',' or 'end of string'"),
    ("!x=a", "found '=', expected: ',' or 'end of string'"),
    ("x<a", "for 'Gt', 'Lt' operators, the value must be an integer"),
    ("x,,y", "found ',', expected: identifier after ','"),
    (",x,y", "found ',', expected: !, identifier, or 'end of string'"),
    ("x nott in (y)", "found 'nott', expected: in, notin, =, ==, !=, gt, lt"),
    ("a in (xyz),", "found '', expected: identifier after ','"),
    ("a in (xyz)b notin ()", "found 'b', expected: ',' or 'end of string'"),
    ("a in (xyz abc)", "found 'abc', expected: ',' or ')'"),
    ("a notin(", "found '', expected: ',', ')' or identifier"),
    ("a (", "found '(', expected: in, notin, =, ==, !=, gt, lt"),
    ("(", "found '(', expected: !, identifier, or 'end of string'"),
    ("x in a", "found 'a' expected: '('"),
    ("x=(a,b)", "found '(', expected: identifier"),
    # ... and a NUL right after a word ends that word: "b" is then where an operator belongs.
    ("a\x00b", "found 'b', expected: in, notin, =, ==, !=, gt, lt"),
    # Keys and values are validated as the API server validates labels.
    ("-x", 'Invalid value: "-x": name part must consist of alphanumeric characters'),
    ("Example.COM/x", 'Invalid value: "Example.COM/x": prefix part a lowercase RFC 1123'),
    ("/x", "prefix part must be non-empty"),
    ("a/b/c", "a qualified name must consist of"),
    ("x" * 64, "name part must be no more than 63 characters"),
    ("x=-a", 'values[0][x]: Invalid value: "-a": a valid label must be an empty string'),
    ("x in (" + "v" * 64 + ")", "must be no more than 63 characters"),
]


@pytest.mark.parametrize(("text", "expected"), PARSED)
def test_documented_selectors_parse_as_the_api_server_parses_them(
    text: str, expected: tuple[tuple[str, Operator, tuple[str, ...]], ...]
) -> None:
    parsed = parse_label_selector(text)
    assert parsed.requirements == tuple(Requirement(*r) for r in expected)


@pytest.mark.parametrize(("text", "words"), REFUSED)
def test_bad_selectors_are_refused_in_the_api_servers_words(text: str, words: str) -> None:
    with pytest.raises(LabelSelectorError) as refused:
        parse_label_selector(text)
    assert words in str(refused.value)


# The "Labels and Selectors" concept page's examples, and apimachinery's TestSelectorMatches.
MATCHES = [
    ("environment = production", {"environment": "production"}, True),
    ("environment = production", {"environment": "qa"}, False),
    ("tier != frontend", {"tier": "backend"}, True),
    ("tier != frontend", {}, True),
    ("tier != frontend", {"tier": "frontend"}, False),
    ("environment=production,tier!=frontend", {"environment": "production"}, True),
    ("environment in (production, qa)", {"environment": "qa"}, True),
    ("environment in (production, qa)", {"environment": "dev"}, False),
    ("environment in (production, qa)", {}, False),
    ("tier notin (frontend, backend)", {"tier": "cache"}, True),
    ("tier notin (frontend, backend)", {}, True),
    ("tier notin (frontend, backend)", {"tier": "backend"}, False),
    ("partition", {"partition": ""}, True),
    ("partition", {}, False),
    ("!partition", {}, True),
    ("!partition", {"partition": "a"}, False),
    ("partition,environment notin (qa)", {"partition": "a"}, True),
    ("partition,environment notin (qa)", {"partition": "a", "environment": "qa"}, False),
    ("x in ()", {"x": ""}, True),
    ("x in ()", {"x": "a"}, False),
    ("x=", {"x": ""}, True),
    ("x>1", {"x": "2"}, True),
    ("x>1", {"x": "0"}, False),
    ("x>1", {"x": "v2"}, False),
    ("x<1", {"x": "-3"}, True),
    ("x<1", {}, False),
    ("x>1", {"x": "1_0"}, False),
    ("foo=bar,foobar=bar,baz=blah", {"foo": "bar", "baz": "blah"}, False),
    ("", {"x": "y"}, True),
]


@pytest.mark.parametrize(("text", "labels", "selected"), MATCHES)
def test_documented_selectors_select_what_the_api_server_selects(
    text: str, labels: dict[str, str], selected: bool
) -> None:
    assert parse_label_selector(text).matches(labels) is selected


def test_field_selectors_split_at_the_first_operator_and_unescape_their_values() -> None:
    # apimachinery's fields/selector_test.go: good strings, and the escapes of a value.
    assert parse_field_terms("x=a,y=b,z=c") == [
        FieldTerm("x", "a"),
        FieldTerm("y", "b"),
        FieldTerm("z", "c"),
    ]
    assert parse_field_terms("x!=a,y==b") == [
        FieldTerm("x", "a", negated=True),
        FieldTerm("y", "b"),
    ]
    assert parse_field_terms(r"x=a||y\=b") == [FieldTerm("x", "a||y=b")]
    assert parse_field_terms(r"x=a\=\=b") == [FieldTerm("x", "a==b")]
    assert parse_field_terms(r"x=a\,b,y=c\\") == [FieldTerm("x", "a,b"), FieldTerm("y", "c\\")]
    assert parse_field_terms("") == []
    assert parse_field_terms("x=a,") == [FieldTerm("x", "a")]
    # Nothing is trimmed: the field is "x ", which a kind then does not support.
    assert parse_field_terms("x = a") == [FieldTerm("x ", " a")]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("x=a||y=b", "unescaped character in value: 61"),
        ("x==a==b", "unescaped character in value: 61"),
        ("x=a,b", "invalid selector: 'x=a,b'; can't understand 'b'"),
        ("x in (a)", "can't understand 'x in (a)'"),
        ("x", "can't understand 'x'"),
        ("x=a\\", "invalid escape sequence: \\"),
        ("x=\\a", "invalid escape sequence: \\a"),
    ],
)
def test_bad_field_selectors_are_refused_in_the_api_servers_words(text: str, words: str) -> None:
    with pytest.raises(FieldSelectorError) as refused:
        parse_field_terms(text)
    assert words in str(refused.value)


# ----------------------------------------------------------------------- through the API


def _pod(name: str, labels: dict[str, str], node: str) -> dict[str, object]:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "busybox"}]},
    }


@pytest.fixture
def labelled(sim_api: SimulatorHandle) -> SimulatorHandle:
    store = sim_api.sim.store
    store.create(PODS, "default", _pod("web-prod", {"app": "web", "env": "production"}, "worker1"))
    store.create(PODS, "default", _pod("web-qa", {"app": "web", "env": "qa"}, "control02"))
    store.create(PODS, "default", _pod("db", {"app": "db", "tier": "backend"}, "worker1"))
    store.create(PODS, "default", _pod("bare", {}, "control02"))
    return sim_api


async def _kubectl(handle: SimulatorHandle, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        "kubectl",
        "--kubeconfig",
        str(handle.kubeconfig),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "HOME": str(handle.kubeconfig.parent)},
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


KUBECTL_SELECTS = [
    ("app=web", {"web-prod", "web-qa"}),
    ("app==web,env!=qa", {"web-prod"}),
    ("env in (production, qa)", {"web-prod", "web-qa"}),
    ("env notin (qa)", {"web-prod", "db", "bare"}),
    ("tier", {"db"}),
    ("!app", {"bare"}),
    ("app in (web),!tier", {"web-prod", "web-qa"}),
    ("env=", set()),
]


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
async def test_kubectl_label_selectors_select_what_a_real_server_would(
    labelled: SimulatorHandle,
) -> None:
    for selector, expected in KUBECTL_SELECTS:
        rc, out = await _kubectl(labelled, "get", "pods", "-l", selector, "-o", "json")
        assert rc == 0, (selector, out)
        names = {p["metadata"]["name"] for p in json.loads(out)["items"]}
        assert names == expected, selector


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
async def test_kubectl_hears_the_servers_refusal_of_a_bad_selector(
    labelled: SimulatorHandle,
) -> None:
    rc, out = await _kubectl(labelled, "get", "pods", "-l", "app in (web", "-o", "name")
    assert rc != 0, out
    assert "BadRequest" in out or "unable to parse requirement" in out, out
    rc, out = await _kubectl(
        labelled, "get", "pods", "--field-selector", "spec.nodeName=worker1", "-o", "name"
    )
    assert rc == 0, out
    assert set(out.split()) == {"pod/web-prod", "pod/db"}
    rc, out = await _kubectl(
        labelled, "get", "pods", "--field-selector", "spec.nodeName!=worker1", "-o", "name"
    )
    assert rc == 0, out
    assert set(out.split()) == {"pod/web-qa", "pod/bare"}


async def test_a_bad_selector_is_a_400_status_and_a_good_one_filters(
    labelled: SimulatorHandle,
) -> None:
    url = labelled.url
    async with aiohttp.ClientSession() as session:
        for query in (
            {"labelSelector": "x,,y"},
            {"labelSelector": "Example.COM/x"},
            {"fieldSelector": "spec.nodeName"},
            {"fieldSelector": "spec.nodeName = worker1"},
            {"fieldSelector": "spec.unknown=worker1"},
        ):
            async with session.get(f"{url}/api/v1/namespaces/default/pods", params=query) as r:
                body = await r.json()
                assert r.status == 400, (query, body)
                assert (body["kind"], body["reason"], body["code"]) == (
                    "Status",
                    "BadRequest",
                    400,
                ), body
        async with session.get(
            f"{url}/api/v1/nodes", params={"labelSelector": "node-role.kubernetes.io/worker"}
        ) as r:
            assert r.status == 200
            names = [n["metadata"]["name"] for n in (await r.json())["items"]]
        assert names == ["worker1"]
