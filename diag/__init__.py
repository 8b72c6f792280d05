"""ddiag: debugging and diagnostics for distributed PyTorch training.

The instrumentation API (``log_step``, ``span``, ``init``) is resolved lazily so that
``import diag`` -- and with it the CLI and the analysis code -- never imports torch.
"""

__version__ = "0.1.0"

_INSTRUMENT_API = ("init", "log_step", "span", "record", "writer", "shutdown", "current_step")


def __getattr__(name: str):
    if name in _INSTRUMENT_API:
        from diag.runtime import instrument

        return getattr(instrument, name)
    raise AttributeError(f"module 'diag' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_INSTRUMENT_API])
