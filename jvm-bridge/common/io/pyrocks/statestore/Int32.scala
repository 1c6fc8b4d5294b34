package io.pyrocks.statestore

import java.lang.invoke.{MethodHandles, VarHandle}
import java.nio.ByteOrder

/**
 * Ints in the read cache's byte arrays (little-endian: they never leave the JVM), read and
 * written as one int each through a byte-array view, which the JIT compiles to a single
 * load or store (four byte accesses and their shifts, otherwise). The view checks its
 * bounds, unlike `Platform`'s unchecked accesses: a wrong offset then fails with an
 * exception that names it, where an unchecked read of a dropped page would take the whole
 * executor down (it did, once, while the packed cache was young).
 */
private[statestore] object Int32 {
  private val Ints: VarHandle =
    MethodHandles.byteArrayViewVarHandle(classOf[Array[Int]], ByteOrder.LITTLE_ENDIAN)

  // The ascriptions give the calls their exact signatures (an int back, nothing back):
  // without them the compiler would have the view box its answer.
  def get(bytes: Array[Byte], at: Int): Int = Ints.get(bytes, at): Int

  def put(bytes: Array[Byte], at: Int, value: Int): Unit = Ints.set(bytes, at, value): Unit
}
