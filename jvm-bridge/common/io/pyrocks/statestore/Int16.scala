package io.pyrocks.statestore

import java.lang.invoke.{MethodHandles, VarHandle}
import java.nio.ByteOrder

/** Unsigned 16-bit lengths in the read cache's byte arrays (`PrefixRecord`), read and
 * written as `Int32` reads and writes its ints: one access each, bounds checked. */
private[statestore] object Int16 {
  private val Shorts: VarHandle =
    MethodHandles.byteArrayViewVarHandle(classOf[Array[Short]], ByteOrder.LITTLE_ENDIAN)

  def get(bytes: Array[Byte], at: Int): Int = (Shorts.get(bytes, at): Short) & 0xffff

  /** `value` in [0, 65535]. */
  def put(bytes: Array[Byte], at: Int, value: Int): Unit =
    Shorts.set(bytes, at, value.toShort): Unit
}
