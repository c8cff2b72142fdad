"""What the commands share: argument types and options, input files or stdin, JSON output, stopping on signals."""

from __future__ import annotations

import argparse
import json
import logging
import math
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from scrutiny.core.errors import ScrutinyError
from scrutiny.core.health_summary import DEFAULT_FAIL_ON, DEFAULT_WORST
from scrutiny.core.vocabulary import Severity
from scrutiny.settings.addresses import host_problem
from scrutiny.settings.loader import MAX_SECONDS

#: The format of every command's log lines.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: Libraries whose INFO lines tell a user nothing to act on (kafka-python's ~40 lines of connection and metadata
#: chatter at start, py4j's gateway lines): only their warnings and errors are shown.
QUIET_LIBRARIES = ("kafka", "py4j")


def configure_logging(level: int = logging.INFO) -> None:
    """Log lines of ``level`` and above to standard error in :data:`LOG_FORMAT`; :func:`quiet_libraries`."""
    logging.basicConfig(level=level, format=LOG_FORMAT, stream=sys.stderr)
    quiet_libraries()


def quiet_libraries() -> None:
    """Show only warnings and errors of :data:`QUIET_LIBRARIES`."""
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING)


class InputError(ScrutinyError):
    """A command-line input that cannot be used (missing file, conflicting options)."""


#: The ``--config`` help every command that reads settings shows.
CONFIG_HELP = (
    "configuration file (TOML; default: $SCRUTINY_CONFIG, else built-in defaults); "
    "SCRUTINY_<SECTION>_<KEY> environment variables override its keys"
)


def add_config_argument(parser: argparse.ArgumentParser, help_text: str = CONFIG_HELP) -> None:
    """The ``--config FILE`` option of a command that loads settings."""
    parser.add_argument("--config", metavar="FILE", help=help_text)


def add_metrics_arguments(parser: argparse.ArgumentParser, section: str) -> None:
    """``--metrics-port`` and ``--metrics-host`` of a service whose settings section is ``section``."""
    parser.add_argument(
        "--metrics-port", type=port_argument, help=f"serve Prometheus metrics on this port ({section}.metrics_port)"
    )
    parser.add_argument(
        "--metrics-host",
        type=host_argument,
        metavar="HOST",
        help=f"the metrics' address ({section}.metrics_host, default 127.0.0.1)",
    )


#: The largest whole number an option takes (a ledger id, a time in ms, a count): a signed 64-bit integer.
MAX_COUNT = 2**63 - 1
MAX_PORT = 65_535


def count_argument(text: str) -> int:
    """An argparse type: a whole number from 0 to :data:`MAX_COUNT` (ledger ids, times in ms, counts)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_COUNT} (64 bits), got {value}")
    return value


def positive_count_argument(text: str) -> int:
    """An argparse type: a whole number ≥ 1 (a size or a count where 0 means nothing sensible)."""
    value = count_argument(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be at least 1, got 0")
    return value


def bounded_count(minimum: int, maximum: int, why: str = "") -> Callable[[str], int]:
    """An argparse type: a whole number from ``minimum`` to ``maximum`` (``why``: the reason for the maximum)."""

    def parse(text: str) -> int:
        value = count_argument(text)
        if not minimum <= value <= maximum:
            reason = f" ({why})" if why else ""
            raise argparse.ArgumentTypeError(f"must be from {minimum} to {maximum}{reason}, got {value}")
        return value

    return parse


def port_argument(text: str) -> int:
    """An argparse type: a TCP port, 0 to 65535 (0: any free port, or off, as the option says)."""
    value = count_argument(text)
    if value > MAX_PORT:
        raise argparse.ArgumentTypeError(f"a port is 0..{MAX_PORT}, got {value}")
    return value


def host_argument(text: str) -> str:
    """An argparse type: an IP address or a host name, checked by its spelling (nothing is looked up)."""
    problem = host_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{text!r} {problem}")
    return text


def seconds_argument(text: str) -> float:
    """An argparse type: a finite number of seconds from 0 to the settings' :data:`MAX_SECONDS` (ten years)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds ≥ 0, got {text}")
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SECONDS} seconds (ten years), got {text}")
    return value


