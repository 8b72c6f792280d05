"""Collective and shape mismatches: ranks issued different collectives at one seq.

At the first seq of a group where the ranks' collectives differ, a different op means
a different program path (collective_mismatch: a rank-only barrier, a skipped
all_reduce); the same op with a different size or dtype is a shape_mismatch. The
culprit is the minority; with a tie (two ranks) it is the rank whose sequence realigns
with the others once its extra collective is skipped, or whose size is new to the run.
``detect_text`` does the same over NCCL's per-collective trace lines in text logs, opCount
by opCount of each communicator.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import NamedTuple

import numpy as np

from diag.analyze.detectors.common import fmt_ranks, index, make
from diag.analyze.inputs import Inputs
from diag.analyze.signals import Signal
from diag.analyze.collops import SIZE_RULED_OPS
from diag.analyze.collops import NO_INT
from diag.analyze.progress import CollOp, RankSeqs, common_seqs, groups_of
from diag.verdict import Basis, Category, Culprit, Finding, Severity, graded

SCATTER_OPS = {"reduce_scatter_tensor", "reduce_scatter_single", "_reduce_scatter_base"}
GATHER_OPS = SIZE_RULED_OPS - SCATTER_OPS
RULED_OPS = SIZE_RULED_OPS


def detect(inputs: Inputs) -> list[Finding]:
    for source in ("events", "fr"):
        groups = groups_of(inputs, source)
        found = [f for g, ranks in groups.items() for f in _size_rules(g, ranks)]
        found += [f for g, ranks in groups.items() for f in _first_divergence(g, ranks, source)]
        if found:
            return found
    return []


def _first_divergence(group: str, ranks: dict[int, RankSeqs], source: str
                      ) -> list[Finding]:
    if len(ranks) < 2:
        return []
    common = common_seqs(ranks)
    op_seq = _first_difference(ranks, common, lambda s, at: (s.ops[at],))
    # A heartbeat's pending row has no size; it can only differ by op.
    unsized = np.concatenate([s.seqs[s.col("in_numel") == NO_INT] for s in ranks.values()])
    sized = common[~np.isin(common, unsized)]
    size_seq = _first_difference(ranks, sized,
                                 lambda s, at: (s.col("in_numel")[at], s.dtypes[at]))
    if op_seq is not None and (size_seq is None or op_seq <= size_seq):
        return [_op_mismatch(group, op_seq, {r: ranks[r][op_seq] for r in ranks}, ranks, source)]
    if size_seq is not None:
        return [_size_mismatch(group, size_seq, {r: ranks[r][size_seq] for r in ranks}, ranks,
                               source)]
    return []


def _first_difference(ranks: dict[int, RankSeqs], seqs: np.ndarray, key) -> int | None:
    """The first seq at which the ``key`` columns of the rows differ between ranks,
    compared whole, column against column."""
    if not len(seqs):
        return None
    columns = iter(ranks.values())
    first_rank = next(columns)
    reference = key(first_rank, first_rank.at(seqs))
    first = None
    for rows in columns:
        differs = np.zeros(len(seqs), bool)
        for mine, theirs in zip(key(rows, rows.at(seqs)), reference):
            differs |= mine != theirs
        if differs.any():
            i = int(np.argmax(differs))
            first = i if first is None else min(first, i)
    return None if first is None else int(seqs[first])


def _op_mismatch(group, seq, rows, ranks, source) -> Finding:
    culprits = (_minority(rows, lambda row: row.op) or _extra_collective(seq, ranks)
                or _novel_op(seq, rows, ranks))
    seen = ", ".join(f"rank {r}: {rows[r].op}" for r in sorted(rows))
    extra = " (an extra collective on that rank only)" if culprits else ""
    return Finding(
        category=Category.COLLECTIVE_MISMATCH, severity=Severity.CRITICAL,
        **graded(Basis.MINORITY if culprits else Basis.LINE),
        title=f"ranks issued different collectives at seq {seq} of group {group}: {seen}{extra}",
        culprit=Culprit(ranks=tuple(culprits)),
        evidence=tuple(rows[r].evidence for r in sorted(rows)),
        fix=("make every rank issue the same collectives in the same order: a collective "
             "(barrier, checkpoint save, metric reduction, new_group) under `if rank == 0:` "
             "must move out of the condition or run on all ranks"),
        detector="mismatch", details={"group": group, "seq": seq, "source": source},
    )


def _size_mismatch(group, seq, rows, ranks, source) -> Finding:
    culprits = _minority(rows, lambda row: (row.in_numel, row.dtype)) or _novel_size(rows, ranks)
    seen = ", ".join(f"rank {r}: {rows[r].in_numel} x {rows[r].dtype}" for r in sorted(rows))
    op = next(iter(rows.values())).op
    return Finding(
        category=Category.SHAPE_MISMATCH, severity=Severity.CRITICAL,
        **graded(Basis.MINORITY if culprits else Basis.LINE),
        title=f"{op} seq {seq} of group {group} has different sizes across ranks: {seen}",
        culprit=Culprit(ranks=tuple(culprits)),
        evidence=tuple(rows[r].evidence for r in sorted(rows)),
        fix=("every rank must pass tensors of the same numel and dtype to one collective: "
             "look for data-dependent shapes (padding, variable-length batches, "
             "modality-dependent modules) feeding it on the named rank"),
        detector="mismatch", details={"group": group, "seq": seq, "source": source},
    )


def _minority(rows: dict[int, CollOp], key) -> list[int]:
    """Ranks whose value differs from a strict majority's; empty on a tie."""
    counts = Counter(key(row) for row in rows.values())
    (top, n), *rest = counts.most_common()
    if rest and rest[0][1] == n:
        return []
    return sorted(r for r, row in rows.items() if key(row) != top)


