"""`launch --exec`'s watchdog and its launch gate, without a cluster: which bound ends a job, what is
said after a stall or a hang, and how the gate's answer becomes the launch's exit status."""

from __future__ import annotations

import json

import pytest

from hpcbundle.config.loading import read_yaml, validate
from hpcbundle.config.sites import Site
from hpcbundle.diagnose.gate.probe import REPORT_KEY
from hpcbundle.diagnose.gate.run import gate_probe, gate_python, run_gate
from hpcbundle.diagnose.watchdog import (
    exec_limit,
    hang_error,
    quiet_warning,
    run_job,
    stall_lines,
    stall_verdict,
    unbounded_note,
)
from hpcbundle.execute import Captured, Watched
from hpcbundle.launch import RankLayout, build_command

from .helpers import ROOT

LOCAL = ROOT / "site_configs" / "local.yaml"


def _site(**over) -> Site:
    """The shipped local site with `over` on top."""
    return validate(Site, {**read_yaml(LOCAL), **over}, str(LOCAL))


WATCHED = _site(faults={"stall_seconds": 4})


def test_the_jobs_bound_is_timeout_when_given_else_the_sites_launcher_timeout():
    assert exec_limit(_site(), 7) == (7, "--timeout")
    assert exec_limit(_site(), None) == (300, "launcher.timeout of site local")


def test_a_site_without_a_stall_bound_runs_the_job_bounded_only():
    calls = []
    ended = run_job(
        _site(),
        ["job"],
        9,
        lambda: pytest.fail("looked"),
        lambda stopped: pytest.fail("killed"),
        bounded=lambda argv, limit: calls.append((argv, limit)) or 3,
    )
    assert calls == [(["job"], 9)] and ended.watched == Watched(3) and ended.stopped == {}


def test_a_stalled_job_has_its_stopped_ranks_looked_up_before_it_is_ended_and_those_left_killed_after():
    """torchrun's workers outlive a launcher that ended their agent: the stopped ones found before the end
    are asked for again after it, and those still there killed and reported."""
    stopped = {"node2": [{"pid": 41, "state": "T"}], "node3": [{"pid": 43, "state": "T"}]}
    steps = []

    def watch(argv, limit, stall, before_stop):
        assert (argv, limit, stall) == (["job"], 9, 4)
        before_stop()
        steps.append("ended")
        return Watched(None, stalled=True)

    def kill(found):
        steps.append(("kill", found))
        return {"node3": found["node3"]}

    ended = run_job(WATCHED, ["job"], 9, lambda: steps.append("looked") or stopped, kill, watch=watch)
    assert steps == ["looked", "ended", ("kill", stopped)]
    assert ended.watched.stalled and ended.stopped == stopped and ended.killed == {"node3": [{"pid": 43, "state": "T"}]}


def test_a_stalled_job_without_stopped_ranks_kills_nothing_after():
    def watch(argv, limit, stall, before_stop):
        before_stop()
        return Watched(None, stalled=True)

    ended = run_job(WATCHED, ["job"], 9, dict, lambda found: pytest.fail("killed"), watch=watch)
    assert ended.watched.stalled and ended.stopped == ended.killed == {}


def test_after_a_stall_the_launch_names_the_bound_and_each_stopped_rank():
    assert stall_lines(WATCHED, {"node2": [{"pid": 41, "state": "T"}, {"pid": 42, "state": "X"}]}) == [
        "hpcbundle: error: no output from the job for 4 s (faults.stall_seconds of site local), so it was stopped: "
        "a rank stopped or lost its link, and the others would wait in their collectives (MPI, Gloo or NCCL) for TCP's "
        "retries",
        "hpcbundle: node2: the rank with PID 41 was stopped (SIGSTOP, or a job-control stop) (state T)",
        "hpcbundle: node2: the rank with PID 42 was X (state X)",
    ]
    assert stall_lines(WATCHED, {"node2": [{"pid": 41, "state": "T"}]}, {"node2": [{"pid": 41, "state": "T"}]})[2:] == [
        "hpcbundle: node2: the rank with PID 41 outlived the launcher, still stopped: killed (SIGKILL)"
    ]


@pytest.mark.parametrize(
    "failed, stopped, cause",
    [
        (True, True, "the FAIL above is on the job's nodes now; "),
        (False, True, "the rank named above stopped, not a link; "),
        (
            False,
            False,
            "doctor finds the job's nodes and links fine now, so a rank itself stopped "
            "(SIGSTOP, a hung device, swapping); ",
        ),
    ],
)
def test_the_last_line_after_a_stall_names_the_likeliest_cause_and_says_to_run_again(failed, stopped, cause):
    assert stall_verdict(failed, stopped) == (
        f"hpcbundle: {cause}run the same command again to resume from the last checkpoint"
    )


