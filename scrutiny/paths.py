"""Where the project's shipped files are: the one module that knows the checkout's layout.

The package is installed in editable mode from the checkout (``scripts/setup``), so ``conf/`` (the
documented configuration, the SQL views, the simulator's scenarios and the JSON schema) sits beside
the ``scrutiny/`` directory. Every other module asks here instead of counting parent directories.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

#: The checkout's top directory (holds ``pyproject.toml``).
PROJECT_ROOT: Final = Path(__file__).resolve().parent.parent
#: ``conf/``: ``scrutiny.toml``, ``sql/``, ``scenarios/``, ``schemas/``.
CONF_DIR: Final = PROJECT_ROOT / "conf"
#: The SQL views that ``scrutiny sql``, ``report`` and the dashboard create (one SELECT per file).
SQL_VIEWS_DIR: Final = CONF_DIR / "sql"
#: The simulator's scenarios, among them the embedded default's demo.
SCENARIOS_DIR: Final = CONF_DIR / "scenarios"
#: Spark's log configuration when ``scrutiny run`` sends the JVM's log lines to a file.
SPARK_FILE_LOGGING = CONF_DIR / "spark-log4j2.properties"
#: The embedded Kafka broker's log configuration.
KAFKA_LOGGING = CONF_DIR / "kafka-log4j2.properties"
#: The real local bookies' log configuration, and that of BookKeeper's shell and the ledger tool.
BOOKKEEPER_LOGGING = CONF_DIR / "bookkeeper-log4j2.properties"
BOOKKEEPER_TOOLS_LOGGING = CONF_DIR / "bookkeeper-tools-log4j2.properties"
#: Where ``scripts/setup`` puts the JVM programs' jars (``jvm/pom.xml``), one folder per program.
JVM_DIR: Final = PROJECT_ROOT / ".jvm"
#: Spark's Kafka source and Delta Lake's Spark writer with what they need (``jvm/spark/pom.xml``).
SPARK_JARS: Final = JVM_DIR / "spark"
#: Apache BookKeeper's server, shell and client (``jvm/bookkeeper/pom.xml``).
BOOKKEEPER_JARS: Final = JVM_DIR / "bookkeeper"
#: Apache Pulsar's broker, run beside the real local bookies (``jvm/pulsar/pom.xml``).
PULSAR_JARS: Final = JVM_DIR / "pulsar"
#: The ledger tool, run from source with :data:`BOOKKEEPER_JARS`.
LEDGER_TOOL_SOURCE: Final = PROJECT_ROOT / "jvm" / "bookkeeper" / "LedgerTool.java"
