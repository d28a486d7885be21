"""The rules over a torch job's head as doctor observes it (rules/torch.py: torch-head-address, torch-port-free,
torch-head-reach): a bad and a good case each, over facts; and the probe they read, run on this node: a port
another socket listens on is in use, a free one is listened on and reached."""

from __future__ import annotations

import socket

import pytest

from hpcbundle.diagnose.fanout import head_store
from hpcbundle.knowledge.compat import knowledge_base
from hpcbundle.rules.engine import Facts, HeadProbe, applicable, registered

from .helpers import SMALL_SITE, make_site

SITE = make_site(SMALL_SITE)
NODES = ("node1", "node2", "node3")
GOOD = HeadProbe("node1", "data0", 29500, "10.77.0.1", "ok", dict.fromkeys(NODES, "ok"))
HEAD_RULES = ("torch-head-address", "torch-port-free", "torch-head-reach")
WAITS = (
    "torch's store client would wait until its timeout rather than fail "
    "(env:// against a closed port had not failed after 150 s, measured)"
)
REACH_FIX = (
    "let the nodes reach 10.77.0.1:29500 over data0 (a firewall, a link down?), or name the interface that joins "
    "them first in network.interfaces of WHERE"
)


def judged(head: HeadProbe, answered: tuple[str, ...] = NODES) -> list[tuple[str, str, str]]:
    """(rule, status, message) of each rule over the head, the nodes not `answered` left silent."""
    nodes = {h: {"host": h} if h in answered else {"error": "ssh: no route", "unreached": True} for h in NODES}
    facts = Facts(site=SITE, nodes=nodes, observed=True, head=head)
    results = [r for rule in registered() if "head" in rule.needs for r in rule(facts, knowledge_base())]
    return [(r.rule, r.status, r.message().replace(SITE.where, "WHERE")) for r in results]


def test_the_head_rules_are_the_three_and_run_only_where_doctor_observed_a_head():
    assert tuple(r.name for r in registered() if "head" in r.needs) == HEAD_RULES
    facts = Facts(site=SITE, nodes={"node1": {}}, observed=True)
    assert not {r.name for r in applicable(facts)} & set(HEAD_RULES)
    with_head = {r.name for r in applicable(Facts(site=SITE, nodes={"node1": {}}, observed=True, head=GOOD))}
    assert set(HEAD_RULES) <= with_head


def test_a_head_that_has_its_address_its_port_and_every_node_passes_all_three():
    assert judged(GOOD) == [
        ("torch-head-address", "PASS", "node1 has 10.77.0.1 on data0"),
        ("torch-port-free", "PASS", "port 29500 is free on node1: doctor listened on it"),
        ("torch-head-reach", "PASS", "node1, node2, node3 reached node1 10.77.0.1:29500 (data0)"),
    ]


def test_a_head_without_an_address_on_the_data_interface_fails_naming_node_interface_and_key():
    assert judged(HeadProbe("node1", "data0", 29500)) == [
        ("torch-head-address", "FAIL", "node1 has no IPv4 address on data0 (network.interfaces[0] of WHERE): "
         "MASTER_ADDR, where the ranks meet, is the first host's address there; give data0 an address on node1, "
         "or name one that has an address first in network.interfaces"),
        ("torch-port-free", "SKIP", "not tried: the head's address is not known (rule torch-head-address)"),
        ("torch-head-reach", "SKIP", "nothing listened on the head's port (rules torch-head-address, "
         "torch-port-free)"),
    ]  # fmt: skip


def test_a_head_that_did_not_answer_is_left_to_node_reach():
    assert judged(HeadProbe("node1", "data0", 29500), answered=("node2", "node3"))[0] == (
        "torch-head-address", "SKIP", "node1 did not answer (rule node-reach says why)"
    )  # fmt: skip


def test_a_port_in_use_on_the_head_fails_naming_port_node_and_the_site_key():
    held = HeadProbe("node1", "data0", 29500, "10.77.0.1", "Address already in use")
    assert judged(held)[1:] == [
        ("torch-port-free", "FAIL", "port 29500 is in use on node1 (address already in use): rank 0's store cannot "
         "listen at 10.77.0.1:29500 (data0); set torch.port in WHERE"),
        ("torch-head-reach", "SKIP", "nothing listened on the head's port (rules torch-head-address, "
         "torch-port-free)"),
    ]  # fmt: skip


@pytest.mark.parametrize("cause", ["No route to host", "Connection refused", "timed out (no answer within 3 s)"])
def test_a_node_that_cannot_reach_the_head_fails_naming_node_address_interface_and_cause(cause):
    head = HeadProbe("node1", "data0", 29500, "10.77.0.1", "ok", {"node1": "ok", "node2": "ok", "node3": cause})
    why = cause[:1].lower() + cause[1:]
    assert judged(head)[2] == (
        "torch-head-reach", "FAIL", f"node3 cannot reach node1 10.77.0.1:29500 (data0): {why}; {WAITS}; {REACH_FIX}"
    )  # fmt: skip


def test_a_node_that_did_not_answer_is_not_blamed_for_the_head():
    head = HeadProbe("node1", "data0", 29500, "10.77.0.1", "ok", {"node1": "ok", "node2": "ok", "node3": "ssh: x"})
    assert judged(head, answered=("node1", "node2"))[2] == (
        "torch-head-reach", "PASS", "node1, node2 reached node1 10.77.0.1:29500 (data0)"
    )  # fmt: skip


def test_the_probe_names_a_port_another_socket_listens_on_in_use_and_reaches_a_free_one():
    here = socket.gethostname()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        assert head_store({}, (here, "127.0.0.1", port), [here], 2.0, 20.0, {}) == ("Address already in use", {})
    assert head_store({}, (here, "127.0.0.1", port), [here], 2.0, 20.0, {}) == ("ok", {here: "ok"})