def _extra_collective(seq: int, ranks: dict[int, RankSeqs]) -> list[int]:
    """Ranks whose ops after ``seq`` line up with everyone else's ops from ``seq``: the
    op at ``seq`` was one the others never issued."""
    def ops(r, start):
        seqs = ranks[r]
        i = int(np.searchsorted(seqs.seqs, start))
        return seqs.ops[i:i + 8].tolist()

    out = []
    for r in ranks:
        others = [o for o in ranks if o != r]
        if all(_prefix_equal(ops(r, seq + 1), ops(o, seq)) for o in others):
            out.append(r)
    return sorted(out) if len(out) < len(ranks) else []


def _novel_op(seq: int, rows: dict[int, CollOp], ranks: dict[int, RankSeqs]) -> list[int]:
    """When nothing follows the divergence (the job died there), the extra collective is
    the one no rank issued anywhere else in the run, like a lone checkpoint barrier
    among the steps' all_reduces."""
    history = set(np.concatenate([s.ops[s.seqs != seq] for s in ranks.values()]).tolist())
    novel = [r for r in rows if _code_at(ranks[r], seq) not in history]
    return sorted(novel) if len(novel) < len(rows) else []


def _code_at(seqs: RankSeqs, seq: int) -> int:
    return int(seqs.ops[int(np.searchsorted(seqs.seqs, seq))])


def _prefix_equal(a: list, b: list) -> bool:
    n = min(len(a), len(b))
    return n > 0 and a[:n] == b[:n]


def _novel_size(rows: dict[int, CollOp], ranks: dict[int, RankSeqs]) -> list[int]:
    """Ranks whose size for this op never occurs anywhere else in the run."""
    seq = next(iter(rows.values())).seq
    some = next(r for r in rows if r in ranks)
    code = _code_at(ranks[some], seq)
    same_op = [(s.col("in_numel")[s.ops == code], s.dtypes[s.ops == code])
               for s in ranks.values()]
    numels = np.concatenate([n for n, _ in same_op])
    dtypes = np.concatenate([d for _, d in same_op])

    def seen(r: int) -> int:
        at = int(np.searchsorted(ranks[r].seqs, seq))
        n, d = ranks[r].col("in_numel")[at], ranks[r].dtypes[at]
        return int(np.sum((numels == n) & (dtypes == d)))

    novel = [r for r in rows if seen(r) == 1]
    return sorted(novel) if len(novel) < len(rows) else []


