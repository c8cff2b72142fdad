"""The metrics every component (checker, watcher, agent) exports beside its own.

``scrutiny_build_info{version}`` (always 1: join on it, or alert when two versions run) and the process's own
figures from prometheus_client's collectors: CPU seconds, resident memory, open file descriptors, start time
(``process_*``), the Python version (``python_info``) and the garbage collector (``python_gc_*``).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, GCCollector, PlatformCollector, ProcessCollector

from scrutiny import __version__


def register_component_metrics(registry: CollectorRegistry) -> None:
    """Add the build information and the process collectors to ``registry``."""
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    build = Gauge("scrutiny_build_info", "The running build of Scrutiny (always 1)", ["version"], registry=registry)
    build.labels(__version__).set(1)