def positive_seconds_argument(text: str) -> float:
    """An argparse type: :func:`seconds_argument` above 0."""
    value = seconds_argument(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def checked_directory(name: str, what: str) -> Path:
    """``name`` as a directory to use or make: InputError when it exists as something else or cannot be looked at."""
    path = Path(name)
    try:
        if path.exists() and not path.is_dir():
            raise InputError(f"the {what} {name} is not a directory")
    except OSError as error:
        raise InputError(f"cannot use the {what} {name}: {error.strerror or error}") from None
    return path


#: The most bytes a command reads from one input file (or standard input): a ledger's metadata znode is at most
#: ZooKeeper's 1 MB, a listing, racks, a token or a certificate far less; more (``/dev/zero``) is an error, read no
#: further.
MAX_INPUT_BYTES = 64 * 2**20


def read_input(name: str) -> bytes:
    """The bytes of file ``name``, or of standard input when ``name`` is ``-`` (at most :data:`MAX_INPUT_BYTES`)."""
    if name == "-":
        return _at_most(sys.stdin.buffer.read(MAX_INPUT_BYTES + 1), "standard input")
    return read_file_bytes(name)


def print_json(document: object) -> None:
    """Print ``document`` as JSON: objects indented, lists of plain values kept on one line."""
    sys.stdout.write(format_json(document) + "\n")


def format_json(document: object, level: int = 0) -> str:
    """Readable JSON text: nested containers indented by two spaces, flat lists inline."""
    pad, inner = "  " * level, "  " * (level + 1)
    if isinstance(document, dict) and document:
        items = [f"{inner}{json.dumps(str(k))}: {format_json(v, level + 1)}" for k, v in document.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(document, list) and any(isinstance(v, dict | list) for v in document):
        items = [f"{inner}{format_json(v, level + 1)}" for v in document]
        return "[\n" + ",\n".join(items) + f"\n{pad}]"
    return json.dumps(document)


def add_summary_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a command that ends with the health summary: ``--fail-on``, ``--worst``, ``--format``."""
    parser.add_argument(
        "--fail-on",
        choices=[s.value for s in Severity],
        default=DEFAULT_FAIL_ON.value,
        help=f"lowest severity that makes the status UNHEALTHY (default: {DEFAULT_FAIL_ON.value})",
    )
    parser.add_argument(
        "--worst",
        type=count_argument,
        default=DEFAULT_WORST,
        metavar="N",
        help=f"worst ledgers to list (default: {DEFAULT_WORST})",
    )
    parser.add_argument("--format", choices=["text", "json"], default="text", help="output format (default: text)")


@contextmanager
def stop_on_signals(
    on_signal: Callable[[int], None] | None = None, *, until_exit: bool = False
) -> Iterator[threading.Event]:
    """While the block runs, the first SIGINT or SIGTERM sets the yielded event (after calling ``on_signal(signum)``);
    the ones after it do nothing more. A signal the process was started ignoring stays ignored.

    The previous handlers are back when the block ends, unless ``until_exit``: then both signals are ignored from
    there on (the command's work is done and it is exiting), so a second stop signal sent while it winds down
    (``kill`` after a Ctrl-C) cannot kill it on the way out; Python puts the default action back for handlers it
    ran, not for ignored signals. Install it after Spark starts: PySpark sets its own SIGINT handler when its
    gateway starts.
    """
    stop = threading.Event()
    handled = False

    def handle(signum: int, _frame: object) -> None:
        # Once only. Python runs a handler between two bytecodes of the main thread, also those of a handler still
        # running: a signal storm (`kill` in a loop) would run one inside another's ``stop.set()``, which holds the
        # event's lock, and wait for that lock forever.
        nonlocal handled
        if handled:
            return
        handled = True
        if on_signal is not None:
            on_signal(signum)
        stop.set()

    # A signal ignored from the start stays ignored: a shell script's background job (`cmd &`) is started with SIGINT
    # ignored, so the Ctrl-C meant for the foreground command does not stop it (it would not reach it from a terminal).
    signals = [sig for sig in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(sig) is not signal.SIG_IGN]
    previous = {sig: signal.signal(sig, handle) for sig in signals}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_IGN if until_exit else handler)


def read_file_bytes(name: str) -> bytes:
    """The bytes of file ``name``, at most :data:`MAX_INPUT_BYTES` (unreadable: :class:`InputError`, one line)."""
    try:
        with Path(name).open("rb") as handle:
            return _at_most(handle.read(MAX_INPUT_BYTES + 1), name)
    except OSError as error:
        raise InputError(f"cannot read {name}: {error.strerror or error}") from error


def _at_most(data: bytes, name: str) -> bytes:
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(f"{name} holds more than {MAX_INPUT_BYTES:,} bytes, more than any input of this command")
    return data


def read_token_file(name: str) -> str:
    """The secret held in file ``name`` (UTF-8, surrounding blanks dropped; warned about when others can read it)."""
    try:
        token = read_file_bytes(name).decode("utf-8", errors="strict").strip()
    except UnicodeDecodeError as error:
        raise InputError(f"the token file {name} is not UTF-8 text (byte {error.start})") from None
    if not token:
        raise InputError(f"the token file {name} is empty")
    if Path(name).stat().st_mode & 0o077:
        logging.getLogger(__name__).warning("the token file %s is readable by other users", name)
    return token
