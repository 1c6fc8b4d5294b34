package io.pyrocks.tests

import java.nio.file.Files
import java.nio.file.attribute.PosixFilePermission

import org.apache.hadoop.fs.{LocalFileSystem, Path, RawLocalFileSystem}
import org.apache.hadoop.fs.permission.FsPermission

/** Hadoop's local file system for the tests' Spark JVMs (`fs.file.impl`), with permissions
  * set in-process. pip's pyspark ships without Hadoop's native library, so the stock one
  * starts a `chmod` process for every file and directory it creates (Spark's checkpoint
  * logs, its providers' state files, their checksum files). The files and their modes are
  * the same; only the process per file is gone. */
class InProcessLocalFileSystem extends LocalFileSystem(new InProcessRawLocalFileSystem)

class InProcessRawLocalFileSystem extends RawLocalFileSystem {
  override def setPermission(path: Path, permission: FsPermission): Unit = {
    val mode = permission.toShort
    // PosixFilePermission lists owner, group and others' read, write and execute in the
    // order of the mode's nine bits, highest first.
    val granted = java.util.EnumSet.noneOf(classOf[PosixFilePermission])
    for ((bit, index) <- PosixFilePermission.values.zipWithIndex
         if (mode & (1 << (8 - index))) != 0) granted.add(bit)
    Files.setPosixFilePermissions(pathToFile(path).toPath, granted)
  }
}
