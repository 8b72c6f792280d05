"""A restricted unpickler for Flight Recorder dumps from other people's clusters.

Unpickling runs code: a pickle may name any importable callable. Flight Recorder dumps
hold only plain containers and scalars, so this unpickler resolves no global at all and
refuses every opcode that would call one; what it returns is dicts, lists, tuples,
sets, strings, bytes, numbers, booleans and None.

What it returns may still share its own lists and unfold into 2**26 nodes from 200
bytes: the loader measures that (``docsize``) before anything walks the document. One
cost it cannot measure is paid inside unpickling: a dict key or set member that is a
tuple sharing itself is hashed there, and Python before 3.14 does not cache tuple hashes.
So the loader unpickles in a worker process it ends past a time limit
(``inputs._timed_job``).
"""

from __future__ import annotations

import io
import pickle


class UnsafePickleError(pickle.UnpicklingError):
    """The pickle asked for a global (class or function); it is not a plain dump."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        raise UnsafePickleError(
            f"refusing to load global {module}.{name}: Flight Recorder dumps hold only "
            "plain containers and scalars"
        )

    def persistent_load(self, pid):
        raise UnsafePickleError("refusing persistent id in pickle")


def loads_plain(data: bytes):
    """Unpickle ``data`` allowing only plain containers and scalars."""
    return _PlainUnpickler(io.BytesIO(data)).load()
