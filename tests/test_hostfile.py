"""One hostfile grammar (hpcbundle.launch.hostfile): what `launch` accepts, the elastic discovery script
accepts the same way; what `launch` refuses, the script skips and names on stderr. The script is the real
generated one, run by bash on a file of many lines, with its ssh probe answering for every host."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcbundle.config.loading import validate
from hpcbundle.config.sites import Site
from hpcbundle.launch.batch import script_environment
from hpcbundle.launch.elastic import discovery_script
from hpcbundle.launch.hostfile import MAX_SLOTS, parse_line

from .helpers import GOLDEN, ROOT, assert_golden, examples, hpcbundle, site_variant, write_site

HOSTFILE_SITE = site_variant("eth-cpu-elastic")
HOSTFILE_SITE["faults"]["elastic"]["discovery"] = "hostfile"

CORPUS: list[tuple[str, tuple[str, int] | None | str]] = [
    ("n01", ("n01", 1)),
    ("n01 slots=4", ("n01", 4)),
    ("n01:4", ("n01", 4)),
    ("\tn01 \t slots=4 \t# rack 2 \u00a0\u2028 anything", ("n01", 4)),
    ("n01 slots=4\r", ("n01", 4)),
    ("n-1.example_x slots=100000", ("n-1.example_x", 100000)),
    ("", None),
    ("   \t", None),
    ("# spare node", None),
    ("  #n02 slots=2", None),
    ("\r", None),
    ("n01 slots=4\r\r", "refused"),
    ("n01\rn02", "refused"),
    ("n01\u00a0slots=4", "refused"),
    ("n01 slots=4\u00a0", "refused"),
    ("\u00a0n01", "refused"),
    ("n01\x0bslots=4", "refused"),
    ("n01\x0cslots=4", "refused"),
    ("n01\u2028n02", "refused"),
    ("n01\u3000slots=4", "refused"),
    ("n01 slots=04", "refused"),
    ("n01:007", "refused"),
    ("n01 slots=0", "refused"),
    ("n01 slots=100001", "refused"),
    ("n01 slots=99999999999999999999", "refused"),
    ("n01 slots=2 slots=3", "refused"),
    ("n01:2 slots=3", "refused"),
    ("n01 max_slots=4", "refused"),
    ("n01 slots=4 extra", "refused"),
    ("n01 slots =4", "refused"),
    ("n#01 slots=2", "refused"),
    ("n01# slots=2", "refused"),
    ("n01 slots=2#rack", "refused"),
    ("-n01", "refused"),
    (".n01", "refused"),
    ("n01:", "refused"),
    ("n\u00e901", "refused"),
    ("n\uff1101", "refused"),
    ("n01 slots=\u0664", "refused"),
    ("n0\x001", "refused"),
    ("n01 # a\x00b", ("n01", 1)),
    ("a" * 253, ("a" * 253, 1)),
    ("a" * 254, "refused"),
    ("$(touch PWNED) slots=1", "refused"),
]

SEPARATORS = [" ", "\t", "  ", "\u00a0", "\x0b", "\x0c", "\u2028", "\u2029", "\x85", "\u3000", "\r", "\x00", ""]
NAME = st.text(st.sampled_from("abz09.-_#:\u00e9\u0131K"), min_size=1, max_size=8)
COUNT = st.one_of(
    st.integers(1, 12).map(str),
    st.sampled_from(["0", "00", "01", "007", str(MAX_SLOTS), str(MAX_SLOTS + 1), "999999", "1" * 30, "\u0663", ""]),
)
OPTION = st.one_of(
    COUNT.map(lambda n: f"slots={n}"),
    COUNT.map(lambda n: f"max_slots={n}"),
    st.sampled_from(["slots", "#", "# spare", "#x", "extra", "slots=2 slots=3"]),
)
NEAR_VALID = st.builds(
    lambda lead, name, colon, parts, trail: lead + name + colon + "".join(sep + word for sep, word in parts) + trail,
    st.sampled_from(SEPARATORS),
    NAME,
    st.one_of(st.just(""), COUNT.map(lambda n: f":{n}")),
    st.lists(st.tuples(st.sampled_from(SEPARATORS), OPTION), max_size=3),
    st.sampled_from(SEPARATORS),
)
LINE = st.one_of(NEAR_VALID, st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n")))


def expected(line: str) -> tuple[str, int] | None | str:
    """What `launch` makes of one line: (host, slots), None (blank or comment) or 'refused'."""
    try:
        return parse_line(line)
    except ValueError:
        return "refused"


@pytest.fixture(scope="module")
def discover(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    """(the generated discovery script, its hostfile, an environment whose `timeout` lets every probe answer)."""
    work = tmp_path_factory.mktemp("grammar")
    hosts, script, stubs = work / "hosts", work / "hosts.discover", work / "bin"
    site = validate(Site, HOSTFILE_SITE, "eth-cpu-elastic.yaml")
    script.write_text(discovery_script(site, script_environment(ROOT / "scripts"), str(hosts), 1))
    script.chmod(0o755)
    stubs.mkdir()
    (stubs / "timeout").write_text("#!/bin/sh\nexit 0\n")  # the ssh probe: every host answers
    (stubs / "timeout").chmod(0o755)
    return script, hosts, {"PATH": f"{stubs}:/usr/bin:/bin"}


def run_script(
    discover: tuple[Path, Path, dict[str, str]], lines: list[str], end: str = "\n"
) -> tuple[list[str], list[int]]:
    """The script's `host:slots` lines for a hostfile of `lines` (the last one ending in `end`), and the
    line numbers it said it skipped."""
    script, hosts, env = discover
    hosts.write_bytes(("\n".join(lines) + end).encode())
    found = subprocess.run([str(script)], capture_output=True, timeout=60, env=env, check=False)
    assert found.returncode == 0, found.stderr
    skipped = [line.split(b" ")[4] for line in found.stderr.splitlines()]
    assert all(line.startswith(b"hpcbundle discovery: skipped line ") for line in found.stderr.splitlines())
    return found.stdout.decode().splitlines(), [int(number) for number in skipped]


def assert_agree(discover: tuple[Path, Path, dict[str, str]], lines: list[str]) -> None:
    """The script prints exactly the hosts launch reads, and skips exactly the lines launch refuses."""
    readings = [expected(line) for line in lines]
    printed, skipped = run_script(discover, lines)
    assert printed == [f"{host}:{slots}" for host, slots in (r for r in readings if isinstance(r, tuple))]
    assert skipped == [number for number, reading in enumerate(readings, 1) if reading == "refused"]


@pytest.mark.parametrize("line, reading", CORPUS, ids=[repr(line)[:40] for line, _ in CORPUS])
def test_launch_reads_each_corpus_line_as_the_grammar_says(line, reading):
    assert expected(line) == reading


def test_the_discovery_script_reads_every_corpus_line_as_launch_does(discover):
    assert_agree(discover, [line for line, _ in CORPUS])


def test_the_discovery_script_reads_a_last_line_without_a_line_feed(discover):
    assert run_script(discover, ["n1 slots=2", "n2:3\r"], end="") == (["n1:2", "n2:3"], [])
    assert run_script(discover, ["n1 slots=2", "n2:03"], end="") == (["n1:2"], [2])


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(LINE, min_size=1, max_size=40))
def test_the_discovery_script_and_launch_agree_on_random_lines(discover, lines):
    assert_agree(discover, lines)


def test_the_hostfile_discovery_script_matches_its_golden_file():
    site = validate(Site, HOSTFILE_SITE, "eth-cpu-elastic.yaml")
    text = discovery_script(site, script_environment(ROOT / "scripts"), "/cluster/job/hosts", 1)
    assert_golden(GOLDEN / "discovery" / "hostfile.sh", text)


@pytest.mark.parametrize(
    "content, message",
    [
        (
            "n1 slots=2\nn2\u00a0slots=2\n",
            "HOSTS:2: 'n2\\xa0slots=2': character U+00A0 (only ASCII letters, digits, '.', '_', '-', spaces "
            "and tabs) (write `host`, `host:N` or `host slots=N` (N from 1 to 100000, ASCII spaces, "
            "`# comment` after a space))",
        ),
        ("n1 slots=02\n", "HOSTS:1: 'n1 slots=02': not `host`, `host:N` or `host slots=N`"),
        ("n1 slots=200000\n", "HOSTS:1: 'n1 slots=200000': more than 100000 slots"),
        ("# none\n", "HOSTS: names no host"),
    ],
)
def test_launch_refuses_a_bad_hostfile_line_in_one_line_naming_the_file_and_line(tmp_path, content, message):
    site, hosts = write_site(tmp_path, HOSTFILE_SITE), tmp_path / "hosts"
    hosts.write_text(content)
    result = hpcbundle("launch", "--site", str(site), "--np", "2", "--hostfile", str(hosts), "--", "python3", "t.py")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and message.replace("HOSTS", str(hosts)) in result.stderr, result.stderr
    assert not (tmp_path / "hosts.discover").exists()
