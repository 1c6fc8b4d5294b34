"""The worker process the shim starts in every executor (`python -m
state_store.runtime.worker`): one store per connection, RocksDB opened only after the
process starts.

  protocol.py      the frames between the shim and a worker
  worker.py        the socket server, the request loop, a store's durable root at open
  engine.py        a versioned store: a state machine over its working copy
  working_copy.py  the local RocksDB write records are applied to
  snapshots.py     local checkpoints of a working copy and their uploads
  teardown.py      closing and removing working copies behind the requests that closed them
  memory.py        the RocksDB memory a worker's stores share, and its bound
"""
