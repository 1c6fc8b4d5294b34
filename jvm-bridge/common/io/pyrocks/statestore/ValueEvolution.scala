package io.pyrocks.statestore

import java.util.concurrent.ConcurrentHashMap

import org.apache.spark.sql.catalyst.expressions.{BoundReference, Cast, CreateNamedStruct, Expression, GetStructField, If, IsNull, Literal, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.execution.streaming.state.{StateSchemaMetadataKey, StateSchemaProvider}
import org.apache.spark.sql.types.{DataType, StructType}

/**
 * Schema evolution of one column family's values, as Spark supports it for
 * transformWithState (with `spark.sql.streaming.stateStore.encodingFormat=avro`): a new run
 * of the query may add, remove, reorder and widen the fields of a state variable's value.
 * Spark numbers each schema a column family has had (its StateSchemaProvider); every value
 * row is stored after the 2-byte id of the schema it was written with, and a row of an
 * older schema is read into the current one by field name: a field it lacks is null, a
 * field the current schema lacks is dropped, a narrower type is cast to the wider one.
 */
final class ValueEvolution(columnFamily: String, schemas: StateSchemaProvider) {
  val currentId: Short = schemas.getCurrentStateSchemaId(columnFamily, false)
  private val current = schemaOf(currentId)
  private val readers = new ConcurrentHashMap[Short, (Int, UnsafeProjection)]()

  /** The fields a row written with schema `id` has, and how it becomes a current row. */
  def reader(id: Short): (Int, UnsafeProjection) = readers.computeIfAbsent(id, _ => {
    val written = schemaOf(id)
    val fields = current.fields.map { field =>
      ValueEvolution.indexOf(written, field.name) match {
        case Some(i) => ValueEvolution.widen(
          BoundReference(i, written(i).dataType, nullable = true), written(i).dataType,
          field.dataType)
        case None => Literal(null, field.dataType)
      }
    }
    (written.length, UnsafeProjection.create(fields.toSeq))
  })

  private def schemaOf(id: Short): StructType =
    schemas.getSchemaMetadataValue(StateSchemaMetadataKey(columnFamily, id, false)).sqlSchema
}

object ValueEvolution {
  def indexOf(schema: StructType, name: String): Option[Int] =
    Some(schema.fieldNames.indexOf(name)).filter(_ >= 0)

  /** `value` (of type `from`) as type `to`: structs field by field, by name. */
  def widen(value: Expression, from: DataType, to: DataType): Expression = (from, to) match {
    case (a, b) if a == b => value
    case (a: StructType, b: StructType) =>
      val fields = b.fields.toSeq.flatMap { field =>
        val converted = indexOf(a, field.name) match {
          case Some(i) => widen(GetStructField(value, i, Some(field.name)), a(i).dataType,
            field.dataType)
          case None => Literal(null, field.dataType)
        }
        Seq(Literal(field.name), converted)
      }
      If(IsNull(value), Literal(null, b), CreateNamedStruct(fields))
    case _ => Cast(value, to, Some("UTC"))
  }

  /** For a column family whose values Spark lets evolve: Spark gave a schema provider, the
   * encoding is Avro (Spark's condition for evolution), and the provider knows the family. */
  def of(columnFamily: String, schemas: Option[StateSchemaProvider],
      encodingFormat: String): Option[ValueEvolution] =
    schemas.filter(_ => encodingFormat == "avro").flatMap { provider =>
      try Some(new ValueEvolution(columnFamily, provider)) catch {
        case _: Exception => None // a family Spark keeps no schemas of does not evolve
      }
    }
}
