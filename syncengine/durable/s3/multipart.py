"""Multipart uploads of large objects, and aborting the ones a killed run left open.

obstore (the client of store.py) can upload in parts but can neither list open
multipart uploads nor abort one it did not start, so a run killed mid-upload would
leave parts that are billed and never collected.  Objects above
store.SINGLE_PUT_MAX therefore go through botocore here, imported only then (~0.3 s):
an upload aborted on any failure, and `sweep`, run only after a killed run (the
engine's local staging marker), aborting uploads under the prefix begun before
this process started.  Part size 16 MiB: 4 requests per 64 MiB, memory bounded.
"""

from __future__ import annotations

import datetime
from typing import IO, Any

from syncengine.config.s3location import S3Location
from syncengine.durable.s3 import failures

PART_SIZE = 16 * 1024 * 1024


def _client(where: S3Location) -> Any:
    import botocore.config
    import botocore.session

    session = botocore.session.Session()
    return session.create_client(
        "s3",
        endpoint_url=where.endpoint,
        region_name=where.region or "us-east-1",
        aws_access_key_id=where.access_key_id,
        aws_secret_access_key=where.secret_access_key,
        aws_session_token=where.session_token,
        config=botocore.config.Config(
            retries={"max_attempts": 4, "mode": "standard"},
            s3={"addressing_style": "path"},
            connect_timeout=10,
            read_timeout=60,
        ),
    )


def _full(where: S3Location, key: str) -> str:
    return f"{where.prefix}/{key}" if where.prefix else key


def upload(
    where: S3Location, key: str, file: IO[bytes], size: int, metadata: dict[str, str]
) -> None:
    """Upload `size` bytes of `file` as `key`, in parts; abort the upload on any failure
    (an exception, or a KeyboardInterrupt), so nothing is left open."""
    try:
        client = _client(where)
        full = _full(where, key)
        upload_id = client.create_multipart_upload(
            Bucket=where.bucket, Key=full, Metadata=metadata
        )["UploadId"]
    except ImportError:
        raise
    except Exception as exc:
        raise failures.durable("upload", where, key, exc) from exc
    try:
        parts = []
        for number, offset in enumerate(range(0, size, PART_SIZE), start=1):
            file.seek(offset)
            body = file.read(min(PART_SIZE, size - offset))
            etag = client.upload_part(
                Bucket=where.bucket, Key=full, UploadId=upload_id, PartNumber=number, Body=body
            )["ETag"]
            parts.append({"ETag": etag, "PartNumber": number})
        client.complete_multipart_upload(
            Bucket=where.bucket, Key=full, UploadId=upload_id, MultipartUpload={"Parts": parts}
        )
    except BaseException as exc:
        try:
            client.abort_multipart_upload(Bucket=where.bucket, Key=full, UploadId=upload_id)
        except Exception:  # the sweep after the next killed-run marker retries it
            pass
        if isinstance(exc, Exception):
            raise failures.durable("upload", where, key, exc) from exc
        raise


def sweep(where: S3Location, before: datetime.datetime) -> int:
    """Abort multipart uploads under the prefix begun before `before`; how many."""
    prefix = f"{where.prefix}/" if where.prefix else ""
    try:
        client = _client(where)
        aborted = 0
        pages = client.get_paginator("list_multipart_uploads").paginate(
            Bucket=where.bucket, Prefix=prefix
        )
        for page in pages:
            for up in page.get("Uploads", []):
                if up["Initiated"] < before:
                    client.abort_multipart_upload(
                        Bucket=where.bucket, Key=up["Key"], UploadId=up["UploadId"]
                    )
                    aborted += 1
        return aborted
    except Exception as exc:
        raise failures.durable("abort open uploads under", where, "", exc) from exc
