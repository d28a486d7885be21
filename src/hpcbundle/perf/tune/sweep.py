"""Tuning a site's allreduce: the knobs worth sweeping, a coordinate-descent sweep, the tuned copy.

Pure: the sweep takes a `measure` function (the CLI's runs the generated command on the nodes and
returns busbw in GiB/s), so the selection rules are tested with exact expectations.

    >>> knobs = [k for k in KNOBS if k.name in ("algorithm", "yield")]
    >>> result = sweep(knobs, lambda s: 2.0 if s.get("mca.mpi_yield_when_idle") == "1" else 1.0, repeat=1)
    >>> result.winners, result.changed()
    ({'algorithm': 'default', 'yield': '1'}, {'mca.mpi_yield_when_idle': '1'})
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from ...config.sites import Site
from ...knowledge.knobs import knob_sites

Value = str | bool | None
Settings = dict[str, Value]  # "mca.X" / "env.Y" / "launcher.gloo" -> value; None removes the key (the default)

# A challenger must beat the kept value by this much (median of back-to-back pairs), and in every
# pair: nodes are shared and noisy, and a change the site does not need is a change nobody can
# explain later. Measured on 2 namespace nodes (2026-11-26): one setting's busbw went 0.47, 0.52,
# 0.73 GiB/s in three rounds, and a value whose pairs were 0.89, 1.58, 1.38 (median 1.38) was
# 0.90x the untuned site in the benchmark that followed.
MIN_GAIN = 0.05
_MIB = 1 << 20


@dataclass(frozen=True)
class Candidate:
    """One value of a knob: the site keys it sets (None: remove the key, i.e. the default)."""

    label: str
    settings: tuple[tuple[str, Value], ...] = ()

    def apply(self, base: Mapping[str, Value]) -> Settings:
        """`base` with this candidate's keys on top."""
        return {**base, **dict(self.settings)}


@dataclass(frozen=True)
class Knob:
    """Something that decides allreduce speed, with the values worth trying (the first is kept
    unless another wins) and whether it applies to a site (Open MPI knobs need Open MPI ranks)."""

    name: str
    what: str
    candidates: tuple[Candidate, ...]
    needs_tensors: int = 1  # a knob about fusing tensors shows nothing with fewer
    small_end: bool = False  # also judged on many small tensors, where Horovod's cycle sets the latency

    def applies(self, site: Site) -> bool:
        """Whether the knob applies to `site` (knowledge/knobs.py says which sites each knob is for)."""
        return knob_sites(self.name).applies(site)

    @property
    def sites(self) -> str:
        """The sites it applies to, in words."""
        return knob_sites(self.name).sites


LARGE, SMALL = "large", "small"
"""The two workloads a small_end knob is judged on: the --size allreduce (bandwidth) and many small
tensors (latency: a model with many small gradients)."""


def _mca(name: str, value: str | None) -> tuple[str, str | None]:
    return (f"mca.{name}", value)


def _algorithm(number: int | None, label: str, segment: int | None = None) -> Candidate:
    """Open MPI's coll_tuned allreduce forced to algorithm `number` (None: Open MPI's own choice)."""
    forced = None if number is None else "1"
    return Candidate(
        label,
        (
            _mca("coll_tuned_use_dynamic_rules", forced),
            _mca("coll_tuned_allreduce_algorithm", None if number is None else str(number)),
            _mca("coll_tuned_allreduce_algorithm_segmentsize", None if segment is None else str(segment)),
        ),
    )


