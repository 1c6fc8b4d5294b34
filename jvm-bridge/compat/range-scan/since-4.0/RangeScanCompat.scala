// Range scans in Spark 4.0 and 4.1: only the range key spec has them.
package io.pyrocks.statestore

import org.apache.spark.sql.execution.streaming.state._

private[statestore] object RangeScanCompat {
  def supported(encoder: RocksDBKeyStateEncoder, spec: KeyStateEncoderSpec): Boolean =
    spec.isInstanceOf[RangeKeyScanStateEncoderSpec]
}
