"""The JVM bridge: the Scala sources of the shim Spark loads in every executor and driver
(`common/` for every Spark 4.x release, `compat/<concern>/since-X.Y/` for what Spark changed
between releases). It ships inside the package as `state_store.jvm_bridge`, so that a
checkout, an editable install and a wheel all find it the same way; it is compiled on first
use by state_store/driver/bridge.py. Nothing here is Python but this file."""
