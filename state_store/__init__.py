"""A Spark Structured Streaming state store: Python on embedded RocksDB behind a Scala shim.

Layout (one concept per module):
  spark        driver-side API: spark_conf(), configure(), PROVIDER_CLASS
  options      every `spark.sql.streaming.stateStore.pyrocks.*` key, validated in one place
  shim/        the Scala shim's sources (the executor side of every store)
  bridge       builds and caches the shim jar from shim/, per pyspark version
  driver_jvm   loads the shim into a driver JVM that already runs (notebooks)
  worker       the Python worker process: socket server and request loop
  protocol     wire frames between the shim and a worker
  records      the write-record encoding shared by the wire and the changelog files
  engine       a versioned key-value store on rocksdict (load, write, commit, abort, finish)
  snapshots    local RocksDB checkpoints and their incremental uploads off the commit path
  manifest     the durable records: manifests (versions) and snapshot descriptors, with owners
  checkpoint   publishes records, plans loads, the shared-file registry and GC
  storage      fsspec access: atomic publish, checksummed reads, duplicate(), retries
  inspect      what `state-store inspect` reports (read-only, with a GC dry run)
  errors       the errors, each naming the store, the version, the file or the key
  cli, demo    the `state-store` console command and its demo query
"""

__version__ = "0.1.0"