KNOBS: tuple[Knob, ...] = (
    # Only horovodrun can switch (knowledge/knobs.py says why).
    Knob(
        "controller",
        "Horovod over MPI or Gloo (horovodrun --gloo: launcher.gloo)",
        (Candidate("mpi", (("launcher.gloo", False),)), Candidate("gloo", (("launcher.gloo", True),))),
    ),
    Knob(
        "algorithm",
        (
            "Open MPI's allreduce algorithm (coll_tuned dynamic rules; default: its size-based choice; "
            "segmented ring: 1 MiB segments)"
        ),
        (
            _algorithm(None, "default"),
            _algorithm(3, "recursive doubling"),
            _algorithm(4, "ring"),
            _algorithm(5, "segmented ring", _MIB),
            _algorithm(6, "rabenseifner"),
        ),
    ),
    Knob(
        "tcp-links",
        "TCP connections per peer (btl_tcp_links)",
        (
            Candidate("1", (_mca("btl_tcp_links", None),)),
            Candidate("2", (_mca("btl_tcp_links", "2"),)),
            Candidate("4", (_mca("btl_tcp_links", "4"),)),
        ),
    ),
    Knob(
        "tcp-buffers",
        "TCP socket buffers (btl_tcp_sndbuf/rcvbuf; default: the kernel's autotuning)",
        (
            Candidate("kernel", (_mca("btl_tcp_sndbuf", None), _mca("btl_tcp_rcvbuf", None))),
            Candidate("4 MiB", (_mca("btl_tcp_sndbuf", str(4 * _MIB)), _mca("btl_tcp_rcvbuf", str(4 * _MIB)))),
        ),
    ),
    Knob(
        "yield",
        "a rank waiting in MPI gives its core away (mpi_yield_when_idle), for nodes with more busy threads than cores",
        (Candidate("0", (_mca("mpi_yield_when_idle", None),)), Candidate("1", (_mca("mpi_yield_when_idle", "1"),))),
    ),
    Knob(
        "fusion",
        "Horovod's fusion buffer (HOROVOD_FUSION_THRESHOLD; default 128 MiB)",
        (
            Candidate("128 MiB", (("env.HOROVOD_FUSION_THRESHOLD", None),)),
            Candidate("32 MiB", (("env.HOROVOD_FUSION_THRESHOLD", str(32 * _MIB)),)),
            Candidate("8 MiB", (("env.HOROVOD_FUSION_THRESHOLD", str(8 * _MIB)),)),
        ),
        needs_tensors=2,
        small_end=True,
    ),
    Knob(
        "cycle",
        "how often Horovod's background thread looks for ready tensors (HOROVOD_CYCLE_TIME ms; default 1)",
        (
            Candidate("1 ms", (("env.HOROVOD_CYCLE_TIME", None),)),
            Candidate("0.1 ms", (("env.HOROVOD_CYCLE_TIME", "0.1"),)),
            Candidate("0.5 ms", (("env.HOROVOD_CYCLE_TIME", "0.5"),)),
            Candidate("5 ms", (("env.HOROVOD_CYCLE_TIME", "5"),)),
        ),
        small_end=True,
    ),
)
KNOB_NAMES = tuple(k.name for k in KNOBS)


def current_settings(site: Site, knobs: Sequence[Knob]) -> Settings:
    """The site's own values of every key the knobs touch (None where the site leaves the default)."""
    data = site.model_dump()
    keys = {key for knob in knobs for cand in knob.candidates for key, _ in cand.settings}
    current: Settings = {}
    for key in sorted(keys):
        section, name = key.split(".", 1)
        value = data[section].get(name) if isinstance(data[section], dict) else None
        current[key] = value if value is None or isinstance(value, bool) else str(value)
    return current


@dataclass(frozen=True)
class Trial:
    """One candidate's runs within its knob's round on one workload (`end`): busbw of each run
    (None: the run failed)."""

    knob: str
    candidate: str
    settings: tuple[tuple[str, Value], ...]
    busbw: tuple[float | None, ...]
    end: str = LARGE

    @property
    def median(self) -> float | None:
        """Median busbw of the runs; None if any run failed (a setting that sometimes fails loses)."""
        if not self.busbw or any(b is None for b in self.busbw):
            return None
        return statistics.median(b for b in self.busbw if b is not None)


@dataclass
class TuneResult:
    """Every trial in order, the winning settings, and the kept (starting) figure for comparison."""

    start: Settings
    settings: Settings = field(default_factory=dict)
    trials: list[Trial] = field(default_factory=list)
    winners: dict[str, str] = field(default_factory=dict)

    def changed(self) -> Settings:
        """Keys whose winning value differs from the site's own."""
        return {k: v for k, v in self.settings.items() if self.start.get(k) != v}

    def best(self, knob: str, end: str = LARGE) -> Trial | None:
        """The trial that won `knob`, on workload `end`."""
        return next(
            (t for t in self.trials if t.knob == knob and t.end == end and t.candidate == self.winners.get(knob)), None
        )

    def small_gain(self, key: str) -> tuple[float | None, float | None] | None:
        """(kept, chosen) median busbw on the small end of the knob whose winner set `key`; None where
        that knob was judged on the --size workload only."""
        for knob in self.winners:
            chosen = self.best(knob, SMALL)
            if chosen is not None and key in dict(chosen.settings):
                kept = next(t for t in self.trials if t.knob == knob and t.end == SMALL)
                return kept.median, chosen.median
        return None

    def baseline(self) -> float | None:
        """busbw of the site as it was (the first knob's kept candidate, --size workload)."""
        return self.trials[0].median if self.trials else None

    def final(self) -> float | None:
        """busbw of the winning settings (as measured in the last knob's round, --size workload)."""
        winner = self.best(self.trials[-1].knob) if self.trials else None
        return winner.median if winner else None


