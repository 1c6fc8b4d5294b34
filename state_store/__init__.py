"""A Spark Structured Streaming state store: Python on embedded RocksDB behind a Scala shim.

Layout (one concept per module):
  spark        driver-side API: spark_conf(), configure(), PROVIDER_CLASS
  options      every `spark.sql.streaming.stateStore.pyrocks.*` key, validated in one place
  bridge       builds and caches the Scala shim jar from jvm-bridge/
  worker       the Python worker process: socket server and request loop
  protocol     wire frames between the shim and a worker
  records      the write-record encoding shared by the wire and the changelog files
  engine       a versioned key-value store on rocksdict (load, write, commit, abort)
  manifest     the durable record of one version (what files it needs, who owns them)
  checkpoint   publishes versions and reads them back (changelogs, snapshots, GC)
  storage      fsspec access: atomic publish, checksummed reads, duplicate()
  cli          the `state-store` console command
"""

__version__ = "0.1.0"