def _size_rules(group: str, ranks: dict[int, RankSeqs]) -> list[Finding]:
    """all_gather's output is group_size x its input, reduce_scatter's input is
    group_size x its output; a rank breaking that passed a wrong-sized buffer."""
    for r, seqs in sorted(ranks.items()):
        for i in seqs.with_ops(RULED_OPS):
            row = seqs.row(int(i))
            if _breaks_size_rule(row):
                return [Finding(
                    category=Category.SHAPE_MISMATCH, severity=Severity.CRITICAL,
                    **graded(Basis.EMITTER),
                    title=(f"rank {r}: {row.op} seq {row.seq} of group {group} has input "
                           f"{row.in_numel} and output {row.out_numel} elements, which "
                           f"breaks the size rule for a group of {row.group_size}"),
                    culprit=Culprit(ranks=(r,)), evidence=(row.evidence,),
                    fix=f"size the output of {row.op} as group_size x input (all_gather) "
                        "or the input as group_size x output (reduce_scatter)",
                    detector="mismatch", details={"group": group, "seq": row.seq})]
    return []


def _breaks_size_rule(row: CollOp) -> bool:
    if not (row.group_size and row.in_numel is not None and row.out_numel is not None):
        return False
    if row.op in GATHER_OPS:
        return row.out_numel != row.in_numel * row.group_size
    if row.op in SCATTER_OPS:
        return row.in_numel != row.out_numel * row.group_size
    return False


# =======================================================================================
# From text logs: NCCL's per-collective trace (catalog/nccl_coll.py)
#
# Each rank prints one line per collective with the communicator's opCount. The same
# opCount of one communicator is the same collective slot on every rank, so the first
# opCount where the ranks' ops (or sizes) differ is where their programs diverged.

TEXT_DETECTOR = "logs_mismatch"
_P2P_OPS = frozenset({"Send", "Recv"})  # a pair's two sides differ by design
_REDUCING_OPS = frozenset({"AllReduce", "Reduce", "ReduceScatter"})
_ROOTED_OPS = frozenset({"Broadcast", "Reduce", "Gather", "Scatter"})
_BUILTIN_REDOPS = 5  # ncclRedOp_t: sum, prod, max, min, avg; above are per-comm handles
# ncclDataType_t (src/nccl.h.in)
_DTYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64",
           "bfloat16", "fp8e4m3", "fp8e5m2")
_FAILING_KINDS = ("watchdog_timeout", "watchdog_status", "exception", "gloo_error", "nccl_error",
                  "store_wait_timeout", "nccl_warn")


class TraceRow(NamedTuple):
    """One traced collective of one process, placed in its communicator (a tuple: a long
    trace makes many)."""

    proc: tuple  # (host, pid): the process that printed it
    comm: tuple  # the communicator, the same key on every rank of it
    opcount: int
    key: tuple  # what every rank must agree on at this opCount
    cut: bool  # the paste cut the line short: only its op, count and datatype are known
    sig: Signal


def detect_text(inputs) -> list[Finding]:
    idx = index(inputs)
    sigs = idx.of("nccl_coll")
    if not sigs:
        return []
    rows = trace_rows(sigs, idx.of("nccl_comm"))
    ranks = trace_ranks(sigs, idx.of("nccl_comm"))
    comms = _by_comm(rows)
    found = [f for comm, procs in comms.items() for f in _trace_divergence(comm, procs, ranks)]
    if found or not idx.has(*_FAILING_KINDS):
        return found[:1]
    return [f for comm, procs in comms.items() for f in _trace_laggard(procs, ranks)][:1]