def paired_ratios(challenger: Trial, kept: Trial) -> list[float] | None:
    """challenger/kept busbw round by round, each pair measured back to back, so a slow spell of a
    shared machine divides out; None if a run of either failed.

    >>> paired_ratios(Trial("k", "ring", (), (2.0, 1.2, 3.0)), Trial("k", "default", (), (1.0, 1.0, 2.0)))
    [2.0, 1.2, 1.5]
    """
    if challenger.median is None or kept.median is None:
        return None
    return [c / k for c, k in zip(challenger.busbw, kept.busbw, strict=True) if c is not None and k]


def clear_gain(ratios: Sequence[float] | None, min_gain: float = MIN_GAIN) -> bool:
    """A gain worth keeping: more than `min_gain` in the median pair, and a win in every pair. On a
    shared machine one pair can swing 40 % either way; a value that lost a pair has not shown it helps.

    >>> clear_gain([1.2, 1.1, 1.06]), clear_gain([1.58, 1.38, 0.89]), clear_gain([1.04, 1.04, 1.04])
    (True, False, False)
    """
    return bool(ratios) and statistics.median(ratios) > 1 + min_gain and min(ratios) > 1.0


def choose(kept: Trial, challengers: Sequence[Trial], min_gain: float = MIN_GAIN) -> Trial:
    """The challenger with the best paired ratio among those with a clear gain over the kept one, else
    kept; if the kept one failed, the challenger with the best median.

    >>> kept = Trial("k", "default", (), (1.0, 1.0))
    >>> choose(kept, [Trial("k", "ring", (), (1.04, 1.04))]).candidate
    'default'
    >>> choose(kept, [Trial("k", "ring", (), (1.2, 1.1))]).candidate
    'ring'
    >>> choose(kept, [Trial("k", "ring", (), (1.6, 0.9))]).candidate
    'default'
    """
    working = [t for t in challengers if t.median is not None]
    if kept.median is None:
        return max(working, key=lambda t: t.median or 0.0, default=kept)
    pairs = [(paired_ratios(t, kept), t) for t in working]
    gains = [(statistics.median(ratios), t) for ratios, t in pairs if ratios and clear_gain(ratios, min_gain)]
    return max(gains, key=lambda rt: rt[0], default=(0.0, kept))[1]


def choose_both(large: Sequence[Trial], small: Sequence[Trial], min_gain: float = MIN_GAIN) -> Trial:
    """A knob judged at both ends (`large[0]`/`small[0]`: the kept candidate's trials): the challenger
    with a clear gain over the kept one at one end that loses no more than `min_gain` (median pair) at
    the other (the best product of its two median ratios), else the kept one; its large-end trial.
    Where the kept candidate failed at an end, the large end alone decides (choose).

    >>> kept = (Trial("cycle", "1 ms", (), (1.0, 1.0)), Trial("cycle", "1 ms", (), (0.01, 0.01), SMALL))
    >>> fast = (Trial("cycle", "0.1 ms", (), (0.97, 0.98)), Trial("cycle", "0.1 ms", (), (0.04, 0.05), SMALL))
    >>> slow = (Trial("cycle", "5 ms", (), (1.2, 1.2)), Trial("cycle", "5 ms", (), (0.002, 0.002), SMALL))
    >>> choose_both([kept[0], fast[0], slow[0]], [kept[1], fast[1], slow[1]]).candidate
    '0.1 ms'
    """
    if large[0].median is None or small[0].median is None:
        return choose(large[0], large[1:], min_gain)
    best, best_score = large[0], 0.0
    for at_large, at_small in zip(large[1:], small[1:], strict=True):
        at_large_ratios, at_small_ratios = paired_ratios(at_large, large[0]), paired_ratios(at_small, small[0])
        if not at_large_ratios or not at_small_ratios:
            continue
        large_gain, small_gain = statistics.median(at_large_ratios), statistics.median(at_small_ratios)
        wins = (clear_gain(at_large_ratios, min_gain) and small_gain >= 1 - min_gain) or (
            clear_gain(at_small_ratios, min_gain) and large_gain >= 1 - min_gain
        )
        if wins and large_gain * small_gain > best_score:
            best, best_score = at_large, large_gain * small_gain
    return best


