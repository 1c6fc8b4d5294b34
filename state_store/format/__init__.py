"""The durable format: what a store root, a savepoint and a checkpoint hold, and its rules.

  storage/            one small interface over fsspec: immutable files, atomic put-if-absent
                      publish, verified reads, duplicate() by each filesystem's fast path
  names.py            which names and URLs a record may hold (checked where it is parsed)
  records.py          the write record: the same bytes on the wire and in changelogs
  changelog_file.py   a changelog file's bytes: write records, compressed in chunks
  manifest.py         the records of a store root: manifests and snapshot descriptors
  lineage.py          which snapshot a version builds on, and which versions form its chain
  store_root.py       one store's root: listing, reading, writing and publishing records
  gc.py               which records and files may be deleted, and deleting them
  seeding.py          starting a store root from a version of another (restores, savepoints)
  spark_checkpoint.py what Spark keeps in a checkpoint, and where our stores sit in it
  restores.py         the records a restore leaves in checkpoints (restore, claim, release)
  dependencies.py     what a checkpoint's query still needs outside its own state
"""
