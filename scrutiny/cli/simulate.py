"""``scrutiny simulate``: run a simulated BookKeeper cluster from a scenario, or generate a scenario.

Run: ``scrutiny simulate SCENARIO.toml [--zookeeper HOST:PORT[/CHROOT]] [--duration S]
[--truth-out FILE] [--replace] [--keep-metadata] [--dry-run]`` writes the cluster to ZooKeeper,
starts its bookies, prints one JSON line when it is up (bookie addresses, start time), carries out
the schedule and runs until ``--duration`` has passed or SIGINT/SIGTERM; then it unregisters and
stops every bookie and removes what it wrote (unless ``--keep-metadata``). ``--truth-out`` writes
the ground truth (docs/simulator.md) once the cluster is up; with ``--dry-run`` only the scenario
is checked and the truth written, nothing is started.

Generate: ``scrutiny simulate --generate N --faults MIX --seed S --out FILE`` writes a random
scenario of N ledgers (``--out -``: standard output) and prints its fault plan as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import threading
import time
from pathlib import Path

from kazoo.client import KazooClient

from scrutiny.cli.commands import COMMAND_HELP
from scrutiny.cli.common import InputError, add_config_argument, configure_logging, seconds_argument, stop_on_signals
from scrutiny.connectors.zookeeper.client import close_zookeeper_client, start_zookeeper_client
from scrutiny.connectors.zookeeper.settings import ZooKeeperSection
from scrutiny.services.scenario_settings import scenario_overrides
from scrutiny.settings.addresses import zookeeper_connect_problem
from scrutiny.settings.loader import load_settings
from scrutiny.simulator.cluster import SimCluster
from scrutiny.simulator.generator import generate, parse_fault_mix
from scrutiny.simulator.model import Scenario
from scrutiny.simulator.scenario import load_scenario
from scrutiny.simulator.truth import truth_document, truth_timeline, write_truth

log = logging.getLogger("scrutiny.simulate")
_CONNECT_TIMEOUT_S = 15.0


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``simulate``."""
    sim = commands.add_parser(
        "simulate",
        help=COMMAND_HELP["simulate"],
        description="Simulated bookies (v3 protocol and agent API) registered in ZooKeeper with real-format "
        "metadata, faults and a schedule of changes; writes the ground truth. See docs/simulator.md.",
    )
    sim.add_argument("scenario", nargs="?", help="the scenario file (TOML)")
    sim.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]", help="default: zookeeper.connect of the settings")
    add_config_argument(sim)
    sim.add_argument(
        "--duration",
        type=seconds_argument,
        metavar="SECONDS",
        help="stop after this long (default: run until SIGINT/SIGTERM)",
    )
    sim.add_argument("--truth-out", metavar="FILE", help="write the ground truth (JSON) here")
    sim.add_argument("--replace", action="store_true", help="replace a cluster already at the ledgers root")
    sim.add_argument("--keep-metadata", action="store_true", help="leave the metadata in ZooKeeper on exit")
    sim.add_argument("--dry-run", action="store_true", help="check the scenario (and write the truth) only")
    gen = sim.add_argument_group("generate a scenario instead")
    gen.add_argument("--generate", type=int, metavar="N", help="number of ledgers of a random scenario")
    gen.add_argument(
        "--faults",
        default="realistic",
        metavar="MIX",
        help="preset (none, ledgers, realistic) and/or name=value,... (default: realistic)",
    )
    gen.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    gen.add_argument("--bookies", type=int, default=9, help="number of bookies (default 9)")
    gen.add_argument("--racks", type=int, default=3, help="number of racks (default 3)")
    gen.add_argument("--out", metavar="FILE", help="where to write the generated scenario (- for stdout)")
    sim.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    if args.generate is not None:
        return _generate(args)
    if args.scenario is None:
        raise InputError("give a scenario file, or --generate N --out FILE")
    if args.zookeeper is not None:
        problem = zookeeper_connect_problem(args.zookeeper) if args.zookeeper.strip() else "is empty"
        if problem is not None:
            raise InputError(f"--zookeeper {args.zookeeper!r} {problem}")
    if args.truth_out:
        _check_writable(args.truth_out)
    scenario = load_scenario(args.scenario)
    settings = load_settings(args.config)
    overrides = scenario_overrides(settings, scenario)
    if args.dry_run:
        if args.truth_out:
            _write_truth(args.truth_out, truth_document(scenario, truth_timeline(scenario, horizon_s=args.duration)))
        document = {"scenario": scenario.name, "ledgers": len(scenario.ledgers), "ok": True}
        print(json.dumps({**document, "checker_environment": overrides}))
        return 0
    configure_logging()
    if overrides:
        log.warning(
            "the scenario's ground truth assumes checker settings this configuration does not have; run a checker or"
            " scan of this cluster with %s",
            " ".join(f"{name}={value}" for name, value in overrides.items()),
        )
    hosts = args.zookeeper or settings.zookeeper.connect
    with stop_on_signals(until_exit=True) as stopped:  # SIGINT/SIGTERM from here to exit only ask it to stop
        client = _connect(settings.zookeeper, hosts)
        try:
            if not stopped.is_set():
                asyncio.run(_simulate(scenario, client, args, hosts, stopped=stopped, overrides=overrides))
        finally:
            client.stop()
            client.close()
    return 0