def sweep(
    knobs: Sequence[Knob],
    measure: Callable[[Settings], float | None],
    *,
    repeat: int = 3,
    start: Settings | None = None,
    min_gain: float = MIN_GAIN,
    progress: Callable[[str, str, float | None], None] = lambda knob, label, busbw: None,
    measure_small: Callable[[Settings], float | None] | None = None,
) -> TuneResult:
    """Tune one knob at a time, in order, keeping each winner for the knobs after it.

    Each knob's candidates run `repeat` rounds, interleaved (a b c a b c ...), so slow spells of
    a shared machine hit all of them; the kept value is the site's current one, the first
    candidate when the site leaves the key at its default. With `measure_small`, a small_end knob
    runs both workloads for every candidate in each round and is judged by choose_both.
    """
    result = TuneResult(start=dict(start or {}))
    current: Settings = dict(start or {})
    for knob in knobs:
        candidates = _with_current_first(knob, current)
        meters = {LARGE: measure, **({SMALL: measure_small} if knob.small_end and measure_small else {})}
        runs: dict[tuple[str, str], list[float | None]] = {(c.label, end): [] for c in candidates for end in meters}
        for _ in range(repeat):
            for cand in candidates:
                for end, meter in meters.items():
                    busbw = meter(cand.apply(current))
                    runs[(cand.label, end)].append(busbw)
                    progress(knob.name, cand.label if end == LARGE else f"{cand.label} ({end})", busbw)
        trials = {
            end: [Trial(knob.name, c.label, c.settings, tuple(runs[(c.label, end)]), end) for c in candidates]
            for end in meters
        }
        result.trials.extend(t for end in meters for t in trials[end])
        if SMALL in trials:
            winner = choose_both(trials[LARGE], trials[SMALL], min_gain)
        else:
            winner = choose(trials[LARGE][0], trials[LARGE][1:], min_gain)
        result.winners[knob.name] = winner.candidate
        current = Candidate(winner.candidate, winner.settings).apply(current)
    result.settings = current
    return result


def _with_current_first(knob: Knob, current: Mapping[str, Value]) -> list[Candidate]:
    """The knob's candidates with the one matching the current settings first (it is 'kept');
    if none matches (the site sets its own value), that value is added as the kept candidate."""
    keys = [key for key, _ in knob.candidates[0].settings]
    now = tuple((key, current.get(key)) for key in keys)
    for cand in knob.candidates:
        if all(current.get(key) == value for key, value in cand.settings):
            return [cand, *(c for c in knob.candidates if c is not cand)]
    label = "site: " + ", ".join(f"{k.split('.', 1)[1]}={v}" for k, v in now if v is not None)
    return [Candidate(label, now), *knob.candidates]


def apply_settings(
    data: Mapping[str, Any], settings: Mapping[str, Value], why: Mapping[str, str] = {}
) -> dict[str, Any]:
    """A copy of site data (as loaded from YAML) with `settings` set (None: removed) and `why` lines.

    >>> apply_settings({"mca": {"btl": "self,tcp"}}, {"mca.btl_tcp_links": "2", "env.X": None})
    {'mca': {'btl': 'self,tcp', 'btl_tcp_links': '2'}}
    """
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for key, value in settings.items():
        section, name = key.split(".", 1)
        table = out.setdefault(section, {})
        if value is None:
            table.pop(name, None)
            if key in out.get("why", {}):
                out["why"] = {k: v for k, v in out["why"].items() if k != key}
        else:
            table[name] = value
    for key, line in why.items():
        out.setdefault("why", {})[key] = line
    return {k: v for k, v in out.items() if v != {} or k in data}


@dataclass(frozen=True)
class Workload:
    """What was measured: the program's allreduce (and the small-tensor one, where `small_bytes`),
    where, and how often."""

    bytes: int
    tensors: int
    ranks: int
    hosts: str
    repeat: int
    small_bytes: int | None = None
    small_tensors: int = 1


def _gib(value: float | None) -> str:
    return "failed" if value is None else f"{value:.3f}"


