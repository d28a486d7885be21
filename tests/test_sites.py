"""Site files: every shipped site loads; every bad one is refused in one line naming file, key and
fix, with exit status 2, no traceback and nothing written."""

from __future__ import annotations

import pytest
import yaml

from hpcbundle.config.errors import UserError
from hpcbundle.knowledge.knobs import GPU_CYCLE_TIME, GPU_CYCLE_TIME_WHY
from hpcbundle.launch import load_site
from hpcbundle.rules.engine import Facts
from hpcbundle.rules.loading import load_failures

from .helpers import SHIPPED, SITES, bad_site, hpcbundle


@pytest.mark.parametrize("name", SHIPPED)
def test_each_shipped_site_loads_without_problems(name):
    site = load_site(name, SITES)
    assert site.name == name and load_failures(Facts(site=site)) == []


def test_sites_command_lists_every_shipped_site():
    result = hpcbundle("sites")
    assert result.returncode == 0, result.stderr
    assert sorted(line.split()[0] for line in result.stdout.splitlines()) == SHIPPED


def test_shipped_gpu_sites_draft_horovods_cycle_time_from_the_h200_figures():
    """Every GPU site sets HOROVOD_CYCLE_TIME=0.1 with the measurement as its why, but seed-v100 (the seed's
    documented line, argv for argv)."""
    gpu_sites = [name for name in SHIPPED if load_site(name, SITES).node.gpus]
    drafted = {
        name: (site.env.get("HOROVOD_CYCLE_TIME"), site.why.get("env.HOROVOD_CYCLE_TIME"))
        for name in gpu_sites
        if (site := load_site(name, SITES))
    }
    assert drafted == {
        name: (None, None) if name == "seed-v100" else (GPU_CYCLE_TIME, GPU_CYCLE_TIME_WHY) for name in gpu_sites
    }
    assert len(gpu_sites) == 6


BAD_SITES = [
    # (base site, edit, the one line expected after "bad.yaml: ")
    ("ib-v100", {"launcher.nmae": "mpirun"}, "launcher.nmae: unknown key (did you mean name?)"),
    ("ib-v100", {"contianer": {"runtime": "singularity"}}, "contianer: unknown key (did you mean container?)"),
    ("ib-v100", {"launcher.name": "mpirn"}, "launcher.name: unknown launcher 'mpirn' (did you mean mpirun?)"),
    (
        "ib-v100",
        {"container.runtime": "singulrity"},
        "container.runtime: unknown container runtime 'singulrity' (did you mean singularity?)",
    ),
    (
        "ib-v100",
        {"launcher.name": "mpiexec.hydra", "launcher.single_dash": False},
        "launcher.name: mpiexec.hydra cannot start openmpi ranks (mpi.flavour) "
        "(use one of: horovodrun, mpirun, mpirun5, srun)",
    ),
    (
        "ib-v100",
        {"mpi.version": "5.0.3"},
        "launcher.name: mpirun speaks Open MPI 3/4 syntax; this site has Open MPI 5.0.3 (use name: mpirun5)",
    ),
    (
        "roce-h100-ompi5",
        {"launcher.single_dash": True},
        "launcher.single_dash: Open MPI 5's mpirun rejects single-dash long options such as -bind-to "
        "(drop single_dash)",
    ),
    (
        "roce-h100-ompi5",
        {"launcher": {"name": "horovodrun"}, "mca": {}, "why": {}},
        "launcher.name: horovodrun passes -bind-to none -map-by slot, which Open MPI 5 rejects "
        "(set launcher.gloo: true or use name: mpirun5)",
    ),
    (
        "eth-a100-slurm",
        {"launcher.gloo": True},
        "launcher.gloo: srun has no such option (drop it or pick a launcher that has it)",
    ),
    (
        "stampede2-knl",
        {"mca": {"btl": "self,tcp"}},
        "mca: MCA parameters are Open MPI's; this site's MPI is intelmpi (set the MPI's own variables in env)",
    ),
    (
        "local-charliecloud",
        {"container.gpu": True, "node.gpus": 1, "node.gpu_model": "T4"},
        "container.gpu: ch-run has no GPU flag "
        "(inject the driver once with `ch-fromhost --nvidia IMAGE` and drop container.gpu)",
    ),
    ("local", {"container.gpu": True}, "container.gpu: the site has no GPUs (node.gpus: 0) (set node.gpus or drop it)"),
    (
        "ib-v100",
        {"node.gpus": "two"},
        "node.gpus: expected a whole number, got text of 3 characters (write a whole number without quotes)",
    ),
    ("ib-v100", {"mca.pml": 1.1}, "mca.pml: write 1.1 as a quoted string: YAML reads 1.10 as the number 1.1"),
    ("local", {"faults.signal_before_end": 0}, "faults.signal_before_end: expected more than 0, got a number (0)"),
    ("local", {"faults.requeue": "sometimes"}, "faults.requeue: expected true or false, got text of 9 characters"),
    (
        "ib-v100",
        {"slurm.time": "two hours"},
        "slurm.time: 'two hours' is not a SLURM time like 30, 02:00:00 or 1-00:00:00",
    ),
    ("ib-v100", {"name": "other"}, "name: is 'other' but the file is bad.yaml (set name: bad or rename the file)"),
    (
        "eth-a100-slurm",
        {"env.NCCL_IB_HCA": "mlx5_0"},
        "env.NCCL_IB_HCA: is an InfiniBand/RoCE adapter setting, but network.fabric is ethernet "
        "(drop it, or set network.fabric to infiniband or roce if the nodes have that fabric)",
    ),
    (
        "local",
        {"env.UCX_NET_DEVICES": "mlx5_0:1"},
        "env.UCX_NET_DEVICES: names the adapter port mlx5_0:1, but network.fabric is loopback (name a TCP interface "
        "such as eth0, or drop it, or set network.fabric to infiniband or roce if the nodes have that fabric)",
    ),
    (
        "eth-a100-slurm",
        {"mca.btl": "openib,self"},
        "mca.btl: selects the openib btl (InfiniBand verbs), but network.fabric is ethernet (use self,vader,tcp, or "
        "drop it, or set network.fabric to infiniband or roce if the nodes have that fabric)",
    ),
    (
        "local",
        {"mca.btl_openib_allow_ib": "1"},
        "mca.btl_openib_allow_ib: is a setting of the openib btl (InfiniBand verbs), but network.fabric is loopback",
    ),
]


@pytest.mark.parametrize("base, edit, line", BAD_SITES)
def test_bad_site_is_refused_in_one_line_and_nothing_is_written(tmp_path, base, edit, line):
    site = bad_site(tmp_path, base, edit)
    out = tmp_path / "out" / "job.sh"
    for args in (
        ["launch", "--np", "1", "--", "python3", "t.py"],
        ["sbatch", "--nodes", "1", "-o", str(out), "--", "python3", "t.py"],
    ):
        result = hpcbundle(args[0], "--site", str(site), *args[1:])
        assert result.returncode == 2, result.stdout + result.stderr
        assert result.stdout == "" and "Traceback" not in result.stderr
        assert result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith(f"hpcbundle: error: {site}: {line}"), result.stderr
    assert not out.parent.exists()


def test_why_must_name_an_existing_key(tmp_path):
    data = yaml.safe_load((SITES / "ib-v100.yaml").read_text())
    data.update(name="bad", why={"env.NCCL_SOCKT_IFNAME": "typo"})
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(UserError) as caught:
        load_site(str(tmp_path / "bad.yaml"), SITES)
    assert caught.value.lines == (
        f"{tmp_path}/bad.yaml: why.env.NCCL_SOCKT_IFNAME: names no key this site sets "
        "(use a dotted key the site sets, such as env.NCCL_SOCKET_IFNAME or wrappers[0])",
    )


def test_several_problems_are_reported_together(tmp_path):
    site = bad_site(tmp_path, "ib-v100", {"launcher.nmae": "x", "node.cores": 0})
    result = hpcbundle("launch", "--site", str(site), "--np", "1", "--", "python3", "t.py")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 2 and "launcher.nmae" in result.stderr and "node.cores" in result.stderr


def test_a_yaml_number_for_an_mca_value_becomes_a_string(tmp_path):
    site = load_site(str(bad_site(tmp_path, "local", {"mca": {"plm_rsh_no_tree_spawn": 1}})), SITES)
    assert site.mca == {"plm_rsh_no_tree_spawn": "1"}