def trace_rows(sigs: list[Signal], comm_sigs: list[Signal]) -> list[TraceRow]:
    """The traced collectives, each keyed to its communicator: NCCL's commId when the init
    lines give it for every communicator, else (nranks, the order in which the process
    first used a communicator of that size), since every rank creates its communicators
    in the same order."""
    pairs: dict[tuple, int] = {}  # (proc, comm pointer) -> nranks, in first-use order
    for s in sigs:
        f = s.fields
        if f.get("nranks") is not None:
            pairs.setdefault(((s.host, f.get("pid")), f["comm"]), f["nranks"])
    keys = _comm_keys(pairs, comm_sigs)
    rows = []
    for s in sigs:
        f = s.fields
        proc = (s.host, f.get("pid"))
        cut = f.get("nranks") is None
        comm = _cut_comm(proc, keys) if cut else keys[(proc, f["comm"])]
        if comm is not None:
            rows.append(TraceRow(proc, comm, f["opcount"], _row_key(f), cut, s))
    return rows


def _comm_keys(pairs: dict[tuple, int], comm_sigs: list[Signal]) -> dict[tuple, tuple]:
    ids = {((s.host, s.fields.get("pid")), s.fields.get("comm")): s.fields.get("commid")
           for s in comm_sigs}
    if pairs and all(ids.get(pair) for pair in pairs):
        return {pair: ("id", ids[pair]) for pair in pairs}
    order: dict[tuple, list] = defaultdict(list)  # (proc, nranks) -> comm pointers in order
    for (proc, comm), nranks in pairs.items():
        order[(proc, nranks)].append(comm)
    return {(proc, comm): ("n", nranks, order[(proc, nranks)].index(comm))
            for (proc, comm), nranks in pairs.items()}


def _proc(sig: Signal) -> tuple:
    return (sig.host, sig.fields.get("pid"))


def _cut_comm(proc: tuple, keys: dict) -> tuple | None:
    """A line cut before its comm field belongs to its process's only communicator, or
    to the job's only one."""
    mine = {k for (p, _), k in keys.items() if p == proc}
    if len(mine) == 1:
        return mine.pop()
    every = set(keys.values())
    return every.pop() if not mine and len(every) == 1 else None


def _row_key(f: dict) -> tuple:
    op = f["op"]
    if op in _P2P_OPS:
        return ("p2p",)
    count = None if op.endswith("V") else f["count"]  # the V variants' counts are per rank
    redop = f.get("redop") if op in _REDUCING_OPS and (f.get("redop") or 0) < _BUILTIN_REDOPS \
        else None
    return (op, count, f["dtype"], redop, f.get("root") if op in _ROOTED_OPS else None)


def _by_comm(rows: list[TraceRow]) -> dict[tuple, dict[tuple, dict[int, list[TraceRow]]]]:
    """comm -> process -> opCount -> its rows, in line order."""
    out: dict = {}
    for row in rows:  # in line order already
        out.setdefault(row.comm, {}).setdefault(row.proc, {}).setdefault(row.opcount,
                                                                          []).append(row)
    return out


# ---------------------------------------------------------------------------------------
# Which rank printed a trace line


def trace_ranks(sigs: list[Signal], comm_sigs: list[Signal]) -> dict[tuple, int]:
    """(host, pid) -> rank, from the best evidence each process has: torch's or a
    launcher's rank prefix (or the pid of a world init line), the rank its communicator's
    init line gives, RCCL's globalrank, a per-rank file name the lines were quoted from,
    and last the CUDA device, only on one host where every process has its own."""
    largest: dict[tuple, tuple] = {}  # the largest communicator's rank is the global one
    for s in comm_sigs:
        proc = _proc(s)
        if s.fields["nranks"] > largest.get(proc, (0, None))[0]:
            largest[proc] = (s.fields["nranks"], s.fields["comm_rank"])
    ranks = {proc: rank for proc, (_, rank) in largest.items()}
    first: dict[tuple, Signal] = {}  # the first line of each process
    for s in sigs:
        proc = (s.host, s.fields.get("pid"))
        first.setdefault(proc, s)
        if s.rank is not None:
            ranks[proc] = s.rank
        elif s.fields.get("comm_rank") is not None:
            ranks.setdefault(proc, s.fields["comm_rank"])
    for guess in (_quoted_numbers, _distinct_devices):
        found = guess([s for proc, s in first.items() if proc not in ranks])
        if found:
            ranks.update(found)
            break
    return ranks


