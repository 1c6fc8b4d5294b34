"""The options of every JVM the tests start: Spark sessions, drivers in subprocesses,
local-cluster executors, the shim's checks.

Each runs short, on small data, with every core busy: the C2 compiler's and the parallel
GC's threads cost more CPU than they save there (measured: a sixth of the CPU of
tests/test_correctness.py; the shim's checks took 90-98 s of JVM CPU with the JVM's
defaults, 54-56 s with these). What the tests prove depends on neither.

C1 alone shrinks the code cache's default from 240 MiB to 48, which a long-lived test JVM
fills (Spark's generated classes, kept by the codegen cache): a query then fails with "Out
of space in CodeCache for adapters" (Spark 4.0's state data source test, in the release
matrix). So the cache keeps the size the JVM's own default gives it.

Imported by the release matrix's preparing too (`.ci/spark-matrix`), from tests/ alone: no
import here may need the repository's root on the path."""

TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=240m"