def report_lines(result: TuneResult) -> list[str]:
    """The table of every trial: knob, workload end, candidate, median busbw, paired ratio to the kept
    one on the same end (median, and the pairs it won), each run."""
    lines = [f"{'knob':<12} {'end':<5} {'candidate':<20} {'median GiB/s':>12} {'vs kept':>8} {'won':>5}  runs"]
    for knob, end in dict.fromkeys((t.knob, t.end) for t in result.trials):
        trials = [t for t in result.trials if t.knob == knob and t.end == end]
        for t in trials:
            pairs = paired_ratios(t, trials[0])
            ratio = "-" if not pairs else f"{statistics.median(pairs):.2f}"
            won = "-" if not pairs or t is trials[0] else f"{sum(r > 1.0 for r in pairs)}/{len(pairs)}"
            mark = " <- chosen" if result.winners.get(knob) == t.candidate else ""
            runs = " ".join(_gib(b) for b in t.busbw)
            lines.append(
                f"{knob:<12} {end:<5} {t.candidate:<20} {_gib(t.median):>12} {ratio:>8} {won:>5}  {runs}{mark}"
            )
    return lines


def changed_text(result: TuneResult) -> str:
    """The keys the tune changed, as the tuned copy's header and the CLI's last line name them.

    >>> changed_text(TuneResult(start={"env.A": "1"}, settings={"env.A": None, "mca.b": "2"}))
    'env.A=(default), mca.b=2'
    """
    return ", ".join(f"{k}={v if v is not None else '(default)'}" for k, v in result.changed().items()) or "nothing"


def _link_proposal(data: Mapping[str, Any], busbw_gib: float | None) -> list[str]:
    """A comment proposing network.link_gbps (what the launch gate judges busbw against) from the best
    busbw measured, for a site that has none: a floor of the link's speed, which the site may know better."""
    if busbw_gib is None or "link_gbps" in data.get("network", {}):
        return []
    gbps = busbw_gib * (1 << 30) * 8 / 1e9
    return [
        f"Proposed network.link_gbps: {gbps:.3g} (the best busbw here, in Gbit/s, for `launch --gate`; "
        "the link's rated speed where known)."
    ]


def _small_why(result: TuneResult, key: str, workload: Workload) -> str:
    """'; small end (64 x 4096 B): 0.010 -> 0.040 GiB/s (4.00x)' for a key a small_end knob set."""
    figures = result.small_gain(key)
    if figures is None or workload.small_bytes is None:
        return ""
    kept, chosen = figures
    gain = f" ({chosen / kept:.2f}x)" if kept and chosen else ""
    tensor = workload.small_bytes // workload.small_tensors
    return f"; small end ({workload.small_tensors} x {tensor} B): {_gib(kept)} -> {_gib(chosen)} GiB/s{gain}"


def tuned_site_text(
    data: Mapping[str, Any], name: str, source: str, result: TuneResult, workload: Workload, when: str
) -> str:
    """The tuned copy of a site as YAML: the winners set, a `why` line for each changed key, and the
    measured figures as comments at the top (the CLI validates the text before writing it)."""
    before, after = result.baseline(), result.final()
    gain = f" ({after / before:.2f}x)" if before and after else ""
    why = {
        key: f"hpcbundle tune {when}: busbw {_gib(before)} -> {_gib(after)} GiB/s{gain} at "
        f"{workload.bytes // _MIB} MiB on {workload.ranks} ranks{_small_why(result, key, workload)}"
        for key, v in result.changed().items()
        if v is not None
    }
    tuned = apply_settings({**data, "name": name}, result.changed(), why)
    header = [
        f"Tuned by `hpcbundle tune` on {when} from {source}.",
        f"Workload: allreduce of {workload.bytes // _MIB} MiB in {workload.tensors} float32 tensor(s), Horovod, "
        f"{workload.ranks} ranks on {workload.hosts}; each candidate run {workload.repeat} times, interleaved; "
        "busbw (nccl-tests).",
        *(
            [
                f"Small end (fusion, cycle): {workload.small_bytes} bytes in {workload.small_tensors} tensors; a value "
                f"is kept if it wins by more than {MIN_GAIN:.0%} at one end and loses no more than that at the other."
            ]
            if workload.small_bytes
            else []
        ),
        f"busbw: site as it was {_gib(before)} GiB/s, tuned {_gib(after)} GiB/s{gain}.",
        f"Changed: {changed_text(result)}",
        *_link_proposal(data, max((b for b in (before, after) if b is not None), default=None)),
        "",
        *report_lines(result),
        "",
        "Figures hold for these nodes and this network; run `hpcbundle tune` again after changes to either.",
    ]
    comments = "".join(f"# {line}".rstrip() + "\n" for line in header)
    return comments + yaml.safe_dump(tuned, sort_keys=False, width=120)
