"""``scrutiny verdict``: one ledger's verdict, offline, from files (stable JSON output)."""

from __future__ import annotations

import argparse
import sys
import time

from scrutiny.cli.commands import COMMAND_HELP
from scrutiny.cli.common import InputError, add_config_argument, count_argument, print_json, read_input
from scrutiny.core.ledger_metadata import LedgerMetadata, decode_ledger_metadata
from scrutiny.core.listing_codec import decode_listing_compact
from scrutiny.core.placement import PlacementPolicy
from scrutiny.core.verdict import BookieAnswer, ClusterView, compute_verdict
from scrutiny.core.zk_records import UnderReplicationMark, parse_pulsar_racks
from scrutiny.settings.loader import load_settings


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``verdict``."""
    verdict = commands.add_parser(
        "verdict",
        help=COMMAND_HELP["verdict"],
        description="A bookie of the ledger's ensembles that no option names counts as unknown.",
    )
    verdict.add_argument("--metadata", required=True, help="the ledger's metadata znode bytes (file, or -)")
    verdict.add_argument(
        "--listing", action="append", default=[], metavar="BOOKIE=FILE", help="the listing bytes BOOKIE returned"
    )
    verdict.add_argument("--no-ledger", action="append", default=[], metavar="BOOKIE", help="BOOKIE said ENOLEDGER")
    verdict.add_argument("--unknown", action="append", default=[], metavar="BOOKIE", help="BOOKIE gave no answer")
    verdict.add_argument(
        "--racks",
        help="Pulsar's /bookies rack JSON (turns on the rack-aware check unless --placement or the configuration"
        " sets placement.policy)",
    )
    verdict.add_argument("--placement", choices=[p.value for p in PlacementPolicy], help="placement policy to check")
    verdict.add_argument(
        "--registered",
        action="append",
        default=None,
        metavar="BOOKIE",
        help="a registered writable bookie (turns on the registration check)",
    )
    verdict.add_argument(
        "--readonly",
        action="append",
        default=[],
        metavar="BOOKIE",
        help="a read-only bookie (registered, when --registered turns the check on)",
    )
    verdict.add_argument(
        "--under-replicated-since",
        type=count_argument,
        metavar="MS",
        help="the ledger's under-replication mark ctime (ms)",
    )
    verdict.add_argument("--now", type=count_argument, metavar="MS", help="the current time in ms (default: now)")
    add_config_argument(verdict)
    verdict.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    if args.placement is not None:
        settings = settings.with_placement_policy(PlacementPolicy(args.placement))
    elif args.racks is not None and "placement.policy" not in settings.given:
        settings = settings.with_placement_policy(PlacementPolicy.RACKAWARE)
    metadata = decode_ledger_metadata(read_input(args.metadata))
    answers = _answers(args, metadata)
    racks = parse_pulsar_racks(read_input(args.racks)).racks if args.racks is not None else {}
    cluster = ClusterView(
        racks=racks,
        writable=frozenset(args.registered) if args.registered is not None else None,
        readonly=frozenset(args.readonly),
    )
    mark = UnderReplicationMark((), args.under_replicated_since) if args.under_replicated_since is not None else None
    now_ms = args.now if args.now is not None else int(time.time() * 1000)
    verdict = compute_verdict(
        metadata, answers, now_ms=now_ms, config=settings.verdict_config, cluster=cluster, under_replication=mark
    )
    print_json(verdict.as_json_dict())
    return 0


def _answers(args: argparse.Namespace, metadata: LedgerMetadata) -> dict[str, BookieAnswer]:
    answers: dict[str, BookieAnswer] = {}

    def put(bookie: str, answer: BookieAnswer) -> None:
        if bookie in answers:
            raise InputError(f"bookie {bookie} is given more than one answer")
        answers[bookie] = answer

    for spec in args.listing:
        bookie, sep, name = spec.partition("=")
        if not sep or not bookie or not name:
            raise InputError(f"--listing expects BOOKIE=FILE, not {spec!r}")
        try:
            put(bookie, BookieAnswer.listing(decode_listing_compact(read_input(name))))
        except InputError:
            raise
        except ValueError as error:
            raise InputError(f"listing of {bookie} ({name}): {error}") from error
    for bookie in args.no_ledger:
        put(bookie, BookieAnswer.no_ledger())
    for bookie in args.unknown:
        put(bookie, BookieAnswer.unknown("given as unknown"))
    members = {b for segment in metadata.segments for b in segment.ensemble}
    for bookie in sorted(set(answers) - members):
        print(f"scrutiny: warning: bookie {bookie} is in none of the ledger's ensembles", file=sys.stderr)
    return answers
