"""``scrutiny inspect``: decode BookKeeper's bytes and paths for forensics (stable JSON output)."""

from __future__ import annotations

import argparse
import heapq
from collections.abc import Iterator, Sequence

from scrutiny.cli.commands import COMMAND_HELP
from scrutiny.cli.common import count_argument, print_json, read_input
from scrutiny.core.ledger_metadata import decode_ledger_metadata
from scrutiny.core.listing_codec import decode_listing
from scrutiny.core.periodic_sets import union_groups
from scrutiny.core.sequence_groups import SequenceGroup, count_of
from scrutiny.core.zk_paths import (
    LedgerManager,
    ledger_id_from_path,
    ledger_path,
    underreplication_path,
)

DEFAULT_MAX_RANGES = 10_000


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``inspect metadata|listing|path``."""
    inspect = commands.add_parser("inspect", help=COMMAND_HELP["inspect"])
    kinds = inspect.add_subparsers(dest="kind", required=True, metavar="{metadata,listing,path}")

    metadata = kinds.add_parser("metadata", help="decode a ledger metadata znode's bytes (format v1, v2 or v3)")
    metadata.add_argument("file", help="file holding the znode's bytes, or - for standard input")
    metadata.set_defaults(handler=_metadata)

    listing = kinds.add_parser("listing", help="decode a bookie's entry listing (AvailabilityOfEntriesOfLedger)")
    listing.add_argument("file", help="file holding the listing bytes, or - for standard input")
    listing.add_argument(
        "--max-ranges",
        type=count_argument,
        default=DEFAULT_MAX_RANGES,
        help=f"print at most this many ranges (default {DEFAULT_MAX_RANGES}); ranges_truncated tells",
    )
    listing.set_defaults(handler=_listing)

    path = kinds.add_parser("path", help="map a ledger id to its znode path or back")
    which = path.add_mutually_exclusive_group(required=True)
    which.add_argument("--ledger-id", type=int, help="ledger id (0 .. 2^63-1)")
    which.add_argument("--path", help="a ledger znode path")
    path.add_argument("--manager", choices=[m.value for m in LedgerManager], default=LedgerManager.HIERARCHICAL.value)
    path.add_argument("--root", default="/ledgers", help="the ledgers root (default /ledgers)")
    path.set_defaults(handler=_path)


def _metadata(args: argparse.Namespace) -> int:
    print_json(decode_ledger_metadata(read_input(args.file)).as_json_dict())
    return 0


def _listing(args: argparse.Namespace) -> int:
    groups = decode_listing(read_input(args.file))
    union = union_groups(groups)
    ranges = list(_ranges(union, args.max_ranges + 1))
    truncated = len(ranges) > args.max_ranges
    print_json(
        {
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
            "ranges": [list(r) for r in ranges[: args.max_ranges]],
            "ranges_truncated": truncated,
        }
    )
    return 0


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
