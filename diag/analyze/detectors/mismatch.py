"""Collective and shape mismatches: ranks issued different collectives at one seq.

At the first seq of a group where the ranks' collectives differ, a different op means
a different program path (collective_mismatch: a rank-only barrier, a skipped
all_reduce); the same op with a different size or dtype is a shape_mismatch. The
culprit is the minority; with a tie (two ranks) it is the rank whose sequence realigns
with the others once its extra collective is skipped, or whose size is new to the run.
"""

from __future__ import annotations

from collections import Counter
from operator import attrgetter

from diag.analyze.inputs import Inputs
from diag.analyze.collops import SIZE_RULED_OPS
from diag.analyze.progress import CollOp, groups_of
from diag.verdict import Category, Culprit, Finding, Severity

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


def _first_divergence(group: str, ranks: dict[int, dict[int, CollOp]], source: str
                      ) -> list[Finding]:
    if len(ranks) < 2:
        return []
    common = sorted(set.intersection(*(set(s) for s in ranks.values())))
    op_seq = _first_difference(ranks, common, attrgetter("op"))
    # A heartbeat's pending row has no size; it can only differ by op.
    unsized = {row.seq for seqs in ranks.values() for row in seqs.values() if row.in_numel is None}
    sized = [s for s in common if s not in unsized]
    size_seq = _first_difference(ranks, sized, attrgetter("in_numel", "dtype"))
    if op_seq is not None and (size_seq is None or op_seq <= size_seq):
        return [_op_mismatch(group, op_seq, {r: ranks[r][op_seq] for r in ranks}, ranks, source)]
    if size_seq is not None:
        return [_size_mismatch(group, size_seq, {r: ranks[r][size_seq] for r in ranks}, ranks,
                               source)]
    return []


def _first_difference(ranks: dict[int, dict[int, CollOp]], seqs: list[int], key) -> int | None:
    """The first seq at which ``key`` of the rows differs between ranks. Whole per-rank
    columns are compared at C speed; only a differing column is scanned."""
    columns = iter(ranks.values())
    reference = [key(row) for row in map(next(columns).__getitem__, seqs)]
    first = None
    for rows in columns:
        column = [key(row) for row in map(rows.__getitem__, seqs)]
        if column != reference:
            i = next(i for i, (a, b) in enumerate(zip(column, reference)) if a != b)
            first = i if first is None else min(first, i)
    return None if first is None else seqs[first]


def _op_mismatch(group, seq, rows, ranks, source) -> Finding:
    culprits = (_minority(rows, lambda row: row.op) or _extra_collective(seq, ranks)
                or _novel_op(seq, rows, ranks))
    seen = ", ".join(f"rank {r}: {rows[r].op}" for r in sorted(rows))
    extra = " (an extra collective on that rank only)" if culprits else ""
    return Finding(
        category=Category.COLLECTIVE_MISMATCH, severity=Severity.CRITICAL,
        confidence=0.95 if culprits else 0.6,
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
        confidence=0.95 if culprits else 0.6,
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


def _extra_collective(seq: int, ranks: dict[int, dict[int, CollOp]]) -> list[int]:
    """Ranks whose ops after ``seq`` line up with everyone else's ops from ``seq``: the
    op at ``seq`` was one the others never issued."""
    def ops(r, start):
        return [ranks[r][s].op for s in sorted(ranks[r]) if s >= start][:8]

    out = []
    for r in ranks:
        others = [o for o in ranks if o != r]
        if all(_prefix_equal(ops(r, seq + 1), ops(o, seq)) for o in others):
            out.append(r)
    return sorted(out) if len(out) < len(ranks) else []


def _novel_op(seq: int, rows: dict[int, CollOp], ranks: dict[int, dict[int, CollOp]]
              ) -> list[int]:
    """When nothing follows the divergence (the job died there), the extra collective is
    the one no rank issued anywhere else in the run, like a lone checkpoint barrier
    among the steps' all_reduces."""
    history = Counter(row.op for seqs in ranks.values() for s, row in seqs.items() if s != seq)
    novel = [r for r, row in rows.items() if history[row.op] == 0]
    return sorted(novel) if len(novel) < len(rows) else []


def _prefix_equal(a: list, b: list) -> bool:
    n = min(len(a), len(b))
    return n > 0 and a[:n] == b[:n]


def _novel_size(rows: dict[int, CollOp], ranks: dict[int, dict[int, CollOp]]) -> list[int]:
    """Ranks whose size for this op never occurs anywhere else in the run."""
    op = next(iter(rows.values())).op
    history = Counter((row.in_numel, row.dtype) for seqs in ranks.values()
                      for row in seqs.values() if row.op == op)
    novel = [r for r, row in rows.items() if history[(row.in_numel, row.dtype)] == 1]
    return sorted(novel) if len(novel) < len(rows) else []


def _size_rules(group: str, ranks: dict[int, dict[int, CollOp]]) -> list[Finding]:
    """all_gather's output is group_size x its input, reduce_scatter's input is
    group_size x its output; a rank breaking that passed a wrong-sized buffer."""
    for r, seqs in sorted(ranks.items()):
        ruled = [(seq, row) for seq, row in seqs.items() if row.op in RULED_OPS]
        for seq, row in sorted(ruled):
            if _breaks_size_rule(row):
                return [Finding(
                    category=Category.SHAPE_MISMATCH, severity=Severity.CRITICAL, confidence=0.85,
                    title=(f"rank {r}: {row.op} seq {seq} of group {group} has input "
                           f"{row.in_numel} and output {row.out_numel} elements, which "
                           f"breaks the size rule for a group of {row.group_size}"),
                    culprit=Culprit(ranks=(r,)), evidence=(row.evidence,),
                    fix=f"size the output of {row.op} as group_size x input (all_gather) "
                        "or the input as group_size x output (reduce_scatter)",
                    detector="mismatch", details={"group": group, "seq": seq})]
    return []


def _breaks_size_rule(row: CollOp) -> bool:
    if not (row.group_size and row.in_numel is not None and row.out_numel is not None):
        return False
    if row.op in GATHER_OPS:
        return row.out_numel != row.in_numel * row.group_size
    if row.op in SCATTER_OPS:
        return row.in_numel != row.out_numel * row.group_size
    return False
