"""What the job's executors need, as one picklable object built on the driver from the settings.

Spark ships it with the fetch stage and the stateful processor to every Python worker; it holds
connection settings (secrets stay :class:`~scrutiny.core.secret.Secret`) and no live object.
"""

from __future__ import annotations

from dataclasses import dataclass

from scrutiny.connectors.bookies.fetch import FetchConfig
from scrutiny.connectors.zookeeper.cluster_cache import CachedClusterReader, shared_reader
from scrutiny.connectors.zookeeper.settings import ZooKeeperSection
from scrutiny.core.ledger_tracker import TrackerConfig


@dataclass(frozen=True)
class JobConfig:
    """The executors' view of the configuration."""

    zookeeper: ZooKeeperSection
    ledgers_root: str
    racks_path: str
    fetch: FetchConfig
    tracker: TrackerConfig
    source: str = "stream"
    fetch_timeout_s: float = 10.0
    cluster_ttl_s: float = 2.0
    #: Re-verifications one task of the stateful step may start per micro-batch (0: no limit), and the spacing of
    #: those put off (:class:`~scrutiny.streaming.checker.reverify_budget.ReverifyBudget`).
    reverify_per_task: int = 0
    reverify_spacing_ms: int = 1000

    def cluster_reader(self) -> CachedClusterReader:
        """This worker process's shared reader of registrations and racks."""
        return shared_reader(self.zookeeper, self.ledgers_root, ttl_s=self.cluster_ttl_s, racks_path=self.racks_path)
