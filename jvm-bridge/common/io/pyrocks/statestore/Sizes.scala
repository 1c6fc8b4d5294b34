package io.pyrocks.statestore

/**
 * Sizes and durations in option values, read as `state_store/options.py` reads them (a test
 * feeds both the same samples): binary multiples (256k = 256 KiB), durations in ms, s, min,
 * h or d. A value that is not one is None: the caller names the key and what it accepts.
 */
object Sizes {
  private val Size = """(?i)\s*(\d+)\s*([kmgt]?)(?:i?b)?\s*""".r
  private val Duration = """(?i)\s*(\d+(?:\.\d*)?)\s*(ms|s|sec|secs|m|min|mins|h|d)?\s*""".r
  private val Shift = Map("" -> 0, "k" -> 10, "m" -> 20, "g" -> 30, "t" -> 40)
  private val Seconds: Map[String, BigDecimal] = Map("ms" -> BigDecimal("0.001"),
    "s" -> BigDecimal(1), "sec" -> BigDecimal(1), "secs" -> BigDecimal(1), "m" -> BigDecimal(60),
    "min" -> BigDecimal(60), "mins" -> BigDecimal(60), "h" -> BigDecimal(3600),
    "d" -> BigDecimal(86400))

  /** A size in units of 2^`unitShift` bytes: a plain number is in that unit, a suffixed one
   * must be a whole number of it; `unitShift` -1 accepts plain numbers only. */
  def inUnits(text: String, unitShift: Int): Option[Long] = text match {
    case Size(digits, suffix) if suffix.isEmpty || unitShift >= 0 =>
      val n = BigInt(digits)
      if (suffix.isEmpty) Some(n).filter(_.isValidLong).map(_.toLong)
      else {
        val bytes = n << Shift(suffix.toLowerCase)
        val unit = BigInt(1) << unitShift
        if (bytes % unit != 0) None else Some(bytes / unit).filter(_.isValidLong).map(_.toLong)
      }
    case _ => None
  }

  /** A duration in whole seconds (a plain number is seconds). */
  def wholeSeconds(text: String): Option[Long] = text match {
    case Duration(number, unit) =>
      val seconds = BigDecimal(number) * Seconds(Option(unit).getOrElse("s").toLowerCase)
      if (seconds.isWhole && seconds.isValidLong) Some(seconds.toLong) else None
    case _ => None
  }
}