def _quoted_numbers(sigs: list[Signal]) -> dict[tuple, int]:
    """Lines quoted from per-rank files ("rank3.log:", "LOG1.3.txt:", "out.3:"): the one
    number that varies between the file names, when each process has its own file."""
    names = {}
    for s in sigs:
        names.setdefault(_proc(s), s.fields.get("quoted_from"))
    if len(names) < 2 or None in names.values() or len(set(names.values())) < len(names):
        return {}
    parts = {proc: re.split(r"(\d+)", name) for proc, name in names.items()}
    shapes = {tuple(p[0::2]) for p in parts.values()}
    if len(shapes) != 1:
        return {}
    numbers = list(zip(*(p[1::2] for p in parts.values())))
    varying = [i for i, column in enumerate(numbers) if len(set(column)) > 1]
    if len(varying) != 1:
        return {}
    return {proc: int(p[1::2][varying[0]]) for proc, p in parts.items()}


def _distinct_devices(sigs: list[Signal]) -> dict[tuple, int]:
    """[dev] is the CUDA device, not the rank; on one host with one device per process it
    is the local rank, which there is the rank."""
    devs = {}
    for s in sigs:
        devs.setdefault(_proc(s), s.fields.get("dev"))
    hosts = {proc[0] for proc in devs}
    if len(hosts) != 1 or None in devs.values() or len(set(devs.values())) < len(devs):
        return {}
    return dict(devs)


# ---------------------------------------------------------------------------------------
# Where the ranks' traces part


def _trace_divergence(comm: tuple, procs: dict, ranks: dict[tuple, int]) -> list[Finding]:
    if len(procs) < 2:
        return []
    common = sorted(set.intersection(*(set(ops) for ops in procs.values())))
    for n, opcount in enumerate(common):
        keys = _slot_keys(procs, opcount)
        if len(set(keys.values())) > 1:
            later = [_slot_agree(procs, c) for c in common[n + 1:]]
            return [_divergence_finding(comm, opcount, procs, keys, ranks, later)]
    return []


def _slot_keys(procs: dict, opcount: int) -> dict[tuple, tuple]:
    """Each process's collectives at one opCount (several when a group shares it), on the
    fields every line of the slot shows."""
    cut = any(r.cut for ops in procs.values() for r in ops[opcount])
    return {proc: _slot_key(ops[opcount], cut) for proc, ops in procs.items()}


def _slot_key(rows: list[TraceRow], cut: bool) -> tuple:
    keys = [r.key[:3] if cut else r.key for r in rows if r.key != ("p2p",)]
    return tuple(keys) + ((("p2p",),) if len(keys) < len(rows) else ())


def _slot_agree(procs: dict, opcount: int) -> bool:
    return len(set(_slot_keys(procs, opcount).values())) == 1


def _odd_procs(keys: dict[tuple, tuple], ranks: dict[tuple, int]) -> tuple[list, bool]:
    """The processes whose slot differs from the majority's; on a tie, from the lowest
    rank's (the reference a reader compares against). (odd ones, by a majority?)"""
    counts = Counter(keys.values())
    (top, n), *rest = counts.most_common()
    if rest and rest[0][1] == n:
        reference = min(keys, key=lambda p: (ranks.get(p, 1 << 30), str(p)))
        top = keys[reference]
    return [p for p, k in keys.items() if k != top], not (rest and rest[0][1] == n)


def _divergence_finding(comm, opcount, procs, keys, ranks, later: list[bool]) -> Finding:
    odd, majority = _odd_procs(keys, ranks)
    ops = {k[0] for key in keys.values() for k in key}
    dtypes = {k[2] for key in keys.values() for k in key if len(k) > 2}
    sizes_only = len(ops) == 1 and len(dtypes) <= 1 and (not later or any(later))
    category = Category.SHAPE_MISMATCH if sizes_only else Category.COLLECTIVE_MISMATCH
    culprits = sorted(ranks[p] for p in odd if p in ranks)
    sides = _describe_sides(keys, ranks)
    nranks = next(iter(procs.values()))[opcount][0].sig.fields.get("nranks")
    what = "the same collective with different sizes" if sizes_only else "different collectives"
    title = (f"ranks issued {what} at NCCL opCount {opcount:x} of {_comm_name(comm, nranks)}: "
             f"{sides}")
    fix = (_TRACE_FIX_SIZES if sizes_only else _TRACE_FIX_ORDER).format(
        who=fmt_ranks(culprits) if culprits else "the odd rank")
    evidence = [row.sig for p in [*odd, *[p for p in keys if p not in odd][:3]]
                for row in procs[p][opcount][:2]]
    return make(category, title, fix, TEXT_DETECTOR, Basis.MINORITY if majority else Basis.LINE,
                evidence,
                ranks=culprits, hosts=[p[0] for p in odd], severity=Severity.CRITICAL,
                details={"opcount": opcount, "comm": list(comm), "majority": majority})