def _generate(args: argparse.Namespace) -> int:
    if args.scenario is not None:
        raise InputError("--generate makes a new scenario: give no scenario file")
    if not args.out:
        raise InputError("--generate needs --out FILE (or --out - for standard output)")
    started = time.perf_counter()
    text, plan = generate(
        args.generate, parse_fault_mix(args.faults), args.seed, bookies=args.bookies, racks=args.racks
    )
    if args.out == "-":
        sys.stdout.write(text)
        return 0
    try:
        Path(args.out).write_text(text, encoding="utf-8")
    except OSError as error:
        raise InputError(f"cannot write {args.out}: {error.strerror or error}") from None
    summary = {
        "scenario": args.out,
        "ledgers": args.generate,
        "seconds": round(time.perf_counter() - started, 3),
        "ledger_faults": {kind: len(ids) for kind, ids in plan.ledgers.items()},
        "bookie_faults": plan.bookies,
    }
    print(json.dumps(summary))
    return 0


def _check_writable(name: str) -> None:
    """InputError unless a file can be written at ``name`` (its directory exists; it is not a directory itself)."""
    path = Path(name)
    try:
        if path.is_dir():
            raise InputError(f"cannot write {name}: it is a directory")
        if not path.parent.is_dir():
            raise InputError(f"cannot write {name}: the directory {path.parent} does not exist")
    except OSError as error:
        raise InputError(f"cannot write {name}: {error.strerror or error}") from None


def _write_truth(name: str, document: dict[str, object]) -> None:
    try:
        write_truth(name, document)
    except OSError as error:
        raise InputError(f"cannot write {name}: {error.strerror or error}") from None


def _connect(zookeeper: ZooKeeperSection, hosts: str) -> KazooClient:
    """A started client on ``hosts``; its chroot is created first when missing."""
    servers, _, chroot = hosts.partition("/")
    if chroot.strip("/"):
        root = start_zookeeper_client(zookeeper, timeout_s=_CONNECT_TIMEOUT_S, hosts=servers)
        try:
            root.ensure_path("/" + chroot.strip("/"))
        finally:
            close_zookeeper_client(root)
    return start_zookeeper_client(zookeeper, timeout_s=_CONNECT_TIMEOUT_S, hosts=hosts)


async def _simulate(
    scenario: Scenario,
    client: KazooClient,
    args: argparse.Namespace,
    hosts: str,
    *,
    stopped: threading.Event,
    overrides: dict[str, str],
) -> None:
    cluster = SimCluster(scenario, client, replace=args.replace)
    loop = asyncio.get_running_loop()
    await cluster.start()
    try:
        if args.truth_out:
            timeline = truth_timeline(scenario, horizon_s=args.duration)
            document = truth_document(
                scenario, timeline, started_at_ms=cluster.started_at_ms, bookies=cluster.addresses()
            )
            _write_truth(args.truth_out, document)
        ready = {
            "scenario": scenario.name,
            "zookeeper": hosts,
            "ledgers_root": scenario.cluster.ledgers_root,
            "started_at_ms": cluster.started_at_ms,
            "ledgers": cluster.stats.ledgers,
            "write_seconds": round(cluster.stats.seconds, 3),
            "bookies": cluster.addresses(),
            "truth": args.truth_out,
            "checker_environment": overrides,
        }
        print(json.dumps(ready), flush=True)
        cluster.start_schedule()
        # SIGINT and SIGTERM stay with stop_on_signals' handler (which sets ``stopped``) until the command returns:
        # the event loop never takes them over, so a second signal during the stop cannot kill the process when
        # the loop closes and puts the default handlers back (a README block's `kill` after its Ctrl-C did).
        if not stopped.is_set():
            await loop.run_in_executor(None, stopped.wait, args.duration)
    finally:
        await cluster.stop(keep_metadata=args.keep_metadata)
        # End any ZooKeeper call still retrying in a worker thread (a schedule step cut short, a step given up):
        # the event loop waits for its threads before it closes.
        client.stop()
