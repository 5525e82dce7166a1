"""S3 client errors as syncengine errors: one line naming the bucket and the fix.

obstore's exceptions carry no HTTP status, so the mapping reads the exception class
first and the S3 error code in its message second (``NoSuchBucket``,
``InvalidAccessKeyId``...); botocore's `ClientError` (multipart uploads) carries the
code itself.  A missing object stays `FileNotFoundError` (the `Store` contract).
Retries (throttling, 5xx, a dropped connection) happen in the client, bounded
(store.RETRY); what reaches this module has exhausted them.
"""

from __future__ import annotations

from syncengine.config.s3location import S3Location
from syncengine.errors import DurableError

_CREDENTIALS = (
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "AccessDenied",
    "403 Forbidden",
    "401 Unauthorized",
    "Unauthenticated",
    "PermissionDenied",
)
_UNREACHABLE = (
    "error sending request",
    "connection refused",
    "Connection refused",
    "dns error",
    "timed out",
    "Could not connect",
    "EndpointConnectionError",
    "ConnectTimeout",
)
_OVERLOADED = (
    "SlowDown",
    "503 Service Unavailable",
    "500 Internal Server Error",
    "InternalError",
    "502 Bad Gateway",
    "504 Gateway Timeout",
    "ServiceUnavailable",
)


def durable(operation: str, where: S3Location, key: str, exc: BaseException) -> DurableError:
    """The run-stopping error for a failed request on `key` under `where`."""
    text = f"{type(exc).__name__} {exc}"
    bucket = where.bucket
    endpoint = where.endpoint or "AWS S3"
    if "NoSuchBucket" in text:
        advice = (
            f"bucket {bucket} does not exist at {endpoint}: create it, or fix the bucket "
            "in durable_root / AWS_ENDPOINT_URL"
        )
    elif any(s in text for s in _CREDENTIALS):
        advice = (
            f"{endpoint} refused the credentials for bucket {bucket}: check "
            "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN or AWS_PROFILE, "
            "and that they may read and write the bucket"
        )
    elif any(s in text for s in _UNREACHABLE):
        advice = (
            f"cannot reach {endpoint} for bucket {bucket} (retried): check the network "
            "and AWS_ENDPOINT_URL / AWS_REGION; the next run retries"
        )
    elif any(s in text for s in _OVERLOADED):
        advice = (
            f"{endpoint} kept failing for bucket {bucket} (throttling or a server error, "
            "retried with backoff): nothing was recorded; try again later"
        )
    else:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        advice = f"bucket {bucket} at {endpoint}: {first[:300]}"
    return DurableError(f"{operation} {where.url(key)}: {advice}")
