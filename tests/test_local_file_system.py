"""The Hadoop local file system the tests' Spark JVMs run with (tests/local_file_system.py):
it sets a file's or a directory's permissions in-process and to the same modes `chmod` would
give, so Spark's own files are as they would be with the stock one."""

from __future__ import annotations

import stat
from pathlib import Path

from harness import make_spark
from local_file_system import FILE_SYSTEM_CLASS

MODES = (0o644, 0o600, 0o755, 0o750, 0o700, 0o777, 0o421, 0o000)


def test_the_tests_local_file_system_sets_modes_as_chmod_does(tmp_path: Path) -> None:
    spark = make_spark({})
    try:
        jvm = spark._jvm
        hadoop = jvm.org.apache.hadoop.fs
        conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
        fs = hadoop.FileSystem.get(jvm.java.net.URI("file:///"), conf)
        assert fs.getClass().getName() == FILE_SYSTEM_CLASS
        for mode in MODES:
            file, directory = tmp_path / f"file-{mode:o}", tmp_path / f"dir-{mode:o}"
            file.write_text("x")
            directory.mkdir()
            for path in (file, directory):
                permission = hadoop.permission.FsPermission(jvm.java.lang.Short(mode))
                fs.setPermission(hadoop.Path(str(path)), permission)
                assert stat.S_IMODE(path.stat().st_mode) == mode, (path, oct(mode))
    finally:
        for path in tmp_path.iterdir():
            path.chmod(0o700)  # so that pytest can clean up what it made
        spark.stop()
