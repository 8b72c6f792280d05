"""Lines CPython itself prints: argparse's usage errors and faulthandler's dump headers.

The thread stacks that follow a faulthandler header span lines and stay code
(diag/analyze/stacktext.py); these entries only say why the dump was written.
"""

from __future__ import annotations

from diag.analyze.catalog.spec import Example, Signature, Source, compute, group

CPYTHON = "python/cpython"


def _seconds(m) -> int:
    return int(m.group("h")) * 3600 + int(m.group("m")) * 60 + int(m.group("s"))


def _args(text: str) -> list[str]:
    return text.split()[:20]


ENTRIES = (
    Signature(
        # "%(prog)s: error: %(message)s": only argparse's own messages, so gcc's or ld's
        # "<tool>: error: ..." never match
        id="python.argparse_error", signal="argparse_error",
        prefilter=("error: ", ("arguments", "argument ", "ambiguous option")),
        # the prog is optional: a launcher prefix peeler may take "train2.py: " for a host
        pattern=r"^\s*(?:(?P<prog>(?![\w.]*(?:Error|Exception|Warning)\b)[\w.\-/]+): )?error: "
                r"(?P<message>unrecognized arguments: (?P<args>.*)"
                r"|the following arguments are required: (?P<required>.*)"
                r"|argument (?P<argument>\S+): .*|ambiguous option: .*"
                r"|one of the arguments .* is required)$",
        fields={"prog": str, "message": group("message", lambda t: t.strip()[:300]),
                "args": group("args", _args, default=[]),
                "required": group("required", str.strip)},
        source=Source(CPYTHON, "Lib/argparse.py", "ArgumentParser.error",
                      "prints the usage, then '%(prog)s: error: %(message)s' and exits 2; "
                      "'unrecognized arguments: %s' from ArgumentParser.parse_args"),
        examples=(Example("finetune.py: error: unrecognized arguments: --local-rank=3",
                          {"prog": "finetune.py", "args": ["--local-rank=3"]}),
                  Example("[default1]:main_ddp.py: error: unrecognized arguments: --local_rank=1 "
                          "--deepspeed ds.json",
                          {"args": ["--local_rank=1", "--deepspeed", "ds.json"]}),
                  Example("pretrain.py: error: the following arguments are required: --data-path",
                          {"required": "--data-path", "args": []}),
                  Example("train.py: error: argument --lr: invalid float value: 'x'",
                          {"prog": "train.py"}),
                  Example("train2.py: error: unrecognized arguments: --local-rank=0",
                          {"args": ["--local-rank=0"]})),
        near_misses=("RuntimeError: error: unrecognized arguments in the config",
                     "gcc: error: unrecognized command-line option '-mavx512'",
                     "ld: error: undefined symbol: ncclCommInitRank")),
    Signature(
        id="python.faulthandler_timeout", signal="faulthandler_timeout", prefilter=("Timeout (",),
        pattern=r"^\s*Timeout \((?P<h>\d+):(?P<m>\d\d):(?P<s>\d\d)(?:\.\d+)?\)!\s*$",
        fields={"seconds": compute(_seconds)},
        source=Source(CPYTHON, "Modules/faulthandler.c", "format_timeout",
                      "faulthandler.dump_traceback_later's header before the thread stacks"),
        examples=(Example("Timeout (0:30:00)!", {"seconds": 1800}),
                  Example("[rank3]:Timeout (1:00:00.500000)!", {"seconds": 3600, "rank": 3})),
        near_misses=("Timeout (ms) = 600000",
                     "socket.timeout: Timeout (30s) exceeded!")),
    Signature(
        id="python.fatal_error", signal="fatal_python_error", prefilter=("Fatal Python error: ",),
        pattern=r"Fatal Python error: (?P<message>.+?)\s*$",
        fields={"message": str},
        source=Source(CPYTHON, "Modules/faulthandler.c", "faulthandler_fatal_error",
                      "the signal's name (Segmentation fault, Aborted, Bus error, ...) before "
                      "the stacks; Py_FatalError prints the same prefix (Python/pylifecycle.c "
                      "fatal_error)"),
        examples=(Example("Fatal Python error: Segmentation fault",
                          {"message": "Segmentation fault"}),
                  Example("[rank1]:Fatal Python error: Aborted", {"message": "Aborted"})),
        near_misses=("a fatal Python error was avoided",)),
)
