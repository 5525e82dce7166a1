"""The store on an S3-compatible bucket (`store.S3Store`, the optional ``s3`` extra): the
bucket's location and credentials as plain values (location.py, no client import) and
the client that maps the `Store` contract onto PUT, GET, LIST and DELETE."""
