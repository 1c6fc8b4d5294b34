// Range scans from Spark 4.2 on: Spark's encoder says which specs have them (the timestamp
// specs too).
package io.pyrocks.statestore

import org.apache.spark.sql.execution.streaming.state._

private[statestore] object RangeScanCompat {
  def supported(encoder: RocksDBKeyStateEncoder, spec: KeyStateEncoderSpec): Boolean =
    encoder.supportsRangeScan
}
