"""Fix texts for faults that more than one command finds: check-env before the job, from
the environment, and analyze after it, from the logs, say the same thing once from here.

Each is a clause (lower case, no final stop) that reads in check-env's fix column;
``sentence`` makes one a sentence for a report. Texts that only one check or detector
gives stay next to it.
"""

from __future__ import annotations

# --- socket interfaces ------------------------------------------------------------------

GLOO_IFNAME_MISSING = (
    "set GLOO_SOCKET_IFNAME to the interface on the nodes' shared network, one that exists "
    "on every node (`ip -br addr` lists them; gloo takes exact names, no prefixes), or "
    "unset it")

NCCL_IFNAME_NO_MATCH = (
    "set NCCL_SOCKET_IFNAME to a prefix of the interface on the nodes' shared network, e.g. "
    "eth0 or ib0 (`ip -br addr` lists them; '^' excludes, '=' is exact), or unset it; in a "
    "container, run with --net=host")


def loopback_iface(var: str, interfaces: str = "") -> str:
    """A multi-node job would bootstrap over loopback. ``interfaces``: the node's, shown."""
    shown = f" (interfaces: {interfaces})" if interfaces else ", e.g. eth0"
    return (f"set {var} to the interface that reaches the other nodes{shown}: loopback is "
            "private to each node")


def hostname_loopback(hostname: str = "the hostname", interfaces: str = "") -> str:
    """The hostname resolves to loopback, so gloo tells its peers to connect there."""
    shown = f" (interfaces: {interfaces})" if interfaces else ""
    return (f"map {hostname} to this node's routable address in /etc/hosts (Debian's "
            "'127.0.1.1 <host>' line is the usual cause), or set GLOO_SOCKET_IFNAME (and "
            f"NCCL_SOCKET_IFNAME) to the interface that reaches the other nodes{shown}")


def hostname_unresolved(hostname: str = "<its hostname>") -> str:
    return (f"add `<this node's IP> {hostname}` to /etc/hosts or DNS (in a container, pass "
            "--hostname with a matching --add-host), or set MASTER_ADDR to an IP")


# --- the rendezvous: MASTER_ADDR, MASTER_PORT, the ports between nodes -------------------

MASTER_ADDR_HOST = (
    "set MASTER_ADDR (or --master-addr / --rdzv-endpoint) to the IP or resolvable hostname "
    "of the node that runs rank 0, reachable from every node (under Slurm: "
    "MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1))")

MASTER_ADDR_RESOLVE = (
    "use rank 0's IP for MASTER_ADDR, or add (or correct) the node names in DNS or /etc/hosts "
    "on every node (in containers: --add-host or the host's /etc/hosts)")

STORE_NOT_LISTENING = (
    "make MASTER_ADDR and MASTER_PORT the same on every node, naming the node and port "
    "rank 0's store binds (torchrun's, under torchrun); rank 0 must have started and not "
    "crashed")

FIREWALL = (
    "open the ports between the nodes (NCCL and Gloo use random ephemeral ports besides "
    "MASTER_PORT): disable firewalld/ufw on the cluster network or allow the subnet, e.g. "
    "`firewall-cmd --permanent --zone=trusted --add-source=<subnet>`; check with a TCP "
    "connect from one node to another on a high port")


# --- the same on every node ---------------------------------------------------------------

def env_skew(var: str) -> str:
    return (f"set {var} to the same value on every rank: export it in the job script so the "
            "launcher passes it to every rank (a node's profile may set it otherwise)")


def versions(component: str) -> str:
    return (f"install one {component} version on every node (the same container image, venv, "
            "module or wheel); mixed versions can hang or fail in init and in collectives")


# --- GPUs and host resources ----------------------------------------------------------------

SHARED_GPU = (
    "give each local rank its own GPU: call torch.cuda.set_device(LOCAL_RANK) before "
    "init_process_group (or give each rank its own CUDA_VISIBLE_DEVICES), and check "
    "CUDA_VISIBLE_DEVICES and --nproc-per-node against each node's GPUs")


def too_few_gpus(ranks: int | None = None, gpus: int | None = None) -> str:
    """More local ranks than visible GPUs; the counts, when known, are shown."""
    more = f"list {ranks} GPUs" if ranks else "list more GPUs"
    fewer = (f"at most {gpus} ranks per node (--nproc-per-node)" if gpus else
             "no more ranks per node (--nproc-per-node) than it has GPUs")
    return (f"{more} in CUDA_VISIBLE_DEVICES or start {fewer}; use LOCAL_RANK (not RANK) as "
            "the device index")


SHM = ("give /dev/shm more room: run the container with --shm-size=16g or --ipc=host "
       "(Kubernetes: an emptyDir with medium: Memory on /dev/shm)")

EXPOSE_IB = ("expose the HCAs to the container (--device=/dev/infiniband, or Slurm/pyxis "
             "--container-mounts /dev/infiniband)")

LIBIBVERBS = "install rdma-core / libibverbs (libibverbs1) in the image"


def sentence(clause: str) -> str:
    """A clause as a report's sentence: capitalised, with a final stop."""
    return clause[:1].upper() + clause[1:] + ("" if clause.endswith(".") else ".")
