"""A namespace cluster whose nodes run a real OpenSSH server, reached with key auth as on a real cluster.

The environment-inheriting rsh agent of NetnsCluster runs a remote command inside the caller's
environment; sshd does not: the remote command gets root's login environment as sshd builds it
(sshd's default PATH, the login shell's rc files), so a program that only works because the
launching shell activated a venv fails on the other nodes, as it does on a cluster.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from .netns_cluster import NetnsCluster, netns_pids
from .procs import kill_pids, wait_until

SSHD = "/usr/sbin/sshd"
# sshd's privilege-separation directory, which the Debian service creates when it starts.
PRIVSEP_DIR = Path("/run/sshd")


class SshCluster(NetnsCluster):
    """NetnsCluster with `sshd -D` on every node and a client set-up in the cluster's workdir.

    Host names resolve to mgmt0, the management network, which here carries traffic (ssh and
    the launcher's daemons reach the nodes over it) while MPI stays on data0 where the site says
    so. Every key lives in `workdir/ssh`: a generated client key (authorized on every node), one
    host key per node, a known_hosts listing them (StrictHostKeyChecking yes), and a client
    config, so nothing reads or writes ~/.ssh::

        with SshCluster(3) as c:
            c.run("node1", [*c.ssh_argv(), "node2", "hostname"])        # node2
            c.run("node1", ["mpirun", *c.mpirun_ssh_args(), ...])        # Open MPI over real ssh

    sshd processes are stopped by PID at teardown (with everything else the cluster started).
    """

    def __init__(self, n_nodes: int = 3, **kwargs) -> None:
        super().__init__(n_nodes, **kwargs)
        self.sshd_pids: dict[str, int] = {}

    @property
    def ssh_dir(self) -> Path:
        return self.workdir / "ssh"

    @property
    def ssh_config(self) -> Path:
        """The client config: `ssh -F THIS node2 CMD` from any node."""
        return self.ssh_dir / "config"

    def ssh_argv(self) -> list[str]:
        """The ssh client with this cluster's config, keys and known_hosts."""
        return ["ssh", "-F", str(self.ssh_config)]

    def rsh_agent_value(self) -> str:
        """plm_rsh_agent for Open MPI: real ssh with this cluster's client config."""
        return f"ssh -F {self.ssh_config}"

    def mpirun_ssh_args(self) -> list[str]:
        """mpirun options that start remote daemons through real ssh (Open MPI's tree spawn stays on)."""
        return ["--mca", "plm_rsh_agent", self.rsh_agent_value()]

    # --- lifecycle ---------------------------------------------------------------------------
    def _plug(self, node: str, port: str, bridge: str, iface: str, *, isolated: bool) -> None:
        """As NetnsCluster, but the management network carries traffic: it is how ssh reaches the nodes."""
        super()._plug(node, port, bridge, iface, isolated=False)

    def _write_files(self) -> None:
        super()._write_files()
        lines = ["127.0.0.1 localhost"] + [f"{self.address(n, self.MGMT_IFACE)} {n}" for n in self.nodes]
        self.hosts_file.write_text("\n".join(lines) + "\n")
        self._write_ssh_files()

    def _write_ssh_files(self) -> None:
        """Client key, per-node host keys, authorized_keys, known_hosts, sshd and client configs."""
        ssh = self.ssh_dir
        ssh.mkdir(mode=0o700)
        _keygen(ssh / "id_ed25519", "hpcbundle-testbed client")
        (ssh / "authorized_keys").write_text((ssh / "id_ed25519.pub").read_text())
        known = []
        for node in self.nodes:
            key = ssh / f"host-{node}"
            _keygen(key, f"host {node}")
            names = ",".join([node, self.address(node, self.MGMT_IFACE), self.address(node)])
            known.append(f"{names} {' '.join(key.with_suffix('.pub').read_text().split()[:2])}")
        (ssh / "known_hosts").write_text("\n".join(known) + "\n")
        (ssh / "sshd_config").write_text(
            "\n".join(
                [
                    "Port 22",
                    "ListenAddress 0.0.0.0",
                    f"AuthorizedKeysFile {ssh}/authorized_keys",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    "UsePAM no",
                    # mkdtemp's parent is world-writable /tmp, which StrictModes refuses.
                    "StrictModes no",
                    "PermitUserEnvironment no",
                    "X11Forwarding no",
                    "PrintMotd no",
                    "PrintLastLog no",
                    "MaxStartups 100",
                    "MaxSessions 100",
                    "",
                ]
            )
        )
        self.ssh_config.write_text(
            "\n".join(
                [
                    "Host *",
                    "    User root",
                    f"    IdentityFile {ssh}/id_ed25519",
                    "    IdentitiesOnly yes",
                    f"    UserKnownHostsFile {ssh}/known_hosts",
                    "    GlobalKnownHostsFile /dev/null",
                    "    StrictHostKeyChecking yes",
                    "    BatchMode yes",
                    "    ConnectTimeout 5",
                    "    LogLevel ERROR",
                    "",
                ]
            )
        )

    def _open(self) -> None:
        super()._open()
        PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
        for node in self.nodes:
            self._start_sshd(node)
        for node in self.nodes:
            self._wait_sshd(node)

    def _start_sshd(self, node: str) -> None:
        log = self.ssh_dir / f"sshd-{node}.log"
        log.write_text("")
        argv = [
            SSHD,
            "-D",
            "-e",
            "-f",
            str(self.ssh_dir / "sshd_config"),
            "-o",
            f"HostKey={self.ssh_dir / f'host-{node}'}",
            "-o",
            f"PidFile={self.ssh_dir / f'sshd-{node}.pid'}",
        ]
        self.sshd_pids[node] = self.start(node, argv, log=log).pid

    def _wait_sshd(self, node: str) -> None:
        log = self.ssh_dir / f"sshd-{node}.log"
        if not wait_until(lambda: "Server listening on" in log.read_text(), timeout=15):
            raise RuntimeError(f"{self.prefix}: sshd on {node} did not start: {log.read_text().strip()[-400:]}")

    def lose_node(self, node: str) -> None:
        """Every process of `node` SIGKILLed at once, its sshd with them: as when a node dies, its
        ssh sessions drop and nothing there answers until `revive_node`."""
        kill_pids(lambda: netns_pids(self.netns(node)), grace=0.0)
        self.sshd_pids.pop(node, None)

    def revive_node(self, node: str) -> None:
        """`node` back after `lose_node`: its sshd listens again."""
        self._start_sshd(node)
        self._wait_sshd(node)

    def close(self) -> None:
        """Stop every sshd by its PID (the parent of its sessions), then tear the cluster down."""
        for node, pid in list(self.sshd_pids.items()):
            kill_pids(lambda pid=pid: [pid], grace=2.0)
            del self.sshd_pids[node]
        super().close()


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )
