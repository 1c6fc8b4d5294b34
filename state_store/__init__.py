"""A Spark Structured Streaming state store: Python on embedded RocksDB behind a Scala shim.

The layers, each importing only those above it in this list (tests/test_layers.py checks):

  errors.py, options.py  what every layer shares: the errors, and every
                         `spark.sql.streaming.stateStore.pyrocks.*` key with its validation
  format/                the durable format: storage (fsspec, atomic publish, verified
                         reads), the records (manifests, snapshots, names checked as parsed),
                         a version's lineage, a store root, GC, seeding from another root,
                         Spark's checkpoint layout and the restore records kept in it
  runtime/               the worker process: the socket protocol, a store's engine (a state
                         machine over its RocksDB working copy), snapshots, shared memory
  driver/                the driver side of the JVM: the shim's build (jvm-bridge/, one table
                         of Spark releases), its class names, a driver JVM that already runs
  spark.py               the driver-side API (contract): spark_conf(), configure(),
                         PROVIDER_CLASS, spark_default_provider()
  savepoint/, results/   the tools: savepoints and restores, the query result store
  tools/, cli.py         inspect, the demo, progress bars; the `state-store` command

The shim itself (Scala, the executor side of every store) is in jvm-bridge/ beside this
package, shipped inside it as `state_store.jvm_bridge`.
"""

__version__ = "0.1.0"