def test_a_finished_job_silent_for_half_its_stall_bound_is_warned_about_naming_the_site():
    assert quiet_warning(WATCHED, Watched(0, quietest=2.5)) == (
        "hpcbundle: warning: the job was silent for up to 2.5 s, more than half of faults.stall_seconds (4 s) "
        "of site local: a slower epoch or checkpoint would be ended as a stall; raise it in site local"
    )
    assert quiet_warning(WATCHED, Watched(0, quietest=1.9)) is None
    assert quiet_warning(WATCHED, Watched(None, stalled=True, quietest=4.0)) is None
    assert quiet_warning(_site(), Watched(0, quietest=100.0)) is None


def test_a_site_without_a_stall_bound_is_told_in_one_line_what_a_lost_link_will_do():
    assert unbounded_note(WATCHED, 3600, "launcher.timeout of site local") is None
    assert unbounded_note(_site(), 3600, "launcher.timeout of site local") == (
        "hpcbundle: note: site local sets no faults.stall_seconds: a lost link or a stopped rank leaves the job "
        "waiting until 3600 s (launcher.timeout of site local); set it above the program's longest silent phase "
        "to end such a job sooner"
    )


def test_a_job_killed_at_its_bound_is_blamed_on_the_network_keys_of_the_site():
    assert hang_error(_site(), 300, "--timeout") == (
        "hpcbundle: error: killed after 300 s (--timeout): the job neither finished nor failed. MPI hangs like this "
        "when ranks cannot reach each other, most often over a wrong network interface: check network.interfaces, "
        "mca btl_tcp_if_include/oob_tcp_if_include and NCCL_SOCKET_IFNAME in site local against `ip -br addr` "
        "on the nodes (or raise the limit for a long job)"
    )


def test_the_gate_runs_in_the_jobs_python_else_the_images_else_this_one():
    assert gate_python(("python3.11", "train.py"), None) == "python3.11"
    assert gate_python(("./train",), "x.sif") == "python3"
    assert gate_python(("./train",), None, own="/venv/bin/python") == "/venv/bin/python"


def _gate_answers(ran: Captured):
    """A runner that checks it got the gate's probe through the job's launch command, and answers `ran`."""
    site, layout = _site(), RankLayout(np=2)

    def launch(words):
        return build_command(site, layout, words, None).argv

    def run(argv, timeout, grace):
        assert list(argv) == launch(gate_probe(site, None, ("python3", "train.py")))
        assert argv[-4:-2] == ["python3", "-c"] and (timeout, grace) == (site.gate.timeout, 2.0)
        return ran

    return run_gate(site, launch, None, ("python3", "train.py"), run=run)


def _report(verdict: str) -> str:
    return "mpirun noise\n" + json.dumps({REPORT_KEY: verdict, "line": f"hpcbundle gate: {verdict}: x"}) + "\n"


def test_a_gate_whose_ranks_never_started_names_the_wire_up_and_the_start_time_not_the_transfer():
    slow = _gate_answers(Captured(None, "mpirun noise\n", ""))
    assert slow.status == 124 and slow.line.startswith(
        "hpcbundle gate: FAIL: no rank started within 30 s: site local: network.interfaces or gate.timeout "
        "(the launcher did not get its ranks running"
    )


def test_the_gates_verdict_decides_whether_the_launch_goes_on():
    passed, failed = _gate_answers(Captured(0, _report("PASS"), "")), _gate_answers(Captured(2, _report("FAIL"), ""))
    assert (passed.status, passed.line) == (0, "hpcbundle gate: PASS: x")
    assert (failed.status, failed.line) == (2, "hpcbundle gate: FAIL: x")


def test_a_gate_without_an_answer_stops_the_launch_with_124_and_one_without_a_report_with_2():
    hung = _gate_answers(Captured(None, "hpcbundle gate: rank started on n1\n", ""))
    assert hung.status == 124 and hung.line.startswith(
        "hpcbundle gate: FAIL: no answer within 30 s: site local: network.interfaces (the ranks started but their "
        "allreduce never finished"
    )
    broken = _gate_answers(Captured(1, "", "a\nb\n"))
    assert (broken.status, broken.line) == (2, "hpcbundle gate: FAIL: the probe gave no report (exit 1): a / b")
