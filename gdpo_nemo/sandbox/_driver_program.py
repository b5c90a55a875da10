"""The driver, second part: what lets the forked child run the program as `python main.py` would.

Follows `_driver_kernel.py` in the driver's source (whose docstring states the protocol) and
uses its names; never imported by the harness. A cheap compile, a `__main__` module with
fresh standard streams, the encoding of an "eval" case's values, and CPython's way out:
SystemExit codes, tracebacks without the driver's frames, non-daemon threads joined,
atexit run, stdout flushed.
"""

import posix as os  # the builtin half of `os`: importing `os` itself costs ~2 ms
import sys

FLUSH_FAILED_STATUS = 120  # what CPython exits with when flushing stdout fails at exit
ENCODE_DEPTH = 200  # nesting of a returned value that `_encode` follows


class _Captured(BaseException):
    """Raised by `_compile`'s trace hook to stop the module it captured."""


def _renamed(code, filename):
    consts = tuple(_renamed(c, filename) if isinstance(c, type(code)) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _compile(source, filename):
    """compile(source, filename, "exec", dont_inherit=True), but cheaper.

    The builtin compile() builds every AST class on its first call (~1.5 ms, a tenth of a
    trivial run). exec() of a string compiles without them; a trace hook takes the module's
    code object at the frame's first event and raises before any of its bytecode runs.
    Syntax errors come out of exec() as they would out of compile().
    """
    captured = []

    def hook(frame, event, arg):
        captured.append(frame.f_code)
        raise _Captured

    sys.settrace(hook)
    try:
        exec(source, {})
    except _Captured:
        pass
    finally:
        sys.settrace(None)
    if not captured:
        return compile(source, filename, "exec", dont_inherit=True)
    return _renamed(captured[0], filename)


def _main_namespace(main_path, kind):
    """Make this process what the program expects of `python main_path`: text streams on
    fds 0-2 (stderr line-buffered, as CPython's is), sys.argv, and a
    fresh `__main__` module whose namespace is returned ("call" cases also get typing's
    names in it)."""
    import builtins
    import io

    sys.stdin = sys.__stdin__ = io.open(0, "r", encoding="utf-8", closefd=False)
    sys.stdout = sys.__stdout__ = io.open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = sys.__stderr__ = io.open(
        2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1
    )
    sys.argv = [main_path]
    main = type(sys)("__main__")
    main.__file__ = main_path
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    namespace = main.__dict__
    if kind == "call":
        # LeetCode-style solutions annotate with List, Optional, ... without importing them.
        typing = sys.modules["typing"]
        for attribute in typing.__all__:
            namespace[attribute] = getattr(typing, attribute)
    return namespace


def _exit_status(stop):
    """The exit status CPython gives an uncaught SystemExit."""
    code = stop.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write("%s\n" % (code,))
    except Exception:
        pass
    return 1


def _report(error, main_path):
    """Print an uncaught exception like the interpreter, without the driver's own frames."""
    trace = error.__traceback__
    while trace is not None and trace.tb_frame.f_code.co_filename != main_path:
        trace = trace.tb_next
    try:
        # The printed traceback is the exception's own, so trim that one.
        sys.excepthook(type(error), error.with_traceback(trace), trace)
    except Exception:
        pass


def _flush_std():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


def _shutdown(status):
    """Finish like the interpreter would (join non-daemon threads, run atexit callbacks,
    flush stdio), then leave with os._exit: a full finalization of the forked interpreter
    costs a few milliseconds and has no effect a test can observe."""
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except BaseException:
            pass
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:
        pass
    try:
        sys.stdout.flush()
    except BaseException:
        status = FLUSH_FAILED_STATUS
    try:
        sys.stderr.flush()
    except BaseException:
        pass
    os._exit(status)


def _encode(value, depth=0):
    """A returned value as JSON-ready data that keeps Python's types apart: str, int, float,
    bool and None as themselves, every container as [type name, items] ("list", "tuple",
    "set", "frozenset", "dict" with [key, value] pairs, "bytes" as latin-1 text, "complex"
    as [real, imag]). Subclasses count as their base type; anything else raises TypeError."""
    if depth > ENCODE_DEPTH:
        raise ValueError("nested too deeply")
    if value is None or type(value) in (bool, str, float):
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, complex):
        return ["complex", [complex.__complex__(value).real, complex.__complex__(value).imag]]
    if isinstance(value, (bytes, bytearray)):
        return ["bytes", bytes(value).decode("latin-1")]
    if isinstance(value, dict):
        return ["dict", [[_encode(k, depth + 1), _encode(v, depth + 1)] for k, v in dict.items(value)]]
    for kind in (list, tuple, set, frozenset):
        if isinstance(value, kind):
            return [kind.__name__, [_encode(item, depth + 1) for item in kind.__iter__(value)]]
    raise TypeError("cannot encode %s" % type(value).__name__)