def _comm_name(comm: tuple, nranks: int | None) -> str:
    size = f"a communicator of {nranks} ranks" if nranks else "a communicator"
    return f"{size} (commId {comm[1]})" if comm[0] == "id" else size


def _describe_sides(keys: dict[tuple, tuple], ranks: dict[tuple, int]) -> str:
    groups: dict[tuple, list] = defaultdict(list)
    for proc, key in keys.items():
        groups[key].append(ranks.get(proc, f"pid {proc[1]}"))
    parts = []
    for key, who in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        named = fmt_ranks(who) if all(isinstance(w, int) for w in who) else ", ".join(map(str, who))
        parts.append(f"{named}: {' + '.join(_describe_op(k) for k in key) or 'nothing'}")
    return "; ".join(parts)


def _describe_op(key: tuple) -> str:
    if key == ("p2p",):
        return "Send/Recv"
    op, count, dtype, *rest = key
    root = rest[1] if len(rest) > 1 else None
    name = _DTYPES[dtype] if 0 <= dtype < len(_DTYPES) else f"datatype {dtype}"
    shown = f"{count} x {name}" if count is not None else name
    return f"{op}({shown}{f', root {root}' if root is not None else ''})"


def _trace_laggard(procs: dict, ranks: dict[tuple, int]) -> list[Finding]:
    """A failing job whose ranks stopped at one opCount but for a few that stopped
    earlier: those never issued the collective the others wait in."""
    if len(procs) < 3:
        return []
    last = {proc: max(ops) for proc, ops in procs.items()}
    top = max(last.values())
    behind = [p for p, n in last.items() if n < top]
    if not behind or len(behind) * 2 >= len(procs):
        return []
    culprits = sorted(ranks[p] for p in behind if p in ranks)
    waiting = sorted(ranks[p] for p in last if p not in behind and p in ranks)
    others = fmt_ranks(waiting) if waiting else "the others"
    title = (f"{fmt_ranks(culprits) if culprits else 'some ranks'} stopped at NCCL opCount "
             f"{min(last[p] for p in behind):x} while {others} went on to {top:x}")
    sigs = [procs[p][last[p]][-1].sig for p in [*behind, *[p for p in last if p not in behind][:3]]]
    return [make(Category.RANK_HANG, title, _TRACE_FIX_HANG.format(
        who=fmt_ranks(culprits) if culprits else "the rank behind"),
        TEXT_DETECTOR, Basis.LINE, sigs,
        ranks=culprits, hosts=[p[0] for p in behind])]


_TRACE_FIX_ORDER = (
    "Make every rank issue the same collectives in the same order: {who} issued another "
    "collective (or another tensor) at this slot. Look for rank- or data-dependent branches "
    "around collectives, and for an order that differs between processes (buckets or "
    "parameters grouped by an unordered key); TORCH_DISTRIBUTED_DEBUG=DETAIL names the "
    "first mismatching call.")
_TRACE_FIX_SIZES = (
    "{who} passed a tensor of another size to the same collective: make the shapes agree "
    "(pad variable-length data, or exchange sizes first).")
_TRACE_FIX_HANG = (
    "{who} stopped issuing collectives while the others went on: look at its stack "
    "(py-spy dump --pid PID) for what it waits on (a DataLoader worker, I/O, a "
    "rank-conditional path).")
