"""The model store: immutable, numbered, tagged model versions with lineage.

Metadata lives in SQLite (`store.db`, transactions make several publishers safe); the
artifact folders live on any fsspec filesystem (the local one by default). Nothing here
imports TensorFlow, so `python -m export versions ...` answers fast from anywhere.
"""
