"""``scrutiny inspect``: decode BookKeeper's bytes and paths for forensics (stable JSON output)."""

from __future__ import annotations

import argparse
import heapq
from collections.abc import Iterator, Sequence
from pathlib import Path

from scrutiny.cli.commands import COMMAND_HELP
from scrutiny.cli.common import InputError, add_config_argument, count_argument, print_json, read_input
from scrutiny.core.ledger_metadata import decode_ledger_metadata
from scrutiny.core.listing_codec import decode_listing
from scrutiny.core.metadata_redaction import redact_ledger_metadata
from scrutiny.core.periodic_sets import union_groups
from scrutiny.core.sequence_groups import SequenceGroup, count_of
from scrutiny.core.verdict import AnswerKind
from scrutiny.core.zk_paths import (
    LedgerManager,
    ledger_id_from_path,
    ledger_path,
    underreplication_path,
)
from scrutiny.settings.loader import load_settings

DEFAULT_MAX_RANGES = 10_000


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``inspect metadata|listing|path``."""
    inspect = commands.add_parser("inspect", help=COMMAND_HELP["inspect"])
    kinds = inspect.add_subparsers(dest="kind", required=True, metavar="{metadata,listing,path}")

    metadata = kinds.add_parser(
        "metadata",
        help="decode a ledger metadata znode's bytes (format v1, v2 or v3)",
        description="Give FILE (or - for standard input), or --ledger-id to read the znode from ZooKeeper.",
    )
    metadata.add_argument("file", nargs="?", help="file holding the znode's bytes, or - for standard input")
    metadata.add_argument(
        "--ledger-id",
        type=count_argument,
        help="read this ledger's znode from the configuration's ZooKeeper (zookeeper.connect, ledgers root)",
    )
    metadata.add_argument(
        "--save",
        metavar="FILE",
        help="also write the znode's bytes, without the ledger's password, to FILE (verdict --metadata)",
    )
    add_config_argument(metadata)
    metadata.set_defaults(handler=_metadata)

    listing = kinds.add_parser(
        "listing",
        help="decode a bookie's entry listing (AvailabilityOfEntriesOfLedger)",
        description="Give FILE (or - for standard input), or --ledger-id and --bookie to ask the bookie now, "
        "as the checker would (v3 or its agent, by the [bookies] settings and its registration).",
    )
    listing.add_argument("file", nargs="?", help="file holding the listing bytes, or - for standard input")
    listing.add_argument("--ledger-id", type=count_argument, help="ask --bookie for this ledger's entries")
    listing.add_argument("--bookie", metavar="BOOKIE_ID", help="the bookie to ask (its id, as in the ensembles)")
    listing.add_argument(
        "--save", metavar="FILE", help="also write the listing's bytes to FILE (for verdict --listing BOOKIE=FILE)"
    )
    add_config_argument(listing)
    listing.add_argument(
        "--max-ranges",
        type=count_argument,
        default=DEFAULT_MAX_RANGES,
        help=f"print at most this many ranges (default {DEFAULT_MAX_RANGES}); ranges_truncated tells",
    )
    listing.set_defaults(handler=_listing)

    path = kinds.add_parser("path", help="map a ledger id to its znode path or back")
    which = path.add_mutually_exclusive_group(required=True)
    which.add_argument("--ledger-id", type=count_argument, help="ledger id (0 .. 2^63-1)")
    which.add_argument("--path", help="a ledger znode path")
    path.add_argument("--manager", choices=[m.value for m in LedgerManager], default=LedgerManager.HIERARCHICAL.value)
    path.add_argument("--root", default="/ledgers", help="the ledgers root (default /ledgers)")
    path.set_defaults(handler=_path)


def _metadata(args: argparse.Namespace) -> int:
    if (args.file is None) == (args.ledger_id is None):
        raise InputError("give a FILE (or - for standard input) or --ledger-id, one of them")
    if args.file is not None:
        data = read_input(args.file)
    else:
        from scrutiny.cli.cluster_bytes import read_ledger_znode  # noqa: PLC0415 (kazoo only for this use)

        data = read_ledger_znode(load_settings(args.config), args.ledger_id)
    document = decode_ledger_metadata(data).as_json_dict()  # decoded first: never save bytes that do not decode
    _save(args.save, redact_ledger_metadata(data))  # the document says whether a password is set, never which
    print_json(document)
    return 0


def _listing(args: argparse.Namespace) -> int:
    if args.file is not None:
        if args.ledger_id is not None or args.bookie is not None:
            raise InputError("give a FILE (or -), or --ledger-id with --bookie, not both")
        data = read_input(args.file)
        print_json(_listing_document(decode_listing(data), args.max_ranges))
        _save(args.save, data)
        return 0
    if args.ledger_id is None or args.bookie is None:
        raise InputError("give a FILE (or - for standard input), or --ledger-id and --bookie")
    from scrutiny.cli.cluster_bytes import fetch_bookie_listing  # noqa: PLC0415 (ZooKeeper and gRPC only here)

    fetched = fetch_bookie_listing(load_settings(args.config), args.ledger_id, args.bookie)
    answer = fetched.answer
    asked = {"bookie": fetched.bookie, "protocol": fetched.protocol, "address": fetched.address}
    if answer.kind is AnswerKind.UNKNOWN:
        raise InputError(f"bookie {fetched.bookie} gave no answer for ledger {args.ledger_id}: {answer.reason}")
    if answer.kind is AnswerKind.NO_LEDGER:  # nothing to save: verdict takes it as --no-ledger BOOKIE
        print_json({**asked, "answer": "no_ledger"})
        return 0
    data = fetched.listing_bytes or b""
    _save(args.save, data)
    print_json({**asked, "answer": "listing", **_listing_document(decode_listing(data), args.max_ranges)})
    return 0


def _save(name: str | None, data: bytes) -> None:
    if name is None:
        return
    try:
        Path(name).write_bytes(data)
    except OSError as error:
        raise InputError(f"cannot write {name}: {error.strerror or error}") from error


def _listing_document(groups: Sequence[SequenceGroup], max_ranges: int) -> dict[str, object]:
    union = union_groups(groups)
    ranges = list(_ranges(union, max_ranges + 1))
    truncated = len(ranges) > max_ranges
    return {
        "groups": [
            {
                "first_sequence_start": g.first_start,
                "last_sequence_start": g.last_start,
                "sequence_size": g.size,
                "sequence_period": g.period,
            }
            for g in groups
        ],
        "entry_count": count_of(union),
        "ranges": [list(r) for r in ranges[:max_ranges]],
        "ranges_truncated": truncated,
    }


def _ranges(groups: Sequence[SequenceGroup], limit: int) -> Iterator[tuple[int, int]]:
    """Maximal contiguous ranges of disjoint groups in order, at most ``limit`` of them."""
    runs = heapq.merge(*(g.run_bounds() for g in groups))
    current: tuple[int, int] | None = None
    produced = 0
    for first, last in runs:
        if current is not None and first == current[1] + 1:
            current = (current[0], last)
            continue
        if current is not None:
            yield current
            produced += 1
            if produced >= limit:
                return
        current = (first, last)
    if current is not None:
        yield current


def _path(args: argparse.Namespace) -> int:
    manager = LedgerManager(args.manager)
    if args.ledger_id is not None:
        ledger_id = args.ledger_id
        path = ledger_path(ledger_id, manager=manager, root=args.root)
    else:
        path = args.path
        ledger_id = ledger_id_from_path(path, manager=manager, root=args.root)
    print_json(
        {
            "ledger_id": ledger_id,
            "path": path,
            "manager": manager.value,
            "underreplication_path": underreplication_path(ledger_id, root=args.root),
        }
    )
    return 0
