"""The driver side of the JVM: building the shim, naming its classes, loading it.

  bridge.py    compiles jvm-bridge/ with the Scala compiler pyspark ships, cached per release
  releases.py  the Spark releases supported: the one table every other place reads
  classes.py   the shim's class names and the Spark settings that name providers
  jvm.py       loading the shim into a driver JVM that already runs (notebooks)
"""
